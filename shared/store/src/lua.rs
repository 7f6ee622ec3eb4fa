//! [`lua_script!`]: how every Lua script of the store is named, once, in the Rust module that
//! holds its contract and call (`redis/scripts/renew.rs` for `lua/renew.lua`,
//! `credentials/redis/claim.rs` for `lua/credential_claim.lua`, ...).

/// `lua_script!("name")` defines, in the module that calls it, `NAME` (the span name every call
/// records) and `SOURCE` (`lua/name.lua`, its includes resolved by `build.rs`), from one
/// literal, so the source a call runs and the name it is traced under cannot drift apart:
///
/// - `lua_script!("name")`: a task-store script (`redis/scripts/`), which the store loads once
///   per pub/sub flavour (PUBLISH or SPUBLISH) from `SOURCE` (`redis::scripts::Scripts`), and
///   whose `BODY` (the script without its includes) is one function of the store's Redis
///   Functions library (`redis::functions`);
/// - `lua_script!(static "name")`: a namespace-wide script (credentials, idempotency, registry,
///   rate limits), which publishes nothing: also `SCRIPT`, built once per process on first use
///   (its text never changes), inside the replay guard that every store script runs in.
macro_rules! lua_script {
    ($name:literal) => {
        $crate::lua::lua_script!(source $name);

        /// The script without its includes (`build.rs`): its function's body in the library.
        pub(crate) const BODY: &str =
            include_str!(concat!(env!("OUT_DIR"), "/", $name, ".body.lua"));
    };
    (source $name:literal) => {
        /// The script's name: its file in `lua/`, and its spans' name.
        pub(crate) const NAME: &str = $name;

        /// The script's text with its includes resolved (`build.rs`).
        pub(crate) const SOURCE: &str = include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"));
    };
    (static $name:literal) => {
        $crate::lua::lua_script!(source $name);

        /// The script, inside the replay guard.
        static SCRIPT: ::std::sync::LazyLock<$crate::redis::StoreScript> =
            ::std::sync::LazyLock::new(|| $crate::redis::guarded_script(SOURCE));
    };
}

pub(crate) use lua_script;
