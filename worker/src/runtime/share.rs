//! Fair share of a worker's slots between its entrypoints: one entrypoint holds at most `cap`
//! of them at once (`WORKER_ENTRYPOINT_SHARE` percent of the concurrency, at least one), so a
//! flood of long runs of one entrypoint (a thousand anonymous 60 s sleeps) leaves the other
//! entrypoints slots to run in, instead of queueing them behind every run it admitted. BullMQ
//! gets the same from a worker per queue, each with its own concurrency.
//!
//! A slot is counted from the moment its task is taken (not when its run starts) until the run
//! ends, so that a take in flight cannot pass the cap; a take asks for at most the smallest
//! room left, so that whichever entrypoint its tasks come from, none passes its cap.
//!
//! The fetch loop waits only on the doorbells of open entrypoints, so a run that ends and
//! reopens a capped entrypoint wakes it ([`SlotShare::reopened`]): else that entrypoint's
//! queued tasks would wait for the next ring of another entrypoint, or the idle timeout.
//!
//! An entrypoint an operator paused cluster-wide ([`SlotShare::set_paused`], from the
//! heartbeat) is never open: its queued tasks wait, and a resume reopens it the same way.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use tokio::sync::Notify;

pub struct SlotShare {
    concurrency: usize,
    share_pct: u8,
    /// The entrypoints and their cap: replaced when the hosted set changes ([`SlotShare::set_keys`]).
    layout: Mutex<Layout>,
    held: Mutex<HashMap<String, usize>>,
    /// Entrypoints paused cluster-wide: taken from by no slot.
    paused: Mutex<BTreeSet<String>>,
    /// Notified when a run ends that leaves its entrypoint below the cap again.
    reopen: Notify,
}

impl SlotShare {
    /// `share_pct` of `concurrency` per entrypoint; no bound with one entrypoint or 100 %.
    pub fn new(keys: Vec<String>, concurrency: usize, share_pct: u8) -> Self {
        SlotShare {
            concurrency,
            share_pct,
            layout: Mutex::new(Layout::new(keys, concurrency, share_pct)),
            held: Mutex::new(HashMap::new()),
            paused: Mutex::new(BTreeSet::new()),
            reopen: Notify::new(),
        }
    }

    /// The hosted entrypoints changed: takes look at `keys` from now on. Runs under way keep
    /// their slots counted until they end.
    pub fn set_keys(&self, keys: Vec<String>) {
        *self.layout() = Layout::new(keys, self.concurrency, self.share_pct);
        // A waiter on capped entrypoints looks again, at the new set.
        self.reopen.notify_one();
    }

    /// The entrypoints paused cluster-wide are `paused` from now on; true when that changed
    /// the set. A resumed one wakes the fetch loop, which waits on no doorbell of a paused one.
    pub fn set_paused(&self, paused: BTreeSet<String>) -> bool {
        let mut current = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        if *current == paused {
            return false;
        }
        let resumed = current.iter().any(|key| !paused.contains(key));
        *current = paused;
        drop(current);
        if resumed {
            self.reopen.notify_one();
        }
        true
    }

    /// `keys` less those paused now: a take whose wait began before a pause takes none of
    /// the paused entrypoint's tasks after it.
    pub fn unpaused(&self, keys: &[String]) -> Vec<String> {
        let paused = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        keys.iter()
            .filter(|key| !paused.contains(*key))
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Held only for map operations, never across an await.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn layout(&self) -> std::sync::MutexGuard<'_, Layout> {
        self.layout.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entrypoints with room for another run, and the most tasks one take may claim
    /// without any of them passing its cap. `leaving`: a run of that entrypoint that is about
    /// to end (its slot takes the next task as it finishes).
    pub fn open(&self, leaving: Option<&str>) -> (Vec<String>, usize) {
        let Layout { cap, mut keys } = self.layout().clone();
        {
            let paused = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
            keys.retain(|key| !paused.contains(key));
        }
        if cap == usize::MAX {
            return (keys, usize::MAX);
        }
        let held = self.lock();
        let mut room = usize::MAX;
        let mut open = Vec::with_capacity(keys.len());
        for key in &keys {
            let mut count = held.get(key).copied().unwrap_or(0);
            if leaving == Some(key.as_str()) {
                count = count.saturating_sub(1);
            }
            if count < cap {
                room = room.min(cap - count);
                open.push(key.clone());
            }
        }
        (open, room)
    }

    /// A task of `entrypoint` was taken for a slot.
    pub fn took(&self, entrypoint: &str) {
        // Counted even without a cap: the hosted set, and with it the cap, may change
        // while the run is under way.
        *self.lock().entry(entrypoint.to_owned()).or_default() += 1;
    }

    /// A run of `entrypoint` ended.
    pub fn left(&self, entrypoint: &str) {
        let cap = self.layout().cap;
        let mut held = self.lock();
        if let Some(count) = held.get_mut(entrypoint) {
            let was_capped = *count >= cap;
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(entrypoint);
            }
            if was_capped && cap != usize::MAX {
                // One waiter (the fetch loop); a permit stored while it does not wait ends
                // its next wait at once, which costs one look at the queues.
                self.reopen.notify_one();
            }
        }
    }

    /// True when every entrypoint is open (none at its cap nor paused): then nothing but a doorbell can
    /// bring work that the fetch loop may take.
    pub fn all_open(&self, open: &[String]) -> bool {
        open.len() == self.layout().keys.len()
    }

    /// Completes when a capped entrypoint has room again ([`SlotShare::left`]).
    pub async fn reopened(&self) {
        self.reopen.notified().await;
    }
}

/// The entrypoints slots are shared between, and the most one of them may hold.
#[derive(Clone)]
struct Layout {
    cap: usize,
    keys: Vec<String>,
}

impl Layout {
    /// `share_pct` of `concurrency` per entrypoint; no bound with one entrypoint or 100 %.
    fn new(keys: Vec<String>, concurrency: usize, share_pct: u8) -> Self {
        let cap = if keys.len() <= 1 || share_pct >= 100 {
            usize::MAX
        } else {
            (concurrency * usize::from(share_pct) / 100).max(1)
        };
        Layout { cap, keys }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<String> {
        vec!["echo".to_owned(), "sleep".to_owned()]
    }

    #[test]
    fn one_entrypoint_holds_at_most_its_share() {
        let share = SlotShare::new(keys(), 16, 75);
        assert_eq!(share.open(None), (keys(), 12));
        for _ in 0..12 {
            share.took("sleep");
        }
        assert_eq!(share.open(None), (vec!["echo".to_owned()], 12));
        // A finishing sleep's slot may take another sleep.
        assert_eq!(share.open(Some("sleep")), (keys(), 1));
        share.left("sleep");
        assert_eq!(share.open(None), (keys(), 1));
    }

    #[tokio::test]
    async fn a_run_that_uncaps_its_entrypoint_wakes_the_waiter() {
        let share = std::sync::Arc::new(SlotShare::new(keys(), 2, 50));
        share.took("sleep");
        let (open, _) = share.open(None);
        assert!(!share.all_open(&open));
        let waiter = tokio::spawn({
            let share = share.clone();
            async move {
                share.reopened().await;
                share.open(None).0
            }
        });
        share.left("sleep");
        assert_eq!(waiter.await.ok(), Some(keys()));
    }

    #[test]
    fn a_run_below_the_cap_wakes_nobody() {
        let share = SlotShare::new(keys(), 4, 50);
        share.took("sleep");
        share.left("sleep");
        // No permit was stored: a waiter would still be waiting.
        let waiting = share.reopened();
        let mut waiting = std::pin::pin!(waiting);
        let waker = futures::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
    }

    #[test]
    fn a_lone_entrypoint_or_a_whole_share_is_unbounded() {
        let lone = SlotShare::new(vec!["echo".to_owned()], 16, 50);
        lone.took("echo");
        assert_eq!(lone.open(None).1, usize::MAX);
        let whole = SlotShare::new(keys(), 16, 100);
        assert_eq!(whole.open(None), (keys(), usize::MAX));
    }

    #[test]
    fn a_paused_entrypoint_is_never_open() {
        let share = SlotShare::new(keys(), 16, 100);
        assert!(share.set_paused(BTreeSet::from(["sleep".to_owned()])));
        let (open, _) = share.open(None);
        assert_eq!(open, vec!["echo".to_owned()]);
        assert!(!share.all_open(&open));
        // A finishing sleep's slot takes no other sleep either.
        assert_eq!(share.open(Some("sleep")).0, vec!["echo".to_owned()]);
        assert!(!share.set_paused(BTreeSet::from(["sleep".to_owned()])));
        assert_eq!(share.unpaused(&keys()), vec!["echo".to_owned()]);
    }

    #[tokio::test]
    async fn a_resume_wakes_the_waiter() {
        let share = std::sync::Arc::new(SlotShare::new(keys(), 16, 100));
        share.set_paused(BTreeSet::from(["sleep".to_owned()]));
        let waiter = tokio::spawn({
            let share = share.clone();
            async move {
                share.reopened().await;
                share.open(None).0
            }
        });
        assert!(share.set_paused(BTreeSet::new()));
        assert_eq!(waiter.await.ok(), Some(keys()));
    }

    #[test]
    fn a_small_worker_keeps_one_slot_per_entrypoint() {
        let share = SlotShare::new(keys(), 1, 50);
        assert_eq!(share.open(None).1, 1);
        share.took("sleep");
        assert_eq!(share.open(None), (vec!["echo".to_owned()], 1));
    }
}
