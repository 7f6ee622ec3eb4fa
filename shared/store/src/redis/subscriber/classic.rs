//! Classic pub/sub on one dedicated connection to a single server (a Redis Cluster uses
//! [`super::sharded`]).

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Command, FIRST_BACKOFF, Listeners, refuse_for};

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
                    Some(Command::Subscribe { channel, route, id, sink: tx, ready }) => {
                        let routed = route.clone();
                        let fresh = listeners.add(&channel, route, id, tx);
                        let result = if fresh { sink.subscribe(&channel).await } else { Ok(()) };
                        match result {
                            Ok(()) => { let _ = ready.send(Ok(())); }
                            Err(err) => {
                                listeners.remove(&channel, routed.as_deref(), id);
                                listeners.failed(&channel);
                                let _ = ready.send(Err(err.into()));
                                break;
                            }
                        }
                    }
                    Some(Command::Unsubscribe { channel, route, id }) => {
                        if listeners.remove(&channel, route.as_deref(), id) && sink.unsubscribe(&channel).await.is_err() {
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
