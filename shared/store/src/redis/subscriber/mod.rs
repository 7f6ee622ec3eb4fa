//! One shared pub/sub connection per store, multiplexing every subscription of the process.
//!
//! Gateways hold thousands of SSE subscribers; one Redis connection each would not scale. The
//! dispatcher task owns the connection, subscribes a channel when its first listener arrives
//! and unsubscribes it with the last. Whenever messages may have been missed (a lost
//! connection, a failover) it resubscribes first and then sends every listener
//! [`Signal::Resync`], so each listener re-reads its task's event log and nothing published
//! meanwhile is lost.
//!
//! A process that creates a task and follows it (an invoke, a stream) does not subscribe to the
//! task's channel: the scripts also publish the task's events on the process's notify channel
//! (`publish_event.lua`), which it subscribes once per shard, and the dispatcher routes each
//! message to the listener of the task channel the message names ([`Dispatcher::listen_routed`]).
//! That spares a SUBSCRIBE and an UNSUBSCRIBE round trip per task.
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
        route: Option<String>,
        id: u64,
        sink: mpsc::UnboundedSender<Signal>,
        ready: oneshot::Sender<Result<(), StoreError>>,
    },
    Unsubscribe {
        channel: String,
        route: Option<String>,
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
    route: Option<String>,
    id: u64,
    commands: mpsc::UnboundedSender<Command>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unsubscribe {
            channel: std::mem::take(&mut self.channel),
            route: self.route.take(),
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
        self.subscribe(channel, None).await
    }

    /// Listens for the messages of routed channel `channel` (a notify channel) that name
    /// `route` (a task channel); returns once the channel is subscribed, which takes a round
    /// trip only the first time: a routed channel stays subscribed for the process's life.
    pub async fn listen_routed(
        &self,
        channel: String,
        route: String,
    ) -> Result<Listener, StoreError> {
        self.subscribe(channel, Some(route)).await
    }

    async fn subscribe(
        &self,
        channel: String,
        route: Option<String>,
    ) -> Result<Listener, StoreError> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (sink, signals) = mpsc::unbounded_channel();
        let (ready, confirmed) = oneshot::channel();
        let closed = || StoreError::Unavailable("subscriber stopped".into());
        self.commands
            .send(Command::Subscribe {
                channel: channel.clone(),
                route: route.clone(),
                id,
                sink,
                ready,
            })
            .map_err(|_| closed())?;
        let listener = Listener {
            signals,
            channel,
            route,
            id,
            commands: self.commands.clone(),
        };
        confirmed.await.map_err(|_| closed())??;
        Ok(listener)
    }
}

type Sinks = Vec<(u64, mpsc::UnboundedSender<Signal>)>;

/// Every listener of the process: by channel, and on routed channels by route.
#[derive(Default)]
struct Listeners {
    plain: HashMap<String, Sinks>,
    /// Routed (notify) channels: once added, kept for the process's life, with or without
    /// listeners, so that their subscription is never undone and redone per task.
    routed: HashMap<String, HashMap<String, Sinks>>,
}

impl Listeners {
    /// Adds one listener. Whether its channel must be subscribed is [`Listeners::apply`]'s to
    /// say, from membership before and after a batch.
    fn add(
        &mut self,
        channel: &str,
        route: Option<String>,
        id: u64,
        sink: mpsc::UnboundedSender<Signal>,
    ) {
        let sinks = match route {
            None => self.plain.entry(channel.to_owned()).or_default(),
            Some(route) => self
                .routed
                .entry(channel.to_owned())
                .or_default()
                .entry(route)
                .or_default(),
        };
        sinks.push((id, sink));
    }

    /// Removes one listener. A plain channel goes with its last listener; a routed channel
    /// stays (see `routed`), only the route goes.
    fn remove(&mut self, channel: &str, route: Option<&str>, id: u64) {
        match route {
            None => {
                if let Some(entries) = self.plain.get_mut(channel) {
                    entries.retain(|(entry, _)| *entry != id);
                    if entries.is_empty() {
                        self.plain.remove(channel);
                    }
                }
            }
            Some(route) => {
                if let Some(routes) = self.routed.get_mut(channel)
                    && let Some(entries) = routes.get_mut(route)
                {
                    entries.retain(|(entry, _)| *entry != id);
                    if entries.is_empty() {
                        routes.remove(route);
                    }
                }
            }
        }
    }

    /// After a failed first subscription of `channel`: a routed channel left without listeners
    /// is forgotten, so that the next listener subscribes it again.
    fn failed(&mut self, channel: &str) {
        if self
            .routed
            .get(channel)
            .is_some_and(|routes| routes.values().all(|entries| entries.is_empty()))
        {
            self.routed.remove(channel);
        }
    }

    fn contains(&self, channel: &str) -> bool {
        self.plain.contains_key(channel) || self.routed.contains_key(channel)
    }

    fn is_empty(&self) -> bool {
        self.plain.is_empty() && self.routed.is_empty()
    }

    fn channels(&self) -> Vec<String> {
        self.plain
            .keys()
            .chain(self.routed.keys())
            .cloned()
            .collect()
    }

    /// Hands a message to the channel's listeners (on a routed channel, to those of the route
    /// it names), forgetting those that went away.
    fn deliver(&mut self, channel: &str, payload: String) {
        if let Some(routes) = self.routed.get_mut(channel) {
            let Some((route, message)) = routed_message(&payload) else {
                return;
            };
            if let Some(entries) = routes.get_mut(route) {
                entries.retain(|(_, tx)| tx.send(Signal::Message(message.to_owned())).is_ok());
                if entries.is_empty() {
                    routes.remove(route);
                }
            }
        } else if let Some(entries) = self.plain.get_mut(channel) {
            entries.retain(|(_, tx)| tx.send(Signal::Message(payload.clone())).is_ok());
        }
    }

    /// Tells every listener to re-read its log: messages may have been missed.
    fn resync_all(&self) {
        let routed = self.routed.values().flat_map(|routes| routes.values());
        for entries in self.plain.values().chain(routed) {
            for (_, tx) in entries {
                let _ = tx.send(Signal::Resync);
            }
        }
    }
}

/// The most commands applied together ([`gather`]).
const MAX_BATCH: usize = 1_024;

/// `first` and whatever else is queued behind it (up to [`MAX_BATCH`]): applied together, they
/// cost one SUBSCRIBE and one UNSUBSCRIBE for the lot, where one each per listener made every
/// listener wait for the round trips of all those queued before it.
fn gather(first: Command, commands: &mut mpsc::UnboundedReceiver<Command>) -> Vec<Command> {
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match commands.try_recv() {
            Ok(command) => batch.push(command),
            Err(_) => break,
        }
    }
    batch
}

/// A subscription waiting for its confirmation.
struct Waiting {
    channel: String,
    route: Option<String>,
    id: u64,
    ready: oneshot::Sender<Result<(), StoreError>>,
}

/// What a batch of commands changed ([`Listeners::apply`]): the channels to subscribe (they
/// gained their first listener) and to unsubscribe (they lost their last), and the
/// subscriptions to confirm once that is done ([`Batch::confirm`]).
struct Batch {
    subscribe: Vec<String>,
    unsubscribe: Vec<String>,
    waiting: Vec<Waiting>,
}

impl Listeners {
    /// Applies `commands` in order to the listeners.
    fn apply(&mut self, commands: Vec<Command>) -> Batch {
        let mut seen = std::collections::HashSet::new();
        let mut touched = Vec::new();
        let mut waiting = Vec::new();
        for command in commands {
            let channel = match &command {
                Command::Subscribe { channel, .. } | Command::Unsubscribe { channel, .. } => {
                    channel
                }
            };
            if seen.insert(channel.clone()) {
                touched.push((channel.clone(), self.contains(channel)));
            }
            match command {
                Command::Subscribe {
                    channel,
                    route,
                    id,
                    sink,
                    ready,
                } => {
                    self.add(&channel, route.clone(), id, sink);
                    waiting.push(Waiting {
                        channel,
                        route,
                        id,
                        ready,
                    });
                }
                Command::Unsubscribe { channel, route, id } => {
                    self.remove(&channel, route.as_deref(), id);
                }
            }
        }
        let (mut subscribe, mut unsubscribe) = (Vec::new(), Vec::new());
        for (channel, before) in touched {
            match (before, self.contains(&channel)) {
                (false, true) => subscribe.push(channel),
                (true, false) => unsubscribe.push(channel),
                _ => {}
            }
        }
        Batch {
            subscribe,
            unsubscribe,
            waiting,
        }
    }
}

impl Batch {
    /// Confirms the batch's subscriptions once its channels are subscribed; when that failed,
    /// refuses them and forgets their listeners.
    fn confirm(self, listeners: &mut Listeners, result: Result<(), StoreError>) {
        match result {
            Ok(()) => {
                for waiting in self.waiting {
                    let _ = waiting.ready.send(Ok(()));
                }
            }
            Err(err) => {
                let reason = err.to_string();
                for waiting in self.waiting {
                    listeners.remove(&waiting.channel, waiting.route.as_deref(), waiting.id);
                    listeners.failed(&waiting.channel);
                    let _ = waiting
                        .ready
                        .send(Err(StoreError::Unavailable(reason.clone())));
                }
            }
        }
    }
}

/// A routed channel's message, "<length of route>:<route><message>" (`publish_event.lua`):
/// its route and message; None when malformed.
fn routed_message(payload: &str) -> Option<(&str, &str)> {
    let (length, rest) = payload.split_once(':')?;
    let length: usize = length.parse().ok()?;
    Some((rest.get(..length)?, rest.get(length..)?))
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
                Some(Command::Unsubscribe { channel, route, id }) => {
                    listeners.remove(&channel, route.as_deref(), id);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routed_message_names_its_route_by_length() {
        assert_eq!(
            routed_message("10:{t}:ch:a:b2|progress|{}"),
            Some(("{t}:ch:a:b", "2|progress|{}"))
        );
        // Malformed payloads are dropped, never a panic: a length past the end, one that
        // splits a character, no length at all.
        assert_eq!(routed_message("90:short"), None);
        assert_eq!(routed_message("1:é2|x|{}"), None);
        assert_eq!(routed_message("no length"), None);
    }

    #[test]
    fn routed_listeners_hear_their_route_only_and_keep_the_channel() {
        let mut listeners = Listeners::default();
        let (a, mut heard_a) = mpsc::unbounded_channel();
        let (b, mut heard_b) = mpsc::unbounded_channel();
        // The first route subscribes the channel; the second needs nothing more.
        let (first, _) = subscribe_routed("nc", Some("ch:a"), 1, a);
        assert_eq!(listeners.apply(vec![first]).subscribe, ["nc"]);
        let (second, _) = subscribe_routed("nc", Some("ch:b"), 2, b);
        assert!(listeners.apply(vec![second]).subscribe.is_empty());
        listeners.deliver("nc", "4:ch:a2|progress|{}".into());
        assert!(matches!(heard_a.try_recv(), Ok(Signal::Message(m)) if m == "2|progress|{}"));
        assert!(heard_b.try_recv().is_err());
        // The last listener leaving does not unsubscribe a routed channel.
        let leave = |route: &str, id| Command::Unsubscribe {
            channel: "nc".into(),
            route: Some(route.into()),
            id,
        };
        assert!(
            listeners
                .apply(vec![leave("ch:a", 1)])
                .unsubscribe
                .is_empty()
        );
        assert!(
            listeners
                .apply(vec![leave("ch:b", 2)])
                .unsubscribe
                .is_empty()
        );
        assert_eq!(listeners.channels(), vec!["nc".to_owned()]);
    }

    type Confirmed = oneshot::Receiver<Result<(), StoreError>>;

    fn subscribe_routed(
        channel: &str,
        route: Option<&str>,
        id: u64,
        sink: mpsc::UnboundedSender<Signal>,
    ) -> (Command, Confirmed) {
        let (ready, confirmed) = oneshot::channel();
        let command = Command::Subscribe {
            channel: channel.into(),
            route: route.map(str::to_owned),
            id,
            sink,
            ready,
        };
        (command, confirmed)
    }

    fn subscribe(channel: &str, id: u64) -> (Command, Confirmed) {
        subscribe_routed(channel, None, id, mpsc::unbounded_channel().0)
    }

    fn unsubscribe(channel: &str, id: u64) -> Command {
        Command::Unsubscribe {
            channel: channel.into(),
            route: None,
            id,
        }
    }

    #[test]
    fn a_batch_subscribes_and_unsubscribes_only_its_net_changes() {
        let mut listeners = Listeners::default();
        let (first_a, _) = subscribe("a", 1);
        let (first_b, _) = subscribe("b", 2);
        let batch = listeners.apply(vec![first_a, first_b]);
        assert_eq!(batch.subscribe, ["a", "b"]);
        assert!(batch.unsubscribe.is_empty());
        batch.confirm(&mut listeners, Ok(()));

        // a's only listener leaves and another comes in the same batch: a stays subscribed; b
        // loses its last; c is new.
        let (again_a, _) = subscribe("a", 3);
        let (first_c, confirmed_c) = subscribe("c", 4);
        let batch = listeners.apply(vec![
            unsubscribe("a", 1),
            again_a,
            unsubscribe("b", 2),
            first_c,
        ]);
        assert_eq!(batch.subscribe, ["c"]);
        assert_eq!(batch.unsubscribe, ["b"]);
        batch.confirm(&mut listeners, Err(StoreError::Unavailable("gone".into())));
        // A failed batch refuses its subscriptions and forgets their listeners.
        assert!(matches!(confirmed_c.blocking_recv(), Ok(Err(_))));
        // a's new listener was refused too and its old one left: nothing is listened to.
        assert!(
            listeners.channels().is_empty(),
            "{:?}",
            listeners.channels()
        );
    }
}
