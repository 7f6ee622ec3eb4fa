//! `taskctl get URL TASK_ID`: one task.

use crate::cmd::print_task;
use crate::{CmdResult, Context};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub url: String,
    pub task_id: String,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let token = context.required_token()?;
    let card = context.card(&args.url).await?;
    let task = context
        .client
        .get_task(&card, &args.task_id, &token)
        .await?;
    if context.output.is_json() {
        context.output.json(&task);
    } else {
        print_task(&context.output, &task);
    }
    Ok(())
}
