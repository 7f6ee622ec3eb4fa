//! Classic pub/sub on one dedicated connection to a single server (a Redis Cluster uses
//! [`super::sharded`]).

use futures::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Command, FIRST_BACKOFF, Listeners, gather, refuse_for};
use crate::StoreError;

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
                        let batch = gather(first, &mut commands);
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

/// Applies `commands` (see [`Listeners::apply`]) with one UNSUBSCRIBE and one SUBSCRIBE. False
/// when the connection failed: the caller reconnects (resubscribing everything left).
async fn apply(sink: &mut PubSubSink, listeners: &mut Listeners, commands: Vec<Command>) -> bool {
    let batch = listeners.apply(commands);
    let mut result = Ok(());
    if !batch.unsubscribe.is_empty() {
        result = sink.unsubscribe(&batch.unsubscribe).await;
    }
    if result.is_ok() && !batch.subscribe.is_empty() {
        result = sink.subscribe(&batch.subscribe).await;
    }
    let ok = result.is_ok();
    batch.confirm(listeners, result.map_err(StoreError::from));
    ok
}
