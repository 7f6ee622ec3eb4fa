//! `taskctl admin …`: the operator's commands, against the gateway's console API with the
//! operator token (`OPERATOR_TOKEN`, or `--operator-token-file`), never an access token.
//!
//! - `taskctl admin settlements URL`: the credentials left `settling` (lost settle answers the
//!   sweep could not resolve), oldest first, with their task, age, payer and amount;
//! - `taskctl admin settle URL TASK_ID lookup|void|settled [--transaction HASH] [--note TEXT]`:
//!   resolves one: ask the facilitator now, record that nothing was charged (the task is
//!   cancelled), or record the transaction that charged it (the receipt is stored, the task
//!   runs);
//! - `taskctl admin pause URL KEY [--refuse]`, `taskctl admin resume URL KEY`: pause an
//!   entrypoint cluster-wide (workers take none of its tasks; queued ones wait, or with
//!   `--refuse` new ones are refused with 503) and lift the pause;
//! - `taskctl admin drain URL WORKER [--wait [--wait-timeout SECONDS]]`: ask a live worker to
//!   drain (take no more tasks, finish its runs, deregister, exit 0, as on SIGTERM); `--wait`
//!   polls the console overview until the worker is gone from it, for at most 900 s by default
//!   (then exit 3, the request standing);
//! - `taskctl admin audit URL`: the operators' actions, newest first;
//! - `taskctl admin task|cancel|rerun URL ID`: one task as the operator sees it, cancelled, or
//!   run again as a new task; `taskctl admin failed URL [KEY]`: the failed tasks (see
//!   [`super::admin_tasks`]).

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::{CmdResult, Context, Exit, Failure};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A file holding the operator token (else OPERATOR_TOKEN).
    #[arg(long, global = true, value_name = "PATH")]
    pub operator_token_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// List the payments left settling (lost settle answers), oldest first.
    Settlements { url: String },
    /// Resolve one payment left settling, named by its task.
    Settle(SettleArgs),
    /// Pause an entrypoint cluster-wide: workers take none of its tasks until it is resumed.
    Pause {
        url: String,
        key: String,
        /// Refuse new tasks (503 with Retry-After) instead of queueing them.
        #[arg(long)]
        refuse: bool,
    },
    /// Lift an entrypoint's pause: its queued tasks run.
    Resume { url: String, key: String },
    /// Drain a worker: it takes no more tasks, finishes its runs, deregisters and exits.
    Drain {
        url: String,
        worker: String,
        /// Wait until the worker has left the registry (polling the console overview).
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds (exit 3; the drain request stands).
        #[arg(long, value_name = "SECONDS", default_value_t = 900, requires = "wait")]
        wait_timeout: u64,
    },
    /// List the operators' actions (pauses, resumes, drains, settlements, cancels, re-runs),
    /// newest first.
    Audit { url: String },
    /// Show one task as the operator sees it (state, attempts, lease, error, events; no input
    /// or result unless the gateway runs with --console-show-payloads).
    Task { url: String, id: String },
    /// Cancel a running task, as its owner could.
    Cancel { url: String, id: String },
    /// Run a failed or cancelled task again as a new task of the same owner (never charged).
    Rerun { url: String, id: String },
    /// List an entrypoint's failed tasks, newest first (without KEY: the entrypoints that
    /// have failed tasks, with how many).
    Failed {
        url: String,
        key: Option<String>,
        /// Where to go on from: the `nextCursor` of the page before.
        #[arg(long)]
        cursor: Option<String>,
        /// Tasks per page (1 to 200; default 50).
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Debug, clap::Args)]
pub struct SettleArgs {
    pub url: String,
    pub task_id: String,
    /// lookup: ask the facilitator; void: nothing was charged; settled: it was (--transaction).
    #[arg(value_enum)]
    pub decision: Decision,
    /// The transaction that charged the payer (0x and 64 hex digits), for `settled`.
    #[arg(long, value_name = "HASH")]
    pub transaction: Option<String>,
    /// Kept with the decision (at most 500 bytes).
    #[arg(long, default_value = "")]
    pub note: String,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Decision {
    Lookup,
    Void,
    Settled,
}

pub async fn run(context: &Context, args: &Args) -> CmdResult {
    let token = operator_token(args)?;
    match &args.command {
        AdminCommand::Task { url, id } => super::admin_tasks::task(context, &token, url, id).await,
        AdminCommand::Cancel { url, id } => {
            super::admin_tasks::cancel(context, &token, url, id).await
        }
        AdminCommand::Rerun { url, id } => {
            super::admin_tasks::rerun(context, &token, url, id).await
        }
        AdminCommand::Failed {
            url,
            key,
            cursor,
            limit,
        } => {
            let page = super::admin_tasks::Page {
                key: key.as_deref(),
                cursor: cursor.as_deref(),
                limit: *limit,
            };
            super::admin_tasks::failed(context, &token, url, page).await
        }
        AdminCommand::Settlements { url } => {
            let path = ["console", "api", "settlements"];
            let answer = call(context, &token, url, &path, None).await?;
            if context.output.is_json() {
                context.output.json(&answer);
                return Ok(());
            }
            let listed = answer["settlements"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if listed.is_empty() {
                context.output.line("no payment is left settling");
            }
            for record in listed {
                context.output.line(&format!(
                    "{}  {}s  payer {}  amount {}  {}",
                    record["taskId"].as_str().unwrap_or("?"),
                    record["ageMs"].as_u64().unwrap_or(0) / 1000,
                    record["payer"].as_str().unwrap_or("?"),
                    record["amount"].as_str().unwrap_or("?"),
                    record["network"].as_str().unwrap_or("?"),
                ));
            }
            Ok(())
        }
        AdminCommand::Pause { url, key, refuse } => {
            let mode = if *refuse { "refuse" } else { "queue" };
            let path = ["console", "api", "entrypoints", key.as_str(), "pause"];
            let answer = call(context, &token, url, &path, Some(json!({"mode": mode}))).await?;
            if context.output.is_json() {
                context.output.json(&answer);
            } else {
                context.output.line(&format!("{key}: paused ({mode})"));
            }
            Ok(())
        }
        AdminCommand::Resume { url, key } => {
            let path = ["console", "api", "entrypoints", key.as_str(), "resume"];
            let answer = call(context, &token, url, &path, Some(json!({}))).await?;
            if context.output.is_json() {
                context.output.json(&answer);
            } else if answer["wasPaused"] == true {
                context.output.line(&format!("{key}: resumed"));
            } else {
                context.output.line(&format!("{key}: was not paused"));
            }
            Ok(())
        }
        AdminCommand::Drain {
            url,
            worker,
            wait,
            wait_timeout,
        } => {
            let path = ["console", "api", "workers", worker.as_str(), "drain"];
            let answer = call(context, &token, url, &path, Some(json!({}))).await?;
            if *wait {
                let bound = std::time::Duration::from_secs(*wait_timeout);
                wait_gone(context, &token, url, worker, bound).await?;
            }
            if context.output.is_json() {
                context.output.json(&answer);
            } else if *wait {
                context.output.line(&format!("{worker}: drained and gone"));
            } else {
                context.output.line(&format!(
                    "{worker}: draining (it stops within a heartbeat, then finishes its runs)"
                ));
            }
            Ok(())
        }
        AdminCommand::Audit { url } => {
            let path = ["console", "api", "audit"];
            let answer = call(context, &token, url, &path, None).await?;
            if context.output.is_json() {
                context.output.json(&answer);
                return Ok(());
            }
            let entries = answer["entries"].as_array().cloned().unwrap_or_default();
            if entries.is_empty() {
                context.output.line("no operator action is recorded");
            }
            for entry in entries {
                let at = entry["atMs"]
                    .as_u64()
                    .map(|ms| protocol::Timestamp(ms).to_iso())
                    .unwrap_or_else(|| "?".to_owned());
                context.output.line(&format!(
                    "{at}  {}  {}  {}  {}",
                    entry["actor"].as_str().unwrap_or("?"),
                    entry["action"].as_str().unwrap_or("?"),
                    entry["target"].as_str().unwrap_or("?"),
                    entry.get("detail").cloned().unwrap_or(Value::Null),
                ));
            }
            Ok(())
        }
        AdminCommand::Settle(settle) => {
            let body = match settle.decision {
                Decision::Lookup => json!({"action": "lookup"}),
                Decision::Void => json!({"action": "void", "note": settle.note}),
                Decision::Settled => {
                    let Some(transaction) = &settle.transaction else {
                        return Err(Failure::usage(
                            "settled needs --transaction HASH (the transaction that charged the payer)",
                        ));
                    };
                    json!({"action": "settled", "transaction": transaction, "note": settle.note})
                }
            };
            let path = ["console", "api", "settlements", settle.task_id.as_str()];
            let answer = call(context, &token, &settle.url, &path, Some(body)).await?;
            if context.output.is_json() {
                context.output.json(&answer);
            } else {
                context.output.line(&format!(
                    "{}: {}",
                    answer["taskId"].as_str().unwrap_or(&settle.task_id),
                    answer["outcome"].as_str().unwrap_or("?")
                ));
            }
            if answer["outcome"] == "unresolved" {
                return Err(Failure::remote(
                    "unresolved: the facilitator could not say, or it was resolved meanwhile",
                    json!({}),
                )
                .printed());
            }
            Ok(())
        }
    }
}

/// How often `drain --wait` reads the overview: the console rebuilds it about this often.
const WAIT_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Polls the console overview until `worker` is not among its workers, for at most `bound`
/// (a worker that never heard the request, or whose runs outlast the operator's patience, is
/// reported, not waited for forever; each read has the global `--timeout` too).
async fn wait_gone(
    context: &Context,
    token: &str,
    url: &str,
    worker: &str,
    bound: std::time::Duration,
) -> Result<(), Failure> {
    let path = ["console", "api", "overview"];
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let overview = call(context, token, url, &path, None).await?;
        let listed = overview["workers"]
            .as_array()
            .is_some_and(|rows| rows.iter().any(|row| row["id"] == worker));
        if !listed {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failure {
                exit: Exit::Network,
                message: format!(
                    "{worker} is still registered after {} s: it is still finishing its runs \
                     (its drain timeout bounds them), or it has not read the request yet; the \
                     request stands",
                    bound.as_secs()
                ),
                details: json!({"worker": worker, "waitedSeconds": bound.as_secs()}),
                printed: false,
            });
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        tokio::time::sleep(WAIT_POLL.min(left)).await;
    }
}

/// The operator token from `--operator-token-file` or `OPERATOR_TOKEN` (the gateway's own
/// setting's name), trimmed.
fn operator_token(args: &Args) -> Result<String, Failure> {
    let token = match &args.operator_token_file {
        Some(path) => std::fs::read_to_string(path).map_err(|err| {
            Failure::usage(format!(
                "cannot read the operator token file {}: {err}",
                path.display()
            ))
        })?,
        None => std::env::var("OPERATOR_TOKEN").unwrap_or_default(),
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(Failure::usage(
            "the operator token is required: OPERATOR_TOKEN or --operator-token-file",
        ));
    }
    Ok(token)
}

/// GET (no body) or POST `body` to the path of `segments` below the gateway at `url` (its
/// base path kept; each segment percent-encoded), as the operator; the JSON answer, or a
/// failure saying what the gateway said.
pub(super) async fn call(
    context: &Context,
    token: &str,
    url: &str,
    segments: &[&str],
    body: Option<Value>,
) -> Result<Value, Failure> {
    call_with_query(context, token, url, segments, &[], body).await
}

/// [`call`] with `query` pairs added to the URL.
pub(super) async fn call_with_query(
    context: &Context,
    token: &str,
    url: &str,
    segments: &[&str],
    query: &[(&str, String)],
    body: Option<Value>,
) -> Result<Value, Failure> {
    let mut target = reqwest::Url::parse(url)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or_else(|| Failure::usage(format!("{url} is not an http(s) URL")))?;
    let base = target.origin().ascii_serialization();
    target
        .path_segments_mut()
        .map_err(|()| Failure::usage(format!("{url} cannot have a path")))?
        .pop_if_empty()
        .extend(segments);
    if !query.is_empty() {
        target
            .query_pairs_mut()
            .extend_pairs(query.iter().map(|(name, value)| (*name, value.as_str())));
    }
    let timeout = std::time::Duration::from_secs(context.global.timeout.unwrap_or(30));
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| Failure::usage(format!("cannot make an HTTP client: {err}")))?;
    let request = match body {
        Some(body) => http.post(target).json(&body),
        None => http.get(target),
    };
    let response = request
        .bearer_auth(token)
        .send()
        .await
        .map_err(|err| Failure {
            exit: Exit::Network,
            message: format!("could not reach {base}: {err}"),
            details: json!({}),
            printed: false,
        })?;
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let code = answer["error"]["code"].as_str().unwrap_or("");
        let message = answer["error"]["message"].as_str().unwrap_or("");
        return Err(Failure::remote(
            format!("HTTP {} {code}: {message}", status.as_u16()),
            json!({"status": status.as_u16(), "code": code}),
        ));
    }
    Ok(answer)
}
