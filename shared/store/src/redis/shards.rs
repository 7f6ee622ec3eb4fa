//! Sharding: a namespace split into S shards, each under its own hash tag, so that on a Redis
//! Cluster the shards spread over the masters while every script still touches one slot.
//!
//! - **Where a task lives:** shard `hash(id) mod S` ([`shard_index`]), so anyone holding a
//!   task id finds its keys without a lookup. The hash is the first 8 bytes of the id's
//!   SHA-256: stable across builds, platforms and Rust versions (std's hasher promises none of
//!   that), and spread evenly whatever ids look like.
//! - **Per shard** (tag [`shard_tag`]: `{ns:i}` or `{ns:i.n}`, or `{ns}` when S = 1, the
//!   unsharded layout): task records, event logs, the live set, lease and admission deadlines,
//!   queues and doorbells, owner indexes and owner live counters, and the pub/sub channels of
//!   its tasks and of its tasks' holders (sharded pub/sub on a cluster). A task's transitions touch
//!   only its own shard's keys.
//! - **Placement:** shard i's tag is chosen so that its Redis Cluster slot lies in the i-th S-th
//!   of the slot range. A cluster splits the slots into contiguous equal ranges, one per master
//!   (`redis-cli --cluster create`), so S shards on P masters, S a multiple of P, land S/P on
//!   each master, whatever the namespace. Plain `{ns:i}` tags would fall where CRC16 puts them,
//!   and CRC16 is linear: `{ns:0}` and `{ns:1}` differ by a fixed XOR that never crosses the
//!   middle slot, so two shards on two masters would always share one.
//! - **Namespace-wide** (`{ns}`): the layout stamp (which records S), the worker registry,
//!   idempotency records, payment credentials.
//! - **Capacity** is per shard: each admits `ceil(max_tasks / S)` live tasks, so that creation
//!   stays one single-slot script. Ids spread evenly, so the cluster-wide bound is `max_tasks`
//!   up to rounding; a shard that is full refuses even while another has room.

use sha2::{Digest, Sha256};

/// Slots of a Redis Cluster.
const SLOTS: usize = 16_384;

use super::Keys;
use super::take::Hints;

/// Most shards a namespace can have: enough for any cluster (a shard per master is plenty),
/// few enough that per-shard sweeps and listings stay cheap.
pub const MAX_SHARDS: u16 = 256;

/// The shard of task `id` among `count`.
pub fn shard_index(id: &str, count: usize) -> usize {
    if count <= 1 {
        return 0;
    }
    let digest = Sha256::digest(id.as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    // The remainder is below `count`, a usize.
    usize::try_from(u64::from_be_bytes(head) % count as u64).unwrap_or(0)
}

/// The Redis Cluster slot of a hash tag's content (CRC16/XMODEM mod 16384, as Redis computes it).
pub fn tag_slot(tag: &str) -> usize {
    usize::from(crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes())) % SLOTS
}

/// The hash tag content of shard `index` of `count` in `namespace`: the namespace itself for one
/// shard; else the first of `ns:i`, `ns:i.1`, `ns:i.2`, ... whose slot lies well inside the
/// i-th `count`-th of the slot range (about `count` tries; computed once at connect).
pub fn shard_tag(namespace: &str, index: usize, count: usize) -> String {
    if count <= 1 {
        return namespace.to_owned();
    }
    // The middle three quarters of the range: clear of where tools round the split between
    // masters differently (redis-cli gives slot 10922 of 3 masters to the second).
    let (low, high) = (index * SLOTS / count, (index + 1) * SLOTS / count);
    let margin = (high - low) / 8;
    let range = low + margin..high - margin;
    (0..)
        .map(|n| {
            if n == 0 {
                format!("{namespace}:{index}")
            } else {
                format!("{namespace}:{index}.{n}")
            }
        })
        .find(|tag| range.contains(&tag_slot(tag)))
        .unwrap_or_else(|| format!("{namespace}:{index}"))
}

/// One shard: its keys and which of its queues this process believes may hold tasks.
pub(crate) struct Shard {
    pub index: usize,
    pub keys: Keys,
    /// Which entrypoints' queues may hold tasks here: the shards a take visits.
    pub hints: Hints,
}

impl Shard {
    /// The shards of `namespace`; one shard keeps the unsharded key names (`{ns}`), so a
    /// namespace written before sharding existed is shard 0 of 1.
    pub fn all(namespace: &str, count: u16) -> Vec<Shard> {
        let count = count.clamp(1, MAX_SHARDS);
        (0..usize::from(count))
            .map(|index| Shard {
                index,
                keys: Keys::new(&shard_tag(namespace, index, usize::from(count))),
                hints: Hints::default(),
            })
            .collect()
    }
}

/// Each shard's share of `max_tasks` (rounded up, so that S shards admit at least `max_tasks`).
pub fn capacity_per_shard(max_tasks: u64, count: usize) -> u64 {
    max_tasks.div_ceil(count.max(1) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shard_is_always_zero_and_keeps_the_unsharded_names() {
        assert_eq!(shard_index("anything", 1), 0);
        let shards = Shard::all("tc", 1);
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].keys.live(), "{tc}:live");
    }

    #[test]
    fn shards_have_their_own_hash_tags_in_their_own_slot_ranges() {
        for count in [2usize, 3, 4, 6, 16, 256] {
            let shards = Shard::all("tc", count as u16);
            for (index, shard) in shards.iter().enumerate() {
                let tag = shard_tag("tc", index, count);
                assert!(tag.starts_with(&format!("tc:{index}")), "{tag}");
                assert_eq!(shard.keys.live(), format!("{{{tag}}}:live"));
                let slot = tag_slot(&tag);
                assert!(
                    (index * SLOTS / count..(index + 1) * SLOTS / count).contains(&slot),
                    "shard {index} of {count}: {tag} in slot {slot}"
                );
            }
        }
    }

    #[test]
    fn the_slot_is_redis_cluster_s() {
        // `CLUSTER KEYSLOT` of these keys on Redis 7 (the hash tag decides the slot).
        assert_eq!(tag_slot("foo"), 12_182);
        assert_eq!(tag_slot("tc"), 6_232);
        // Plain `tc:0` and `tc:1` share a half of the slot range (CRC16 is linear): the reason
        // tags are chosen by slot.
        assert_eq!(tag_slot("tc:0") < SLOTS / 2, tag_slot("tc:1") < SLOTS / 2);
    }

    #[test]
    fn ids_spread_over_every_shard_and_stay_put() {
        let mut counts = [0usize; 4];
        for n in 0..4_000 {
            let id = format!("task-{n}");
            let shard = shard_index(&id, 4);
            assert_eq!(shard, shard_index(&id, 4));
            counts[shard] += 1;
        }
        // Uniform would be 1,000 each; a fair hash stays well within a third of that.
        assert!(
            counts.iter().all(|&c| (700..1_300).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn known_ids_have_fixed_shards() {
        // Pinned (the first 8 bytes of SHA-256, big-endian, mod 5): every build of every
        // process must agree on where a task lives, or tasks written by one are lost to another.
        let shards: Vec<usize> = (0..8).map(|n| shard_index(&format!("t{n}"), 5)).collect();
        assert_eq!(shards, [3, 1, 0, 2, 2, 4, 1, 1]);
    }

    #[test]
    fn capacity_is_split_rounding_up() {
        assert_eq!(capacity_per_shard(10, 4), 3);
        assert_eq!(capacity_per_shard(8, 4), 2);
        assert_eq!(capacity_per_shard(5, 1), 5);
    }
}
