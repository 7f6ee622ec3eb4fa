//! One attacker: a client address running five floods at once, each one request at a time and
//! as fast as the gateways answer (Retry-After is ignored, as an attacker would): large but
//! admissible bodies, bodies over the input limit, invokes of 60 KiB with a fresh
//! Idempotency-Key each (records kept for a day), anonymous long sleeps whose streams it then
//! holds open, and listing calls of an owner it filled with tasks.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::cluster::Cluster;
use super::tally::{Flood, Tally};
use super::{HostileConfig, HostileError, client_from};

/// Over the default MAX_INPUT_BYTES (256 KiB): refused with 413 before anything is stored.
const OVERSIZED_BYTES: usize = 1024 * 1024;

pub fn spawn(
    jobs: &mut JoinSet<()>,
    config: &HostileConfig,
    cluster: &Cluster,
    index: u8,
    tally: Arc<Tally>,
    stop: CancellationToken,
) -> Result<(), HostileError> {
    let source = IpAddr::V4(Ipv4Addr::new(127, 0, 1, index.saturating_add(1)));
    let http = client_from(source)?;
    let gateways = cluster.gateways.clone();
    let big = "x".repeat(config.big_body_kib * 1024);
    let big_body = json!({"input": {"blob": big}});
    let oversized = json!({"input": {"blob": "y".repeat(OVERSIZED_BYTES)}});
    for (flood, body) in [(Flood::BigBody, big_body), (Flood::Oversized, oversized)] {
        let (http, gateways, tally, stop) =
            (http.clone(), gateways.clone(), tally.clone(), stop.clone());
        jobs.spawn(async move {
            let body = body.to_string();
            let mut turn = 0usize;
            while !stop.is_cancelled() {
                let base = &gateways[turn % gateways.len()];
                turn += 1;
                let sent = http
                    .post(format!("{base}/entrypoints/echo/invoke"))
                    .header("content-type", "application/json")
                    .body(body.clone());
                tally.attack(flood, send(sent, &stop).await);
            }
        });
    }
    let (h, g, t, s) = (http.clone(), gateways.clone(), tally.clone(), stop.clone());
    jobs.spawn(async move { keyed_invokes(h, g, t, s, index).await });
    let sleep_ms = config.sleep_ms;
    let streams = config.streams_per_attacker;
    let (h, g, t, s) = (http.clone(), gateways.clone(), tally.clone(), stop.clone());
    jobs.spawn(async move { sleeps_and_streams(h, g, t, s, sleep_ms, streams).await });
    jobs.spawn(async move { listings(http, gateways, tally, stop).await });
    Ok(())
}

/// A refusal's status with its error code (`429 address_capacity_exhausted`), else the status.
fn answer(status: u16, body: &[u8]) -> String {
    if status < 400 {
        return status.to_string();
    }
    let code = serde_json::from_slice::<Value>(body).ok().and_then(|body| {
        body["code"]
            .as_str()
            .or_else(|| body["error"]["code"].as_str())
            .map(str::to_owned)
    });
    match code {
        Some(code) => format!("{status} {code}"),
        None => status.to_string(),
    }
}

/// The answer to one request, or None when it did not get one (refused connection, timeout) or
/// the run ended first.
async fn send(request: reqwest::RequestBuilder, stop: &CancellationToken) -> Option<String> {
    tokio::select! {
        _ = stop.cancelled() => None,
        response = request.send() => match response {
            Ok(response) => {
                let status = response.status().as_u16();
                let body = response.bytes().await.unwrap_or_default();
                Some(answer(status, &body))
            }
            Err(_) => None,
        },
    }
}

/// Echo invokes of 60 KiB (under the idempotency body bound, so each response is kept) with a
/// fresh Idempotency-Key each.
async fn keyed_invokes(
    http: reqwest::Client,
    gateways: Vec<String>,
    tally: Arc<Tally>,
    stop: CancellationToken,
    index: u8,
) {
    let body = json!({"input": {"blob": "k".repeat(60 * 1024)}}).to_string();
    let mut turn = 0usize;
    while !stop.is_cancelled() {
        let base = &gateways[turn % gateways.len()];
        turn += 1;
        let sent = http
            .post(format!("{base}/entrypoints/echo/invoke"))
            .header("content-type", "application/json")
            .header(
                "idempotency-key",
                format!("hostile-flood-{index}-{turn:012}"),
            )
            .body(body.clone());
        tally.attack(Flood::Keyed, send(sent, &stop).await);
    }
}

/// Anonymous `POST /tasks` of long sleeps; each admitted one gets its stream opened and held
/// (up to `streams` at once) until it ends or the run does.
async fn sleeps_and_streams(
    http: reqwest::Client,
    gateways: Vec<String>,
    tally: Arc<Tally>,
    stop: CancellationToken,
    sleep_ms: u64,
    streams: usize,
) {
    let held = Arc::new(tokio::sync::Semaphore::new(streams));
    let mut open = JoinSet::new();
    let body = json!({"skillId": "sleep", "message": {"role": "user", "content": {"text": json!({"ms": sleep_ms}).to_string()}}});
    let mut turn = 0usize;
    while !stop.is_cancelled() {
        let base = gateways[turn % gateways.len()].clone();
        turn += 1;
        let created = tokio::select! {
            _ = stop.cancelled() => break,
            created = http.post(format!("{base}/tasks")).json(&body).send() => created,
        };
        let Ok(created) = created else {
            tally.attack(Flood::Sleep, None);
            continue;
        };
        let status = created.status().as_u16();
        let Ok(body) = created.bytes().await else {
            continue;
        };
        tally.attack(Flood::Sleep, Some(answer(status, &body)));
        let Ok(reply) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        let (Some(id), Some(token)) = (reply["taskId"].as_str(), reply["accessToken"].as_str())
        else {
            continue;
        };
        let Ok(permit) = held.clone().try_acquire_owned() else {
            continue;
        };
        let (http, stop, tally) = (http.clone(), stop.clone(), tally.clone());
        let url = format!("{base}/tasks/{id}/subscribe");
        let token = token.to_owned();
        open.spawn(async move {
            let _permit = permit;
            let response = tokio::select! {
                _ = stop.cancelled() => return,
                response = http.get(url).header("task-access-token", token).send() => response,
            };
            let Ok(mut response) = response else {
                tally.attack(Flood::Stream, None);
                return;
            };
            tally.attack(Flood::Stream, Some(response.status().as_u16().to_string()));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    chunk = response.chunk() => match chunk {
                        Ok(Some(_)) => {}
                        _ => return,
                    },
                }
            }
        });
    }
    open.abort_all();
    while open.join_next().await.is_some() {}
}

/// One owner (a token of the attacker's) given tasks, then listed over and over at the largest
/// page the profile allows.
async fn listings(
    http: reqwest::Client,
    gateways: Vec<String>,
    tally: Arc<Tally>,
    stop: CancellationToken,
) {
    let token = super::honest::new_token();
    let body =
        json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "{\"x\":1}"}}});
    let mut turn = 0usize;
    while !stop.is_cancelled() {
        let base = &gateways[turn % gateways.len()];
        turn += 1;
        // Every tenth call adds a task to the owner, the others list it.
        let request = if turn.is_multiple_of(10) {
            http.post(format!("{base}/tasks"))
                .header("task-access-token", &token)
                .json(&body)
        } else {
            http.get(format!("{base}/tasks?limit=1000"))
                .header("task-access-token", &token)
        };
        tally.attack(Flood::Listing, send(request, &stop).await);
    }
}
