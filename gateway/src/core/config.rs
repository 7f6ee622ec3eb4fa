//! Gateway settings: each a flag and an environment variable (`gateway --help` lists them).

use clap::Parser;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "gateway",
    version,
    about = "HTTP gateway of the agent task service (Lucid A2A profile)."
)]
pub struct GatewayConfig {
    /// Address to listen on.
    #[arg(long = "listen", env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen: String,

    #[command(flatten)]
    pub redis: server::redis::RedisFlags,

    /// The public origin clients reach this gateway at, e.g. `https://agent.example.com`
    /// (scheme, host and port only). What Sign-In-With-X messages must name (domain and URI),
    /// the x402 `resource` URLs and the default MPP realm are built from it. Unset: from the
    /// request's headers with --trust-forwarded-headers, else `http://<--listen>`. Set it
    /// whenever the gateway listens on a wildcard address or sits behind a proxy.
    #[arg(long, env = "PUBLIC_URL", value_parser = crate::http::origin::PublicUrl::parse)]
    pub public_url: Option<crate::http::origin::PublicUrl>,

    /// Sign every Agent Card served (A2A v1.0 §8.4): a JWK Set file of private P-256 (ES256)
    /// and Ed25519 (EdDSA) keys, each with a `kid` and maybe an `exp`; one signature per live
    /// key (two during a rotation). The public keys are served at `/.well-known/jwks.json`.
    /// SIGHUP reads the file again. Needs --public-url: a signed card names it.
    #[arg(long, env = "CARD_SIGNING_KEY_FILE")]
    pub card_signing_key_file: Option<std::path::PathBuf>,

    /// Members: a file of `NAME SHA256HEX` lines, one per member (the hex SHA-256 of the
    /// member's bearer token; `#` comments). A member runs the private entrypoints (worker
    /// `--private`) and reads the A2A extended card, which the public card then announces
    /// (`capabilities.extendedAgentCard`). At most 1 MiB and 10,000 members; read at start.
    /// docs/a2a.md, The extended card and private entrypoints.
    #[arg(long, env = "MEMBER_TOKENS_FILE")]
    pub member_tokens_file: Option<std::path::PathBuf>,

    /// Without --public-url: take the security-relevant origin from `X-Forwarded-Host`,
    /// `X-Forwarded-Proto` and `Host`, as the card does. Only behind a proxy that overwrites
    /// those headers: a client sets them at will.
    #[arg(
        long,
        env = "TRUST_FORWARDED_HEADERS",
        default_value_t = false,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub trust_forwarded_headers: bool,

    /// Path prefix of every route, e.g. `/agents/a`; kept in the card's URLs.
    #[arg(long, env = "BASE_PATH", default_value = "")]
    pub base_path: String,

    /// Largest accepted request body, in bytes (larger: 413).
    #[arg(long, env = "BODY_LIMIT_BYTES", default_value_t = 1024 * 1024)]
    pub body_limit_bytes: usize,

    /// Bytes a task's input may take in the task store (as JSON; for A2A, the message's parts
    /// too): a larger one is refused with `413` before anything is stored or paid for.
    #[arg(long, env = "MAX_INPUT_BYTES", default_value_t = protocol::limits::DEFAULT_MAX_INPUT_BYTES)]
    pub max_input_bytes: usize,

    /// How long a client may take to send its body, in milliseconds.
    #[arg(long, env = "BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,

    /// How long a client may take to send its request line and headers, in milliseconds.
    #[arg(long, env = "HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// How often an HTTP/2 connection is PINGed, in milliseconds; a PING unanswered for
    /// --header-timeout-ms closes it. A client that answers may keep an idle connection open.
    #[arg(long, env = "H2_KEEP_ALIVE_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub h2_keep_alive_ms: u64,

    /// Longest an A2A stream (`SendStreamingMessage`, `SubscribeToTask`, both bindings) stays
    /// open, in milliseconds: past it the stream ends cleanly and the client resubscribes. The
    /// Lucid subscribe keeps its own 5-minute bound and a Lucid stream is bounded by
    /// `--invoke-timeout-ms`. Every stream also ends on SIGTERM.
    #[arg(long, env = "MAX_STREAM_MS", default_value_t = 5 * 60 * 1000)]
    pub max_stream_ms: u64,

    /// Open connections the gateway holds at once; more are closed at accept (and counted).
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,

    /// Open connections one client address (an IPv6 peer by its /64) holds at once; more are
    /// closed at accept (and counted). Peers in --trusted-proxies are not held to it (a
    /// proxy's connections carry many clients; --max-connections still holds).
    #[arg(long, env = "MAX_CONNECTIONS_PER_IP", default_value_t = 256)]
    pub max_connections_per_ip: usize,

    /// Store memory high-water mark, in percent of Redis `maxmemory`: while any Redis server
    /// (every master of a Redis Cluster) uses at least this much, new tasks (POST /tasks,
    /// invoke, stream, A2A messages) are refused with `503` and Retry-After, so that the
    /// writes of tasks already admitted (leases, results, receipts, recovery) still fit under
    /// a `noeviction` limit. 0 or 100 disables it; a server without `maxmemory` is never full.
    #[arg(long, env = "REDIS_MEMORY_HIGH_WATER", default_value_t = 80, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub redis_memory_high_water: u8,

    /// How often the gateway samples the store's memory (`INFO memory`), in milliseconds:
    /// admission reads the latest sample, so it may lag the store by this much (plus one
    /// reply). Cluster mode only.
    #[arg(long, env = "REDIS_MEMORY_CHECK_MS", default_value_t = 1_000)]
    pub redis_memory_check_ms: u64,

    /// Cluster-wide cap on non-terminal tasks.
    #[arg(long, env = "MAX_TASKS", default_value_t = store::DEFAULT_MAX_TASKS)]
    pub max_tasks: u64,

    /// Cap on stored tasks, finished ones included (split over the shards like MAX_TASKS):
    /// creation evicts the finished tasks that expire first to stay under it, and answers
    /// 503 task_capacity_exhausted only when every stored task is unfinished. 0: no cap.
    #[arg(long, env = "MAX_RETAINED_TASKS", default_value_t = store::DEFAULT_MAX_RETAINED)]
    pub max_retained_tasks: u64,

    /// Cap on the bytes finished tasks keep in the store (record and event log, measured when
    /// each finishes; split over the shards like MAX_TASKS): creation evicts the finished tasks
    /// that expire first to stay under it, whatever their count. Never a refusal. 0: no cap.
    #[arg(long, env = "MAX_RETAINED_BYTES", default_value_t = store::DEFAULT_MAX_RETAINED_BYTES)]
    pub max_retained_bytes: u64,

    /// Cap on one owner's stored tasks, finished ones included: creation evicts the owner's
    /// oldest finished task to stay under it (429 owner_capacity_exhausted when all are
    /// unfinished). 0: no cap.
    #[arg(long, env = "MAX_RETAINED_PER_OWNER", default_value_t = store::DEFAULT_MAX_RETAINED_PER_OWNER)]
    pub max_retained_per_owner: u64,

    /// Cap on one owner's unfinished tasks: one more is refused with 429
    /// owner_capacity_exhausted and Retry-After. 0: no cap.
    #[arg(long, env = "MAX_LIVE_PER_OWNER", default_value_t = store::DEFAULT_MAX_LIVE_PER_OWNER)]
    pub max_live_per_owner: u64,

    /// Cap on the unfinished tasks of one client address (the address the rate limits use:
    /// the TCP peer, or behind --trusted-proxies the hop they recorded; an IPv6 client by
    /// its /64), whatever their owners: POST /tasks without a token makes a fresh owner per
    /// call, so only this holds an anonymous caller. One more is refused with 429
    /// address_capacity_exhausted and Retry-After. 0: no cap.
    #[arg(long, env = "MAX_LIVE_PER_ADDRESS", default_value_t = store::DEFAULT_MAX_LIVE_PER_ADDRESS)]
    pub max_live_per_address: u64,

    /// How long terminal tasks are kept, in milliseconds.
    #[arg(long, env = "RETENTION_MS", default_value_t = 24 * 60 * 60 * 1000)]
    pub retention_ms: u64,

    /// How long the task of a finished direct invoke (POST /entrypoints/{key}/invoke or
    /// /stream) is kept, in milliseconds: its caller has its answer (an Idempotency-Key
    /// replays the stored response, not the task), so nothing needs it for long.
    #[arg(long, env = "DIRECT_RETENTION_MS", default_value_t = 60_000)]
    pub direct_retention_ms: u64,

    /// Runs a task may get after losing workers.
    #[arg(long, env = "MAX_ATTEMPTS", default_value_t = store::DEFAULT_MAX_ATTEMPTS)]
    pub max_attempts: u32,

    /// The skill an A2A message runs when it names none in `metadata.skillId` (the A2A
    /// bindings under `/a2a`). Unset: the only skill, and an invalid-params error when
    /// several are offered.
    #[arg(long, env = "A2A_DEFAULT_SKILL")]
    pub a2a_default_skill: Option<String>,

    /// Longest a direct invoke waits for its worker, in milliseconds.
    #[arg(long, env = "INVOKE_TIMEOUT_MS", default_value_t = 15 * 60 * 1000)]
    pub invoke_timeout_ms: u64,

    /// Tasks for an entrypoint that vanished from the worker registry are still admitted (and
    /// queued) this long after it was last listed, so that a Redis restart or a rolling deploy
    /// does not answer `404 skill_not_found`; 0 disables it.
    #[arg(long, env = "ENTRYPOINT_GRACE_MS", default_value_t = 60_000)]
    pub entrypoint_grace_ms: u64,

    /// Staleness bound of this gateway's cached worker registry, in milliseconds: the card
    /// and admission reflect the registry as of at most this long before a request (a worker
    /// joining, leaving, or killed and expired). A busy gateway reads the registry version once
    /// per interval; admission also never uses a view older than `--entrypoint-grace-ms`.
    /// Cluster mode only: the embedded mode reads its in-process registry on every request.
    #[arg(long, env = "REGISTRY_REFRESH_MS", default_value_t = 1_000)]
    pub registry_refresh_ms: u64,

    /// Agent name shown in the card.
    #[arg(long, env = "AGENT_NAME", default_value = "taskcluster")]
    pub agent_name: String,

    /// Agent description shown in the card.
    #[arg(
        long,
        env = "AGENT_DESCRIPTION",
        default_value = "An agent task service: owned, streamed and paid tasks over the Lucid and A2A protocols"
    )]
    pub agent_description: String,

    /// Agent version shown in the card.
    #[arg(long, env = "AGENT_VERSION", default_value = env!("CARGO_PKG_VERSION"))]
    pub agent_version: String,

    /// EVM address that priced entrypoints are paid to (x402). Priced routes need it and
    /// `--facilitator-url`; without both they answer 503.
    #[arg(long, env = "PAY_TO")]
    pub pay_to: Option<String>,

    /// Network payments are taken on: `base-sepolia` (CAIP-2 `eip155:84532`) or `base`.
    #[arg(long, env = "PAYMENT_NETWORK", default_value = "base-sepolia")]
    pub payment_network: String,

    /// x402 facilitator that verifies and settles payments (`/verify`, `/settle`,
    /// `/supported`); redirects are refused. May carry credentials (`https://user:key@host`):
    /// `--help` hides its value, it is never logged, and the card publishes it without them.
    #[arg(long, env = "FACILITATOR_URL", hide_env_values = true)]
    pub facilitator_url: Option<server::secret::Secret>,

    /// Longest wait for the facilitator's answer to one call, in milliseconds.
    #[arg(long, env = "FACILITATOR_TIMEOUT_MS", default_value_t = 10_000)]
    pub facilitator_timeout_ms: u64,

    /// How long a payer has to settle after a challenge (x402 `maxTimeoutSeconds`).
    #[arg(long, env = "PAYMENT_TIMEOUT_SECONDS", default_value_t = payments::terms::DEFAULT_MAX_TIMEOUT_SECONDS)]
    pub payment_timeout_seconds: u64,

    /// File holding the secret (at least 32 bytes; surrounding whitespace ignored) that MPP
    /// challenge ids are HMAC-SHA256'd with, so that any gateway can check a challenge another
    /// issued without shared state: every gateway of a cluster needs the same one. Routes
    /// priced with `:mpp` answer 503 without a secret.
    #[arg(long, env = "MPP_SECRET_FILE")]
    pub mpp_secret_file: Option<std::path::PathBuf>,

    /// The MPP secret itself, for platforms that inject secrets as environment variables
    /// (prefer `MPP_SECRET_FILE`: a flag's value shows in the process list). Never logged.
    #[arg(long, env = "MPP_SECRET", hide_env_values = true)]
    pub mpp_secret: Option<server::secret::Secret>,

    /// File holding the operator token (at least 24 bytes; surrounding whitespace ignored)
    /// that opens the live console at `{BASE_PATH}/console`. Unset (and no `OPERATOR_TOKEN`):
    /// no console, every `/console` path answers 404. Every gateway of a cluster that serves
    /// the console needs the same one (its session cookies are signed with it).
    #[arg(long, env = "OPERATOR_TOKEN_FILE")]
    pub operator_token_file: Option<std::path::PathBuf>,

    /// The operator token itself, for platforms that inject secrets as environment variables
    /// (prefer `OPERATOR_TOKEN_FILE`: a flag's value shows in the process list). Never logged.
    #[arg(long, env = "OPERATOR_TOKEN", hide_env_values = true)]
    pub operator_token: Option<server::secret::Secret>,

    /// Let the operator console's task view (`GET /console/api/tasks/{id}`) show a task's
    /// input and result. Off by default: they belong to the task's caller, and the operator
    /// token is a different party; turn it on only where the operator may read callers' data.
    #[arg(
        long,
        env = "CONSOLE_SHOW_PAYLOADS",
        default_value_t = false,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub console_show_payloads: bool,

    /// The MPP protection space (`realm`) challenges name; default: the host of the
    /// gateway's public origin (see --public-url).
    #[arg(long, env = "MPP_REALM")]
    pub mpp_realm: Option<String>,

    /// How long a payer of a Sign-In-With-X entrypoint (worker `--siwx`) may run it again by
    /// signing in instead of paying, in seconds.
    #[arg(long, env = "ENTITLEMENT_TTL_SECONDS", default_value_t = 30 * 24 * 3600)]
    pub entitlement_ttl_seconds: u64,

    /// A paid reservation not claimed within this long is reaped to `cancelled`, in
    /// milliseconds (upstream's paid admission TTL).
    #[arg(long, env = "PAID_ADMISSION_TTL_MS", default_value_t = 5 * 60 * 1000)]
    pub paid_admission_ttl_ms: u64,

    /// Lease of the claim a gateway holds on a paid task while its payment settles, renewed
    /// every third of it, in milliseconds (upstream's admission lease).
    #[arg(long, env = "ADMISSION_LEASE_MS", default_value_t = 30_000)]
    pub admission_lease_ms: u64,

    /// Payment credentials this gateway checks with the facilitator at once (from the
    /// credential's claim to the facilitator's verdict); more wait their turn, in order, and
    /// past eight times this many waiting the gateway answers 503 with Retry-After. Credentials
    /// cost nothing to forge: this bounds the facilitator calls a flood of them can make.
    #[arg(long, env = "MAX_PENDING_PAYMENTS", default_value_t = 32)]
    pub max_pending_payments: usize,

    /// Credentials of one payer this gateway checks at once; more are `429` with Retry-After.
    #[arg(long, env = "MAX_PENDING_PAYMENTS_PER_PAYER", default_value_t = 8)]
    pub max_pending_payments_per_payer: usize,

    /// After the facilitator refuses a payer's credential, this gateway refuses that payer's
    /// next credentials for this long without asking the facilitator again, in milliseconds
    /// (0: always ask).
    #[arg(long, env = "REFUSED_PAYER_COOLDOWN_MS", default_value_t = 30_000)]
    pub refused_payer_cooldown_ms: u64,

    /// How often this gateway looks for settle answers that were lost (a gateway died
    /// mid-settlement, or the facilitator never answered), in milliseconds; 0 disables it.
    #[arg(long, env = "SETTLEMENT_RECOVERY_MS", default_value_t = 5_000)]
    pub settlement_recovery_ms: u64,

    /// Crash testing only: the process aborts at this point of a paid admission, as a
    /// SIGKILL would stop it (`after-settle`: the facilitator settled, the receipt is not
    /// stored yet; `after-receipt`: the receipt is stored and the task queued, the answer not
    /// sent; `after-run`: a settle=after run ended, its payment not yet settling).
    #[arg(long, env = "GATEWAY_FAULT_POINT", hide = true)]
    pub fault_point: Option<String>,

    /// Fair admission: task creations (POST /tasks, invoke, stream, A2A message:send and
    /// message:stream) one client address may make per second, on average, across every
    /// gateway of the namespace (GCRA in Redis); past it `429 rate_limited` with Retry-After.
    /// 0 disables it. The default lets one machine's load test of up to 100 creations a second
    /// run (docs/gateway.md, Default bounds and load tests).
    #[arg(long, env = "RATE_PER_ADDRESS", default_value_t = 100.0)]
    pub rate_per_address: f64,

    /// Fair admission: task creations one owner (Task-Access-Token) may make per second, on
    /// average, across every gateway. 0 (the default) disables it.
    #[arg(long, env = "RATE_PER_OWNER", default_value_t = 0.0)]
    pub rate_per_owner: f64,

    /// Fair admission: creations a client address or owner may make at once, above its rate.
    #[arg(long, env = "RATE_BURST", default_value_t = 100)]
    pub rate_burst: u32,

    /// Fair admission: paid task creations one payer (the address its payment credential's
    /// signature recovers to) may make per second, on average, across every gateway; past it
    /// `429 rate_limited` before anything is settled. 0 disables it.
    #[arg(long, env = "RATE_PER_PAYER", default_value_t = 10.0)]
    pub rate_per_payer: f64,

    /// Idempotency records (Idempotency-Key on invoke) kept in all, across every gateway of
    /// the namespace: a ceiling on their memory, never an eviction bound (no record is
    /// evicted for another). At it a new key gets `503 service_unavailable` with Retry-After.
    #[arg(long, env = "IDEMPOTENCY_MAX_ENTRIES", default_value_t = store::idempotency::DEFAULT_MAX_RECORDS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub idempotency_max_entries: usize,

    /// Live idempotency records one caller may hold: the payer of a paid call; otherwise the
    /// client address, and also the `Task-Access-Token` owner or signed-in address when
    /// there is one. Past it that caller's new keys get `429 idempotency_quota_exceeded`
    /// with Retry-After (until its oldest record lapses); other callers' records stay.
    #[arg(long, env = "IDEMPOTENCY_MAX_ENTRIES_PER_SUBJECT", default_value_t = store::idempotency::DEFAULT_MAX_RECORDS_PER_SUBJECT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub idempotency_max_entries_per_subject: usize,

    /// Bytes of an invoke response body kept for replay under its Idempotency-Key. A larger
    /// response is recorded as run but not kept: the same request again gets
    /// `409 idempotency_response_too_large` (it never runs twice under one key).
    #[arg(long, env = "IDEMPOTENCY_MAX_BODY_BYTES", default_value_t = store::idempotency::DEFAULT_MAX_BODY_BYTES)]
    pub idempotency_max_body_bytes: usize,

    /// Networks (CIDRs) or addresses of this gateway's own proxies (load balancer, ingress),
    /// comma-separated, e.g. `10.0.0.0/8,192.0.2.10`. A request whose TCP peer is in them is
    /// counted (rate limits, live tasks per address, push fairness) by the right-most hop of
    /// `--client-address-header` that is not itself a trusted proxy: the address the nearest
    /// proxy saw, which a client cannot choose. Their connections are not held to
    /// --max-connections-per-ip. Empty: the TCP peer is the client, headers are not read.
    #[arg(long, env = "TRUSTED_PROXIES", default_value = "", value_parser = server::address::TrustedProxies::parse)]
    pub trusted_proxies: server::address::TrustedProxies,

    /// The header trusted proxies record the client in: `x-forwarded-for` or `forwarded`
    /// (RFC 7239 `for=`). Only the one named is read: a client may send the other one, and a
    /// proxy that only writes this one would pass it through.
    #[arg(long, env = "CLIENT_ADDRESS_HEADER", value_enum, default_value_t = crate::http::forwarded::ClientAddressHeader::XForwardedFor)]
    pub client_address_header: crate::http::forwarded::ClientAddressHeader,

    /// Deprecated: --trusted-proxies names the proxies. Alone, `true` trusts loopback and
    /// private peers (127.0.0.0/8, ::1, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7)
    /// as proxies; with --trusted-proxies it changes nothing.
    #[arg(long, env = "TRUST_FORWARDED_FOR", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub trust_forwarded_for: bool,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: tasks the in-process worker runs at once.
    #[arg(long, env = "WORKER_CONCURRENCY", default_value_t = 16)]
    pub worker_concurrency: usize,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: the most milliseconds the built-in `sleep` waits; a larger
    /// `input.ms` is refused with 400 `invalid_input`.
    #[arg(long, env = "WORKER_MAX_SLEEP_MS", default_value_t = worker::builtins::sleep::DEFAULT_MAX_SLEEP_MS)]
    pub worker_max_sleep_ms: u64,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: bytes a handler's output may take in the task store (as JSON); a
    /// larger one fails the task with `result_too_large`, as on a worker.
    #[arg(long, env = "WORKER_MAX_RESULT_BYTES", default_value_t = protocol::limits::DEFAULT_MAX_RESULT_BYTES)]
    pub worker_max_result_bytes: usize,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: retries of an entrypoint whose handler fails retryably, `KEY=N`,
    /// as a worker's `--retry` (docs/workers.md, Retries). Repeatable or comma separated.
    #[arg(
        long,
        env = "WORKER_RETRY",
        value_name = "KEY=N",
        value_delimiter = ','
    )]
    pub worker_retry: Vec<worker::runtime::retry::RetrySpec>,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: private entrypoints, as a worker's `--private`: run for members
    /// (--member-tokens-file) only and listed on no public surface. Repeatable or comma
    /// separated; a name the embedded worker does not host stops the gateway at start.
    #[arg(
        long,
        env = "WORKER_PRIVATE",
        value_name = "KEY",
        value_delimiter = ','
    )]
    pub worker_private: Vec<String>,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: retries of an entrypoint `--worker-retry` does not name.
    #[arg(long, env = "WORKER_RETRY_DEFAULT", default_value_t = worker::runtime::retry::DEFAULT_RETRIES)]
    pub worker_retry_default: u32,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: the first retry's backoff bound in milliseconds (full jitter,
    /// doubling per retry), as a worker's `--retry-base-ms`.
    #[arg(long, env = "WORKER_RETRY_BASE_MS", default_value_t = 1_000)]
    pub worker_retry_base_ms: u64,

    #[cfg(feature = "embedded")]
    /// Embedded mode only: the most a retry's backoff bound grows to, in milliseconds.
    #[arg(long, env = "WORKER_RETRY_MAX_MS", default_value_t = 60_000)]
    pub worker_retry_max_ms: u64,

    /// Serve the metrics in the Prometheus text format: `main` on this gateway's own listener
    /// at `{BASE_PATH}/metrics`, or `HOST:PORT` for a listener of their own with `/metrics`
    /// and `/health` (keep it off the public network). Unset: no `/metrics`. The same
    /// instruments as the OTLP export, which works with it or without it.
    #[arg(long, env = "METRICS_LISTEN", value_name = "main|HOST:PORT", value_parser = server::admin::MetricsListen::parse)]
    pub metrics_listen: Option<server::admin::MetricsListen>,

    /// Serve the A2A gRPC binding (`lf.a2a.v1.A2AService`, HTTP/2 cleartext) on a listener of
    /// its own, `HOST:PORT`, with the same connection bounds as `--listen`. Unset: no gRPC, and
    /// the A2A card lists no GRPC interface.
    #[arg(long, env = "GRPC_LISTEN", value_name = "HOST:PORT")]
    pub grpc_listen: Option<String>,

    /// The gRPC interface's address as the A2A card names it (`host:port`, or `https://host:port`
    /// behind a TLS proxy). Unset: the card's request host with --grpc-listen's port.
    #[arg(long, env = "GRPC_URL")]
    pub grpc_url: Option<String>,

    /// A2A push notifications: configs on every binding and durable delivery (needs
    /// `REDIS_URL`: the outbox is in Redis; embedded mode has none). `off`: every push config
    /// call answers PushNotificationNotSupported and the card says `pushNotifications: false`.
    #[arg(long, env = "PUSH_NOTIFICATIONS", default_value = "on", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    pub push_notifications: bool,

    /// Hosts (exact names) and networks (CIDRs, or single addresses) push notifications may
    /// reach although they are not public, each on the port it names: comma-separated, e.g.
    /// `hooks.internal:8080,10.0.0.0/8:443,[::1]:9000,127.0.0.1:*` (`:*`: every port). An
    /// entry without a port admits the URL scheme's default port only (80 for http, 443 for
    /// https). Empty: public addresses only (no loopback, private, link-local, unique-local,
    /// metadata, multicast or unspecified address, checked at every connection).
    #[arg(long, env = "PUSH_ALLOWLIST", default_value = "")]
    pub push_allowlist: String,

    /// Attempts at one push delivery (the first one included) before it is given up, kept
    /// for inspection and counted (`taskcluster.push.exhausted`).
    #[arg(long, env = "PUSH_MAX_ATTEMPTS", default_value_t = 8)]
    pub push_max_attempts: u32,

    /// First retry delay of a push delivery (ms): it doubles with each failure, up to
    /// --push-retry-cap-ms, with full jitter.
    #[arg(long, env = "PUSH_RETRY_BASE_MS", default_value_t = 1_000)]
    pub push_retry_base_ms: u64,

    /// Longest retry delay of a push delivery (ms).
    #[arg(long, env = "PUSH_RETRY_CAP_MS", default_value_t = 300_000)]
    pub push_retry_cap_ms: u64,

    /// Push configs one task may have.
    #[arg(long, env = "PUSH_MAX_CONFIGS", default_value_t = 10)]
    pub push_max_configs: usize,

    /// How long a gateway's claim on a task's push deliveries lasts (ms): a gateway that dies
    /// mid-delivery leaves them to another one this long after its claim. A claim's work
    /// stops starting attempts after half of it.
    #[arg(long, env = "PUSH_CLAIM_MS", default_value_t = 60_000)]
    pub push_claim_ms: u64,

    /// Push deliveries this gateway makes at once (each task's configs in order).
    #[arg(long, env = "PUSH_CONCURRENCY", default_value_t = 32)]
    pub push_concurrency: usize,

    /// Log format: `text` or `json`.
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

impl GatewayConfig {
    /// What the idempotency store keeps (`--idempotency-max-entries`, `--idempotency-max-body-bytes`).
    pub fn idempotency_limits(&self) -> store::idempotency::IdempotencyLimits {
        store::idempotency::IdempotencyLimits {
            max_records: self.idempotency_max_entries,
            max_records_per_subject: self.idempotency_max_entries_per_subject,
            max_body_bytes: self.idempotency_max_body_bytes,
        }
    }

    /// The base path normalised: empty, or `/segment...` without a trailing slash.
    pub fn base_path(&self) -> String {
        let trimmed = self.base_path.trim().trim_end_matches('/');
        if trimmed.is_empty() {
            String::new()
        } else if trimmed.starts_with('/') {
            trimmed.to_owned()
        } else {
            format!("/{trimmed}")
        }
    }

    /// Whose word on a request's client address is taken: --trusted-proxies, else loopback
    /// and private peers with the deprecated --trust-forwarded-for, else nobody's.
    pub fn forwarding(&self) -> crate::http::client_address::Forwarding {
        let proxies = if self.trusted_proxies.is_empty() && self.trust_forwarded_for {
            server::address::TrustedProxies::private()
        } else {
            self.trusted_proxies.clone()
        };
        crate::http::client_address::Forwarding {
            proxies,
            header: self.client_address_header,
        }
    }

    /// Defaults for tests and embedding.
    pub fn for_tests() -> Self {
        GatewayConfig::parse_from(["gateway"])
    }
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_secrets() -> Result<(), clap::Error> {
        let config = GatewayConfig::try_parse_from([
            "gateway",
            "--redis-url",
            "redis://:s3cr3t-canary@127.0.0.1:7000/",
            "--redis-cluster-urls",
            "redis://:s3cr3t-canary@127.0.0.1:7001,redis://:s3cr3t-canary@127.0.0.1:7002",
            "--mpp-secret",
            "s3cr3t-canary-s3cr3t-canary-s3cr3t-canary",
        ])?;
        assert!(!format!("{config:?}").contains("s3cr3t-canary"));
        assert_eq!(config.redis.cluster_urls.len(), 2);
        Ok(())
    }
}
