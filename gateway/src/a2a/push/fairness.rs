//! Fairness among callers in one gateway's deliverer: how many tasks of each group (a client
//! address, or an owner for a task no address put a config on: `store::push::Claimed::group`)
//! are under way, which every claim is told (`lua/push_claim.lua` keeps the shares and the
//! reserve). By address, not by owner: tokens are free to mint, addresses are what admission
//! bounds already (`crate::http::client_address`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use store::push::OwnerShare;

/// Fairness among groups: a quarter of a gateway's delivery slots (at least one) is each
/// group's share, and as much is kept in reserve for groups with nothing under way. A group
/// past its share gets more slots only while they are free, and never the reserve: an address
/// whose receivers hang cannot hold every slot for their 10 s each, however many tokens it
/// uses, while other callers' notifications wait, and a caller alone still gets three quarters
/// of the slots.
pub(super) const GROUP_SHARE_DIVISOR: usize = 4;

/// How far ahead a due task of a group past its share is moved when no slot fits it (by the
/// claim script): short, so a lone caller's backlog goes on at once, long enough that a flood
/// is passed over by the claims in between.
pub(super) const GROUP_BUSY_DELAY: Duration = Duration::from_millis(25);

/// Tasks being delivered per group: what each claim is told (the claim script keeps the
/// shares).
pub(super) struct InFlight {
    share: usize,
    cap: usize,
    per_group: Mutex<HashMap<String, usize>>,
}

impl InFlight {
    pub(super) fn new(share: usize, cap: usize) -> InFlight {
        InFlight {
            share: share.max(1),
            cap: cap.max(1),
            per_group: Mutex::new(HashMap::new()),
        }
    }

    /// What a claim needs to share the slots: each group's tasks under way.
    pub(super) fn share(&self, postpone: Duration) -> OwnerShare {
        let per_group = self
            .per_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        OwnerShare {
            share: self.share,
            cap: self.cap,
            under_way: per_group
                .iter()
                .map(|(group, count)| (group.clone(), *count))
                .collect(),
            postpone,
        }
    }

    /// Counts one more of `group`'s tasks under way until the slot is dropped.
    pub(super) fn enter(self: &Arc<Self>, group: &str) -> GroupSlot {
        let mut per_group = self
            .per_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *per_group.entry(group.to_owned()).or_default() += 1;
        GroupSlot {
            in_flight: Arc::clone(self),
            group: group.to_owned(),
        }
    }

    #[cfg(test)]
    fn under_way(&self, group: &str) -> usize {
        let per_group = self
            .per_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        per_group.get(group).copied().unwrap_or(0)
    }
}

/// One task's place in its group's share, given back when dropped.
pub(super) struct GroupSlot {
    in_flight: Arc<InFlight>,
    group: String,
}

impl Drop for GroupSlot {
    fn drop(&mut self) {
        let mut per_group = self
            .in_flight
            .per_group
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = per_group.get_mut(&self.group) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                per_group.remove(&self.group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_told_each_groups_tasks_under_way_until_their_slots_are_dropped() {
        let in_flight = Arc::new(InFlight::new(2, 6));
        let (alice, bob) = ("a:203.0.113.1", "a:203.0.113.2");
        let first = in_flight.enter(alice);
        let _second = in_flight.enter(alice);
        let _third = in_flight.enter(bob);
        let share = in_flight.share(Duration::from_millis(5));
        assert_eq!((share.share, share.cap), (2, 6));
        let mut under_way = share.under_way.clone();
        under_way.sort();
        assert_eq!(under_way, vec![(alice.to_owned(), 2), (bob.to_owned(), 1)]);
        drop(first);
        assert_eq!(in_flight.under_way(alice), 1);
    }

    #[test]
    fn the_share_and_the_cap_are_at_least_one() {
        let in_flight = InFlight::new(0, 0);
        assert_eq!((in_flight.share, in_flight.cap), (1, 1));
    }
}
