//! `taskctl invoke URL ENTRYPOINT [INPUT_JSON]`: run an entrypoint, print its result.

use shared::client::InvokeOptions;

use crate::output::pretty;
use crate::{CmdResult, Context, parse_input};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub url: String,
    pub entrypoint: String,
    /// The input as JSON (`-` reads standard input); `{}` when absent.
    pub input: Option<String>,
    /// Idempotency-Key: a retry with the same key gets the first result back.
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let input = parse_input(args.input.as_deref())?;
    let card = context.card(&args.url).await?;
    let options = InvokeOptions {
        idempotency_key: args.idempotency_key.clone(),
    };
    let result = context
        .client
        .invoke(&card, &args.entrypoint, &input, &options)
        .await?;
    if context.output.is_json() {
        context.output.json(&result);
    } else {
        context.output.line(&pretty(&result.output));
        if result.replayed {
            context
                .output
                .note("(replayed: the stored result of an earlier call)");
        }
    }
    Ok(())
}
