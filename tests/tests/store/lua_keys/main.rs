//! Every Lua script of the store declares every key it touches (`docs/store.md`, Redis
//! layout): what a Redis Cluster needs to route a script call, and what keeps a script correct
//! whatever the key scheme. A node refuses only keys of another slot, so a script that reaches
//! an undeclared key of its own hash tag works until the key scheme changes; nothing in Redis
//! catches it. This test does, on a real redis-server: a MONITOR connection records every
//! command while the whole store conformance suite and a workload of every other script
//! (`workloads.rs`) run; each script call's own commands are checked against the keys it
//! declared (`audit.rs`).
//!
//! It cannot pass by accident: every script file in `shared/store/lua/` must have run (a
//! script no workload calls fails the test, so a new script needs a workload), and each
//! recording opens with a probe script that touches a key it does not declare, which the check
//! must report (so a check that sees nothing fails). Run on one namespace and on a namespace
//! split in three shards.

#[path = "../conformance/all_tests.rs"]
mod all_tests;
#[path = "../conformance/capacity.rs"]
mod capacity;
#[path = "../conformance/failed.rs"]
mod failed;
#[path = "../conformance/leases.rs"]
mod leases;
#[path = "../conformance/lifecycle.rs"]
mod lifecycle;
#[path = "../conformance/list.rs"]
mod list;
#[path = "../conformance/property.rs"]
mod property;
#[path = "../conformance/recovery.rs"]
mod recovery;
#[path = "../conformance/retries.rs"]
mod retries;
#[path = "../conformance/settlement.rs"]
mod settlement;
#[path = "../conformance/subscriptions.rs"]
mod subscriptions;
#[path = "../conformance/support.rs"]
mod support;
#[path = "../conformance/take_finish.rs"]
mod take_finish;
#[path = "../conformance/turns.rs"]
mod turns;

mod audit;
mod monitor;
mod workloads;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use harness::redis_server::RedisServer;
use store::TaskStore;

use crate::audit::{Order, Violation};
use crate::monitor::Monitor;
use crate::support::{BoxError, Harness, StoreCfg, TestResult};

/// The conformance suite's stores, each on a namespace of its own on the monitored server.
struct Monitored {
    url: String,
    shards: u16,
}

impl Harness for Monitored {
    fn shards(&self) -> usize {
        usize::from(self.shards)
    }

    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let mut config = store::RedisStoreConfig::new(self.url.clone());
        config.namespace = format!("t{}", protocol::token::AccessToken::generate().expose());
        config.shards = self.shards;
        config.max_tasks = cfg.max_tasks;
        config.retention = cfg.retention;
        config.pool_size = 8;
        Ok(Arc::new(store::RedisStore::connect(config).await?))
    }
}

type Boxed<'a> = Pin<Box<dyn Future<Output = (&'static str, TestResult)> + Send + 'a>>;

/// Every conformance test whose name `select` keeps, as named futures on harness `h`.
macro_rules! every_test {
    ($h:expr, $select:expr; $($theme:ident { $($test:ident),* $(,)? })*) => {{
        let mut tests: Vec<Boxed<'_>> = Vec::new();
        $($(
            let name = concat!(stringify!($theme), "::", stringify!($test));
            if $select(name) {
                tests.push(Box::pin(async move { (name, $theme::$test($h).await) }));
            }
        )*)*
        tests
    }};
}

/// The conformance suite, a few tests at a time (the race tests start 50 callers each). The
/// suite's short deadlines (30 ms) can be missed on a loaded machine with every command
/// monitored, so a test that fails here runs again alone before it counts (the suite itself
/// holds the store to its contract: here it is the workload).
async fn conformance(h: &Monitored) -> TestResult {
    let tests = all_tests::conformance_list!(every_test!(h, |_| true;));
    let failed: Vec<&'static str> = futures::stream::iter(tests)
        .buffer_unordered(4)
        .filter_map(|(name, result)| async move { result.is_err().then_some(name) })
        .collect()
        .await;
    let mut failures = Vec::new();
    for test in all_tests::conformance_list!(every_test!(h, |name| failed.contains(&name);)) {
        if let (name, Err(err)) = test.await {
            failures.push(format!("{name}: {err}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("conformance tests failed under the monitor: {failures:#?}").into())
    }
}

/// The top-level scripts of `shared/store/lua/`, by file stem; each file must open with its
/// own name (`-- take: ...`), which is how the check tells scripts apart.
fn scripts() -> Result<BTreeSet<String>, BoxError> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/store/lua");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().and_then(|ext| ext.to_str()) != Some("lua") {
            continue;
        }
        let stem = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .ok_or("a script name")?
            .to_owned();
        let text = std::fs::read_to_string(&path)?;
        if !text.starts_with(&format!("-- {stem}: ")) {
            return Err(format!("{} does not open with `-- {stem}: `", path.display()).into());
        }
        names.insert(stem);
    }
    if names.len() < 30 {
        return Err(format!("only {} scripts found in {}", names.len(), dir.display()).into());
    }
    Ok(names)
}

/// Runs `workload` on a monitored server and checks every script call it made. Returns the
/// calls per script, and fails on an undeclared key.
async fn audited<F, Fut>(workload: F) -> Result<std::collections::BTreeMap<String, usize>, BoxError>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = TestResult>,
{
    let known = scripts()?;
    let server = RedisServer::start()?;
    let monitor = Monitor::start(server.port())?;
    let mut conn = server.client().await?;
    let marker = format!(
        "lua-keys-probe-{}",
        protocol::token::AccessToken::generate().expose()
    );
    let undeclared = format!("{marker}-undeclared");
    let _: redis::Value = redis::cmd("EVAL")
        .arg(audit::PROBE)
        .arg(1)
        .arg(&marker)
        .arg(&undeclared)
        .query_async(&mut conn)
        .await?;
    let outcome = workload(server.url()).await;
    let lines = monitor.finish()?;
    outcome?;
    let order = Order::probe(&lines, &marker)?;
    let runs = audit::runs(&lines, order, &known)?;
    let mut report = audit::check(&mut conn, &runs).await?;
    // The probe's undeclared key must be caught, and is the only one allowed.
    let probe = Violation {
        script: "(unnamed)".into(),
        command: "EXISTS".into(),
        key: undeclared,
        tag_declared: false,
    };
    if !report.violations.remove(&probe) {
        return Err(format!(
            "the check missed the probe's undeclared key: {:?}",
            report.violations
        )
        .into());
    }
    report.violations.retain(|v| !popped(v));
    if !report.violations.is_empty() {
        // One line per script, command and kind of key (`{tag}:task:*`), with one example.
        let mut found: std::collections::BTreeMap<String, &str> = Default::default();
        for v in &report.violations {
            let line = format!("  {}: {} {}", v.script, v.command, shape(&v.key));
            found.entry(line).or_insert(&v.key);
        }
        let found: Vec<String> = found
            .into_iter()
            .map(|(line, key)| format!("{line} (e.g. {key})"))
            .collect();
        return Err(format!(
            "scripts touched keys they do not declare:\n{}",
            found.join("\n")
        )
        .into());
    }
    Ok(report.runs)
}

/// The keys no caller can declare: those of a task whose id the script itself takes from an
/// index it declared (a worker's take pops its tasks from the queues, so that no two workers
/// contend for a queue head; the push claim reads the owner and address of each due task; a
/// listing and a creation drop retained tasks whose retention ended or that the retained bound
/// evicts, oldest first, with their owner's index entry and their push configs, cursors and
/// outbox). Knowing them first would take a read, and a
/// race, before every such call (docs/store.md, Redis layout). Each is allowed for its script
/// and kind of key only, and only in the hash tag (so the slot) of a key the call declared.
const POPPED: &[(&str, &str)] = &[
    ("take", "task"),
    ("finish_take", "task"),
    ("push_claim", "task"),
    ("list_page", "task"),
    ("list_page", "events"),
    ("list_page", "owner"),
    ("list_page", "push"),
    ("list_page", "push-cur"),
    ("list_page", "push-out"),
    ("create", "task"),
    ("create", "events"),
    ("create", "owner"),
    ("create", "push"),
    ("create", "push-cur"),
    ("create", "push-out"),
];

/// Whether a violation is one of [`POPPED`].
fn popped(v: &Violation) -> bool {
    let kind = shape(&v.key);
    v.tag_declared
        && POPPED
            .iter()
            .any(|(script, popped)| *script == v.script && kind == format!("{{tag}}:{popped}:*"))
}

/// A key's kind: `{tag}:task:*` for `{t5c…:1.2}:task:abc`.
fn shape(key: &str) -> String {
    let rest = key.split_once("}:").map_or(key, |(_, rest)| rest);
    match rest.split_once(':') {
        Some((kind, _)) => format!("{{tag}}:{kind}:*"),
        None => format!("{{tag}}:{rest}"),
    }
}

/// The conformance suite and every other script's workload on one server, `shards` shards.
async fn every_script_declares_its_keys(shards: u16) -> TestResult {
    let runs = audited(|url| async move {
        // Boxed: the whole suite's future is too large to build on a test thread's stack in
        // a debug build.
        Box::pin(conformance(&Monitored {
            url: url.clone(),
            shards,
        }))
        .await?;
        Box::pin(workloads::run(&url, shards)).await
    })
    .await?;
    let unseen: Vec<String> = scripts()?
        .into_iter()
        .filter(|name| !runs.contains_key(name))
        .collect();
    assert!(
        unseen.is_empty(),
        "scripts that no workload ran (give each a workload): {unseen:?}; ran: {runs:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_script_declares_every_key_it_touches() -> TestResult {
    every_script_declares_its_keys(1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_script_declares_every_key_it_touches_when_sharded() -> TestResult {
    every_script_declares_its_keys(3).await
}

/// The check itself: a store script (named by its header, called by EVALSHA after SCRIPT
/// LOAD, as the store calls them) that touches an undeclared key is reported under its name,
/// and its declared keys are not; a key of a popped task ([`POPPED`]) outside the slot of the
/// call's declared keys is reported too.
#[tokio::test]
async fn the_check_reports_an_undeclared_key_under_its_scripts_name() -> TestResult {
    let result = audited(|url| async move {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let cas = redis::Script::new(
            "-- cas: not the real one\n\
             redis.call('SET', KEYS[1], 'x')\n\
             redis.call('HSET', KEYS[1] .. ':derived', 'f', ARGV[1])\n\
             return 1",
        );
        let _: i64 = cas
            .key("{t}:task:1")
            .arg("v")
            .invoke_async(&mut conn)
            .await?;
        let take = redis::Script::new(
            "-- take: not the real one\n\
             redis.call('ZCARD', KEYS[1])\n\
             redis.call('HSET', ARGV[1], 'f', 'v')\n\
             return 1",
        );
        let _: i64 = take
            .key("{t}:queue:echo")
            .arg("{u}:task:2")
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    })
    .await;
    let Err(err) = result else {
        return Err("an undeclared key passed the check".into());
    };
    let text = err.to_string();
    assert!(
        text.contains("cas: HSET {tag}:task:* (e.g. {t}:task:1:derived)")
            && text.contains("take: HSET {tag}:task:* (e.g. {u}:task:2)")
            && !text.contains("cas: SET ")
            && !text.contains("take: ZCARD"),
        "{text}"
    );
    Ok(())
}
