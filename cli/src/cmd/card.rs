//! `taskctl card URL [--verify [--jwks FILE] [--revoked-kid KID]]`: the agent's card, and
//! whether its signature verified (the flags are global: [`crate::GlobalArgs`]).

use client::Verification;
use serde_json::json;

use crate::{CmdResult, Context, Failure};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's URL (its base URL, or the card's URL).
    pub url: String,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let output = &context.output;
    if !context.global.verify {
        let card = context.card(&args.url).await?;
        if output.is_json() {
            output.json(&card);
            return Ok(());
        }
        return print(context, &card);
    }
    // The client holds the required trust policy of the global --verify.
    let (card, verification) = context.client.fetch_card_verified(&args.url).await?;
    // Required verification either verifies or fails: anything else is not a pass.
    let Verification::Verified { kid } = verification else {
        return Err(Failure::from(client::ClientError::Signature(
            client::SignatureError::Missing,
        )));
    };
    if output.is_json() {
        output.json(&json!({"card": card, "verified": {"kid": kid}}));
        return Ok(());
    }
    print(context, &card)?;
    output.line(&format!("signature verified (key {kid})"));
    Ok(())
}

fn print(context: &Context, card: &client::AgentCard) -> CmdResult {
    let output = &context.output;
    output.line(&format!(
        "{} {}",
        card.name,
        card.version.as_deref().unwrap_or_default()
    ));
    if let Some(description) = &card.description {
        output.line(description);
    }
    let base = context.client.base_url(card)?;
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
