//! The Lua scripts, one per transition (see `shared/store/lua/`), with includes resolved at build
//! time. `redis::Script::invoke_async` sends EVALSHA and reloads on NOSCRIPT, so a Redis restart
//! or SCRIPT FLUSH costs one extra round trip, never an error. Every script runs inside the
//! replay guard (`replay.rs`).

use redis::Script;

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"))
    };
}

pub struct Scripts {
    pub create: Script,
    pub claim: Script,
    pub take: Script,
    pub renew: Script,
    pub activate: Script,
    pub hand_off: Script,
    pub hold: Script,
    pub record_receipt: Script,
    pub attach_receipt: Script,
    pub emit: Script,
    pub await_input: Script,
    pub resume: Script,
    pub cas: Script,
    pub finish_take: Script,
    pub due: Script,
    pub recover: Script,
    pub layout: Script,
    pub list_page: Script,
}

/// How the scripts publish task events and cancellations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PubSub {
    /// `PUBLISH`: one server (any Redis version) hears it on classic channels.
    Classic,
    /// `SPUBLISH` (Redis 7): on a Redis Cluster the message stays on the master that owns the
    /// channel's slot, which is the script's own shard's (channel names carry the shard's tag).
    Sharded,
}

/// One Lua source serves both flavours: the sharded variant only swaps the publish command,
/// so the scripts cannot drift apart (a Lua script cannot tell by itself whether it runs on
/// a cluster).
fn script(text: &str, pubsub: PubSub) -> Script {
    match pubsub {
        PubSub::Classic => guarded(text),
        PubSub::Sharded => guarded(&text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")),
    }
}

/// A script inside the replay guard ([`super::replay`]), as every script the store runs must
/// be: the store ends each call's keys and arguments with the guard's.
pub(crate) fn guarded(text: &str) -> Script {
    Script::new(&super::replay::wrap(text))
}

impl Scripts {
    pub fn load(pubsub: PubSub) -> Self {
        Scripts {
            create: script(lua!("create"), pubsub),
            claim: script(lua!("claim"), pubsub),
            take: script(lua!("take"), pubsub),
            renew: script(lua!("renew"), pubsub),
            activate: script(lua!("activate"), pubsub),
            hand_off: script(lua!("hand_off"), pubsub),
            hold: script(lua!("hold"), pubsub),
            record_receipt: script(lua!("record_receipt"), pubsub),
            attach_receipt: script(lua!("attach_receipt"), pubsub),
            emit: script(lua!("emit"), pubsub),
            await_input: script(lua!("await_input"), pubsub),
            resume: script(lua!("resume"), pubsub),
            cas: script(lua!("cas"), pubsub),
            finish_take: script(lua!("finish_take"), pubsub),
            due: script(lua!("due"), pubsub),
            recover: script(lua!("recover"), pubsub),
            layout: script(lua!("layout"), pubsub),
            list_page: script(lua!("list_page"), pubsub),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharded_flavour_publishes_only_on_sharded_channels() {
        let publishers = [
            "emit",
            "cas",
            "finish_take",
            "recover",
            "await_input",
            "resume",
        ];
        for name in publishers {
            let text = match name {
                "emit" => lua!("emit"),
                "cas" => lua!("cas"),
                "finish_take" => lua!("finish_take"),
                "recover" => lua!("recover"),
                "await_input" => lua!("await_input"),
                _ => lua!("resume"),
            };
            assert!(
                text.contains("redis.call('PUBLISH'"),
                "{name} publishes classically"
            );
            let sharded = text.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'");
            assert!(
                !sharded.contains("'PUBLISH'"),
                "{name} keeps a classic publish"
            );
            assert_ne!(
                script(text, PubSub::Classic).get_hash(),
                script(text, PubSub::Sharded).get_hash()
            );
        }
    }
}
