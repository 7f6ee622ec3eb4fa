//! Live event delivery: per-task listener lists and the stream a subscriber holds.
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
