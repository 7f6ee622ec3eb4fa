//! `research`: writes a short report on a topic, in three steps, each a `progress` event as it
//! starts and a `text` event (the step's note, streamed to callers) as it ends.
//! Without an audience it asks for one first (A2A `input-required`), once; the caller answers
//! with the same input and the audience. A cancel stops it between two steps or in the middle
//! of one. The steps wait `pauseMs` where a real agent would call its model and tools.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use taskcluster_agent::{Entrypoint, HandlerError, HandlerOutput, TaskContext};

pub const KEY: &str = "research";

/// The research steps, in order.
const STEPS: [&str; 3] = ["gathering sources", "reading", "drafting"];

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// What to research.
    pub topic: String,
    /// Who the report is for; asked for when missing.
    #[serde(default)]
    pub audience: Option<String>,
    /// Milliseconds each step takes (the stand-in for a real agent's model and tool calls).
    #[serde(default = "default_pause_ms")]
    pub pause_ms: u64,
}

fn default_pause_ms() -> u64 {
    200
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Report {
    pub topic: String,
    pub audience: String,
    /// One line per step.
    pub notes: Vec<String>,
    pub summary: String,
}

/// The entrypoint: typed schemas, a handler over raw JSON (it may end asking for input, which a
/// typed handler cannot).
pub fn entrypoint() -> Entrypoint {
    Entrypoint::new(
        KEY,
        "Researches a topic for an audience (asked for when missing): progress per step, a short report",
        |input: Value, ctx: TaskContext| research(input, ctx),
    )
    .streaming()
    .input_schema(schema::<Request>())
    .output_schema(schema::<Report>())
}

fn schema<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({}))
}

async fn research(input: Value, ctx: TaskContext) -> Result<HandlerOutput, HandlerError> {
    let request: Request = serde_json::from_value(input)
        .map_err(|err| HandlerError::invalid_input(err.to_string()))?;
    let topic = request.topic;
    let Some(audience) = request
        .audience
        .filter(|audience| !audience.trim().is_empty())
    else {
        progress(&ctx, json!({"stage": "planning", "topic": topic})).await;
        // The question, and the input to answer with (the handler keeps no state between
        // turns: the answer carries the topic again).
        return Ok(HandlerOutput::input_required(json!({"parts": [
            {"text": format!("Who is the report on {topic} for? Answer with the topic and an audience.")},
            {"data": {"topic": topic, "audience": null}},
        ]})));
    };
    let pause = Duration::from_millis(request.pause_ms);
    let mut notes = Vec::with_capacity(STEPS.len());
    for (index, step) in STEPS.iter().enumerate() {
        progress(
            &ctx,
            json!({"stage": step, "step": index + 1, "of": STEPS.len()}),
        )
        .await;
        tokio::select! {
            () = ctx.cancelled() => {
                tracing::info!(task_id = %ctx.task_id, stage = step, "research cancelled");
                return Err(HandlerError::cancelled());
            }
            () = tokio::time::sleep(pause) => {}
        }
        let note = format!("{step}: done for {audience}");
        if let Err(err) = ctx.events.text(&note).await {
            tracing::debug!(task_id = %ctx.task_id, error = %err, "note not streamed");
        }
        notes.push(note);
    }
    let report = Report {
        summary: format!(
            "{topic}, explained for {audience}, in {} steps",
            notes.len()
        ),
        topic,
        audience,
        notes,
    };
    serde_json::to_value(report)
        .map(HandlerOutput::new)
        .map_err(|err| HandlerError::new("invalid_output", err.to_string()))
}

/// A `progress` event; one that cannot be written (the lease was lost) is not worth failing
/// the run over: the runtime cancels the run then anyway.
async fn progress(ctx: &TaskContext, data: Value) {
    if let Err(err) = ctx.events.progress(data).await {
        tracing::debug!(task_id = %ctx.task_id, error = %err, "progress not written");
    }
}
