//! The Redis Cluster harness (tests/src/redis_cluster.rs) against real servers, driven by the
//! redis crate's async cluster client: hash tags spread over several masters, same-slot Lua
//! scripts run while cross-slot ones get `CROSSSLOT`, classic pub/sub reaches every node and
//! sharded pub/sub its shard, a replica takes over a SIGKILLed master without losing replicated
//! writes, and every node is stopped even when a test panics.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::redis_cluster::{RedisCluster, Role, SLOTS};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncCommands, PushKind, Value};

/// Bound on waiting for one pub/sub message (a bound, not an expectation of speed).
const MESSAGE_BOUND: Duration = Duration::from_secs(10);
/// Bound, in milliseconds, for `WAIT` (numreplicas 1) on a shard's master.
const WAIT_MS: u64 = 10_000;

fn port_answers(port: u16) -> bool {
    TcpStream::connect_timeout(
        &SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// The loopback port and slot a `MOVED` error redirects to (`redirect_node` gives the address
/// as `"host:port"` and the slot, not host and port).
fn moved_to(err: &redis::RedisError) -> Option<(u16, u16)> {
    let (addr, slot) = err.redirect_node()?;
    let port = addr.strip_prefix("127.0.0.1:")?.parse().ok()?;
    Some((port, slot))
}

fn text(value: &Value) -> Result<String, redis::ParsingError> {
    redis::from_redis_value_ref(value)
}

/// `WAIT 1 <bound>` on the master of `slot`, through the cluster connection that wrote: the
/// number of replicas that acknowledged this connection's writes.
async fn wait_for_replica(
    conn: &mut redis::cluster_async::ClusterConnection,
    slot: u16,
) -> TestResult<i64> {
    let mut wait = redis::cmd("WAIT");
    wait.arg(1).arg(WAIT_MS);
    let route = Route::new(slot, SlotAddr::Master);
    let acked = conn
        .route_command(
            wait,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
        )
        .await?;
    Ok(redis::from_redis_value(acked)?)
}

#[tokio::test]
async fn slots_scripts_and_pubsub() -> TestResult {
    let cluster = RedisCluster::start(3, 1)?;
    let topology = cluster.topology()?;
    assert_eq!(topology.masters().len(), 3, "{topology:?}");
    assert_eq!(topology.replicas().len(), 3, "{topology:?}");
    for master in topology.masters() {
        assert_eq!(topology.replicas_of(master).len(), 1, "{topology:?}");
    }
    assert_eq!(cluster.urls().len(), 3);
    assert_eq!(cluster.node_urls().len(), 6);

    // Keys under different hash tags land on different masters, and the harness' slot map agrees
    // with where the cluster client puts them.
    let mut conn = cluster.connection().await?;
    let mut owners = BTreeMap::new();
    for i in 0..8 {
        let key = format!("{{tc:{i}}}");
        let slot = cluster.key_slot(&key)?;
        assert!(slot < SLOTS);
        let owner = topology
            .owner_of(slot)
            .ok_or_else(|| format!("no owner for slot {slot}"))?;
        assert_eq!(cluster.node_for_slot(slot)?, owner);
        assert_eq!(cluster.master_of_key(&key)?, owner);
        assert_eq!(
            cluster.key_slot(&format!("{key}:other"))?,
            slot,
            "hash tag ignored"
        );
        let () = conn.set(&key, i).await?;

        let mut on_owner = cluster.node_connection(owner).await?;
        let stored: Option<i64> = on_owner.get(&key).await?;
        assert_eq!(stored, Some(i), "{key} not on its slot's master {owner}");
        let elsewhere = topology
            .masters()
            .into_iter()
            .find(|&m| m != owner)
            .ok_or("a single master")?;
        let mut other = cluster.node_connection(elsewhere).await?;
        let moved = other.get::<_, Option<i64>>(&key).await;
        let err = moved.err().ok_or("a foreign master served the key")?;
        assert_eq!(moved_to(&err), Some((cluster.port(owner)?, slot)), "{err}");
        owners.insert(key, owner);
    }
    let distinct: BTreeSet<usize> = owners.values().copied().collect();
    assert!(distinct.len() >= 2, "{owners:?}");

    // A script touching only same-slot keys runs; one touching two slots gets CROSSSLOT.
    let script = "redis.call('SET', KEYS[1], ARGV[1]) \
                  redis.call('SET', KEYS[2], ARGV[1]) \
                  return redis.call('MGET', KEYS[1], KEYS[2])";
    let same: Vec<String> = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("{tc:1}:a")
        .arg("{tc:1}:b")
        .arg("x")
        .query_async(&mut conn)
        .await?;
    assert_eq!(same, ["x", "x"]);
    assert_ne!(cluster.key_slot("{tc:1}")?, cluster.key_slot("{tc:2}")?);
    let cross = redis::cmd("EVAL")
        .arg(script)
        .arg(2)
        .arg("{tc:1}:a")
        .arg("{tc:2}:a")
        .arg("y")
        .query_async::<Vec<String>>(&mut conn)
        .await;
    let err = cross.err().ok_or("a cross-slot script ran")?;
    assert_eq!(err.code(), Some("CROSSSLOT"), "{err}");
    let untouched: Option<String> = conn.get("{tc:1}:a").await?;
    assert_eq!(untouched.as_deref(), Some("x"));

    // Classic pub/sub is cluster-wide: a message published on any node reaches a subscriber on
    // node 0.
    let mut pubsub = redis::Client::open(cluster.url(0)?)?
        .get_async_pubsub()
        .await?;
    pubsub.subscribe("tc:broadcast").await?;
    let mut expected = BTreeSet::new();
    for node in 1..cluster.len() {
        let mut publisher = cluster.node_connection(node).await?;
        let payload = format!("from node {node}");
        let _: i64 = publisher.publish("tc:broadcast", &payload).await?;
        expected.insert(payload);
    }
    let mut received = BTreeSet::new();
    {
        let mut messages = pubsub.on_message();
        while received.len() < expected.len() {
            let message = tokio::time::timeout(MESSAGE_BOUND, messages.next())
                .await
                .map_err(|_| format!("only {received:?} of {expected:?} arrived"))?
                .ok_or("the subscription ended")?;
            assert_eq!(message.get_channel_name(), "tc:broadcast");
            received.insert(message.get_payload::<String>()?);
        }
    }
    assert_eq!(received, expected);

    // Sharded pub/sub through the cluster client (RESP3 with a push sender): SSUBSCRIBE and
    // SPUBLISH are routed to the channel's shard, other masters redirect.
    let channel = "{tc:3}:events";
    let (tx, mut pushes) = tokio::sync::mpsc::unbounded_channel();
    let subscriber_client = cluster
        .client_builder()
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(tx)
        .build()?;
    let mut subscriber = subscriber_client.get_async_connection().await?;
    subscriber.ssubscribe(channel).await?;
    let _: i64 = redis::cmd("SPUBLISH")
        .arg(channel)
        .arg("sharded hello")
        .query_async(&mut conn)
        .await?;
    let message = loop {
        let push = tokio::time::timeout(MESSAGE_BOUND, pushes.recv())
            .await
            .map_err(|_| "no smessage arrived")?
            .ok_or("the push channel closed")?;
        if push.kind == PushKind::SMessage {
            break push;
        }
    };
    let [name, payload] = &message.data[..] else {
        return Err(format!("smessage {:?}", message.data).into());
    };
    assert_eq!(text(name)?, channel);
    assert_eq!(text(payload)?, "sharded hello");

    let shard_owner = cluster.master_of_key(channel)?;
    let not_owner = topology
        .masters()
        .into_iter()
        .find(|&m| m != shard_owner)
        .ok_or("a single master")?;
    let mut other = cluster.node_connection(not_owner).await?;
    let moved = redis::cmd("SPUBLISH")
        .arg(channel)
        .arg("wrong shard")
        .query_async::<i64>(&mut other)
        .await;
    let err = moved.err().ok_or("a foreign master accepted SPUBLISH")?;
    let channel_slot = cluster.key_slot(channel)?;
    assert_eq!(
        moved_to(&err),
        Some((cluster.port(shard_owner)?, channel_slot)),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn replica_takes_over_a_killed_master() -> TestResult {
    let mut cluster = RedisCluster::start(3, 1)?;
    let key = "{tc:0}";
    let slot = cluster.key_slot(key)?;
    let owner = cluster.master_of_key(key)?;
    let replicas = cluster.replicas_of(owner)?;
    assert_eq!(replicas.len(), 1);

    // Written and acknowledged by the replica (AOF is only fsynced every second, so the copy on
    // the replica is what survives the kill).
    let mut conn = cluster.connection().await?;
    let () = conn.set("{tc:0}:before", "kept").await?;
    assert!(wait_for_replica(&mut conn, slot).await? >= 1);

    cluster.kill_node(owner)?;
    assert!(!cluster.is_running(owner));
    let promoted = cluster.wait_for_failover(owner)?;
    assert!(
        replicas.contains(&promoted),
        "{promoted} not in {replicas:?}"
    );
    assert_eq!(cluster.master_of_key(key)?, promoted);
    let topology = cluster.topology()?;
    assert_eq!(topology.node(promoted).map(|n| n.role), Some(Role::Master));
    assert!(
        topology.node(owner).is_some_and(|n| n.failing),
        "{topology:?}"
    );
    assert_eq!(cluster.urls().len(), 2, "the dead seed is left out");

    // The connection from before the kill still has the old slot map: it must find the new
    // master by itself.
    let () = conn.set("{tc:0}:after", "new").await?;
    let before: Option<String> = conn.get("{tc:0}:before").await?;
    assert_eq!(before.as_deref(), Some("kept"));

    // The old master comes back as a replica of the node that took over, and redirects.
    let topology = cluster.restart_node(owner)?;
    assert_eq!(
        topology.node(owner).map(|n| n.role),
        Some(Role::Replica { master: promoted })
    );
    assert_eq!(cluster.master_of_key(key)?, promoted);
    let mut old = cluster.node_connection(owner).await?;
    let moved = old.set::<_, _, ()>("{tc:0}:stale", "no").await;
    let err = moved.err().ok_or("the old master still accepts writes")?;
    assert_eq!(
        moved_to(&err),
        Some((cluster.port(promoted)?, slot)),
        "{err}"
    );

    // It has caught up: WAIT on the new master counts it, and it serves reads with READONLY.
    let () = conn.set("{tc:0}:after", "newer").await?;
    assert!(wait_for_replica(&mut conn, slot).await? >= 1);
    let () = redis::cmd("READONLY").query_async(&mut old).await?;
    let on_replica: (Option<String>, Option<String>) = redis::pipe()
        .get("{tc:0}:before")
        .get("{tc:0}:after")
        .query_async(&mut old)
        .await?;
    assert_eq!(
        on_replica,
        (Some("kept".to_owned()), Some("newer".to_owned()))
    );

    // A fresh client seeded with the current list works too.
    let mut fresh = cluster.connection().await?;
    let after: Option<String> = fresh.get("{tc:0}:after").await?;
    assert_eq!(after.as_deref(), Some("newer"));
    Ok(())
}

/// One and two masters without replicas (below what `redis-cli --cluster create` accepts) are
/// joined by hand: every slot is served, split evenly, and the cluster client works across them.
#[tokio::test]
async fn one_and_two_masters_without_replicas() -> TestResult {
    for masters in [1, 2] {
        let cluster = RedisCluster::start(masters, 0)?;
        let topology = cluster.topology()?;
        assert_eq!(topology.masters().len(), masters, "{topology:?}");
        assert!(topology.replicas().is_empty(), "{topology:?}");
        let expected: Vec<Vec<(u16, u16)>> = (0..masters)
            .map(|i| {
                let share = SLOTS / masters as u16;
                vec![(share * i as u16, share * (i as u16 + 1) - 1)]
            })
            .collect();
        let served: Vec<Vec<(u16, u16)>> = topology.nodes.iter().map(|n| n.slots.clone()).collect();
        assert_eq!(served, expected, "{topology:?}");
        let mut conn = cluster.connection().await?;
        let mut owners = BTreeSet::new();
        for i in 0..8 {
            let key = format!("{{tc:{i}}}");
            let () = conn.set(&key, i).await?;
            let value: i64 = conn.get(&key).await?;
            assert_eq!(value, i);
            owners.insert(cluster.master_of_key(&key)?);
        }
        assert_eq!(owners.len(), masters, "keys of 8 tags on {owners:?}");
    }
    Ok(())
}

#[test]
fn panicking_test_still_stops_every_node() -> TestResult {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u16, u16, PathBuf)>::new()));
    let record = std::sync::Arc::clone(&seen);
    let outcome = std::panic::catch_unwind(move || -> Result<(), String> {
        let cluster = RedisCluster::start(3, 0).map_err(|e| e.to_string())?;
        let temp = std::env::temp_dir();
        for index in 0..cluster.len() {
            let node = cluster.node(index).map_err(|e| e.to_string())?;
            let dir = node.dir().to_path_buf();
            // What .ci/run's cleanup looks for: $TMPDIR/redis-harness-*/redis.pid naming a
            // process running in that directory.
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or("directory name")?;
            if !name.starts_with("redis-harness-") || dir.parent() != Some(temp.as_path()) {
                return Err(format!(
                    "{} does not match $TMPDIR/redis-harness-*",
                    dir.display()
                ));
            }
            let pidfile =
                std::fs::read_to_string(dir.join("redis.pid")).map_err(|e| e.to_string())?;
            if pidfile.trim().parse::<u32>().ok() != node.pid() {
                return Err(format!(
                    "redis.pid {pidfile:?} is not node {index}'s pid {:?}",
                    node.pid()
                ));
            }
            let bus = cluster.bus_port(index).map_err(|e| e.to_string())?;
            if let Ok(mut ports) = record.lock() {
                ports.push((node.port(), bus, dir));
            }
        }
        // A failing assertion while the cluster runs.
        std::panic::resume_unwind(Box::new("simulated test failure"))
    });
    match outcome {
        Err(_) => {}
        Ok(result) => return Err(format!("expected an unwind, got {result:?}").into()),
    }
    let seen = seen.lock().map_err(|e| e.to_string())?;
    assert_eq!(seen.len(), 3);
    for (port, bus, dir) in seen.iter() {
        assert!(!port_answers(*port), "port {port} still answers");
        assert!(!port_answers(*bus), "bus port {bus} still answers");
        assert!(!dir.exists(), "{} still exists", dir.display());
    }
    Ok(())
}
