//! `echo_agent`: a minimal, fast agent speaking the Lucid HTTP profile, for hosting with
//! `worker --agent URL` in the benchmark (`scripts/bench-worker`, scenario `remote`) and the
//! chaos run's remote share (`scripts/chaos`).
//!
//! It serves `GET /.well-known/agent-card.json` (two free, non-streaming entrypoints),
//! `GET /health`, `POST /entrypoints/{PREFIX}echo/invoke` (answers its input) and
//! `POST /entrypoints/{PREFIX}sleep/invoke` (waits `input.ms`, at most a minute, then answers
//! `{"slept_ms": ms}`). It does as little as a server can, so that what a benchmark measures is
//! the worker's remote path, not the agent.
//!
//!   echo_agent --listen 127.0.0.1:9000 [--prefix remote-]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use clap::Parser;
use serde_json::{Value, json};

/// The longest `sleep` the agent does.
const MAX_SLEEP_MS: u64 = 60_000;

#[derive(Debug, Parser)]
#[command(about = "A minimal agent speaking the Lucid HTTP profile: echo and sleep")]
struct Args {
    /// Address to listen on (port 0: any free port, printed on stdout).
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:0")]
    listen: String,
    /// Prefix of the entrypoint keys (`{prefix}echo`, `{prefix}sleep`), so that they need not
    /// collide with a worker's built-ins.
    #[arg(long, env = "AGENT_PREFIX", default_value = "")]
    prefix: String,
}

struct Agent {
    prefix: String,
    card: Bytes,
}

fn card(prefix: &str) -> Bytes {
    let card = json!({
        "name": "echo-agent",
        "version": "0.1.0",
        "description": "Echo and sleep over the Lucid HTTP profile",
        "entrypoints": {
            format!("{prefix}echo"): {"description": "Returns its input", "streaming": false},
            format!("{prefix}sleep"): {"description": "Waits input.ms milliseconds", "streaming": false},
        }
    });
    Bytes::from(card.to_string())
}

fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.into(),
    )
        .into_response()
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    json_response(
        status,
        json!({"error": {"code": code, "message": message}}).to_string(),
    )
}

async fn invoke(State(agent): State<Arc<Agent>>, Path(key): Path<String>, body: Bytes) -> Response {
    let Some(name) = key.strip_prefix(agent.prefix.as_str()) else {
        return error(StatusCode::NOT_FOUND, "not_found", "no such entrypoint");
    };
    let Ok(mut request) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "invalid_input", "body is not JSON");
    };
    let input = request
        .get_mut("input")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let output = match name {
        "echo" => input,
        "sleep" => {
            let ms = input["ms"].as_u64().unwrap_or(0).min(MAX_SLEEP_MS);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            json!({"slept_ms": ms})
        }
        _ => return error(StatusCode::NOT_FOUND, "not_found", "no such entrypoint"),
    };
    json_response(
        StatusCode::OK,
        json!({"run_id": "", "status": "succeeded", "output": output}).to_string(),
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let agent = Arc::new(Agent {
        card: card(&args.prefix),
        prefix: args.prefix,
    });
    let card = agent.card.clone();
    let app = Router::new()
        .route(
            "/.well-known/agent-card.json",
            get(move || {
                let card = card.clone();
                async move { json_response(StatusCode::OK, card) }
            }),
        )
        .route("/health", get(|| async { "ok" }))
        .route("/entrypoints/{key}/invoke", post(invoke))
        .with_state(agent);
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    // Small answers on kept-alive connections: no Nagle delay.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}
