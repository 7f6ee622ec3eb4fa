//! The task store's Redis Functions library: every task-store script (`lua/*.lua` with a module
//! in `scripts/`) as one function, the helpers they include (`lua/includes/`) defined once.
//!
//! Why: a script sent by `EVALSHA` is a chunk that Redis runs anew on every call, so every
//! helper it includes (23 in `finish_take.lua`) is made again as a closure on every call, and
//! the garbage of those closures is collected; with its replay guard that came to 78,000
//! instructions and 9.7–13.5 µs for a call that finds nothing to do, against 1.3–1.7 µs for
//! `return 1` (docs/performance.md, "What a script call costs before its first task"). A
//! library is run once, at `FUNCTION LOAD`: its helpers are made there, and each `FCALL` runs
//! only its function's body. Same keys, same arguments, same replies, same atomic step:
//! [`super::invocation`] sends `FCALL` where `EVALSHA` went.
//!
//! The library is named by a digest of its text (`taskcluster_<16 hex>`, each function
//! `<library>_<script>`), as `EVALSHA` names a script by its SHA1: processes of one build share
//! it, processes of two builds each call their own, and none replaces another's. A server that
//! lost it (a restart without persistence, `FUNCTION FLUSH`, a new cluster master) gets it again
//! on the first call that finds it missing. A server without functions (before Redis 7) or an
//! ACL that refuses `FUNCTION LOAD` leaves the store on `EVALSHA`, as does
//! `REDIS_FUNCTIONS=off`.

use sha2::{Digest, Sha256};

use super::replay;
use super::scripts::PubSub;

/// The helpers of every script, each once (`build.rs`).
const INCLUDES: &str = include_str!(concat!(env!("OUT_DIR"), "/includes.lua"));

/// Per-call state a helper keeps at the library's top level, reset by the guard before every
/// call: `num_str`'s cache of formatted numbers (`lua/includes/num_str.lua`), which would
/// otherwise keep every number from every call.
const PER_CALL_RESET: &str = "num_strs = {}";

/// Where the library's name goes before it is known (it is the digest of the text).
const NAME_PLACEHOLDER: &str = "__LIBRARY__";

/// The library's text and name, for one pub/sub flavour.
#[derive(Debug)]
pub struct Library {
    name: String,
    code: String,
}

impl Library {
    /// The library of `scripts` (each script's name and its body without includes), publishing
    /// as `pubsub` says.
    pub fn build(scripts: &[(&str, &str)], pubsub: PubSub) -> Library {
        let mut code = format!("#!lua name={NAME_PLACEHOLDER}\n{INCLUDES}\n");
        code.push_str(&replay::library_guard(PER_CALL_RESET));
        for (script, body) in scripts {
            code.push_str(&format!(
                "redis.register_function('{NAME_PLACEHOLDER}_{script}', guarded(function(KEYS, ARGV)\n{body}\nend))\n"
            ));
        }
        if pubsub == PubSub::Sharded {
            code = code.replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'");
        }
        let digest = hex::encode(Sha256::digest(code.as_bytes()));
        let name = format!("taskcluster_{}", &digest[..16]);
        Library {
            code: code.replace(NAME_PLACEHOLDER, &name),
            name,
        }
    }

    /// The library's name (`taskcluster_<16 hex>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The function name of `script` in this library.
    pub fn function_name(&self, script: &str) -> String {
        format!("{}_{script}", self.name)
    }

    /// `FUNCTION LOAD`, without `REPLACE`: a library of this name is this text (the name is
    /// its digest), so one already there is kept as it is, and the server refuses before it
    /// compiles anything ([`already_loaded`]), where `REPLACE` would block it for the ~1.8 ms
    /// a compile of the whole library takes, at every process start. On a Redis Cluster the
    /// client sends it to every master.
    pub fn load_command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg(&self.code);
        cmd
    }

    /// The library's text.
    #[cfg(test)]
    pub(crate) fn code(&self) -> &str {
        &self.code
    }
}

/// Whether Redis refused a command with `ERR` and a message holding `text`.
pub fn refused_with(err: &redis::RedisError, text: &str) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && err.detail().is_some_and(|detail| detail.contains(text))
}

/// Whether a refused `FUNCTION LOAD` says that the library is loaded already (on a Redis
/// Cluster: on at least one master, the others having loaded it now).
pub fn already_loaded(err: &redis::RedisError) -> bool {
    refused_with(err, "already exists")
}

/// Whether a refused `FUNCTION LOAD` means that this server cannot run the library (no
/// functions before Redis 7, or an ACL without them), so that the store calls its scripts by
/// `EVALSHA` instead; any other refusal (a master failing over) leaves the library to load on
/// first call.
pub fn unsupported(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm)
        || refused_with(err, "unknown command")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_follows_the_text_and_the_flavour() {
        let one = Library::build(
            &[("a", "return redis.call('PUBLISH', KEYS[1], 'x')")],
            PubSub::Classic,
        );
        let same = Library::build(
            &[("a", "return redis.call('PUBLISH', KEYS[1], 'x')")],
            PubSub::Classic,
        );
        let sharded = Library::build(
            &[("a", "return redis.call('PUBLISH', KEYS[1], 'x')")],
            PubSub::Sharded,
        );
        let other = Library::build(&[("a", "return 2")], PubSub::Classic);
        assert_eq!(one.name(), same.name());
        assert_ne!(one.name(), sharded.name());
        assert_ne!(one.name(), other.name());
        assert!(
            one.code()
                .starts_with(&format!("#!lua name={}\n", one.name()))
        );
        assert!(
            one.code()
                .contains(&format!("'{}'", one.function_name("a")))
        );
        assert!(sharded.code().contains("redis.call('SPUBLISH'"));
        assert!(!sharded.code().contains("redis.call('PUBLISH'"));
        assert!(!one.code().contains(NAME_PLACEHOLDER));
    }

    #[test]
    fn the_guard_resets_what_the_helpers_keep_per_call() {
        assert!(
            INCLUDES.contains("local num_strs = {}"),
            "num_str.lua keeps its cache in num_strs"
        );
        let library = Library::build(&[], PubSub::Classic);
        assert!(library.code().contains(PER_CALL_RESET));
    }
}
