//! The whole program docs/workers.md "Writing an entrypoint" shows (kept equal to it, and
//! compiled by CI as an example of `taskcluster-agent`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use taskcluster_agent::{Entrypoint, Entrypoints, HandlerError, HandlerOutput, TaskContext};

#[derive(Deserialize, JsonSchema)]
struct Request {
    topic: String,
    audience: Option<String>,
}

async fn research(input: Value, ctx: TaskContext) -> Result<HandlerOutput, HandlerError> {
    let request: Request = serde_json::from_value(input)
        .map_err(|err| HandlerError::invalid_input(err.to_string()))?;
    let Some(audience) = request.audience else {
        // The task waits for the caller's answer, holding no worker; the answer is the next
        // run's input.
        return Ok(HandlerOutput::input_required(
            json!({"parts": [{"text": "For whom?"}]}),
        ));
    };
    for step in ["gathering sources", "reading", "drafting"] {
        ctx.events.progress(json!({"stage": step})).await.ok();
        tokio::select! {
            () = ctx.cancelled() => return Err(HandlerError::cancelled()),
            () = tokio::time::sleep(Duration::from_secs(1)) => {} // the real work
        }
    }
    Ok(HandlerOutput::new(
        json!({"report": format!("{} for {audience}", request.topic)}),
    ))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let research = Entrypoint::new("research", "Researches a topic", research)
        .input_schema(serde_json::to_value(schemars::schema_for!(Request)).unwrap_or_default());
    taskcluster_agent::run(Entrypoints::new().with(research)).await
}
