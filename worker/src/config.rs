//! Worker settings: each a flag and an environment variable (`worker --help` lists them).

use std::time::Duration;

use clap::Parser;

use crate::prices::PriceSpec;
use crate::runtime::RuntimeConfig;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "worker",
    version,
    about = "Runs tasks of the agent task service from Redis.",
    // Workers only run in a cluster: --redis-url or --redis-cluster-urls is required.
    group = clap::ArgGroup::new("redis_target")
        .args(["redis_url", "redis_cluster_urls"])
        .required(true)
        .multiple(true)
)]
pub struct WorkerConfig {
    #[command(flatten)]
    pub redis: server::redis::RedisFlags,

    /// Tasks this process runs at once.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 16)]
    pub concurrency: usize,

    /// The most of those slots one entrypoint may hold at once, percent (50 to 100), when the
    /// worker hosts more than one: a flood of long runs of one entrypoint leaves the others
    /// room to run. 100: no bound.
    #[arg(long, env = "WORKER_ENTRYPOINT_SHARE", default_value_t = crate::runtime::DEFAULT_ENTRYPOINT_SHARE_PCT,
        value_parser = clap::value_parser!(u8).range(50..=100))]
    pub entrypoint_share: u8,

    /// Built-in entrypoints to host, comma separated (default: every built-in, or none with
    /// `--agent`).
    #[arg(long, env = "WORKER_ENTRYPOINTS", value_delimiter = ',')]
    pub entrypoints: Vec<String>,

    /// Agents to host, by base URL (e.g. `http://127.0.0.1:9000`): every entrypoint on the
    /// agent's Lucid card (`/.well-known/agent-card.json`) is hosted, each run a
    /// `POST {URL}/entrypoints/KEY/invoke`. Repeatable or comma separated. With an agent,
    /// the built-ins are hosted only where `--entrypoints` names them. A priced entrypoint, a
    /// key hosted twice or an unreadable card stops the worker at start. `a2a+URL` (or a URL
    /// whose card is an A2A card) hosts the skills of an A2A v1.0 agent over JSON-RPC.
    #[arg(
        long = "agent",
        env = "WORKER_AGENTS",
        value_name = "URL",
        value_delimiter = ','
    )]
    pub agents: Vec<String>,

    /// How often each agent's card is read again, in seconds (0: only at start). An
    /// entrypoint gone from the card stops being taken; a new one is hosted after the same
    /// checks as at start; a card that cannot be read keeps the last good one.
    #[arg(
        long,
        env = "WORKER_AGENT_REFRESH_SECS",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    pub agent_refresh_secs: u64,

    /// A file holding the bearer token sent to every `--agent` (`Authorization: Bearer`, on
    /// the card and on every run). Never logged.
    #[arg(
        long,
        env = "WORKER_AGENT_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "agent_token"
    )]
    pub agent_token_file: Option<std::path::PathBuf>,

    /// The agents' bearer token itself, for platforms that inject secrets as environment
    /// variables (prefer `WORKER_AGENT_TOKEN_FILE`: a flag's value shows in the process list).
    /// Never logged.
    #[arg(
        long,
        env = "WORKER_AGENT_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub agent_token: Option<server::secret::Secret>,

    /// Prices, `KEY=AMOUNT` in decimal USDC with an optional payment protocol, `:x402` (the
    /// default) or `:mpp` (the "Payment" HTTP authentication scheme), e.g. `echo=0.001` or
    /// `summarize=0.01:mpp`: invoking, creating a task of and (if it streams)
    /// streaming that entrypoint cost AMOUNT. `:settle=after` settles an invoke only once its
    /// run succeeded (a failed, cancelled or timed-out run charges nothing); tasks and streams
    /// settle before the run either way. `KEY=upto:MAX` (x402 only) makes AMOUNT a maximum: an
    /// invoke settles after the run for the `usage.charge` its handler reports (MAX when none);
    /// tasks and streams are charged MAX. Repeatable or comma separated. `--price` flags
    /// replace `WORKER_PRICES` entirely (they are not merged). Naming an entrypoint this worker
    /// does not host, or a bad amount, stops the worker at start.
    #[arg(
        long = "price",
        env = "WORKER_PRICES",
        value_name = "KEY=[upto:]AMOUNT[:x402|:mpp][:settle=after]",
        value_delimiter = ','
    )]
    pub prices: Vec<PriceSpec>,

    /// Entrypoints whose handler may run again after its worker died mid-run (idempotent or
    /// free of side effects). A direct invoke or stream of any other entrypoint gets exactly
    /// one attempt: a lost worker fails it (502 `task_attempts_exhausted`) rather than running
    /// it twice. Tasks created with POST /tasks are retried up to MAX_ATTEMPTS either way.
    /// Comma separated or repeated; a name this worker does not host stops it at start.
    #[arg(
        long = "retry-safe",
        env = "WORKER_RETRY_SAFE",
        value_name = "KEY",
        value_delimiter = ','
    )]
    pub retry_safe: Vec<String>,

    /// Private entrypoints: the gateway lists them on no public surface (cards,
    /// `/entrypoints`, OpenAPI) and runs them only for its members (gateway
    /// `--member-tokens-file`); anyone else is told they do not exist. Members see them in the
    /// A2A extended card. Comma separated or repeated; a name this worker does not host stops
    /// it at start.
    #[arg(
        long = "private",
        env = "WORKER_PRIVATE",
        value_name = "KEY",
        value_delimiter = ','
    )]
    pub private: Vec<String>,

    /// Retries of an entrypoint whose handler fails retryably (a Rust handler's
    /// `HandlerError::transient`, a remote agent's transient failure), `KEY=N`: up to N more
    /// attempts, each after a backoff (docs/workers.md, Retries); after the last the task
    /// fails with the handler's code. `KEY=0`: no retries. Entrypoints not named get
    /// `--retry-default`. Repeatable or comma separated.
    #[arg(
        long = "retry",
        env = "WORKER_RETRY",
        value_name = "KEY=N",
        value_delimiter = ','
    )]
    pub retry: Vec<crate::runtime::retry::RetrySpec>,

    /// Retries of a retryable failure for an entrypoint `--retry` does not name.
    #[arg(long, env = "WORKER_RETRY_DEFAULT", default_value_t = crate::runtime::retry::DEFAULT_RETRIES)]
    pub retry_default: u32,

    /// The first retry's backoff bound in milliseconds: retry n waits a random time in
    /// [0, min(RETRY_MAX_MS, RETRY_BASE_MS * 2^(n-1))] (full jitter), and never less than
    /// what the handler asked for (an upstream's `Retry-After`).
    #[arg(long, env = "WORKER_RETRY_BASE_MS", default_value_t = 1_000)]
    pub retry_base_ms: u64,

    /// The most a retry's backoff bound grows to, in milliseconds.
    #[arg(long, env = "WORKER_RETRY_MAX_MS", default_value_t = 60_000)]
    pub retry_max_ms: u64,

    /// Entrypoints that take Sign-In-With-X (`SIGN-IN-WITH-X`, a wallet's EIP-4361
    /// signature): `KEY` lets a payer who already paid for a priced entrypoint run it again
    /// by signing in, without paying; `KEY:auth-only` runs it for any signed-in caller and
    /// answers 401 `auth_required` without a signature. Comma separated or repeated; a name
    /// this worker does not host, or `KEY:auth-only` for a priced KEY, stops it at start.
    #[arg(
        long = "siwx",
        env = "WORKER_SIWX",
        value_name = "KEY[:auth-only]",
        value_delimiter = ','
    )]
    pub siwx: Vec<String>,

    /// The most milliseconds the built-in `sleep` waits: a larger `input.ms` is refused as
    /// invalid input (the entrypoint's input schema says so, so the gateway refuses it with
    /// 400 `invalid_input` before the task is stored).
    #[arg(long, env = "WORKER_MAX_SLEEP_MS", default_value_t = crate::builtins::sleep::DEFAULT_MAX_SLEEP_MS)]
    pub max_sleep_ms: u64,

    /// Also host `tck`, the A2A conformance agent the A2A TCK (a2aproject/a2a-tck) drives: it
    /// behaves by the prefix of the A2A message's messageId. Not one of the default built-ins;
    /// with this flag it is hosted even when `--entrypoints` does not name it.
    #[arg(long, env = "A2A_TCK_AGENT", default_value_t = false)]
    pub a2a_tck_agent: bool,

    /// Lease lifetime in milliseconds; renewed every third of it. A dead worker's tasks are
    /// recovered about this long after it died.
    #[arg(long, env = "WORKER_LEASE_TTL_MS", default_value_t = 10_000)]
    pub lease_ttl_ms: u64,

    /// Hard limit of one run in milliseconds (`maxRunMs`); past it the task fails with
    /// `task_timeout`.
    #[arg(long, env = "MAX_RUN_MS", default_value_t = 15 * 60 * 1_000)]
    pub max_run_ms: u64,

    /// How long a task whose run asked for more input (A2A `input-required`) waits for its
    /// caller's answer, in milliseconds; then it fails with `input_timeout`.
    #[arg(long, env = "INPUT_TIMEOUT_MS", default_value_t = 24 * 60 * 60 * 1000)]
    pub input_timeout_ms: u64,

    /// Turns a task that asks for input (A2A `input-required`) may take, its first message
    /// included: a run asking for input on the last one fails the task with `too_many_turns`
    /// instead of waiting, so no caller can keep one task going forever.
    #[arg(long, env = "MAX_TURNS", default_value_t = crate::runtime::DEFAULT_MAX_TURNS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_turns: u32,

    /// Runs a task may get after losing workers; a later run fails it.
    #[arg(long, env = "MAX_ATTEMPTS", default_value_t = store::DEFAULT_MAX_ATTEMPTS)]
    pub max_attempts: u32,

    /// Bytes a handler's output (JSON; for a streaming entrypoint its final output, for A2A
    /// its artifacts) may take in the task store; a larger one fails the task with
    /// `result_too_large` instead of being stored.
    #[arg(long, env = "WORKER_MAX_RESULT_BYTES", default_value_t = protocol::limits::DEFAULT_MAX_RESULT_BYTES)]
    pub max_result_bytes: usize,

    /// How long SIGTERM waits for running handlers before leaving them to recovery.
    #[arg(long, env = "WORKER_DRAIN_TIMEOUT_MS", default_value_t = 30_000)]
    pub drain_timeout_ms: u64,

    /// How often this worker sweeps for expired leases, in milliseconds.
    #[arg(long, env = "WORKER_RECOVERY_INTERVAL_MS", default_value_t = 500)]
    pub recovery_interval_ms: u64,

    /// How long an idle worker waits on its entrypoints' doorbells before it looks at every
    /// queue anyway, in milliseconds (a ring another process took, or one lost to a failover,
    /// is found within this). Shutdown waits this long at most for a wait under way.
    #[arg(long, env = "WORKER_IDLE_WAIT_MS", default_value_t = 1_000)]
    pub idle_wait_ms: u64,

    /// This worker's id in leases and the registry (default: host, pid and a random suffix):
    /// 1 to 128 of `A-Z a-z 0-9 . _ : @ -`, the ids an operator can name to drain a worker.
    #[arg(long, env = "WORKER_ID", value_parser = protocol::worker_id::parse_worker_id)]
    pub worker_id: Option<String>,

    /// Serve `/metrics` (the Prometheus text format) and `/health` on a listener of their
    /// own at `HOST:PORT` (keep it off the public network). Unset: no `/metrics`. The same
    /// instruments as the OTLP export, which works with it or without it.
    #[arg(long, env = "METRICS_LISTEN", value_name = "HOST:PORT", value_parser = server::admin::parse_address)]
    pub metrics_listen: Option<String>,

    /// Log format: `text` or `json`.
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

impl WorkerConfig {
    /// The agents' bearer token: `--agent-token`, or the contents of `--agent-token-file`
    /// (surrounding whitespace trimmed). The error names the file, never its contents.
    pub fn agent_token(&self) -> Result<Option<server::secret::Secret>, String> {
        if let Some(token) = &self.agent_token {
            return Ok(Some(token.clone()));
        }
        let Some(path) = &self.agent_token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("--agent-token-file {}: {err}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!(
                "--agent-token-file {}: the file is empty",
                path.display()
            ));
        }
        Ok(Some(server::secret::Secret::from(token)))
    }

    pub fn host() -> String {
        std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
            })
            .unwrap_or_else(|| "localhost".into())
    }

    pub fn runtime(&self) -> RuntimeConfig {
        let host = WorkerConfig::host();
        let worker_id = self.worker_id.clone().unwrap_or_else(|| {
            let suffix = uuid::Uuid::new_v4().simple().to_string();
            // The host name as the system has it may hold bytes an id may not.
            let host = protocol::worker_id::sanitize_worker_id_part(&host, 96);
            format!("{host}-{}-{}", std::process::id(), &suffix[..8])
        });
        RuntimeConfig {
            worker_id,
            host,
            concurrency: self.concurrency.max(1),
            entrypoint_share_pct: self.entrypoint_share,
            lease_ttl: Duration::from_millis(self.lease_ttl_ms.max(30)),
            max_run: Duration::from_millis(self.max_run_ms.max(1)),
            max_attempts: self.max_attempts.max(1),
            input_timeout: Duration::from_millis(self.input_timeout_ms.max(1)),
            max_turns: self.max_turns.max(1),
            max_result_bytes: self.max_result_bytes,
            drain_timeout: Duration::from_millis(self.drain_timeout_ms),
            recovery_interval: Duration::from_millis(self.recovery_interval_ms.max(10)),
            idle_wait: Duration::from_millis(self.idle_wait_ms.max(10)),
            gauge_interval: crate::runtime::DEFAULT_GAUGE_INTERVAL,
            retry: crate::runtime::retry::RetryPolicy::new(
                self.retry_default,
                &self.retry,
                Duration::from_millis(self.retry_base_ms),
                Duration::from_millis(self.retry_max_ms),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_redis_passwords() -> Result<(), clap::Error> {
        let config = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://:s3cr3t-canary@127.0.0.1:7000/",
            "--redis-cluster-urls",
            "redis://:s3cr3t-canary@127.0.0.1:7001,redis://:s3cr3t-canary@127.0.0.1:7002",
        ])?;
        assert!(!format!("{config:?}").contains("s3cr3t-canary"));
        assert_eq!(
            config.redis.url.as_ref().map(|url| url.expose()),
            Some("redis://:s3cr3t-canary@127.0.0.1:7000/")
        );
        assert_eq!(config.redis.cluster_urls.len(), 2);
        Ok(())
    }

    #[test]
    fn sleep_and_turn_bounds_default_and_parse() -> Result<(), clap::Error> {
        let config = WorkerConfig::try_parse_from(["worker", "--redis-url", "redis://x/"])?;
        assert_eq!(config.max_sleep_ms, 60_000);
        assert_eq!(config.runtime().max_turns, 32);
        let config = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--max-sleep-ms",
            "5",
            "--max-turns",
            "3",
        ])?;
        assert_eq!(config.max_sleep_ms, 5);
        assert_eq!(config.runtime().max_turns, 3);
        assert!(
            WorkerConfig::try_parse_from([
                "worker",
                "--redis-url",
                "redis://x/",
                "--max-turns",
                "0"
            ])
            .is_err()
        );
        Ok(())
    }

    #[test]
    fn parses_flags_and_lists() {
        let parsed = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://127.0.0.1:7000/",
            "--concurrency",
            "4",
            "--entrypoints",
            "echo,sleep",
        ]);
        let config = match parsed {
            Ok(config) => config,
            Err(err) => panic!("{err}"),
        };
        assert_eq!(config.concurrency, 4);
        assert_eq!(config.entrypoints, vec!["echo", "sleep"]);
        assert_eq!(config.runtime().lease_ttl, Duration::from_secs(10));
    }

    #[test]
    fn a_cluster_replaces_the_redis_url_and_the_timeout_is_settable() {
        let parsed = WorkerConfig::try_parse_from([
            "worker",
            "--redis-cluster-urls",
            "redis://127.0.0.1:7000,redis://127.0.0.1:7001",
            "--redis-timeout-ms",
            "5000",
        ]);
        match parsed {
            Ok(config) => {
                assert_eq!(config.redis.url, None);
                assert_eq!(config.redis.cluster_urls.len(), 2);
                assert_eq!(config.redis.timeout_ms, 5000);
            }
            Err(err) => panic!("{err}"),
        }
        let default = WorkerConfig::try_parse_from(["worker", "--redis-url", "redis://x/"]);
        assert_eq!(
            default.map(|config| config.redis.timeout_ms).ok(),
            Some(2000)
        );
    }

    #[test]
    fn parses_repeated_and_comma_separated_prices() {
        let parsed = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--price",
            "echo=0.001,sleep=0.002:x402",
            "--price",
            "count=1",
        ]);
        let prices: Vec<String> = match parsed {
            Ok(config) => config.prices.iter().map(ToString::to_string).collect(),
            Err(err) => panic!("{err}"),
        };
        assert_eq!(
            prices,
            ["echo=0.001:x402", "sleep=0.002:x402", "count=1:x402"]
        );
    }

    #[test]
    fn agents_are_repeatable_and_comma_separated() -> Result<(), clap::Error> {
        let config = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--agent",
            "http://a:1,http://b:2",
            "--agent",
            "https://c/v1",
        ])?;
        assert_eq!(config.agents, ["http://a:1", "http://b:2", "https://c/v1"]);
        Ok(())
    }

    #[test]
    fn the_agents_token_comes_from_its_file_or_the_environment_and_never_shows()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("worker-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("token");
        std::fs::write(&file, "s3cret-token\n")?;
        let path = file.to_string_lossy().into_owned();
        let config = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--agent-token-file",
            &path,
        ])?;
        let token = config.agent_token()?.ok_or("no token")?;
        assert_eq!(token.expose(), "s3cret-token");
        assert!(!format!("{token:?}").contains("s3cret"));
        let config = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--agent-token",
            "flag-secret",
        ])?;
        assert!(!format!("{config:?}").contains("flag-secret"));
        assert_eq!(
            config
                .agent_token()?
                .map(|token| token.expose().to_owned())
                .as_deref(),
            Some("flag-secret")
        );
        std::fs::write(&file, " \n")?;
        let config = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--agent-token-file",
            &path,
        ])?;
        assert!(config.agent_token().is_err());
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn rejects_bad_prices_at_parse_time() {
        for price in ["echo=abc", "echo", "echo=0.001:lightning"] {
            let parsed = WorkerConfig::try_parse_from([
                "worker",
                "--redis-url",
                "redis://x/",
                "--price",
                price,
            ]);
            assert!(parsed.is_err(), "{price}");
        }
    }

    #[test]
    fn the_a2a_tck_agent_is_off_unless_asked_for() {
        let parse = |args: &[&str]| {
            let base = ["worker", "--redis-url", "redis://x/"];
            match WorkerConfig::try_parse_from(base.iter().chain(args)) {
                Ok(config) => config.a2a_tck_agent,
                Err(err) => panic!("{err}"),
            }
        };
        assert!(!parse(&[]));
        assert!(parse(&["--a2a-tck-agent"]));
    }

    #[test]
    fn the_result_limit_defaults_to_256_kib_and_reaches_the_runtime() {
        let parse = |args: &[&str]| {
            let base = ["worker", "--redis-url", "redis://x/"];
            match WorkerConfig::try_parse_from(base.iter().chain(args)) {
                Ok(config) => config.runtime().max_result_bytes,
                Err(err) => panic!("{err}"),
            }
        };
        assert_eq!(parse(&[]), 262_144);
        assert_eq!(parse(&["--max-result-bytes", "1024"]), 1024);
    }

    #[test]
    fn retry_flags_reach_the_runtime() -> Result<(), clap::Error> {
        let base = ["worker", "--redis-url", "redis://x/"];
        let policy = WorkerConfig::try_parse_from(base)?.runtime().retry;
        assert_eq!(policy, crate::runtime::retry::RetryPolicy::default());
        assert_eq!(policy.retries("echo"), 3);
        let args = [
            "--retry",
            "fail=2,echo=0",
            "--retry",
            "sleep=9",
            "--retry-default",
            "1",
            "--retry-base-ms",
            "5",
            "--retry-max-ms",
            "20",
        ];
        let policy = WorkerConfig::try_parse_from(base.iter().chain(&args))?
            .runtime()
            .retry;
        assert_eq!(
            [
                policy.retries("fail"),
                policy.retries("echo"),
                policy.retries("sleep"),
                policy.retries("count")
            ],
            [2, 0, 9, 1]
        );
        assert_eq!(policy.ceiling(3), Duration::from_millis(20));
        let bad = ["--retry", "fail"];
        assert!(WorkerConfig::try_parse_from(base.iter().chain(&bad)).is_err());
        Ok(())
    }

    #[test]
    fn rejects_bad_numbers() {
        let parsed = WorkerConfig::try_parse_from([
            "worker",
            "--redis-url",
            "redis://x/",
            "--concurrency",
            "many",
        ]);
        assert!(parsed.is_err());
    }
}
