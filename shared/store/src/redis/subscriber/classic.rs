//! Classic pub/sub on one dedicated connection to a single server (a Redis Cluster uses
//! [`super::sharded`]).

use std::collections::HashSet;

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Command, FIRST_BACKOFF, Listeners, refuse_for};
use crate::StoreError;

/// The most commands applied together.
const MAX_BATCH: usize = 1_024;

pub(super) async fn run(
    client: redis::Client,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut listeners = Listeners::default();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let connected = tokio::select! {
            _ = shutdown.cancelled() => return,
            conn = client.get_async_pubsub() => conn,
        };
        let (mut sink, mut stream) = match connected {
            Ok(pubsub) => pubsub.split(),
            Err(err) => {
                if !refuse_for(&mut backoff, &err, &mut commands, &mut listeners, &shutdown).await {
                    return;
                }
                continue;
            }
        };
        backoff = FIRST_BACKOFF;
        if !listeners.is_empty() {
            if sink.subscribe(&listeners.channels()).await.is_err() {
                continue;
            }
            listeners.resync_all();
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(first) => {
                        // Whatever else is queued joins it: one SUBSCRIBE and one UNSUBSCRIBE
                        // for the lot, where one each per listener made every listener wait
                        // for the round trips of all those queued before it.
                        let mut batch = vec![first];
                        while batch.len() < MAX_BATCH {
                            match commands.try_recv() {
                                Ok(cmd) => batch.push(cmd),
                                Err(_) => break,
                            }
                        }
                        if !apply(&mut sink, &mut listeners, batch).await {
                            break;
                        }
                    }
                },
                msg = stream.next() => match msg {
                    None => break,
                    Some(msg) => {
                        let Ok(payload) = msg.get_payload::<String>() else { continue };
                        listeners.deliver(msg.get_channel_name(), payload);
                    }
                },
            }
        }
        tracing::warn!("pub/sub connection lost; reconnecting");
    }
}

/// A subscription waiting for its confirmation.
struct Waiting {
    channel: String,
    route: Option<String>,
    id: u64,
    ready: oneshot::Sender<Result<(), StoreError>>,
}

/// Applies `batch` in order to the listeners, then subscribes the channels that gained their
/// first listener and unsubscribes those that lost their last (one command each), and only
/// then confirms the batch's subscriptions. False when the connection failed: the batch's
/// subscriptions are refused and the caller reconnects (resubscribing everything left).
async fn apply(sink: &mut PubSubSink, listeners: &mut Listeners, batch: Vec<Command>) -> bool {
    let mut seen = HashSet::new();
    let mut touched = Vec::new();
    let mut waiting = Vec::new();
    for command in batch {
        let channel = match &command {
            Command::Subscribe { channel, .. } | Command::Unsubscribe { channel, .. } => channel,
        };
        if seen.insert(channel.clone()) {
            touched.push((channel.clone(), listeners.contains(channel)));
        }
        match command {
            Command::Subscribe {
                channel,
                route,
                id,
                sink: tx,
                ready,
            } => {
                listeners.add(&channel, route.clone(), id, tx);
                waiting.push(Waiting {
                    channel,
                    route,
                    id,
                    ready,
                });
            }
            Command::Unsubscribe { channel, route, id } => {
                listeners.remove(&channel, route.as_deref(), id);
            }
        }
    }
    let (mut subscribe, mut unsubscribe) = (Vec::new(), Vec::new());
    for (channel, before) in touched {
        match (before, listeners.contains(&channel)) {
            (false, true) => subscribe.push(channel),
            (true, false) => unsubscribe.push(channel),
            _ => {}
        }
    }
    let mut result = Ok(());
    if !unsubscribe.is_empty() {
        result = sink.unsubscribe(&unsubscribe).await;
    }
    if result.is_ok() && !subscribe.is_empty() {
        result = sink.subscribe(&subscribe).await;
    }
    match result {
        Ok(()) => {
            for waiting in waiting {
                let _ = waiting.ready.send(Ok(()));
            }
            true
        }
        Err(err) => {
            let err = StoreError::from(err);
            for waiting in waiting {
                listeners.remove(&waiting.channel, waiting.route.as_deref(), waiting.id);
                listeners.failed(&waiting.channel);
                let _ = waiting
                    .ready
                    .send(Err(StoreError::Unavailable(err.to_string())));
            }
            false
        }
    }
}
