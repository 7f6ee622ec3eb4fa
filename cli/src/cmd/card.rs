//! `taskctl card URL [--verify [--jwks FILE]]`: the agent's card, and whether its signature
//! verified.

use std::path::PathBuf;

use client::{Client, Jwks, KeySource, TrustPolicy, Verification, Verify};
use serde_json::json;

use crate::{CmdResult, Context, Failure};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's URL (its base URL, or the card's URL).
    pub url: String,
    /// Require a valid signature (ES256, A2A §8.4); a card without one, or signed by an
    /// unknown key, fails (exit 1). Keys: --jwks, else the card origin's
    /// /.well-known/jwks.json.
    #[arg(long)]
    pub verify: bool,
    /// The trusted keys (a JWKS file), pinned instead of fetched from the card's origin.
    #[arg(long, value_name = "FILE", requires = "verify")]
    pub jwks: Option<PathBuf>,
}

/// The client with the trust policy `--verify` and `--jwks` ask for.
fn verifying_client(context: &Context, args: &Args) -> Result<Client, Failure> {
    let keys = match &args.jwks {
        Some(path) => KeySource::Pinned(
            Jwks::from_file(path).map_err(|err| Failure::usage(format!("--jwks: {err}")))?,
        ),
        None => KeySource::SameOrigin,
    };
    let mut options = context.client.options().clone();
    options.trust = TrustPolicy {
        verify: Verify::Required,
        keys,
    };
    Ok(Client::new(options)?)
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let output = &context.output;
    if !args.verify {
        let card = context.card(&args.url).await?;
        if output.is_json() {
            output.json(&card);
            return Ok(());
        }
        return print(context, &card);
    }
    let (card, verification) = verifying_client(context, args)?
        .fetch_card_verified(&args.url)
        .await?;
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
