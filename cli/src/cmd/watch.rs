//! `taskctl watch URL TASK_ID`: the task's events, live, until it ends (the agent closes the
//! stream after a terminal event, or after its safety timeout). JSON: one
//! `{"type","data"}` document per event.

use serde_json::json;

use crate::output::pretty;
use crate::{CmdResult, Context};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub url: String,
    pub task_id: String,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let token = context.required_token()?;
    let card = context.card(&args.url).await?;
    let mut events = context
        .client
        .subscribe_task(&card, &args.task_id, &token)
        .await?;
    let output = &context.output;
    while let Some(event) = events.next().await? {
        if output.is_json() {
            output.json(&json!({"type": event.kind, "data": event.data}));
            continue;
        }
        let status = event
            .data
            .status
            .map(|status| status.as_str())
            .unwrap_or("-");
        output.line(&format!("{:<13} {status}", event.kind.as_str()));
        if let Some(result) = &event.data.result {
            output.line(&pretty(&result.output));
        }
        if let Some(error) = &event.data.error {
            output.line(&format!("{}: {}", error.code, error.message));
        }
    }
    Ok(())
}
