//! Live event delivery: per-task listener lists, subscribing (`redis/feed.rs` in Redis) and the
//! stream a subscriber holds.
//!
//! Events are sent while the store's lock is held, so a listener registered under that lock
//! together with the snapshot sees every later event, in order, and none twice. Dropping the
//! stream unregisters its listener; a listener whose stream is gone is also pruned on the next
//! publish, and all of a task's listeners go when the task is deleted.

use std::pin::Pin;
use std::sync::{Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::state::State;
use crate::StoredEvent;
use protocol::Task;
use protocol::token::OwnerHash;

/// The subscribers of one task.
#[derive(Default)]
pub(super) struct Listeners {
    senders: Vec<(u64, UnboundedSender<StoredEvent>)>,
}

impl Listeners {
    /// Registers listener `id` and returns its receiving end.
    pub(super) fn add(&mut self, id: u64) -> UnboundedReceiver<StoredEvent> {
        let (tx, rx) = unbounded_channel();
        self.senders.push((id, tx));
        rx
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.senders.retain(|(listener, _)| *listener != id);
        if self.senders.is_empty() {
            self.senders = Vec::new();
        }
    }

    /// Sends `event` to every listener, dropping those whose stream is gone (the last one
    /// gets the event itself, not a copy).
    pub(super) fn publish(&mut self, event: StoredEvent) {
        let mut event = Some(event);
        let last = self.senders.len().saturating_sub(1);
        let mut index = 0;
        self.senders.retain(|(_, tx)| {
            let copy = if index == last {
                event.take()
            } else {
                event.clone()
            };
            index += 1;
            copy.is_some_and(|copy| tx.send(copy).is_ok())
        });
        if self.senders.is_empty() {
            // Give the allocation back: most tasks are watched once, then kept for long.
            self.senders = Vec::new();
        }
    }

    pub(super) fn clear(&mut self) {
        self.senders.clear();
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.senders.len()
    }
}

/// What a new subscription gets, read atomically with registering its listener.
pub(super) struct Subscribed {
    pub snapshot: Task,
    pub snapshot_seq: u64,
    pub replay: Vec<StoredEvent>,
    pub rx: UnboundedReceiver<StoredEvent>,
    pub listener_id: u64,
}

impl State {
    pub(in crate::memory) fn subscribe(
        &mut self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
        now: u64,
    ) -> Option<Subscribed> {
        self.purge(now);
        let listener_id = self.next_listener;
        let entry = self.tasks.get_mut(task_id)?;
        if entry.stored.owner != *owner {
            return None;
        }
        self.next_listener += 1;
        // Listener, snapshot and replay under one lock: no event can fall between them.
        let rx = entry.listeners.add(listener_id);
        let replay = match after_seq {
            Some(after) => entry.replay(after),
            None => Vec::new(),
        };
        Some(Subscribed {
            snapshot: entry.task(),
            snapshot_seq: entry.stored.seq,
            replay,
            rx,
            listener_id,
        })
    }

    pub(in crate::memory) fn unsubscribe(&mut self, task_id: &str, listener_id: u64) {
        if let Some(entry) = self.tasks.get_mut(task_id) {
            entry.listeners.remove(listener_id);
        }
    }
}

/// The `events` stream of a memory-store subscription. Ends when the task is deleted or the
/// store closed; unregisters itself when dropped.
pub(super) struct ListenerStream {
    rx: UnboundedReceiver<StoredEvent>,
    _unregister: Unregister,
}

impl ListenerStream {
    pub(super) fn new(
        rx: UnboundedReceiver<StoredEvent>,
        state: Weak<Mutex<State>>,
        task_id: String,
        listener_id: u64,
    ) -> Self {
        ListenerStream {
            rx,
            _unregister: Unregister {
                state,
                task_id,
                listener_id,
            },
        }
    }
}

impl Stream for ListenerStream {
    type Item = StoredEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StoredEvent>> {
        self.rx.poll_recv(cx)
    }
}

struct Unregister {
    // Weak: an outstanding subscription must not keep a dropped store alive.
    state: Weak<Mutex<State>>,
    task_id: String,
    listener_id: u64,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Some(state) = self.state.upgrade() {
            // Never dropped while the store holds its lock: streams are built and handed out
            // after the lock is released, so this cannot deadlock.
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            state.unsubscribe(&self.task_id, self.listener_id);
        }
    }
}
