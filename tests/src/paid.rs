//! A paying cluster as real processes, for the MPP and Sign-In-With-X suites: a private
//! redis-server with AOF (paid tasks need a durable store), the dev `facilitator`, one `worker`
//! and two `gateway`s taking payments through it. Each suite passes the worker's and the
//! gateways' extra settings and what the card must show before it starts testing. The pieces
//! ([`Facilitator`] with its control API, [`PaidGateway`]) serve the x402 suite, whose cluster
//! has one gateway and a Redis of its choosing.

use serde::Deserialize;
use serde_json::Value;

use crate::TestResult;
use crate::process::ServiceProcess;
use crate::redis_server::{RedisOptions, RedisServer};

// The waits and helpers every multi-process suite shares; re-exported for the paid suites.
use crate::cluster::{Gateway, POLL};
pub use crate::cluster::{PATIENCE, free_port, http, wait_healthy};

/// Anvil #0: the payer (the facilitator funds it with 1000 USDC by default).
pub const PAYER_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
/// Anvil #1: the payee every gateway names.
pub const PAYEE: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

/// Anvil #0's address: the payer [`PAYER_KEY`] signs for.
pub const PAYER: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";

/// A paying gateway process and its URL.
pub struct PaidGateway {
    pub process: ServiceProcess,
    pub base: String,
}

impl PaidGateway {
    /// A paying gateway `name` on `redis_url` naming [`PAYEE`] and taking payments through
    /// `facilitator` (its URL), with `env` added, once healthy.
    pub async fn start(
        name: &str,
        redis_url: &str,
        facilitator: &str,
        env: &[(&str, String)],
    ) -> TestResult<PaidGateway> {
        let mut envs = vec![
            ("REDIS_URL", redis_url.to_owned()),
            ("PAY_TO", PAYEE.to_owned()),
            ("FACILITATOR_URL", facilitator.to_owned()),
            ("RUST_LOG", "debug".to_owned()),
        ];
        envs.extend(env.iter().cloned());
        let Gateway { process, base } = crate::cluster::gateway(name, &[], &envs).await?;
        Ok(PaidGateway { process, base })
    }
}

/// The dev facilitator's `/control/stats`: calls it answered and settlements it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct FacilitatorStats {
    pub verify: u64,
    pub settle: u64,
    pub settled: u64,
}

/// The dev `facilitator` (an in-memory play-money ledger funding the Anvil accounts), with
/// its control API: faults switched at runtime, stats and balances.
pub struct Facilitator {
    _process: ServiceProcess,
    pub base: String,
    http: reqwest::Client,
}

impl Facilitator {
    /// Starts it on a free port, once healthy.
    pub async fn start() -> TestResult<Facilitator> {
        let port = free_port()?;
        let process = ServiceProcess::start(
            "facilitator",
            "facilitator",
            &[],
            &[("FACILITATOR_LISTEN", format!("127.0.0.1:{port}"))],
        )?;
        let base = format!("http://127.0.0.1:{port}");
        wait_healthy(&process, &base).await?;
        Ok(Facilitator {
            _process: process,
            base,
            http: http()?,
        })
    }

    /// Switches faults at runtime, e.g. `{"settle": "drop"}`.
    pub async fn set_faults(&self, change: Value) -> TestResult {
        let response = self
            .http
            .post(format!("{}/control/faults", self.base))
            .json(&change)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        if status != reqwest::StatusCode::OK {
            return Err(format!("setting faults {change}: {status} {text}").into());
        }
        Ok(())
    }

    pub async fn stats(&self) -> TestResult<FacilitatorStats> {
        Ok(self
            .http
            .get(format!("{}/control/stats", self.base))
            .send()
            .await?
            .json()
            .await?)
    }

    /// The balance of `address`, in atomic USDC units.
    pub async fn balance(&self, address: &str) -> TestResult<u128> {
        #[derive(Deserialize)]
        struct Balance {
            balance: String,
        }
        let balance: Balance = self
            .http
            .get(format!("{}/balances/{address}", self.base))
            .send()
            .await?
            .json()
            .await?;
        Ok(balance.balance.parse()?)
    }

    /// The balances of [`PAYER`] and [`PAYEE`], in that order.
    pub async fn balances(&self) -> TestResult<(u128, u128)> {
        Ok((self.balance(PAYER).await?, self.balance(PAYEE).await?))
    }
}

/// Redis, the facilitator, worker `w1` and gateways `g1` and `g2`; they stop when it drops.
pub struct PaidCluster {
    gateways: Vec<PaidGateway>,
    facilitator: Facilitator,
    _worker: ServiceProcess,
    pub redis: RedisServer,
    pub http: reqwest::Client,
}

impl PaidCluster {
    /// Starts the cluster with `worker_env` and `gateway_env` added to the worker's and every
    /// gateway's settings, and waits until each gateway's card passes `ready`.
    pub async fn start(
        worker_env: &[(&str, String)],
        gateway_env: &[(&str, String)],
        ready: impl Fn(&Value) -> bool,
    ) -> TestResult<PaidCluster> {
        let redis = RedisServer::start_with(RedisOptions::default().with_aof(true))?;
        let facilitator = Facilitator::start().await?;
        let worker = crate::cluster::worker(&redis, "w1", worker_env)?;
        let mut gateways = Vec::new();
        for name in ["g1", "g2"] {
            gateways.push(
                PaidGateway::start(name, &redis.url(), &facilitator.base, gateway_env).await?,
            );
        }
        let cluster = PaidCluster {
            gateways,
            facilitator,
            _worker: worker,
            redis,
            http: http()?,
        };
        for gateway in &cluster.gateways {
            cluster.wait_for_card(&gateway.base, &ready).await?;
        }
        Ok(cluster)
    }

    /// Starts one more gateway on the same Redis and facilitator with `env` added to its
    /// settings (not the ones the cluster was started with), waits until its card passes
    /// `ready`, and returns its index for [`PaidCluster::base`].
    pub async fn add_gateway(
        &mut self,
        name: &str,
        env: &[(&str, String)],
        ready: impl Fn(&Value) -> bool,
    ) -> TestResult<usize> {
        let gateway =
            PaidGateway::start(name, &self.redis.url(), &self.facilitator.base, env).await?;
        self.wait_for_card(&gateway.base, &ready).await?;
        self.gateways.push(gateway);
        Ok(self.gateways.len() - 1)
    }

    /// The URL of gateway `i` (0 or 1, then those [`PaidCluster::add_gateway`] started).
    pub fn base(&self, i: usize) -> &str {
        self.gateways
            .get(i)
            .map_or("", |gateway| gateway.base.as_str())
    }

    async fn wait_for_card(&self, base: &str, ready: &impl Fn(&Value) -> bool) -> TestResult<()> {
        let start = tokio::time::Instant::now();
        loop {
            let card: Value = self
                .http
                .get(format!("{base}/.well-known/agent-card.json"))
                .send()
                .await?
                .json()
                .await?;
            if ready(&card) {
                return Ok(());
            }
            if start.elapsed() > PATIENCE {
                return Err(format!("the card never became ready: {card}").into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The x402 challenge of an unpaid `POST /entrypoints/{entrypoint}/invoke` with `body` at
    /// gateway `gateway` (asserting it is a 402).
    pub async fn x402_challenge(
        &self,
        gateway: usize,
        entrypoint: &str,
        body: &Value,
    ) -> TestResult<payments::payer::Challenge> {
        let unpaid = self
            .http
            .post(format!(
                "{}/entrypoints/{entrypoint}/invoke",
                self.base(gateway)
            ))
            .json(body)
            .send()
            .await?;
        if unpaid.status() != reqwest::StatusCode::PAYMENT_REQUIRED {
            return Err(format!("expected a 402, got {}", unpaid.status()).into());
        }
        let header = unpaid
            .headers()
            .get("payment-required")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let bytes = unpaid.bytes().await?;
        Ok(payments::payer::Challenge::from_response(
            header.as_deref(),
            &bytes,
        )?)
    }

    /// The dev facilitator's URL.
    pub fn facilitator_base(&self) -> &str {
        &self.facilitator.base
    }

    /// The dev facilitator (its faults, stats and balances).
    pub fn facilitator(&self) -> &Facilitator {
        &self.facilitator
    }

    /// A paid `POST /entrypoints/{entrypoint}/invoke` of `body` at gateway `gateway`, carrying
    /// `payment` and `headers` (an `Idempotency-Key`, say).
    pub async fn invoke(
        &self,
        gateway: usize,
        entrypoint: &str,
        body: &Value,
        payment: &payments::payer::PaymentHeader,
        headers: &[(&str, &str)],
    ) -> TestResult<Invoked> {
        let mut request = self
            .http
            .post(format!(
                "{}/entrypoints/{entrypoint}/invoke",
                self.base(gateway)
            ))
            .header(payment.name, &payment.value)
            .json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await?;
        let status = response.status();
        let replayed = response.headers().get("idempotency-replayed").is_some();
        Ok(Invoked {
            status,
            replayed,
            body: response.text().await?,
        })
    }

    /// Settlements the facilitator made.
    pub async fn settled(&self) -> TestResult<u64> {
        Ok(self.facilitator.stats().await?.settled)
    }

    /// Keys of the namespace matching `pattern`.
    pub async fn count(&self, pattern: &str) -> TestResult<usize> {
        let mut conn = self.redis.client().await?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await?;
        Ok(keys.len())
    }

    /// Every gateway's log so far.
    pub fn logs(&self) -> String {
        self.gateways
            .iter()
            .map(|gateway| gateway.process.log())
            .collect()
    }
}

/// The answer to [`PaidCluster::invoke`].
#[derive(Debug)]
pub struct Invoked {
    pub status: reqwest::StatusCode,
    /// `Idempotency-Replayed` was sent: the stored answer of an earlier request.
    pub replayed: bool,
    pub body: String,
}

impl Invoked {
    /// The error code of the body (`{"error":{"code":...}}`); an error when it is not JSON.
    pub fn code(&self) -> TestResult<String> {
        let body: Value = serde_json::from_str(&self.body)?;
        Ok(body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }
}
