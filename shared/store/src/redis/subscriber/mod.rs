//! One shared pub/sub connection per store, multiplexing every subscription of the process.
//!
//! Gateways hold thousands of SSE subscribers; one Redis connection each would not scale. The
//! dispatcher task owns the connection, subscribes a channel when its first listener arrives
//! and unsubscribes it with the last. Whenever messages may have been missed (a lost
//! connection, a failover) it resubscribes first and then sends every listener
//! [`Signal::Resync`], so each listener re-reads its task's event log and nothing published
//! meanwhile is lost.
//!
//! Two flavours, matching how the scripts publish ([`super::scripts::PubSub`]):
//! - [`classic`]: one server: `SUBSCRIBE` on a dedicated connection;
//! - [`sharded`]: a Redis Cluster: `SSUBSCRIBE` through the cluster client, each channel on
//!   the master that owns its slot, so a message crosses no other node.

mod classic;
mod sharded;

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::StoreError;

pub enum Signal {
    Message(String),
    Resync,
}

/// Where a dispatcher listens.
pub enum Source {
    /// Classic pub/sub on one server.
    Server(redis::Client),
    /// Sharded pub/sub on the Redis Cluster these seed URLs reach; `timeout` bounds connecting
    /// and each reply.
    Cluster {
        urls: Vec<String>,
        timeout: Duration,
    },
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
    pub fn start(source: Source, shutdown: CancellationToken) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        match source {
            Source::Server(client) => {
                tokio::spawn(classic::run(client, rx, shutdown));
            }
            Source::Cluster { urls, timeout } => {
                tokio::spawn(sharded::run(urls, timeout, rx, shutdown));
            }
        }
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

/// Every listener of the process, by channel.
#[derive(Default)]
struct Listeners(HashMap<String, Vec<(u64, mpsc::UnboundedSender<Signal>)>>);

impl Listeners {
    /// Adds one listener; true when it is the channel's first.
    fn add(&mut self, channel: &str, id: u64, sink: mpsc::UnboundedSender<Signal>) -> bool {
        let fresh = !self.0.contains_key(channel);
        self.0
            .entry(channel.to_owned())
            .or_default()
            .push((id, sink));
        fresh
    }

    /// Removes one listener; true when it was the channel's last.
    fn remove(&mut self, channel: &str, id: u64) -> bool {
        let Some(entries) = self.0.get_mut(channel) else {
            return false;
        };
        entries.retain(|(entry, _)| *entry != id);
        if entries.is_empty() {
            self.0.remove(channel);
            true
        } else {
            false
        }
    }

    fn contains(&self, channel: &str) -> bool {
        self.0.contains_key(channel)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn channels(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    /// Hands a message to the channel's listeners, forgetting those that went away.
    fn deliver(&mut self, channel: &str, payload: String) {
        if let Some(entries) = self.0.get_mut(channel) {
            entries.retain(|(_, tx)| tx.send(Signal::Message(payload.clone())).is_ok());
        }
    }

    /// Tells every listener to re-read its log: messages may have been missed.
    fn resync_all(&self) {
        for entries in self.0.values() {
            for (_, tx) in entries {
                let _ = tx.send(Signal::Resync);
            }
        }
    }
}

/// After a failed connection: waits out `backoff` (then doubles it) while Redis is away,
/// refusing new subscriptions at once (callers answer 503) and forgetting listeners that
/// leave. False when the dispatcher must stop.
async fn refuse_for(
    backoff: &mut Duration,
    err: &(dyn std::fmt::Display + Sync),
    commands: &mut mpsc::UnboundedReceiver<Command>,
    listeners: &mut Listeners,
    shutdown: &CancellationToken,
) -> bool {
    tracing::warn!(error = %err, "pub/sub connection failed; retrying");
    let reason = err.to_string();
    let deadline = tokio::time::sleep(*backoff);
    *backoff = longer(*backoff);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            _ = &mut deadline => return true,
            cmd = commands.recv() => match cmd {
                None => return false,
                Some(Command::Subscribe { ready, .. }) => {
                    let _ = ready.send(Err(StoreError::Unavailable(reason.clone())));
                }
                Some(Command::Unsubscribe { channel, id }) => {
                    listeners.remove(&channel, id);
                }
            },
        }
    }
}

/// The next wait after a failed attempt.
fn longer(backoff: Duration) -> Duration {
    (backoff * 2).min(Duration::from_secs(2))
}

/// The first wait after a failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
