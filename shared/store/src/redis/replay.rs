//! The replay guard: a script call that the Redis Cluster client sends twice runs once.
//!
//! redis-rs's cluster client sends a command again when its connection drops or its reply
//! times out. That is right for a read, and wrong for a script that already ran: a master
//! SIGKILLed after running a create, but before its reply left, has replicated the create to
//! the replica that takes over, and the resend there finds the task and answers DUPLICATE (a
//! CI chaos run saw exactly this: a 409 for a task that had been created). The same resend
//! would take tasks twice (their first leases lost until recovery, one attempt burnt), or
//! answer a cancel that worked with 409. Nothing in the client tells a resend apart from the
//! first send, and an option to stop resending would stop following MOVED/ASK too.
//!
//! So on a cluster every script call carries a reply key of its own, `{tag}:rp:<random id>`, in
//! the slot it writes. The guard, wrapped around every script ([`wrap`]), answers a call whose
//! key exists with the reply stored there; otherwise it runs the script and stores its reply
//! (MessagePack) under the key. Both happen in the script's one atomic step and replicate with
//! the script's own writes: a replica that has the writes has the reply too.
//!
//! A reply key lives until its caller has the reply (the caller then queues it, and its next
//! call in that slot deletes it, so Redis holds only the replies of calls in flight), or at
//! most [`REPLAY_TTL`], which outlasts [`CALL_DEADLINE`]: the bound after which the caller gives
//! up on a call, and with it the client stops resending it.
//!
//! One server needs none of this (the store's pool never resends): its calls carry an empty
//! key and the guard steps aside.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::invocation::ScriptCall;

/// How long the store waits for one script call on a cluster, resends included, before it
/// reports the store unavailable: long enough to ride out a failover (a few seconds past
/// `cluster-node-timeout`, 15 s by default).
pub const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// How long a reply key outlives its call at most: longer than [`CALL_DEADLINE`], so every
/// resend of a call finds it.
pub const REPLAY_TTL: Duration = Duration::from_secs(90);

/// The most reply keys one call deletes on the way.
const FORGET_PER_CALL: usize = 64;

/// Wraps a script's text in the guard. Calls then end their keys with the guard's keys (reply
/// keys to delete, then the call's own reply key or `''`) and their arguments with the count
/// of keys to delete; the guard takes them off before the script sees `KEYS` and `ARGV`. The
/// guard is the one the library's functions run in ([`library_guard`]), with no per-call
/// state to reset: a script's text makes its helpers anew on every call.
pub fn wrap(body: &str) -> String {
    format!(
        "{guard}return guarded(function(KEYS, ARGV)\n{body}\nend)(KEYS, ARGV)\n",
        guard = library_guard("")
    )
}

/// The guard as a Lua helper: `guarded(body)` returns a function of `KEYS` and `ARGV` that
/// takes the guard's keys and argument off, answers a resent call from its reply key or runs
/// `body(KEYS, ARGV)` and stores its reply there. The store's Redis Functions library
/// (`functions.rs`) registers each script as such a function; [`wrap`] calls one at once.
/// `reset` runs first on every call: the library's per-call state (`num_str`'s cache), which
/// a library's helpers would otherwise keep from one call to the next.
pub fn library_guard(reset: &str) -> String {
    format!(
        "-- replay guard (shared/store/src/redis/replay.rs)
local function guarded(body)
  return function(KEYS, ARGV)
    {reset}
    local replay_key = table.remove(KEYS)
    local forget = tonumber(table.remove(ARGV))
    for _ = 1, forget do
      redis.call('DEL', table.remove(KEYS))
    end
    if replay_key ~= '' then
      local stored = redis.call('GET', replay_key)
      if stored then
        return cmsgpack.unpack(stored)[1]
      end
    end
    local reply = body(KEYS, ARGV)
    if replay_key ~= '' then
      redis.call('SET', replay_key, cmsgpack.pack({{reply}}), 'PX', {ttl})
    end
    return reply
  end
end
",
        ttl = REPLAY_TTL.as_millis()
    )
}

/// The reply key of one call on a cluster, to hand back to [`Replays::done`] once its reply is
/// in.
#[derive(Debug)]
pub struct ReplayKey {
    tag: String,
    key: String,
}

/// Ends `invocation` with the guard's keys and argument for a call on one server: no reply key,
/// nothing to delete.
pub fn attach_none(invocation: &mut ScriptCall<'_>) {
    invocation.key("").arg(0);
}

/// Reply keys whose callers have their replies, by slot tag, waiting to be deleted by the next
/// call in that slot.
#[derive(Default)]
pub struct Replays {
    answered: Mutex<HashMap<String, Vec<String>>>,
}

impl Replays {
    /// Ends `invocation` with the guard's keys and argument for a call in the slot of `tag`
    /// on a cluster. The returned key goes to [`Self::done`] when the call has its reply, or,
    /// with the keys the call was to delete, to [`Self::failed`] when it has not.
    pub fn attach(&self, invocation: &mut ScriptCall<'_>, tag: &str) -> (ReplayKey, Vec<String>) {
        let forget = self.take_answered(tag);
        for key in &forget {
            invocation.key(key);
        }
        let key = format!("{tag}:rp:{:016x}", rand::random::<u64>());
        invocation.key(&key).arg(forget.len());
        let key = ReplayKey {
            tag: tag.to_owned(),
            key,
        };
        (key, forget)
    }

    /// The call of `key` has its reply: its reply key can go.
    pub fn done(&self, key: ReplayKey) {
        self.queue(&key.tag, std::iter::once(key.key));
    }

    /// The call of `key` failed: the keys it was to delete may still be there, so the next
    /// call deletes them. Its own key stays until [`REPLAY_TTL`]: a resend may still be on its
    /// way.
    pub fn failed(&self, key: &ReplayKey, forget: Vec<String>) {
        self.queue(&key.tag, forget);
    }

    fn take_answered(&self, tag: &str) -> Vec<String> {
        let mut answered = self
            .answered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match answered.get_mut(tag) {
            Some(keys) if keys.len() > FORGET_PER_CALL => {
                keys.split_off(keys.len() - FORGET_PER_CALL)
            }
            Some(keys) => std::mem::take(keys),
            None => Vec::new(),
        }
    }

    fn queue(&self, tag: &str, keys: impl IntoIterator<Item = String>) {
        let mut answered = self
            .answered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        answered.entry(tag.to_owned()).or_default().extend(keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_deletes_at_most_its_share_of_answered_keys() {
        let replays = Replays::default();
        for n in 0..FORGET_PER_CALL + 3 {
            replays.done(ReplayKey {
                tag: "{t}".into(),
                key: format!("{{t}}:rp:{n}"),
            });
        }
        let script = crate::redis::StoreScript::eval("return 1");
        let mut invocation = script.prepare_invoke();
        let (_, first) = replays.attach(&mut invocation, "{t}");
        assert_eq!(first.len(), FORGET_PER_CALL);
        let (_, second) = replays.attach(&mut invocation, "{t}");
        assert_eq!(second.len(), 3);
        let (key, third) = replays.attach(&mut invocation, "{t}");
        assert!(third.is_empty());
        replays.failed(&key, second);
        let (_, again) = replays.attach(&mut invocation, "{t}");
        assert_eq!(
            again.len(),
            3,
            "a failed call's deletions are left to the next call"
        );
        assert!(replays.attach(&mut invocation, "{other}").1.is_empty());
    }

    #[test]
    fn the_guard_keeps_the_script_whole() {
        let wrapped = wrap("return {1, 2}");
        assert!(wrapped.contains("\nreturn {1, 2}\n"));
        assert!(wrapped.contains(&format!("'PX', {}", REPLAY_TTL.as_millis())));
    }
}
