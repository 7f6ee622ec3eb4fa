//! The task store's scripts as one Redis Functions library (`shared/store/src/redis/functions.rs`)
//! on a real redis-server: the store calls them by `FCALL`; a library the server lost
//! (`FUNCTION FLUSH`, a restart without persistence) is loaded again by the first call that
//! misses it; a library already there is kept, not compiled again; another build's library on
//! the same server is left alone; and a store told not to, or one whose ACL user may not load
//! functions, calls the same scripts by `EVALSHA`.

use std::collections::HashMap;

use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{queued_task, run_one_echo, unbounded_store_config};
use protocol::token::AccessToken;
use redis::Value;
use store::{RedisStore, StoreError, TaskStore};

async fn store(url: String, functions: bool) -> Result<RedisStore, StoreError> {
    let mut config = unbounded_store_config(url);
    config.functions = functions;
    RedisStore::connect(config).await
}

/// Creates `n` tasks of `echo` and runs each to completion; the store then holds none live.
async fn create_and_run(store: &RedisStore, prefix: &str, n: usize) -> TestResult {
    let owner = AccessToken::generate().owner_hash();
    for i in 0..n {
        store
            .create(queued_task(&format!("{prefix}-{i}"), &owner, "echo"))
            .await?;
    }
    for _ in 0..n {
        run_one_echo(store).await?;
    }
    assert_eq!(store.live_count().await?, 0);
    Ok(())
}

/// The libraries loaded on the server: name -> its functions' names.
async fn libraries(server: &RedisServer) -> TestResult<HashMap<String, Vec<String>>> {
    let mut conn = server.client().await?;
    let listed: Vec<Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut conn)
        .await?;
    let mut out = HashMap::new();
    for library in listed {
        let fields: HashMap<String, Value> = redis::from_redis_value(library)?;
        let name: String =
            redis::from_redis_value_ref(fields.get("library_name").ok_or("no name")?)?;
        let functions: Vec<HashMap<String, Value>> =
            redis::from_redis_value_ref(fields.get("functions").ok_or("no functions")?)?;
        let mut names = Vec::new();
        for function in functions {
            names.push(redis::from_redis_value_ref::<String>(
                function.get("name").ok_or("a function without a name")?,
            )?);
        }
        out.insert(name, names);
    }
    Ok(out)
}

/// The one library of the store (`taskcluster_…`) on the server, other than `except`.
async fn store_library(server: &RedisServer, except: &str) -> TestResult<(String, Vec<String>)> {
    let found: Vec<(String, Vec<String>)> = libraries(server)
        .await?
        .into_iter()
        .filter(|(name, _)| name.starts_with("taskcluster_") && name != except)
        .collect();
    assert_eq!(found.len(), 1, "one store library: {found:?}");
    Ok(found.into_iter().next().ok_or("no store library")?)
}

/// No library on the server, and the scripts (layout check, creates, takes, activations,
/// finishes) called by EVALSHA alone since the last stats reset.
async fn assert_evalsha_only(server: &RedisServer) -> TestResult {
    assert!(libraries(server).await?.is_empty());
    let stats = server.info_commandstats().await?;
    assert!(stats.get("evalsha").copied().unwrap_or(0) >= 5, "{stats:?}");
    assert_eq!(stats.get("fcall"), None, "{stats:?}");
    Ok(())
}

#[tokio::test]
async fn the_store_calls_its_scripts_as_functions_of_one_library() -> TestResult {
    let server = RedisServer::start()?;
    server.reset_commandstats().await?;
    let store = store(server.url(), true).await?;
    create_and_run(&store, "fn", 3).await?;

    let (name, functions) = store_library(&server, "").await?;
    for script in [
        "create",
        "take",
        "activate",
        "cas",
        "finish_take",
        "renew",
        "recover",
    ] {
        let function = format!("{name}_{script}");
        assert!(functions.contains(&function), "{function} in {functions:?}");
    }
    let stats = server.info_commandstats().await?;
    // The layout check, 3 creates, 3 takes, 3 activations and 3 finishes, some in shared calls.
    assert!(stats.get("fcall").copied().unwrap_or(0) >= 5, "{stats:?}");
    assert_eq!(stats.get("evalsha"), None, "{stats:?}");
    assert_eq!(stats.get("eval"), None, "{stats:?}");
    Ok(())
}

#[tokio::test]
async fn a_library_the_server_lost_is_loaded_again() -> TestResult {
    // No AOF, no RDB: a restart comes back without the library or any task.
    let mut server = RedisServer::start()?;
    let store = store(server.url(), true).await?;
    create_and_run(&store, "before", 2).await?;
    let (name, _) = store_library(&server, "").await?;

    let mut conn = server.client().await?;
    let () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;
    assert!(libraries(&server).await?.is_empty());
    create_and_run(&store, "flushed", 2).await?;
    assert_eq!(store_library(&server, "").await?.0, name);

    server.kill()?;
    server.restart()?;
    assert!(libraries(&server).await?.is_empty());
    // The first call may meet a connection that broke with the restart (and purges the pool).
    let owner = AccessToken::generate().owner_hash();
    let mut created = false;
    for attempt in 0..3 {
        match store
            .create(queued_task(&format!("after-{attempt}"), &owner, "echo"))
            .await
        {
            Ok(_) => {
                created = true;
                break;
            }
            Err(StoreError::Unavailable(_)) => continue,
            Err(err) => return Err(err.into()),
        }
    }
    assert!(created, "the store answers after the restart");
    run_one_echo(&store).await?;
    assert_eq!(store.live_count().await?, 0);
    assert_eq!(store_library(&server, "").await?.0, name);
    Ok(())
}

/// The `INFO commandstats` line of `FUNCTION LOAD`.
async fn function_load_stats(server: &RedisServer) -> TestResult<String> {
    let mut conn = server.client().await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await?;
    let line = info
        .lines()
        .find(|line| line.starts_with("cmdstat_function|load:"))
        .ok_or("no FUNCTION LOAD was sent")?;
    Ok(line.trim_end().to_owned())
}

#[tokio::test]
async fn a_library_already_loaded_is_kept_not_compiled_again() -> TestResult {
    let server = RedisServer::start()?;
    let first = store(server.url(), true).await?;
    let (name, _) = store_library(&server, "").await?;
    server.reset_commandstats().await?;
    // A second process of the same build: its load is refused as already there (before the
    // server compiles anything), and both call the one library.
    let second = store(server.url(), true).await?;
    create_and_run(&second, "second", 2).await?;
    create_and_run(&first, "first", 2).await?;
    let stats = function_load_stats(&server).await?;
    assert!(
        stats.contains(":calls=1,") && stats.contains("failed_calls=1"),
        "{stats}"
    );
    assert_eq!(store_library(&server, "").await?.0, name);
    Ok(())
}

#[tokio::test]
async fn another_builds_library_is_left_alone() -> TestResult {
    let server = RedisServer::start()?;
    let other = "taskcluster_0123456789abcdef";
    let mut conn = server.client().await?;
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(format!(
            "#!lua name={other}\nredis.register_function('{other}_create', function() return 'other build' end)"
        ))
        .query_async(&mut conn)
        .await?;

    let store = store(server.url(), true).await?;
    create_and_run(&store, "shared", 2).await?;
    store_library(&server, other).await?;
    let answer: String = redis::cmd("FCALL")
        .arg(format!("{other}_create"))
        .arg(0)
        .query_async(&mut conn)
        .await?;
    assert_eq!(answer, "other build");
    Ok(())
}

#[tokio::test]
async fn turned_off_the_store_calls_its_scripts_by_evalsha() -> TestResult {
    let server = RedisServer::start()?;
    server.reset_commandstats().await?;
    let store = store(server.url(), false).await?;
    create_and_run(&store, "off", 3).await?;
    assert_evalsha_only(&server).await
}

#[tokio::test]
async fn a_user_that_may_not_load_functions_gets_evalsha() -> TestResult {
    let server = RedisServer::start()?;
    let mut conn = server.client().await?;
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("tasks")
        .arg("on")
        .arg(">tasks-password")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-function")
        .arg("-fcall")
        .arg("-fcall_ro")
        .query_async(&mut conn)
        .await?;
    server.reset_commandstats().await?;
    let url = format!("redis://tasks:tasks-password@127.0.0.1:{}", server.port());
    let store = store(url, true).await?;
    create_and_run(&store, "acl", 3).await?;
    assert_evalsha_only(&server).await
}
