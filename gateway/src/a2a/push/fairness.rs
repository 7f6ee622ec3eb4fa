//! Fairness among owners in one gateway's deliverer: how many of each owner's tasks are under
//! way, which every claim is told (`lua/push_claim.lua` keeps the shares and the reserve).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol::token::OwnerHash;
use store::push::OwnerShare;

/// Fairness among owners: a quarter of a gateway's delivery slots (at least one) is each
/// owner's share, and as much is kept in reserve for owners under their share. An owner past
/// its share gets more slots only while they are free, and never the reserve: a caller whose
/// receivers hang cannot hold every slot for their 10 s each while other callers'
/// notifications wait, and a caller alone still gets three quarters of the slots.
pub(super) const OWNER_SHARE_DIVISOR: usize = 4;

/// How far ahead a due task of an owner past its share is moved when no slot fits it (by the
/// claim script): short, so a lone caller's backlog goes on at once, long enough that a flood
/// is passed over by the claims in between.
pub(super) const OWNER_BUSY_DELAY: Duration = Duration::from_millis(25);

/// Tasks being delivered per owner: what each claim is told (the claim script keeps the
/// shares).
pub(super) struct InFlight {
    share: usize,
    cap: usize,
    per_owner: Mutex<HashMap<OwnerHash, usize>>,
}

impl InFlight {
    pub(super) fn new(share: usize, cap: usize) -> InFlight {
        InFlight {
            share: share.max(1),
            cap: cap.max(1),
            per_owner: Mutex::new(HashMap::new()),
        }
    }

    /// What a claim needs to share the slots: each owner's tasks under way.
    pub(super) fn share(&self, postpone: Duration) -> OwnerShare {
        let per_owner = self
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        OwnerShare {
            share: self.share,
            cap: self.cap,
            under_way: per_owner
                .iter()
                .map(|(owner, count)| (owner.as_str().to_owned(), *count))
                .collect(),
            postpone,
        }
    }

    /// Counts one more of `owner`'s tasks under way until the slot is dropped.
    pub(super) fn enter(self: &Arc<Self>, owner: &OwnerHash) -> OwnerSlot {
        let mut per_owner = self
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *per_owner.entry(owner.clone()).or_default() += 1;
        OwnerSlot {
            in_flight: Arc::clone(self),
            owner: owner.clone(),
        }
    }

    #[cfg(test)]
    fn under_way(&self, owner: &OwnerHash) -> usize {
        let per_owner = self
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        per_owner.get(owner).copied().unwrap_or(0)
    }
}

/// One task's place in its owner's share, given back when dropped.
pub(super) struct OwnerSlot {
    in_flight: Arc<InFlight>,
    pub(super) owner: OwnerHash,
}

impl Drop for OwnerSlot {
    fn drop(&mut self) {
        let mut per_owner = self
            .in_flight
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = per_owner.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                per_owner.remove(&self.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> OwnerHash {
        protocol::token::AccessToken::parse(&format!("{name}-token-0123456789abcdef"))
            .map(|token| token.owner_hash())
            .unwrap_or_else(|_| protocol::token::AccessToken::generate().owner_hash())
    }

    #[test]
    fn a_claim_is_told_each_owners_tasks_under_way_until_their_slots_are_dropped() {
        let in_flight = Arc::new(InFlight::new(2, 6));
        let (alice, bob) = (owner("alice"), owner("bob"));
        let first = in_flight.enter(&alice);
        let _second = in_flight.enter(&alice);
        let _third = in_flight.enter(&bob);
        let share = in_flight.share(Duration::from_millis(5));
        assert_eq!((share.share, share.cap), (2, 6));
        let mut under_way = share.under_way.clone();
        under_way.sort();
        let mut expected = vec![(alice.as_str().to_owned(), 2), (bob.as_str().to_owned(), 1)];
        expected.sort();
        assert_eq!(under_way, expected);
        drop(first);
        assert_eq!(in_flight.under_way(&alice), 1);
    }

    #[test]
    fn the_share_and_the_cap_are_at_least_one() {
        let in_flight = InFlight::new(0, 0);
        assert_eq!((in_flight.share, in_flight.cap), (1, 1));
    }
}
