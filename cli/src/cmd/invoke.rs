//! `taskctl invoke URL ENTRYPOINT [INPUT_JSON]`: run an entrypoint, print its result (and,
//! for a paid call, the settlement: on standard error for people, `settlement` in JSON).

use client::InvokeOptions;

use crate::output::pretty;
use crate::pay::{PayArgs, settlement_json, settlement_text};
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
    #[command(flatten)]
    pub pay: PayArgs,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let input = parse_input(args.input.as_deref())?;
    let payer = args.pay.payer()?;
    let card = context.card(&args.url).await?;
    let options = InvokeOptions {
        idempotency_key: args.idempotency_key.clone(),
        payer,
    };
    let result = context
        .client
        .invoke(&card, &args.entrypoint, &input, &options)
        .await?;
    if context.output.is_json() {
        let mut document = serde_json::to_value(&result).unwrap_or_default();
        if let (Some(fields), Some(settlement)) = (
            document.as_object_mut(),
            settlement_json(&result.settlement),
        ) {
            fields.insert("settlement".into(), settlement);
        }
        context.output.json(&document);
    } else {
        if let Some(settlement) = settlement_text(&result.settlement) {
            context.output.note(&format!("settlement {settlement}"));
        }
        context.output.line(&pretty(&result.output));
        if result.replayed {
            context
                .output
                .note("(replayed: the stored result of an earlier call)");
        }
    }
    Ok(())
}
