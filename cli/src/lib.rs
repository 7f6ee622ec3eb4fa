//! `taskctl`, a command-line client for agents speaking the Lucid A2A HTTP profile:
//!
//! ```text
//! taskctl COMMAND AGENT_URL [ARGS]
//! taskctl card   URL
//! taskctl invoke URL ENTRYPOINT [INPUT_JSON] [--pay KEYFILE [--max-amount USDC] [--x402-version 1|2] [--max-validity-seconds SECS]]
//! taskctl stream URL ENTRYPOINT [INPUT_JSON] [--pay ...]
//! taskctl send   URL ENTRYPOINT INPUT_JSON [--wait] [--pay ...]
//! taskctl get    URL TASK_ID
//! taskctl list   URL [--status S,..] [--context-id C] [--limit N] [--offset N]
//! taskctl cancel URL TASK_ID
//! taskctl watch  URL TASK_ID
//! ```
//!
//! Output is human-readable on a terminal and JSON otherwise (`--output auto`, the default);
//! `--json` (or `--output json`) prints one JSON document per result (per event for `stream`
//! and `watch`), `--output human` forces text. Exit codes: [`Exit`].
//!
//! `--verify` (or `TASKCTL_VERIFY=1`) makes every command require a valid card signature,
//! with the keys of `--jwks FILE` (`TASKCTL_JWKS`) or the card origin's JWKS, and
//! `--revoked-kid KID` refused.
//!
//! Access tokens come from `--token`, `--token-file` or `TASK_ACCESS_TOKEN`, in that order.
//! `send` without one generates a token and prints it (the only time taskctl prints a token).
//!
//! Priced entrypoints (x402) are paid with `--pay KEYFILE` or `TASKCTL_PAY_KEY`, up to
//! `--max-amount` USDC (1.0 by default); the settlement receipt is printed with the result
//! (`settlement` in JSON). A 402 asking to sign for another origin, path, realm or sign-in
//! domain, or on an unknown network or asset, is refused before anything is signed. See
//! [`pay`].

pub mod cmd;
pub mod output;
pub mod pay;
pub mod token;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use client::{
    Client, ClientError, ClientOptions, Jwks, KeySource, TaskCreationError, TrustPolicy, UrlPolicy,
    Verify,
};
use serde_json::{Value, json};

pub use output::{Format, Output, OutputFormat};

/// The process exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Ok = 0,
    /// The agent answered with an error (or refused card, or a task that failed or was
    /// cancelled while `send --wait` or `watch` followed it).
    Remote = 1,
    /// Bad command line: unknown flag, missing argument, input that is not JSON, no token.
    Usage = 2,
    /// The agent could not be reached, or the connection broke or timed out.
    Network = 3,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// A command that did not succeed: how to exit and what to say.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    /// Extra fields for the JSON error document (never a token the user did not just get).
    pub details: Value,
    /// The result was printed already (a task that failed, a stream that ended badly): no
    /// JSON error document follows it, only the note on standard error.
    pub printed: bool,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            exit: Exit::Usage,
            message: message.into(),
            details: json!({}),
            printed: false,
        }
    }

    pub fn remote(message: impl Into<String>, details: Value) -> Self {
        Failure {
            exit: Exit::Remote,
            message: message.into(),
            details,
            printed: false,
        }
    }

    /// The command printed its result before failing.
    pub fn printed(mut self) -> Self {
        self.printed = true;
        self
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        let exit = match &error {
            ClientError::Network(_) | ClientError::Timeout(_) => Exit::Network,
            ClientError::InvalidUrl { .. } => Exit::Usage,
            _ => Exit::Remote,
        };
        let mut details = json!({});
        if let Some(status) = error.status() {
            details["status"] = json!(status);
        }
        if let Some(code) = error.code() {
            details["code"] = json!(code);
        }
        if let ClientError::Remote { body, .. } = &error {
            // An `invalid_input` answer's issues, for scripts (`--json`); the message has the
            // first ones already.
            let issues = serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|parsed| parsed.get("error")?.get("issues")?.as_array().cloned());
            if let Some(mut issues) = issues {
                issues.truncate(20);
                details["issues"] = Value::Array(issues);
            }
        }
        let mut message = error.to_string();
        match &error {
            ClientError::PaymentRequired { paid, terms, .. } => {
                if let Some(terms) = terms {
                    details["price"] = json!({
                        "amount": payments::amount::to_decimal(terms.amount),
                        "currency": "USDC",
                        "network": terms.network.name,
                        "payTo": terms.pay_to.to_string(),
                    });
                }
                if !paid {
                    message.push_str(&format!(" (pay with --pay KEYFILE or {})", pay::KEY_VAR));
                }
            }
            ClientError::Payment(payments::PayError::OverCap { .. }) => {
                message.push_str(" (raise --max-amount to pay it)");
            }
            _ => {}
        }
        Failure {
            exit,
            message,
            details,
            printed: false,
        }
    }
}

impl Failure {
    /// A failed `send`: the keys to reconcile with, the token only if taskctl generated it.
    pub fn creation(error: &TaskCreationError, token_generated: bool) -> Self {
        let exit = match error.failure {
            client::CreationFailure::Network => Exit::Network,
            _ => Exit::Remote,
        };
        let mut details = json!({ "idempotencyKey": error.idempotency_key });
        if token_generated {
            details["accessToken"] = json!(error.access_token());
        }
        if let Some(status) = error.response_status {
            details["status"] = json!(status);
        }
        if let Some(code) = error.cause.code() {
            details["code"] = json!(code);
        }
        if let Some(task_id) = &error.task_id {
            details["taskId"] = json!(task_id);
        }
        if let Some(task_status) = error.task_status {
            details["taskStatus"] = json!(task_status);
        }
        if let Some(settlement) = pay::settlement_json(&error.settlement) {
            details["settlement"] = settlement;
        }
        Failure {
            exit: match (&error.failure, &error.cause) {
                (_, ClientError::InvalidUrl { .. }) => Exit::Usage,
                _ => exit,
            },
            message: error.to_string(),
            details,
            printed: false,
        }
    }
}

pub type CmdResult = Result<(), Failure>;

#[derive(Debug, Parser)]
#[command(
    name = "taskctl",
    version,
    about = "Talk to an agent speaking the Lucid A2A HTTP profile",
    after_help = "Exit codes: 0 ok, 1 remote error (or a task that failed or was cancelled), \
                  2 usage, 3 network.\nTokens: --token, --token-file or TASK_ACCESS_TOKEN."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// Output format: human on a terminal and JSON otherwise (auto), or forced.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Auto)]
    pub output: OutputFormat,
    /// Same as --output json: one JSON document per result.
    #[arg(long, global = true)]
    pub json: bool,
    /// Task access token (visible to other local users in the process list: prefer
    /// --token-file or TASK_ACCESS_TOKEN).
    #[arg(
        long,
        global = true,
        value_name = "TOKEN",
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,
    /// A file holding the task access token.
    #[arg(long, global = true, value_name = "PATH")]
    pub token_file: Option<std::path::PathBuf>,
    /// Only talk to these origins (scheme://host:port); repeatable, or comma-separated in
    /// TASKCTL_ALLOW_ORIGIN. Applies to the card URL and to every URL the card names; without
    /// it a card may only name its own origin.
    #[arg(
        long = "allow-origin",
        global = true,
        value_name = "ORIGIN",
        env = "TASKCTL_ALLOW_ORIGIN",
        value_delimiter = ','
    )]
    pub allow_origins: Vec<String>,
    /// Timeout in seconds for one request, invoke included (not for streams or --wait).
    #[arg(long, global = true, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Every command fetches the card under a required signature (A2A §8.4, ES256 or
    /// EdDSA): an unsigned card, or one signed by an unknown, expired or revoked key, stops it
    /// (exit 1). Keys: --jwks, else the card origin's /.well-known/jwks.json.
    #[arg(
        long,
        global = true,
        env = "TASKCTL_VERIFY",
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::FalseyValueParser::new()
    )]
    pub verify: bool,
    /// The trusted keys (a JWKS file), pinned instead of fetched from the card's origin.
    #[arg(long, global = true, value_name = "FILE", env = "TASKCTL_JWKS")]
    pub jwks: Option<std::path::PathBuf>,
    /// A key id whose signatures never verify (a revoked key); repeatable, or comma-separated
    /// in TASKCTL_REVOKED_KID.
    #[arg(
        long = "revoked-kid",
        global = true,
        value_name = "KID",
        env = "TASKCTL_REVOKED_KID",
        value_delimiter = ','
    )]
    pub revoked_kids: Vec<String>,
}

impl Cli {
    /// Parses `args` (the program name first), then checks what clap's `requires` cannot: a
    /// global flag given before the subcommand is not seen by the subcommand's checks, so
    /// `--verify card URL --jwks F` would be refused.
    pub fn try_parse_checked<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::CommandFactory;
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        let mut cli = Cli::try_parse_from(args.iter().cloned())?;
        // clap keeps a global flag's values from the last place it was given (before or after
        // the subcommand) and drops the others: a revoked kid must never be dropped.
        let named = revoked_kids_named(&args);
        if !named.is_empty() {
            cli.global.revoked_kids = named;
        }
        let global = &cli.global;
        if !global.verify && (global.jwks.is_some() || !global.revoked_kids.is_empty()) {
            return Err(Cli::command().error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "--jwks and --revoked-kid need --verify (or TASKCTL_VERIFY=1)",
            ));
        }
        Ok(cli)
    }
}

/// Every `--revoked-kid KID` and `--revoked-kid=KID` on the command line (comma-separated
/// lists split), up to a `--`.
fn revoked_kids_named(args: &[std::ffi::OsString]) -> Vec<String> {
    let mut named = Vec::new();
    let mut args = args.iter().skip(1).map(|arg| arg.to_str());
    while let Some(arg) = args.next() {
        let value = match arg {
            Some("--") => break,
            Some("--revoked-kid") => args.next().flatten(),
            Some(arg) => arg.strip_prefix("--revoked-kid="),
            None => None,
        };
        if let Some(value) = value {
            named.extend(value.split(',').map(str::to_owned));
        }
    }
    named
}

impl GlobalArgs {
    /// The trust policy --verify, --jwks and --revoked-kid ask for.
    pub fn trust(&self) -> Result<TrustPolicy, Failure> {
        if !self.verify {
            return Ok(TrustPolicy::default());
        }
        let keys = match &self.jwks {
            Some(path) => KeySource::Pinned(
                Jwks::from_file(path).map_err(|err| Failure::usage(format!("--jwks: {err}")))?,
            ),
            None => KeySource::SameOrigin,
        };
        Ok(TrustPolicy {
            verify: Verify::Required,
            keys,
            revoked: self.revoked_kids.clone(),
        })
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the agent's card.
    Card(cmd::card::Args),
    /// Run an entrypoint and print its result.
    Invoke(cmd::invoke::Args),
    /// Run an entrypoint and print its events as they come.
    Stream(cmd::stream::Args),
    /// Create a task (and with --wait, wait for its result).
    Send(cmd::send::Args),
    /// Show one task.
    Get(cmd::get::Args),
    /// List the tasks of a token.
    List(cmd::list::Args),
    /// Cancel a running task.
    Cancel(cmd::cancel::Args),
    /// Follow a task's events live until it ends.
    Watch(cmd::watch::Args),
    /// Operator commands (the operator token, not an access token).
    Admin(cmd::admin::Args),
}

/// What every command gets: the client, the output, and the token sources.
pub struct Context {
    pub client: Client,
    pub output: Output,
    pub global: GlobalArgs,
}

impl Context {
    /// The token from --token, --token-file or TASK_ACCESS_TOKEN, if any.
    pub fn token(&self) -> Result<Option<String>, Failure> {
        token::resolve(
            self.global.token.as_deref(),
            self.global.token_file.as_deref(),
            std::env::var("TASK_ACCESS_TOKEN").ok().as_deref(),
        )
    }

    /// A token the command cannot do without.
    pub fn required_token(&self) -> Result<String, Failure> {
        self.token()?.ok_or_else(|| {
            Failure::usage(
                "an access token is required: --token, --token-file or TASK_ACCESS_TOKEN",
            )
        })
    }

    pub async fn card(&self, url: &str) -> Result<client::AgentCard, Failure> {
        Ok(self.client.fetch_card(url).await?)
    }
}

/// Parses the command line, runs the command and returns the exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse_checked(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                Exit::Usage.into()
            } else {
                Exit::Ok.into()
            };
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("taskctl: cannot start: {error}");
            return Exit::Network.into();
        }
    };
    runtime.block_on(run(cli)).into()
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Exit {
    let format = if cli.global.json {
        Format::Json
    } else {
        cli.global.output.resolve()
    };
    let output = Output::new(format);
    let mut options = ClientOptions::default();
    if !cli.global.allow_origins.is_empty() {
        options.policy = UrlPolicy {
            allowed_origins: Some(cli.global.allow_origins.clone()),
        };
    }
    if let Some(secs) = cli.global.timeout {
        options.request_timeout = std::time::Duration::from_secs(secs);
        options.invoke_timeout = std::time::Duration::from_secs(secs);
        options.card_timeout = std::time::Duration::from_secs(secs);
    }
    options.trust = match cli.global.trust() {
        Ok(trust) => trust,
        Err(failure) => {
            output.failure(&failure);
            return failure.exit;
        }
    };
    let client = match Client::new(options) {
        Ok(client) => client,
        Err(error) => {
            output.failure(&Failure::from(error));
            return Exit::Network;
        }
    };
    let context = Context {
        client,
        output,
        global: cli.global,
    };
    let result = match &cli.command {
        Command::Card(args) => cmd::card::run(&context, args).await,
        Command::Invoke(args) => cmd::invoke::run(&context, args).await,
        Command::Stream(args) => cmd::stream::run(&context, args).await,
        Command::Send(args) => cmd::send::run(&context, args).await,
        Command::Get(args) => cmd::get::run(&context, args).await,
        Command::List(args) => cmd::list::run(&context, args).await,
        Command::Cancel(args) => cmd::cancel::run(&context, args).await,
        Command::Watch(args) => cmd::watch::run(&context, args).await,
        Command::Admin(args) => cmd::admin::run(&context, args).await,
    };
    match result {
        Ok(()) => Exit::Ok,
        Err(failure) => {
            context.output.failure(&failure);
            failure.exit
        }
    }
}

/// Parses an `INPUT_JSON` argument; `-` reads standard input.
pub fn parse_input(text: Option<&str>) -> Result<Value, Failure> {
    let text = match text {
        None => return Ok(json!({})),
        Some("-") => {
            let mut buffer = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut buffer)
                .map_err(|err| Failure::usage(format!("cannot read standard input: {err}")))?;
            buffer
        }
        Some(text) => text.to_owned(),
    };
    serde_json::from_str(&text).map_err(|err| {
        Failure::usage(format!(
            "INPUT_JSON is not JSON ({err}); quote a string as '\"text\"'"
        ))
    })
}

#[cfg(test)]
mod tests;
