//! `taskctl list URL [--status S,..] [--context-id C] [--limit N] [--offset N]`.

use client::ListFilter;
use protocol::TaskStatus;

use crate::{CmdResult, Context};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub url: String,
    /// Only tasks in these statuses (running, completed, failed, cancelled).
    #[arg(long, value_delimiter = ',', value_parser = parse_status)]
    pub status: Vec<TaskStatus>,
    #[arg(long)]
    pub context_id: Option<String>,
    /// At most this many tasks (0 to 1000; the agent's default is 50).
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=1000))]
    pub limit: Option<u16>,
    #[arg(long)]
    pub offset: Option<usize>,
}

fn parse_status(text: &str) -> Result<TaskStatus, String> {
    text.trim()
        .parse()
        .map_err(|_| "expected running, completed, failed or cancelled".to_owned())
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let token = context.required_token()?;
    let card = context.card(&args.url).await?;
    let filter = ListFilter {
        context_id: args.context_id.clone(),
        status: args.status.clone(),
        limit: args.limit.map(usize::from),
        offset: args.offset,
    };
    let list = context.client.list_tasks(&card, &token, &filter).await?;
    let output = &context.output;
    if output.is_json() {
        output.json(&list);
        return Ok(());
    }
    if list.tasks.is_empty() {
        output.line("no tasks");
    }
    for task in &list.tasks {
        output.line(&format!(
            "{}  {:<9}  {}",
            task.task_id,
            task.status.as_str(),
            task.created_at.to_iso()
        ));
    }
    if let Some(total) = list.total {
        let more = if list.has_more == Some(true) {
            " (more: use --offset)"
        } else {
            ""
        };
        output.line(&format!("{} of {total} tasks{more}", list.tasks.len()));
    }
    Ok(())
}
