//! Command-line parsing, table-driven through `try_parse_from`.

use clap::Parser;
use clap::error::ErrorKind;

use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("taskctl").chain(args.iter().copied()))
}

#[test]
fn accepted_command_lines() {
    let table: &[(&[&str], &str)] = &[
        (&["card", "http://a"], "card"),
        (&["card", "http://a", "--json"], "card"),
        (&["--output", "human", "card", "http://a"], "card"),
        (&["invoke", "http://a", "echo"], "invoke"),
        (
            &[
                "invoke",
                "http://a",
                "echo",
                "{\"x\":1}",
                "--idempotency-key",
                "k",
            ],
            "invoke",
        ),
        (&["stream", "http://a", "count", "{\"n\":3}"], "stream"),
        (&["send", "http://a", "echo", "{}"], "send"),
        (
            &[
                "send",
                "http://a",
                "echo",
                "{}",
                "--wait",
                "--wait-timeout",
                "5",
            ],
            "send",
        ),
        (
            &[
                "send",
                "http://a",
                "echo",
                "{}",
                "--token-file",
                "/tmp/t",
                "--context-id",
                "c",
            ],
            "send",
        ),
        (&["get", "http://a", "t1", "--token", "x"], "get"),
        (
            &[
                "list",
                "http://a",
                "--status",
                "running,completed",
                "--limit",
                "10",
            ],
            "list",
        ),
        (
            &["list", "http://a", "--offset", "5", "--context-id", "c"],
            "list",
        ),
        (&["cancel", "http://a", "t1"], "cancel"),
        (&["watch", "http://a", "t1", "--output", "json"], "watch"),
        (
            &[
                "--allow-origin",
                "http://a",
                "--timeout",
                "3",
                "get",
                "http://a",
                "t",
            ],
            "get",
        ),
    ];
    for (args, expected) in table {
        let cli = parse(args).map_err(|e| format!("{args:?}: {e}"));
        let name = cli.map(|cli| match cli.command {
            Command::Card(_) => "card",
            Command::Invoke(_) => "invoke",
            Command::Stream(_) => "stream",
            Command::Send(_) => "send",
            Command::Get(_) => "get",
            Command::List(_) => "list",
            Command::Cancel(_) => "cancel",
            Command::Watch(_) => "watch",
        });
        assert_eq!(name.as_deref(), Ok(*expected), "{args:?}");
    }
}

#[test]
fn refused_command_lines() {
    let table: &[(&[&str], ErrorKind)] = &[
        (&[], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        (&["bogus", "http://a"], ErrorKind::InvalidSubcommand),
        (&["card"], ErrorKind::MissingRequiredArgument),
        (
            &["send", "http://a", "echo"],
            ErrorKind::MissingRequiredArgument,
        ),
        (&["get", "http://a"], ErrorKind::MissingRequiredArgument),
        (
            &["list", "http://a", "--status", "done"],
            ErrorKind::ValueValidation,
        ),
        (
            &["list", "http://a", "--limit", "1001"],
            ErrorKind::ValueValidation,
        ),
        (
            &["card", "http://a", "--output", "xml"],
            ErrorKind::InvalidValue,
        ),
        (
            &["send", "http://a", "e", "{}", "--wait-timeout", "5"],
            ErrorKind::MissingRequiredArgument,
        ),
        (
            &["get", "http://a", "t", "--token", "x", "--token-file", "f"],
            ErrorKind::ArgumentConflict,
        ),
        (&["card", "http://a", "--nope"], ErrorKind::UnknownArgument),
    ];
    for (args, kind) in table {
        let error = parse(args).err().map(|e| e.kind());
        assert_eq!(error, Some(*kind), "{args:?}");
    }
}

#[test]
fn parsed_values() {
    let cli = parse(&["list", "http://a", "--status", "running,failed", "--json"]).ok();
    let Some(Cli {
        command: Command::List(list),
        global,
    }) = cli
    else {
        panic!("list did not parse");
    };
    assert!(global.json);
    assert_eq!(
        list.status,
        [
            shared::protocol::TaskStatus::Running,
            shared::protocol::TaskStatus::Failed
        ]
    );
    assert_eq!(global.output, OutputFormat::Auto);
}

#[test]
fn token_sources_in_order() {
    let dir = std::env::temp_dir().join(format!("taskctl-token-{}", std::process::id()));
    let _ = std::fs::write(&dir, "  from-file-0123456789abcdef \n");
    let flag = token::resolve(Some("flag"), Some(&dir), Some("env"))
        .ok()
        .flatten();
    assert_eq!(flag.as_deref(), Some("flag"));
    let file = token::resolve(None, Some(&dir), Some("env")).ok().flatten();
    assert_eq!(file.as_deref(), Some("from-file-0123456789abcdef"));
    let env = token::resolve(None, None, Some(" env ")).ok().flatten();
    assert_eq!(env.as_deref(), Some("env"));
    assert_eq!(token::resolve(None, None, None).ok().flatten(), None);
    assert!(token::resolve(None, Some(&dir.join("missing")), None).is_err());
    let _ = std::fs::remove_file(&dir);
}

#[test]
fn input_must_be_json() {
    assert_eq!(parse_input(None).ok(), Some(serde_json::json!({})));
    assert_eq!(
        parse_input(Some("\"hi\"")).ok(),
        Some(serde_json::json!("hi"))
    );
    assert_eq!(
        parse_input(Some("hi")).err().map(|f| f.exit),
        Some(Exit::Usage)
    );
}

#[test]
fn control_characters_are_escaped_in_human_text() {
    assert_eq!(output::sanitize("a\tb\nc"), "a\tb\nc");
    assert_eq!(output::sanitize("x\u{1b}[2Jy"), "x\\u{1b}[2Jy");
}
