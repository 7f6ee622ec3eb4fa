//! One shared pub/sub connection per store, multiplexing every subscription of the process.
//!
//! Gateways hold thousands of SSE subscribers; one Redis connection each would not scale. The
//! dispatcher task owns the connection, subscribes a channel when its first listener arrives
//! and unsubscribes it with the last. When the connection drops it reconnects, resubscribes
//! and sends every listener [`Signal::Resync`], so each listener re-reads its task's event log
//! and nothing published during the outage is lost.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::store::StoreError;

pub enum Signal {
    Message(String),
    Resync,
}

enum Command {
    Subscribe {
        channel: String,
        id: u64,
        sink: mpsc::UnboundedSender<Signal>,
        ready: oneshot::Sender<Result<(), StoreError>>,
    },
    Unsubscribe {
        channel: String,
        id: u64,
    },
}

#[derive(Clone)]
pub struct Dispatcher {
    commands: mpsc::UnboundedSender<Command>,
    next_id: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A registered listener; dropping it unsubscribes.
pub struct Listener {
    pub signals: mpsc::UnboundedReceiver<Signal>,
    channel: String,
    id: u64,
    commands: mpsc::UnboundedSender<Command>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unsubscribe {
            channel: std::mem::take(&mut self.channel),
            id: self.id,
        });
    }
}

impl Dispatcher {
    /// Listens through `clients`, the first that answers: one server, or a Redis Cluster's
    /// seed nodes (classic pub/sub reaches every node of a cluster, so any of them hears every
    /// channel). A lost connection is replaced by the next one's.
    pub fn start(clients: Vec<redis::Client>, shutdown: CancellationToken) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(clients, rx, shutdown));
        Dispatcher {
            commands,
            next_id: Default::default(),
        }
    }

    /// Listens on `channel`; returns once Redis confirmed the subscription, so anything
    /// published afterwards reaches the listener.
    pub async fn listen(&self, channel: String) -> Result<Listener, StoreError> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (sink, signals) = mpsc::unbounded_channel();
        let (ready, confirmed) = oneshot::channel();
        let closed = || StoreError::Unavailable("subscriber stopped".into());
        self.commands
            .send(Command::Subscribe {
                channel: channel.clone(),
                id,
                sink,
                ready,
            })
            .map_err(|_| closed())?;
        let listener = Listener {
            signals,
            channel,
            id,
            commands: self.commands.clone(),
        };
        confirmed.await.map_err(|_| closed())??;
        Ok(listener)
    }
}

type Listeners = HashMap<String, Vec<(u64, mpsc::UnboundedSender<Signal>)>>;

async fn run(
    clients: Vec<redis::Client>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut listeners: Listeners = HashMap::new();
    let mut backoff = Duration::from_millis(50);
    let mut turn = 0usize;
    loop {
        let Some(client) = clients.get(turn % clients.len().max(1)) else {
            return;
        };
        // The next attempt, after a failure or a lost connection, tries the next node.
        turn = turn.wrapping_add(1);
        let connected = tokio::select! {
            _ = shutdown.cancelled() => return,
            conn = client.get_async_pubsub() => conn,
        };
        let (mut sink, mut stream) = match connected {
            Ok(pubsub) => pubsub.split(),
            Err(err) => {
                tracing::warn!(error = %err, "pub/sub connection failed; retrying");
                // Refuse new subscriptions while Redis is away: callers answer 503 at once.
                let deadline = tokio::time::sleep(backoff);
                tokio::pin!(deadline);
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = &mut deadline => break,
                        cmd = commands.recv() => match cmd {
                            None => return,
                            Some(Command::Subscribe { ready, .. }) => {
                                let _ = ready.send(Err(StoreError::Unavailable(err.to_string())));
                            }
                            Some(Command::Unsubscribe { channel, id }) => {
                                remove(&mut listeners, &channel, id);
                            }
                        },
                    }
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let channels: Vec<String> = listeners.keys().cloned().collect();
        if !channels.is_empty() {
            if sink.subscribe(&channels).await.is_err() {
                continue;
            }
            for entries in listeners.values() {
                for (_, tx) in entries {
                    let _ = tx.send(Signal::Resync);
                }
            }
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(Command::Subscribe { channel, id, sink: tx, ready }) => {
                        let fresh = !listeners.contains_key(&channel);
                        listeners.entry(channel.clone()).or_default().push((id, tx));
                        let result = if fresh { sink.subscribe(&channel).await } else { Ok(()) };
                        match result {
                            Ok(()) => { let _ = ready.send(Ok(())); }
                            Err(err) => {
                                remove(&mut listeners, &channel, id);
                                let _ = ready.send(Err(err.into()));
                                break;
                            }
                        }
                    }
                    Some(Command::Unsubscribe { channel, id }) => {
                        if remove(&mut listeners, &channel, id) && sink.unsubscribe(&channel).await.is_err() {
                            break;
                        }
                    }
                },
                msg = stream.next() => match msg {
                    None => break,
                    Some(msg) => {
                        let channel = msg.get_channel_name().to_owned();
                        let Ok(payload) = msg.get_payload::<String>() else { continue };
                        if let Some(entries) = listeners.get_mut(&channel) {
                            entries.retain(|(_, tx)| tx.send(Signal::Message(payload.clone())).is_ok());
                        }
                    }
                },
            }
        }
        tracing::warn!("pub/sub connection lost; reconnecting");
    }
}

/// Removes one listener; true when it was the channel's last.
fn remove(listeners: &mut Listeners, channel: &str, id: u64) -> bool {
    let Some(entries) = listeners.get_mut(channel) else {
        return false;
    };
    entries.retain(|(entry, _)| *entry != id);
    if entries.is_empty() {
        listeners.remove(channel);
        true
    } else {
        false
    }
}
