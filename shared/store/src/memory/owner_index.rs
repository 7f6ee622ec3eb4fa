//! One owner's task ids by `(created_at, order)`, for newest-first listing.
//!
//! Most owners hold a single task (a direct invoke makes an owner of its own), and a
//! one-entry `BTreeMap` still allocates a whole node (hundreds of bytes), so a lone task is
//! held inline; the map appears with the second.

use std::collections::BTreeMap;

use super::entry::IndexKey;

pub(super) enum OwnerIndex {
    One(IndexKey, String),
    Many(BTreeMap<IndexKey, String>),
}

impl OwnerIndex {
    pub(super) fn new(key: IndexKey, id: String) -> Self {
        OwnerIndex::One(key, id)
    }

    pub(super) fn insert(&mut self, key: IndexKey, id: String) {
        match self {
            OwnerIndex::One(first_key, first_id) => {
                let mut map = BTreeMap::new();
                map.insert(*first_key, std::mem::take(first_id));
                map.insert(key, id);
                *self = OwnerIndex::Many(map);
            }
            OwnerIndex::Many(map) => {
                map.insert(key, id);
            }
        }
    }

    /// Removes `key`; true when nothing is left (the owner's index should go).
    pub(super) fn remove(&mut self, key: &IndexKey) -> bool {
        match self {
            OwnerIndex::One(only, _) => only == key,
            OwnerIndex::Many(map) => {
                map.remove(key);
                map.is_empty()
            }
        }
    }

    /// How many task ids it holds.
    pub(super) fn len(&self) -> usize {
        match self {
            OwnerIndex::One(..) => 1,
            OwnerIndex::Many(map) => map.len(),
        }
    }

    /// Task ids, oldest first.
    pub(super) fn oldest_first(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self {
            OwnerIndex::One(_, id) => Box::new(std::iter::once(id)),
            OwnerIndex::Many(map) => Box::new(map.values()),
        }
    }

    /// Task ids, newest first.
    pub(super) fn newest_first(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self {
            OwnerIndex::One(_, id) => Box::new(std::iter::once(id)),
            OwnerIndex::Many(map) => Box::new(map.values().rev()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_newest_first_and_empties() {
        let mut index = OwnerIndex::new((1, 0), "a".into());
        assert_eq!(index.newest_first().collect::<Vec<_>>(), ["a"]);
        index.insert((3, 2), "c".into());
        index.insert((2, 1), "b".into());
        assert_eq!(index.newest_first().collect::<Vec<_>>(), ["c", "b", "a"]);
        assert!(!index.remove(&(2, 1)));
        assert!(!index.remove(&(9, 9)));
        assert!(!index.remove(&(1, 0)));
        assert!(index.remove(&(3, 2)));
        let single = OwnerIndex::new((1, 0), "a".into());
        let mut single = single;
        assert!(!single.remove(&(2, 0)), "another key leaves it");
        assert!(single.remove(&(1, 0)));
    }
}
