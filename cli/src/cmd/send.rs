//! `taskctl send URL ENTRYPOINT INPUT_JSON [--wait]`: create a task.
//!
//! Without a token (`--token`, `--token-file`, `TASK_ACCESS_TOKEN`) one is generated and
//! printed: it is the only way to read the task later. With `--wait`, follows the task to its
//! end (a spinner on standard error when it is a terminal) and prints it; a task that failed
//! or was cancelled exits 1.
//!
//! A priced entrypoint is paid with `--pay` (see [`crate::pay`]); the settlement is printed
//! with the task (`settlement` in JSON), and with the error when the creation failed after
//! paying.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use client::SendOptions;
use protocol::TaskStatus;
use serde_json::{Value, json};

use crate::cmd::print_task;
use crate::pay::{PayArgs, settlement_json, settlement_text};
use crate::{CmdResult, Context, Failure, parse_input};

#[derive(Debug, clap::Args)]
pub struct Args {
    pub url: String,
    /// The entrypoint (skill) to run.
    pub entrypoint: String,
    /// The input as JSON (`-` reads standard input).
    pub input: String,
    /// Wait for the task to end and print it.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 900, requires = "wait")]
    pub wait_timeout: u64,
    /// Idempotency-Key sent with the request (generated when absent).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    #[arg(long)]
    pub context_id: Option<String>,
    /// Task metadata, as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub metadata: Option<String>,
    #[command(flatten)]
    pub pay: PayArgs,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let input = parse_input(Some(&args.input))?;
    let metadata = match &args.metadata {
        None => None,
        Some(text) => Some(
            serde_json::from_str::<Value>(text)
                .map_err(|err| Failure::usage(format!("--metadata is not JSON: {err}")))?,
        ),
    };
    let payer = args.pay.payer()?;
    let given = context.token()?;
    let generated = given.is_none();
    let card = context.card(&args.url).await?;
    let options = SendOptions {
        access_token: given,
        idempotency_key: args.idempotency_key.clone(),
        context_id: args.context_id.clone(),
        metadata,
        payer,
    };
    let access = context
        .client
        .send_message(&card, &args.entrypoint, &input, options)
        .await
        .map_err(|error| {
            if generated {
                context.output.note(
                    "the task may exist: list it with this access token before retrying with the same idempotency key",
                );
            }
            Failure::creation(&error, generated)
        })?;
    let output = &context.output;
    let mut document = json!({
        "taskId": access.task_id,
        "status": access.status,
        "idempotencyKey": access.idempotency_key,
    });
    if generated {
        document["accessToken"] = json!(access.access_token());
    }
    if let Some(settlement) = settlement_json(&access.settlement) {
        document["settlement"] = settlement;
    }
    if !output.is_json() {
        output.line(&format!("task      {}", access.task_id));
        output.line(&format!("status    {}", access.status));
        if let Some(settlement) = settlement_text(&access.settlement) {
            output.line(&format!("settlement {settlement}"));
        }
        if generated {
            output.line(&format!("token     {}", access.access_token()));
            output.note(
                "keep the token secret; pass it back with --token-file or TASK_ACCESS_TOKEN to read this task",
            );
        }
    }
    if !args.wait {
        if output.is_json() {
            output.json(&document);
        }
        return Ok(());
    }

    let spinner = (!output.is_json() && std::io::stderr().is_terminal())
        .then(|| tokio::spawn(spin(crate::output::sanitize(&access.task_id).into_owned())));
    let waited = context
        .client
        .wait_for_task(
            &card,
            &access.task_id,
            access.access_token(),
            Duration::from_secs(args.wait_timeout),
        )
        .await;
    if let Some(spinner) = spinner {
        spinner.abort();
        let _ = spinner.await;
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[2K");
        let _ = stderr.flush();
    }
    let task = waited?;
    if output.is_json() {
        document["status"] = json!(task.status);
        document["task"] = json!(task);
        output.json(&document);
    } else {
        print_task(output, &task);
    }
    match task.status {
        TaskStatus::Completed => Ok(()),
        status => Err(Failure::remote(
            format!("task {} {status}", task.task_id),
            json!({ "taskId": task.task_id, "taskStatus": status }),
        )
        .printed()),
    }
}

/// A spinner with the elapsed time, on standard error, until aborted.
async fn spin(task_id: String) {
    const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for frame in FRAMES.iter().cycle() {
        tick.tick().await;
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "\r\x1b[2K{frame} waiting for {task_id} ({:.1}s)",
            start.elapsed().as_secs_f64()
        );
        let _ = stderr.flush();
    }
}
