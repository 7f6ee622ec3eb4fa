//! `taskctl card URL`: the agent's card.

use crate::{CmdResult, Context};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's URL (its base URL, or the card's URL).
    pub url: String,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let card = context.card(&args.url).await?;
    let output = &context.output;
    if output.is_json() {
        output.json(&card);
        return Ok(());
    }
    output.line(&format!(
        "{} {}",
        card.name,
        card.version.as_deref().unwrap_or_default()
    ));
    if let Some(description) = &card.description {
        output.line(description);
    }
    let base = context.client.base_url(&card)?;
    output.line(&format!("service   {base}"));
    if let Some(version) = &card.protocol_version {
        output.line(&format!("protocol  {version}"));
    }
    if card.entrypoints.is_empty() {
        output.line("no entrypoints");
    } else {
        output.line("entrypoints");
        let width = card.entrypoints.keys().map(String::len).max().unwrap_or(0);
        for (key, entrypoint) in &card.entrypoints {
            let streaming = if entrypoint.streaming {
                " [stream]"
            } else {
                ""
            };
            output.line(&format!(
                "  {key:width$}  {}{streaming}",
                entrypoint.description
            ));
        }
    }
    Ok(())
}
