//! `taskctl stream URL ENTRYPOINT [INPUT_JSON]`: run an entrypoint and print its events as
//! they arrive. Human: `text`/`delta` chunks as text, other events as `[kind] data` lines.
//! JSON: one `{"type","data","id"}` document per event. Exits 1 when the run did not succeed.
//! A paid stream (`--pay`, see [`crate::pay`]) first prints its settlement: a
//! `{"type":"settlement","data":{...}}` document in JSON, a note on standard error for people.

use client::InvokeOptions;
use serde_json::Value;

use crate::output::pretty;
use crate::pay::{PayArgs, settlement_json, settlement_text};
use crate::{CmdResult, Context, Failure, parse_input};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub url: String,
    pub entrypoint: String,
    /// The input as JSON (`-` reads standard input); `{}` when absent.
    pub input: Option<String>,
    #[command(flatten)]
    pub pay: PayArgs,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let input = parse_input(args.input.as_deref())?;
    let options = InvokeOptions {
        payer: args.pay.payer()?,
        ..InvokeOptions::default()
    };
    let card = context.card(&args.url).await?;
    let mut events = context
        .client
        .stream_with_options(&card, &args.entrypoint, &input, &options)
        .await?;
    let output = &context.output;
    if output.is_json() {
        if let Some(settlement) = settlement_json(events.settlement()) {
            output.json(&serde_json::json!({"type": "settlement", "data": settlement}));
        }
    } else if let Some(settlement) = settlement_text(events.settlement()) {
        output.note(&format!("settlement {settlement}"));
    }
    let mut end_status = None;
    let mut in_text = false;
    while let Some(event) = events.next().await? {
        if event.is_end() {
            end_status = event
                .data
                .get("status")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if output.is_json() {
            output.json(&event);
            continue;
        }
        match event.kind.as_str() {
            "text" | "delta"
                if event
                    .data
                    .get(event.kind.as_str())
                    .is_some_and(Value::is_string) =>
            {
                output.text(&pretty(&event.data[event.kind.as_str()]));
                in_text = true;
            }
            "text" | "delta" | "asset" | "control" => {
                if in_text {
                    output.line("");
                    in_text = false;
                }
                let value = event.data.get(event.kind.as_str()).unwrap_or(&event.data);
                output.line(&format!("[{}] {value}", event.kind));
            }
            "run-end" => {
                if in_text {
                    output.line("");
                    in_text = false;
                }
                let status = end_status.as_deref().unwrap_or("unknown");
                output.line(&format!("[run-end] {status}"));
                if let Some(result) = event.data.get("output") {
                    output.line(&pretty(result));
                }
            }
            kind => {
                if in_text {
                    output.line("");
                    in_text = false;
                }
                output.line(&format!("[{kind}] {}", event.data));
            }
        }
    }
    match end_status.as_deref() {
        Some("succeeded") => Ok(()),
        Some(status) => Err(Failure::remote(
            format!("the run ended {status}"),
            serde_json::json!({ "status": status }),
        )
        .printed()),
        None => Err(Failure::remote(
            "the stream ended without run-end",
            serde_json::json!({}),
        )),
    }
}
