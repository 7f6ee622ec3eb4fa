//! The callers a hostile run protects: a paying owner buying `summarize` over x402 (Anvil key
//! #2) and a free owner creating `echo` tasks with its token and invoking `echo` directly, each
//! at a steady pace from an address of its own. Every call must succeed.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use payments::LocalPayer;
use payments::payer::Challenge;
use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::cluster::{Cluster, PAID_ENTRYPOINT};
use super::tally::{Honest, Tally};
use super::{HostileConfig, HostileError, client_from};

/// A fresh Task-Access-Token (48 hex digits, as `openssl rand -hex 24`).
pub fn new_token() -> String {
    let bytes: [u8; 24] = rand::random();
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

pub fn spawn(
    jobs: &mut JoinSet<()>,
    config: &HostileConfig,
    cluster: &Cluster,
    tally: Arc<Tally>,
    stop: CancellationToken,
) -> Result<(), HostileError> {
    let pace = Duration::from_secs(1) / config.honest_rate.max(1);
    let deadline = config.honest_deadline;
    let payer = LocalPayer::from_hex(payments::dev::ANVIL_KEYS[2])
        .map_err(|err| HostileError::Setup(format!("payer key: {err}")))?;
    let paying = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 2, 1)))?;
    let free = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 2, 2)))?;
    let gateways = cluster.gateways.clone();
    let (t, s, g) = (tally.clone(), stop.clone(), gateways.clone());
    jobs.spawn(async move {
        paced(pace, &s, |turn| {
            let base = g[turn % g.len()].clone();
            let (paying, payer, t) = (paying.clone(), payer.clone(), t.clone());
            async move {
                let started = Instant::now();
                let outcome = within(deadline, paid_call(&paying, &payer, &base)).await;
                t.honest(Honest::Paying, started.elapsed(), outcome);
            }
        })
        .await;
    });
    let token = new_token();
    jobs.spawn(async move {
        paced(pace, &stop, |turn| {
            let base = gateways[turn % gateways.len()].clone();
            let (free, token, tally) = (free.clone(), token.clone(), tally.clone());
            async move {
                let started = Instant::now();
                let outcome = if turn.is_multiple_of(2) {
                    within(deadline, owned_task(&free, &base, &token)).await
                } else {
                    within(deadline, direct_invoke(&free, &base)).await
                };
                tally.honest(Honest::Free, started.elapsed(), outcome);
            }
        })
        .await;
    });
    Ok(())
}

/// Starts `call(turn)` once per `pace` until `stop`, each beside the ones still running (a
/// slow answer does not hold the next call back, as it would not for a real caller), then
/// waits for those in flight; each has its own deadline.
async fn paced<F, Fut>(pace: Duration, stop: &CancellationToken, mut call: F)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let mut ticks = tokio::time::interval(pace);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut calls = JoinSet::new();
    let mut turn = 0usize;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        calls.spawn(call(turn));
        turn += 1;
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// A call's outcome, or a failure once it has taken longer than a caller waits.
async fn within(deadline: Duration, call: impl std::future::Future<Output = Outcome>) -> Outcome {
    match tokio::time::timeout(deadline, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("no answer within {} s", deadline.as_secs())),
    }
}

/// Ok, or what went wrong (status and body) for the report.
type Outcome = Result<(), String>;

async fn failed(response: reqwest::Response, what: &str) -> String {
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    let body: String = body.chars().take(200).collect();
    format!("{what}: {status} {body}")
}

/// Unpaid call, its 402 answered with a credential, the paid call: one outcome.
async fn paid_call(http: &reqwest::Client, payer: &LocalPayer, base: &str) -> Outcome {
    let url = format!("{base}/entrypoints/{PAID_ENTRYPOINT}/invoke");
    let body = json!({"input": {"text": "Paid work runs once. The payer gets the result. Nobody else does."}});
    let unpaid = http
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if unpaid.status() != reqwest::StatusCode::PAYMENT_REQUIRED {
        return Err(failed(unpaid, "unpaid call").await);
    }
    let header = unpaid
        .headers()
        .get("payment-required")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let bytes = unpaid.bytes().await.map_err(|e| e.to_string())?;
    let challenge =
        Challenge::from_response(header.as_deref(), &bytes).map_err(|e| e.to_string())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let credential = payer
        .answer(&challenge, None, now)
        .map_err(|e| e.to_string())?;
    let paid = http
        .post(&url)
        .header(credential.name, credential.value)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if paid.status() != reqwest::StatusCode::OK {
        return Err(failed(paid, "paid call").await);
    }
    Ok(())
}

/// `POST /tasks` of a small echo with the owner's token, then its stream to the end, which
/// must carry the completed result.
async fn owned_task(http: &reqwest::Client, base: &str, token: &str) -> Outcome {
    let body =
        json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "{\"n\":1}"}}});
    let created = http
        .post(format!("{base}/tasks"))
        .header("task-access-token", token)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if created.status() != reqwest::StatusCode::OK {
        return Err(failed(created, "POST /tasks").await);
    }
    let reply: serde_json::Value = created.json().await.map_err(|e| e.to_string())?;
    let id = reply["taskId"].as_str().ok_or("no taskId")?;
    let stream = http
        .get(format!("{base}/tasks/{id}/subscribe"))
        .header("task-access-token", token)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if stream.status() != reqwest::StatusCode::OK {
        return Err(failed(stream, "subscribe").await);
    }
    let events = stream.text().await.map_err(|e| e.to_string())?;
    if events.contains(r#""status":"completed""#) {
        Ok(())
    } else {
        Err(format!(
            "the task did not complete: {}",
            events.chars().take(300).collect::<String>()
        ))
    }
}

async fn direct_invoke(http: &reqwest::Client, base: &str) -> Outcome {
    let response = http
        .post(format!("{base}/entrypoints/echo/invoke"))
        .json(&json!({"input": {"n": 2}}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(failed(response, "echo invoke").await);
    }
    Ok(())
}
