//! Tests of the private `redis-server` harness itself.

use std::net::{Ipv4Addr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use harness::TestResult;
use harness::redis_server::{HarnessError, RedisOptions, RedisServer};
use redis::AsyncCommands;

/// Whether something accepts TCP connections on `127.0.0.1:port`.
fn port_answers(port: u16) -> bool {
    TcpStream::connect_timeout(
        &(Ipv4Addr::LOCALHOST, port).into(),
        Duration::from_millis(500),
    )
    .is_ok()
}

#[tokio::test]
async fn parallel_servers_are_isolated() -> TestResult {
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(RedisServer::start);
        let b = s.spawn(RedisServer::start);
        (a.join(), b.join())
    });
    let (Ok(a), Ok(b)) = (a, b) else {
        return Err("a start thread panicked".into());
    };
    let (a, b) = (a?, b?);

    assert_ne!(a.port(), b.port());
    assert_ne!(a.port(), 6379);
    assert_ne!(b.port(), 6379);
    assert_ne!(a.dir(), b.dir());
    assert_eq!(a.url(), format!("redis://127.0.0.1:{}/", a.port()));

    let mut ca = a.client().await?;
    let mut cb = b.client().await?;
    let () = ca.set("only-in-a", "1").await?;
    let () = cb.set("only-in-b", "2").await?;
    let a_sees_b: Option<String> = ca.get("only-in-b").await?;
    let b_sees_a: Option<String> = cb.get("only-in-a").await?;
    assert_eq!(a_sees_b, None);
    assert_eq!(b_sees_a, None);
    let own: Option<String> = ca.get("only-in-a").await?;
    assert_eq!(own.as_deref(), Some("1"));
    Ok(())
}

#[tokio::test]
async fn aof_survives_restart_and_kill() -> TestResult {
    let mut server = RedisServer::start_with(RedisOptions::default().with_aof(true))?;
    let port = server.port();
    let first_pid = server.pid();

    let mut conn = server.client().await?;
    let () = conn.set("durable", "yes").await?;
    drop(conn);

    server.restart()?;
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), first_pid);
    let mut conn = server.client().await?;
    let value: Option<String> = conn.get("durable").await?;
    assert_eq!(value.as_deref(), Some("yes"));

    // appendfsync always: an acknowledged write survives a crash too.
    let () = conn.set("after-restart", "also").await?;
    drop(conn);
    server.kill()?;
    assert!(!server.is_running());
    assert_eq!(server.pid(), None);
    server.restart()?;
    let mut conn = server.client().await?;
    let value: Option<String> = conn.get("after-restart").await?;
    assert_eq!(value.as_deref(), Some("also"));
    Ok(())
}

#[tokio::test]
async fn without_aof_restart_starts_empty() -> TestResult {
    let mut server = RedisServer::start()?;
    let mut conn = server.client().await?;
    let () = conn.set("volatile", "1").await?;
    drop(conn);
    server.restart()?;
    let mut conn = server.client().await?;
    let value: Option<String> = conn.get("volatile").await?;
    assert_eq!(value, None);
    Ok(())
}

#[test]
fn drop_stops_the_server() -> TestResult {
    let server = RedisServer::start()?;
    let port = server.port();
    let dir = server.dir().to_path_buf();
    assert!(port_answers(port));
    drop(server);
    assert!(!port_answers(port), "port {port} still answers after drop");
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
    Ok(())
}

#[test]
fn panicking_test_still_stops_the_server() {
    let port = Arc::new(AtomicU16::new(0));
    let seen = Arc::clone(&port);
    let outcome = std::panic::catch_unwind(move || -> Result<(), HarnessError> {
        let server = RedisServer::start()?;
        seen.store(server.port(), Ordering::SeqCst);
        panic!("simulated test failure while the server runs");
    });
    match outcome {
        Err(_) => {}
        Ok(Err(e)) => panic!("start failed: {e}"),
        Ok(Ok(())) => panic!("the closure was expected to panic"),
    }
    let port = port.load(Ordering::SeqCst);
    assert_ne!(port, 0);
    assert!(!port_answers(port), "port {port} still answers after panic");
}

#[test]
fn stop_then_restart() -> TestResult {
    let mut server = RedisServer::start()?;
    let port = server.port();
    server.stop()?;
    assert!(!server.is_running());
    assert!(!port_answers(port));
    server.stop()?; // idempotent
    server.restart()?;
    assert!(server.is_running());
    assert!(port_answers(port));
    Ok(())
}

#[tokio::test]
async fn commandstats_count_calls() -> TestResult {
    let server = RedisServer::start()?;
    server.reset_commandstats().await?;
    let mut conn = server.client().await?;
    let () = conn.set("k", "1").await?;
    let () = conn.set("k", "2").await?;
    let _: Option<String> = conn.get("k").await?;
    let stats = server.info_commandstats().await?;
    assert_eq!(stats.get("set"), Some(&2), "{stats:?}");
    assert_eq!(stats.get("get"), Some(&1), "{stats:?}");
    assert_eq!(stats.get("evalsha"), None, "{stats:?}");
    Ok(())
}

#[test]
fn missing_binary_is_a_clear_error() {
    let options = RedisOptions::default().with_binary("/nonexistent/redis-server");
    match RedisServer::start_with(options) {
        Err(e @ HarnessError::NotFound { .. }) => {
            let message = e.to_string();
            assert!(
                message.starts_with(
                    "redis-server not found: install it with `apt-get install -y redis-server`"
                ),
                "{message}"
            );
        }
        Err(e) => panic!("expected NotFound, got {e}"),
        Ok(server) => panic!("started {}", server.url()),
    }
}

#[test]
fn bad_argument_reports_the_log() {
    let options = RedisOptions::default().arg("--no-such-directive").arg("1");
    match RedisServer::start_with(options) {
        Err(e @ HarnessError::Exited { .. }) => {
            let message = e.to_string();
            assert!(message.contains("no-such-directive"), "{message}");
        }
        Err(e) => panic!("expected Exited, got {e}"),
        Ok(server) => panic!("started {}", server.url()),
    }
}
