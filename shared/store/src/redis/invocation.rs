//! [`StoreScript`] and [`ScriptCall`]: how the store calls a Lua script, by `FCALL` of its
//! function in the store's Redis Functions library ([`super::functions`]) where the server has
//! it loaded, else by `EVALSHA` of its text.
//!
//! Why not `redis::Script`: it only sends `EVALSHA`, and its invocation keeps its keys and
//! arguments to itself, so a call cannot be sent as `FCALL` instead. The two are the same call
//! to Redis (same keys, same arguments, same reply, one atomic step in the keys' slot); a
//! function skips what `EVALSHA` pays on every call before its script's first command: making
//! every helper's closure anew, and the garbage that leaves (docs/performance.md, "What a
//! script call costs").

use std::sync::Arc;

use redis::{Cmd, FromRedisValue, RedisError, RedisResult, ToRedisArgs};

use super::functions::{self, Library};

/// A script the store calls: its text (for `EVALSHA`), and, for a task-store script in a
/// library the server holds, its function's name.
pub struct StoreScript {
    /// The text, for `SCRIPT LOAD` after `NOSCRIPT`.
    code: String,
    /// Its SHA1, for `EVALSHA`.
    hash: String,
    function: Option<Function>,
}

/// A script's function in a loaded library.
struct Function {
    name: String,
    library: Arc<Library>,
}

impl StoreScript {
    /// A script called by `EVALSHA` of `text`.
    pub fn eval(text: &str) -> Self {
        Self::function(text, "", None)
    }

    /// A script called by `FCALL` of its function `script` in `library` (`EVALSHA` of `text`
    /// when `library` is `None`: the server has no functions, or the store was told not to use
    /// them).
    pub fn function(text: &str, script: &str, library: Option<&Arc<Library>>) -> Self {
        StoreScript {
            code: text.to_owned(),
            hash: redis::Script::new(text).get_hash().to_owned(),
            function: library.map(|library| Function {
                name: library.function_name(script),
                library: library.clone(),
            }),
        }
    }

    /// The SHA1 its text is called by with `EVALSHA`.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// What loads it again on a server that lost it: its library, or its text. Built only
    /// then: it copies the whole text (the library's is about 95 KB).
    fn reload_command(&self) -> Cmd {
        match &self.function {
            Some(function) => function.library.load_command(),
            None => {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(&self.code);
                load
            }
        }
    }

    /// An invocation without keys or arguments yet.
    pub fn prepare_invoke(&self) -> ScriptCall<'_> {
        ScriptCall {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// One call of a [`StoreScript`]: its keys (`KEYS`) and arguments (`ARGV`).
pub struct ScriptCall<'a> {
    script: &'a StoreScript,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl std::fmt::Debug for ScriptCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Keys and arguments may carry credentials: only their counts are shown.
        f.debug_struct("ScriptCall")
            .field("keys", &self.keys.len())
            .field("args", &self.args.len())
            .finish()
    }
}

impl ScriptCall<'_> {
    /// Adds an argument (`ARGV[i]`).
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Adds a key (`KEYS[i]`).
    pub fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Runs the call: `FCALL`, loading the library again when the server has lost it (a
    /// restart without persistence, `FUNCTION FLUSH`, a new cluster node); or `EVALSHA`,
    /// loading the script on `NOSCRIPT`. Either costs one extra round trip, never an error.
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        let call = match &self.script.function {
            Some(function) => self.command("FCALL", function.name.as_bytes()),
            None => self.command("EVALSHA", self.script.hash.as_bytes()),
        };
        match call.query_async(con).await {
            Err(err) if missing(&err) => {
                match self.script.reload_command().exec_async(con).await {
                    // Another caller loaded it in between.
                    Err(err) if !functions::already_loaded(&err) => return Err(err),
                    _ => {}
                }
                call.query_async(con).await
            }
            other => other,
        }
    }

    /// `EVALSHA sha` or `FCALL name`, then the key count, the keys and the arguments.
    fn command(&self, verb: &str, target: &[u8]) -> Cmd {
        let mut cmd = Cmd::with_capacity(
            3 + self.keys.len() + self.args.len(),
            self.keys
                .iter()
                .chain(&self.args)
                .map(Vec::len)
                .sum::<usize>()
                + 64,
        );
        cmd.arg(verb)
            .arg(target)
            .arg(self.keys.len())
            .arg(&*self.keys)
            .arg(&*self.args);
        cmd
    }
}

/// Whether Redis answered that it does not hold what was called: the script (`NOSCRIPT`) or
/// the function (`ERR Function not found`).
fn missing(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || functions::refused_with(err, "Function not found")
}
