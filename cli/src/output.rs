//! Where results go: human-readable text, or one compact JSON document per line. Errors go to
//! standard error as text, and in JSON mode also to standard output as `{"error": {...}}`, so
//! a script always reads one document. Writes ignore a closed pipe (`taskctl list | head`).

use std::io::{IsTerminal, Write};

use serde::Serialize;
use serde_json::json;

use crate::Failure;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Human-readable on a terminal, JSON otherwise.
    Auto,
    Human,
    Json,
}

impl OutputFormat {
    pub fn resolve(self) -> Format {
        match self {
            OutputFormat::Human => Format::Human,
            OutputFormat::Json => Format::Json,
            OutputFormat::Auto if std::io::stdout().is_terminal() => Format::Human,
            OutputFormat::Auto => Format::Json,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub format: Format,
}

impl Output {
    pub fn new(format: Format) -> Self {
        Output { format }
    }

    pub fn is_json(&self) -> bool {
        self.format == Format::Json
    }

    /// A line of text on standard output.
    pub fn line(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{}", self.clean(text));
        let _ = stdout.flush();
    }

    /// Text without a newline (stream chunks).
    pub fn text(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = write!(stdout, "{}", self.clean(text));
        let _ = stdout.flush();
    }

    /// Human text comes from an untrusted agent: control characters (terminal escapes) are
    /// shown as `\u{..}` instead of being obeyed. JSON output is escaped by serde already.
    fn clean<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        if self.is_json() {
            return text.into();
        }
        sanitize(text)
    }

    /// One JSON document on one line.
    pub fn json(&self, value: &impl Serialize) {
        match serde_json::to_string(value) {
            Ok(text) => self.line(&text),
            Err(err) => eprintln!("taskctl: cannot print JSON: {err}"),
        }
    }

    /// A note for the person at the terminal (standard error).
    pub fn note(&self, text: &str) {
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(stderr, "{}", sanitize(text));
    }

    pub fn failure(&self, failure: &Failure) {
        self.note(&format!("taskctl: {}", failure.message));
        if failure.printed {
            return;
        }
        if self.is_json() {
            let mut error = json!({
                "exitCode": failure.exit as u8,
                "message": failure.message,
            });
            if let (Some(error), Some(details)) =
                (error.as_object_mut(), failure.details.as_object())
            {
                for (key, value) in details {
                    error.insert(key.clone(), value.clone());
                }
            }
            self.json(&json!({ "error": error }));
        } else if let Some(details) = failure.details.as_object() {
            for (key, value) in details {
                let value = value
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| value.to_string());
                self.note(&format!("  {key}: {value}"));
            }
        }
    }
}

/// A JSON value as people read it: strings bare, the rest pretty-printed.
pub fn pretty(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// `text` with control characters other than newline and tab escaped.
pub fn sanitize(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if unsafe_char(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}
