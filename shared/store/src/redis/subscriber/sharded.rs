//! Sharded pub/sub on a Redis Cluster: `SSUBSCRIBE` through the cluster client (RESP3 pushes),
//! which sends each channel to the master that owns its slot. The scripts `SPUBLISH` on a
//! channel in their own shard's slot, so a message stays on one node; classic `PUBLISH` is
//! broadcast over the cluster bus to every node, a cost that grows with the cluster.
//!
//! The client resubscribes on its own after a reconnection or a topology change, but gives no
//! sign of when that is done, and a failover's promoted replica never saw the messages the dead
//! master had yet to deliver. So on any sign of a gap (a node's connection lost, or the server
//! dropping a channel because its slot moved) the dispatcher subscribes every channel again,
//! waits for each confirmation, and only then tells every listener to resync.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Command, FIRST_BACKOFF, Listeners, gather, longer, refuse_for};
use crate::StoreError;

/// Subscriptions confirmed concurrently (a resync, a batch of new listeners).
const RESUBSCRIBE_CONCURRENCY: usize = 64;

pub(super) async fn run(
    urls: Vec<String>,
    timeout: Duration,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut listeners = Listeners::default();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let (push_sender, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
        let connected = match client(&urls, timeout, push_sender) {
            Ok(client) => tokio::select! {
                _ = shutdown.cancelled() => return,
                conn = client.get_async_connection() => conn.map_err(StoreError::from),
            },
            Err(err) => Err(err),
        };
        let conn = match connected {
            Ok(conn) => conn,
            Err(err) => {
                if !refuse_for(&mut backoff, &err, &mut commands, &mut listeners, &shutdown).await {
                    return;
                }
                continue;
            }
        };
        backoff = FIRST_BACKOFF;
        // Listeners that outlived an earlier client resync as soon as this one subscribed them.
        let mut resync_at = (!listeners.is_empty()).then(Instant::now);
        let mut resync_backoff = FIRST_BACKOFF;
        loop {
            let resync_due = async {
                match resync_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(first) => {
                        let batch = listeners.apply(gather(first, &mut commands));
                        // Harmless when it fails: the channel's messages find no listener and
                        // are dropped.
                        if let Err(err) = each_channel(&conn, batch.unsubscribe.clone(), Pubsub::Unsubscribe).await {
                            tracing::debug!(error = %err, "sharded unsubscribe failed");
                        }
                        let result = each_channel(&conn, batch.subscribe.clone(), Pubsub::Subscribe).await;
                        batch.confirm(&mut listeners, result);
                    }
                },
                push = pushes.recv() => match push {
                    None => break,
                    Some(push) => {
                        if let Some((channel, payload)) = message(&push) {
                            listeners.deliver(&channel, payload);
                        } else if signals_gap(&push, &listeners) {
                            tracing::info!(push = ?push.kind, "cluster pub/sub may have missed messages; resubscribing");
                            resync_at.get_or_insert_with(Instant::now);
                        }
                    }
                },
                _ = resync_due => {
                    match resubscribe(&conn, listeners.channels()).await {
                        Ok(()) => {
                            tracing::info!(channels = listeners.channels().len(), "cluster pub/sub resubscribed; listeners re-read their logs");
                            listeners.resync_all();
                            resync_at = None;
                            resync_backoff = FIRST_BACKOFF;
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "cluster pub/sub resubscription failed; retrying");
                            resync_at = Some(Instant::now() + resync_backoff);
                            resync_backoff = longer(resync_backoff);
                        }
                    }
                }
            }
        }
        tracing::warn!("cluster pub/sub client stopped; reconnecting");
    }
}

/// A cluster client that speaks RESP3 (pushes are how subscriptions deliver) and hands every
/// push to `pushes`.
fn client(
    urls: &[String],
    timeout: Duration,
    pushes: mpsc::UnboundedSender<PushInfo>,
) -> Result<redis::cluster::ClusterClient, StoreError> {
    Ok(crate::redis::pool::cluster_builder(urls, Some(timeout))
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(pushes)
        .build()?)
}

/// A sharded message's channel and payload.
fn message(push: &PushInfo) -> Option<(String, String)> {
    if push.kind != PushKind::SMessage {
        return None;
    }
    let [channel, payload] = push.data.as_slice() else {
        return None;
    };
    Some((
        redis::from_redis_value_ref(channel).ok()?,
        redis::from_redis_value_ref(payload).ok()?,
    ))
}

/// True when `push` means messages may have been missed: a node's connection was lost, or the
/// server dropped a channel that still has listeners (its slot moved to another master).
fn signals_gap(push: &PushInfo, listeners: &Listeners) -> bool {
    match push.kind {
        PushKind::Disconnection => true,
        PushKind::SUnsubscribe => push
            .data
            .first()
            .and_then(|channel| redis::from_redis_value_ref::<String>(channel).ok())
            .is_some_and(|channel| listeners.contains(&channel)),
        _ => false,
    }
}

/// Subscribes every channel again, each on the master that owns its slot now.
async fn resubscribe(conn: &ClusterConnection, channels: Vec<String>) -> Result<(), StoreError> {
    each_channel(conn, channels, Pubsub::Subscribe).await
}

#[derive(Clone, Copy)]
enum Pubsub {
    Subscribe,
    Unsubscribe,
}

/// `SSUBSCRIBE` or `SUNSUBSCRIBE` of each channel, on the master that owns its slot, up to
/// [`RESUBSCRIBE_CONCURRENCY`] at once (channels of different slots cannot share a command).
async fn each_channel(
    conn: &ClusterConnection,
    channels: Vec<String>,
    what: Pubsub,
) -> Result<(), StoreError> {
    futures::stream::iter(channels)
        .map(|channel| {
            let mut conn = conn.clone();
            async move {
                match what {
                    Pubsub::Subscribe => conn.ssubscribe(&channel).await,
                    Pubsub::Unsubscribe => conn.sunsubscribe(&channel).await,
                }
            }
        })
        .buffer_unordered(RESUBSCRIBE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}
