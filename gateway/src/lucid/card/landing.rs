//! `GET /`: a page for a person who opened the agent's URL in a browser: what it does, each
//! entrypoint with its input schema, and commands to paste into a shell. `GET /favicon.svg`.
//!
//! Every dynamic string (agent name and description from configuration, keys, descriptions,
//! schemas and prices from workers, the host from the request) goes through [`escape`]; the
//! page carries no script and its Content-Security-Policy forbids any.

use std::fmt::Write;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use store::registry::EntrypointInfo;

use super::manifest;
use crate::core::config::GatewayConfig;
use crate::http::document::escape;

pub const HTML: &str = "text/html; charset=utf-8";

const FAVICON: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect width="64" height="64" rx="14" fill="#1f2937"/><circle cx="22" cy="32" r="7" fill="#38bdf8"/><circle cx="42" cy="20" r="5" fill="#a3e635"/><circle cx="42" cy="44" r="5" fill="#f472b6"/><path d="M28 29l9-6M28 35l9 6" stroke="#e5e7eb" stroke-width="3" stroke-linecap="round"/></svg>"##;

const STYLE: &str = "body{font:16px/1.5 system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#111827}\
h1{margin-bottom:.25rem}code,pre{font:13px/1.45 ui-monospace,monospace}\
pre{background:#f3f4f6;padding:.75rem;border-radius:6px;overflow-x:auto;white-space:pre}\
section{border-top:1px solid #e5e7eb;margin-top:1.5rem}\
.tag{display:inline-block;font-size:12px;padding:0 .5rem;border-radius:9px;background:#e0f2fe;margin-left:.5rem}\
.muted{color:#6b7280}";

pub async fn favicon() -> Response {
    let mut response = FAVICON.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("image/svg+xml; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=86400"),
    );
    response
}

/// Quotes `text` as one single-quoted POSIX shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The page for `entrypoints` as seen from `base_url` (origin plus base path).
pub fn render(config: &GatewayConfig, base_url: &str, entrypoints: &[EntrypointInfo]) -> String {
    let name = escape(&config.agent_name);
    let base_path = escape(&config.base_path());
    let mut page = String::with_capacity(8 * 1024);
    // `write!` into a String cannot fail; the results are ignored for that reason.
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{name}</title><link rel=\"icon\" type=\"image/svg+xml\" href=\"{base_path}/favicon.svg\">\
         <style>{STYLE}</style></head><body>\
         <h1>{name}</h1><p>{description}</p>\
         <p class=\"muted\">Version {version}. \
         <a href=\"{base_path}/.well-known/agent-card.json\">Agent Card</a> · \
         <a href=\"{base_path}/openapi.json\">OpenAPI</a> · \
         <a href=\"{base_path}/entrypoints\">Entrypoints</a>{operator}</p>",
        description = escape(&config.agent_description),
        version = escape(&config.agent_version),
        operator = operator_links(config, &base_path),
    );

    page.push_str(&task_example(base_url, entrypoints));

    if entrypoints.is_empty() {
        page.push_str("<p><strong>No worker is online right now</strong>; entrypoints appear here as workers join.</p>");
    }
    for entrypoint in entrypoints {
        page.push_str(&entrypoint_section(base_url, entrypoint));
    }
    page.push_str("</body></html>\n");
    page
}

/// Links to what operators read, where this gateway serves it: the console (with an operator
/// token) and `/metrics` on the gateway's own port. `base_path` is already escaped.
fn operator_links(config: &GatewayConfig, base_path: &str) -> String {
    let mut links = String::new();
    if config.operator_token.is_some() || config.operator_token_file.is_some() {
        let _ = write!(links, " · <a href=\"{base_path}/console\">Console</a>");
    }
    if matches!(
        config.metrics_listen,
        Some(server::admin::MetricsListen::Main)
    ) {
        let _ = write!(links, " · <a href=\"{base_path}/metrics\">Metrics</a>");
    }
    links
}

/// Creating a task with the `echo` skill (or the first one there is), then reading it.
fn task_example(base_url: &str, entrypoints: &[EntrypointInfo]) -> String {
    let Some(skill) = entrypoints
        .iter()
        .find(|entrypoint| entrypoint.key == "echo")
        .or_else(|| entrypoints.first())
    else {
        return String::new();
    };
    let text = serde_json::to_string(&sample(&skill.input_schema)).unwrap_or_default();
    let body = json!({
        "skillId": skill.key,
        "message": {"role": "user", "content": {"text": text}}
    });
    let commands = format!(
        "# Your task token: a secret of 20 to 256 characters; only its holder can see the task.\n\
         TOKEN=$(openssl rand -hex 24)\n\
         curl -s -X POST {tasks} \\\n  -H 'Content-Type: application/json' \\\n  -H \"Task-Access-Token: $TOKEN\" \\\n  -d {body}\n\
         # then, with the taskId it returns in place of TASK_ID:\n\
         curl -s {task} -H \"Task-Access-Token: $TOKEN\"\n\
         curl -sN {subscribe} -H \"Task-Access-Token: $TOKEN\"\n",
        tasks = shell_quote(&format!("{base_url}/tasks")),
        task = shell_quote(&format!("{base_url}/tasks/TASK_ID")),
        subscribe = shell_quote(&format!("{base_url}/tasks/TASK_ID/subscribe")),
        body = shell_quote(&body.to_string()),
    );
    format!(
        "<section><h2>Start a task</h2><pre><code>{}</code></pre></section>",
        escape(&commands)
    )
}

fn entrypoint_section(base_url: &str, entrypoint: &EntrypointInfo) -> String {
    let mut section = String::new();
    let _ = write!(
        section,
        "<section><h2><code>{key}</code>{streams}</h2><p>{description}</p>",
        key = escape(&entrypoint.key),
        streams = if entrypoint.streaming {
            "<span class=\"tag\">streaming</span>"
        } else {
            ""
        },
        description = escape(&entrypoint.description),
    );
    if let Some(price) = manifest::price(entrypoint) {
        let mut parts = Vec::new();
        if let Some(invoke) = &price.invoke {
            parts.push(format!("invoke {}", escape(invoke)));
        }
        if let Some(stream) = &price.stream {
            parts.push(format!("stream {}", escape(stream)));
        }
        let _ = write!(section, "<p>Price: {}</p>", parts.join(", "));
    }
    match crate::core::catalog::published_schema(&entrypoint.input_schema) {
        Some(schema) => {
            let pretty = serde_json::to_string_pretty(schema).unwrap_or_default();
            let _ = write!(
                section,
                "<h3>Input schema</h3><pre><code>{}</code></pre>",
                escape(&pretty)
            );
        }
        None => section.push_str("<p class=\"muted\">Input: any JSON value.</p>"),
    }
    let input = json!({"input": sample(&entrypoint.input_schema)}).to_string();
    let path = format!("{base_url}/entrypoints/{}", entrypoint.key);
    let mut commands = format!(
        "curl -s -X POST {} \\\n  -H 'Content-Type: application/json' \\\n  -d {}\n",
        shell_quote(&format!("{path}/invoke")),
        shell_quote(&input)
    );
    if entrypoint.streaming {
        let _ = write!(
            commands,
            "curl -sN -X POST {} \\\n  -H 'Content-Type: application/json' \\\n  -d {}\n",
            shell_quote(&format!("{path}/stream")),
            shell_quote(&input)
        );
    }
    let _ = write!(
        section,
        "<h3>Try it</h3><pre><code>{}</code></pre></section>",
        escape(&commands)
    );
    section
}

/// A value the schema probably accepts, for the examples: the schema's own example or
/// default, else the required properties filled by type. `echo` (no schema) gets `{"x":1}`.
fn sample(schema: &Value) -> Value {
    sample_at(schema, 0)
}

fn sample_at(schema: &Value, depth: usize) -> Value {
    let Some(object) = schema.as_object() else {
        return json!({"x": 1});
    };
    if depth > 4 {
        return Value::Null;
    }
    if let Some(example) = object
        .get("examples")
        .and_then(|examples| examples.get(0))
        .or_else(|| object.get("example"))
        .or_else(|| object.get("default"))
        .or_else(|| object.get("const"))
        .or_else(|| object.get("enum").and_then(|values| values.get(0)))
    {
        return example.clone();
    }
    let kind = match object.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ if object.contains_key("properties") => "object",
        _ => return json!({"x": 1}),
    };
    match kind {
        "object" => {
            let properties = object.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = object
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Map::new();
            if let Some(properties) = properties {
                for (name, property) in properties {
                    if required.is_empty() || required.contains(&name.as_str()) {
                        out.insert(name.clone(), sample_at(property, depth + 1));
                    }
                }
            }
            Value::Object(out)
        }
        "integer" | "number" => {
            let minimum = object.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let maximum = object
                .get("maximum")
                .and_then(Value::as_i64)
                .unwrap_or(i64::MAX);
            json!(minimum.max(1).min(maximum))
        }
        "string" => {
            let min = object.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            let text = "hello";
            if (text.len() as u64) < min {
                json!("x".repeat(usize::try_from(min).unwrap_or(0).min(256)))
            } else {
                json!(text)
            }
        }
        "boolean" => json!(true),
        "array" => json!([]),
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup_and_quotes() {
        assert_eq!(
            escape(r#"<a href="x" title='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[test]
    fn shell_quote_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn samples_follow_the_schema() {
        assert_eq!(sample(&json!({})), json!({"x": 1}));
        let sleep = json!({"type":"object","properties":{"ms":{"type":"integer","minimum":0}},"required":["ms"]});
        assert_eq!(sample(&sleep), json!({"ms": 1}));
        let text = json!({"type":"object","properties":{"text":{"type":"string","minLength":1},"n":{"type":"integer"}},"required":["text"]});
        assert_eq!(sample(&text), json!({"text": "hello"}));
    }
}
