//! A private, real Redis Cluster for one test, always stopped.
//!
//! Sharding over Redis Cluster has to be tested against the real thing: slot ownership, `MOVED`
//! redirections, `CROSSSLOT` errors, cluster-wide and shard pub/sub, and a replica taking over a
//! dead master are behaviours of the servers, not of the client. [`RedisCluster::start`] builds
//! such a cluster on loopback in a few seconds:
//!
//! 1. it starts `masters * (1 + replicas_per_master)` nodes, each a [`RedisServer`] (so each gets
//!    a free loopback port, never 6379, its own `redis-harness-*` directory under the temp dir
//!    with `redis.log` and `redis.pid`, and the same stop-on-drop guarantees), run with
//!    `--cluster-enabled yes`, a short `--cluster-node-timeout` (1 s), AOF with
//!    `appendfsync everysec`, and an explicit `--cluster-port` (the cluster bus) on a second free
//!    port, since the default `port + 10000` may be taken or above 65535;
//! 2. it joins them with `redis-cli --cluster create ... --cluster-replicas R --cluster-yes`;
//!    that tool refuses fewer than 3 masters, so 1 or 2 masters without replicas (what a
//!    scale-out benchmark compares against 4) are joined by hand instead: each node gets an even
//!    range of slots (`CLUSTER ADDSLOTSRANGE`) and its own config epoch, and node 0 meets the
//!    others (`CLUSTER MEET` with the bus port);
//! 3. it waits, bounded, until every node reports `cluster_state:ok`, every node sees the same
//!    configuration (roles, masters of the replicas, slots), all 16384 slots are owned by running
//!    masters, the layout is `masters` masters with `replicas_per_master` replicas each, every
//!    replica's link to its master is up (`INFO replication`), and no node is loading data or
//!    rewriting its AOF (`INFO persistence`; a replica rewrites it after each full sync).
//!
//! Nodes are addressed by their *index*, the order in which they were started (`0..len()`); the
//! index of a node never changes, its role may (see [`RedisCluster::topology`]). A node killed
//! with [`RedisCluster::kill_node`] (`SIGKILL`, a crash) is taken over by one of its replicas;
//! [`RedisCluster::wait_for_failover`] waits for that and names the promoted node, and
//! [`RedisCluster::restart_node`] brings the dead node back (same port, directory, node id and
//! AOF), after which it rejoins as a replica.
//!
//! Node settings chosen for tests: `repl-diskless-sync-delay 0` (Redis 7 otherwise waits 5 s
//! before the first full sync of a replica), `cluster-replica-validity-factor 0` (a replica may
//! always take over), `cluster-allow-replica-migration no` (the layout changes only when a test
//! changes it), `shutdown-timeout 0` (a master stopping on drop does not wait for its replicas).
//!
//! Cleanup: dropping the [`RedisCluster`] kills every node with `SIGKILL`, reaps it and removes
//! its directory; this also runs while a failing test unwinds, and then prints each node's log
//! tail. `SIGKILL` rather than `SIGTERM` because the data goes away with the directories anyway
//! and because Redis 7.0 refuses a `SIGTERM` in some states (a replica still writing its initial
//! AOF after a full sync logs "Writing initial AOF, can't exit." and keeps running), which would
//! cost the 5 s shutdown timeout. If the test process itself dies, each node's
//! `redis-harness-*/redis.pid` lets `.ci/run` stop the leftovers.
//!
//! Like [`RedisServer`], the process control and waiting methods are synchronous and bounded
//! (they poll with short sleeps); they can be called from plain and from `#[tokio::test]` tests
//! (where they block the test's thread for at most the wait timeout). The helpers that return
//! connections are async.
//!
//! The server binary is `$REDIS_SERVER` or `redis-server` from `PATH`; `redis-cli` is
//! `$REDIS_CLI`, else the `redis-cli` next to that server binary, else `redis-cli` from `PATH`.
//! Requires Redis 7.0 or later (`--cluster-port`, `CLUSTER ADDSLOTSRANGE`, sharded pub/sub), and
//! at least 3 masters (the minimum `redis-cli --cluster create` accepts) when there are replicas.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;

use crate::redis_server::{
    self, HarnessError, RedisOptions, RedisServer, describe, find_redis_server, is_executable,
};

/// Name of the environment variable that overrides the `redis-cli` binary.
pub const REDIS_CLI_ENV: &str = "REDIS_CLI";

/// Number of hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// Start attempts per node with a fresh cluster bus port when the chosen one was taken.
const BUS_PORT_ATTEMPTS: u32 = 5;
/// Default `cluster-node-timeout`: how long a node may be unreachable before failover starts.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Default bound on `redis-cli --cluster create` and on each wait for the cluster to settle.
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect, read and write timeout of the harness' own status queries.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Lines of `redis-cli` output shown in errors.
const OUTPUT_TAIL_LINES: usize = 40;
/// Where the output of `redis-cli --cluster create` goes, in node 0's directory.
const CREATE_OUTPUT_FILE: &str = "cluster-create.out";

/// Everything that can go wrong while running a private Redis Cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Starting, stopping or talking to one node failed.
    #[error("cluster node: {0}")]
    Node(#[from] HarnessError),
    /// The requested layout cannot be built.
    #[error("invalid cluster layout: {0}")]
    Layout(String),
    /// No `redis-cli` binary could be located.
    #[error("redis-cli not found: install it with `apt-get install -y redis-tools` ({detail})")]
    CliNotFound {
        /// Where the harness looked.
        detail: String,
    },
    /// A file system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// `redis-cli --cluster create` failed or did not finish in time.
    #[error("redis-cli --cluster create {outcome}; output tail:\n{output}")]
    Create {
        /// How it ended.
        outcome: String,
        /// Last lines of its output.
        output: String,
    },
    /// The cluster did not reach the awaited state in time.
    #[error("{what}: not reached within {timeout:?}; last problem: {last_problem}")]
    Timeout {
        /// The awaited state.
        what: String,
        /// The bound that was exceeded.
        timeout: Duration,
        /// Why the last check failed.
        last_problem: String,
    },
    /// A node process that should run has exited.
    #[error("node {index} (port {port}) exited ({status}); log tail:\n{log_tail}")]
    NodeExited {
        /// The node's index.
        index: usize,
        /// Its port.
        port: u16,
        /// Its exit status, as far as known.
        status: String,
        /// Last lines of its log.
        log_tail: String,
    },
    /// There is no node with this index.
    #[error("no cluster node {index} (the cluster has {len})")]
    NoSuchNode {
        /// The index asked for.
        index: usize,
        /// Number of nodes.
        len: usize,
    },
    /// A node is not running, but the operation needs it to.
    #[error("cluster node {0} is not running")]
    NotRunning(usize),
    /// A Redis command sent by a helper failed.
    #[error("redis command failed: {0}")]
    Redis(#[from] redis::RedisError),
    /// A node answered something the harness does not understand.
    #[error("unexpected reply from a cluster node: {0}")]
    Protocol(String),
}

impl ClusterError {
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// How to start a [`RedisCluster`]; see [`ClusterOptions::new`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of masters (at least 3 with replicas, at least 1 without); the slots are split
    /// evenly between them.
    pub masters: usize,
    /// Replicas of each master.
    pub replicas_per_master: usize,
    /// `cluster-node-timeout`; 1 s by default. Failover takes about twice this.
    pub node_timeout: Duration,
    /// Bound on `redis-cli --cluster create` and on each wait for the cluster to settle
    /// (start-up, failover, restart); 30 s by default.
    pub wait_timeout: Duration,
    /// Extra `redis-server` arguments for every node, appended after the harness' own.
    pub args: Vec<String>,
}

impl ClusterOptions {
    /// `masters` masters with `replicas_per_master` replicas each, default timeouts, no extra
    /// arguments.
    pub fn new(masters: usize, replicas_per_master: usize) -> Self {
        Self {
            masters,
            replicas_per_master,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            args: Vec::new(),
        }
    }

    /// Sets [`ClusterOptions::node_timeout`].
    #[must_use]
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Sets [`ClusterOptions::wait_timeout`].
    #[must_use]
    pub fn with_wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// Appends one extra `redis-server` argument for every node.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    fn node_count(&self) -> usize {
        self.masters * (1 + self.replicas_per_master)
    }
}

/// A node's role in the cluster configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A master (with or without slots).
    Master,
    /// A replica of the master with this node index.
    Replica {
        /// Index of the master it replicates.
        master: usize,
    },
}

/// One node as another node sees it (a line of `CLUSTER NODES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's index in the [`RedisCluster`].
    pub index: usize,
    /// Its cluster node id.
    pub id: String,
    /// Its client port on 127.0.0.1.
    pub port: u16,
    /// Its role.
    pub role: Role,
    /// The slots it serves, as inclusive ranges (empty for replicas).
    pub slots: Vec<(u16, u16)>,
    /// Whether the observer flags it as failing (`fail` or `fail?`).
    pub failing: bool,
}

impl NodeInfo {
    /// Whether `slot` is among [`slots`](Self::slots).
    pub fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

/// The cluster configuration as one node sees it, ordered by node index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Every node the observer knows.
    pub nodes: Vec<NodeInfo>,
}

impl Topology {
    /// The node with this index, if the observer knows it.
    pub fn node(&self, index: usize) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.index == index)
    }

    /// Indices of the masters that serve slots, ascending.
    pub fn masters(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|n| n.role == Role::Master && !n.slots.is_empty())
            .map(|n| n.index)
            .collect()
    }

    /// Indices of all replicas, ascending.
    pub fn replicas(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|n| matches!(n.role, Role::Replica { .. }))
            .map(|n| n.index)
            .collect()
    }

    /// Indices of the replicas of `master`, ascending.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        self.nodes
            .iter()
            .filter(|n| n.role == Role::Replica { master })
            .map(|n| n.index)
            .collect()
    }

    /// Index of the master serving `slot`.
    pub fn owner_of(&self, slot: u16) -> Option<usize> {
        self.nodes
            .iter()
            .find(|n| n.role == Role::Master && n.serves(slot))
            .map(|n| n.index)
    }
}

#[derive(Debug)]
struct Node {
    server: RedisServer,
    /// Cluster node id (kept across restarts in the node's `nodes.conf`).
    id: String,
    /// Cluster bus port.
    bus_port: u16,
    /// What the node was when [`RedisCluster::kill_node`] killed it.
    killed_as: Option<KilledAs>,
}

/// A killed node's slots and replicas, as seen just before the kill.
#[derive(Debug, Clone)]
struct KilledAs {
    slots: Vec<(u16, u16)>,
    replicas: Vec<usize>,
}

/// A Redis Cluster private to one test: `127.0.0.1` nodes with their own directories.
///
/// Every node is killed (SIGKILL) and its directory removed when the cluster is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// Indices of the masters right after creation: the seed list.
    seeds: Vec<usize>,
    options: ClusterOptions,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each and returns once the
    /// cluster is settled (see the module documentation).
    pub fn start(masters: usize, replicas_per_master: usize) -> Result<Self, ClusterError> {
        Self::start_with(ClusterOptions::new(masters, replicas_per_master))
    }

    /// Starts a cluster with the given options.
    pub fn start_with(options: ClusterOptions) -> Result<Self, ClusterError> {
        // Replicas are only assigned by `redis-cli --cluster create`, which wants 3 masters.
        let by_hand = options.masters < 3;
        if options.masters == 0 || (by_hand && options.replicas_per_master > 0) {
            return Err(ClusterError::Layout(format!(
                "{} masters with {} replicas each requested; redis-cli --cluster create needs at \
                 least 3 masters, and fewer (at least 1) are only joined without replicas",
                options.masters, options.replicas_per_master
            )));
        }
        let cli = if by_hand {
            None
        } else {
            Some(find_redis_cli()?)
        };
        let mut nodes = Vec::with_capacity(options.node_count());
        for _ in 0..options.node_count() {
            let (server, bus_port) = start_node(&options)?;
            let id = node_id(server.port())?;
            nodes.push(Node {
                server,
                id,
                bus_port,
                killed_as: None,
            });
        }
        let mut cluster = Self {
            nodes,
            seeds: Vec::new(),
            options,
        };
        match &cli {
            Some(cli) => cluster.create(cli)?,
            None => cluster.join_by_hand()?,
        }
        let layout = (cluster.options.masters, cluster.options.replicas_per_master);
        let topology =
            cluster.wait_settled("the new cluster to settle", |_| Ok(()), Some(layout))?;
        cluster.seeds = topology.masters();
        Ok(cluster)
    }

    /// Number of nodes, running or not.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes (never true for a started cluster).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The server behind node `index` (port, URL, directory, log, pid, async client).
    pub fn node(&self, index: usize) -> Result<&RedisServer, ClusterError> {
        self.nodes
            .get(index)
            .map(|n| &n.server)
            .ok_or(ClusterError::NoSuchNode {
                index,
                len: self.nodes.len(),
            })
    }

    /// The cluster node id of node `index`.
    pub fn node_id(&self, index: usize) -> Result<&str, ClusterError> {
        self.entry(index).map(|n| n.id.as_str())
    }

    /// The cluster bus port of node `index`.
    pub fn bus_port(&self, index: usize) -> Result<u16, ClusterError> {
        self.entry(index).map(|n| n.bus_port)
    }

    /// Client port of node `index`.
    pub fn port(&self, index: usize) -> Result<u16, ClusterError> {
        self.node(index).map(RedisServer::port)
    }

    /// `redis://127.0.0.1:<port>/` of node `index`.
    pub fn url(&self, index: usize) -> Result<String, ClusterError> {
        self.node(index).map(RedisServer::url)
    }

    /// The seed list for cluster clients: the URL of every master the cluster was created with,
    /// minus the nodes that are not running now (any running node is a valid seed).
    pub fn urls(&self) -> Vec<String> {
        self.seeds
            .iter()
            .filter_map(|&i| self.nodes.get(i))
            .filter(|n| n.server.pid().is_some())
            .map(|n| n.server.url())
            .collect()
    }

    /// The URL of every running node.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.server.pid().is_some())
            .map(|n| n.server.url())
            .collect()
    }

    /// Whether node `index` runs (has been neither killed nor found dead).
    pub fn is_running(&mut self, index: usize) -> bool {
        self.nodes
            .get_mut(index)
            .is_some_and(|n| n.server.is_running())
    }

    /// The cluster configuration as the lowest-index running node sees it (`CLUSTER NODES`).
    ///
    /// Right after [`start`](Self::start), [`wait_for_failover`](Self::wait_for_failover),
    /// [`restart_node`](Self::restart_node) or [`wait_settled`](Self::wait_settled) every running
    /// node sees the same; in between, views may differ.
    pub fn topology(&self) -> Result<Topology, ClusterError> {
        let port = self.observer()?;
        let text = query_string(port, redis::cmd("CLUSTER").arg("NODES"))?;
        self.parse_nodes(&text).map_err(ClusterError::Protocol)
    }

    /// Indices of the masters serving slots now (from [`topology`](Self::topology)).
    pub fn masters(&self) -> Result<Vec<usize>, ClusterError> {
        Ok(self.topology()?.masters())
    }

    /// Indices of the replicas now (from [`topology`](Self::topology)).
    pub fn replicas(&self) -> Result<Vec<usize>, ClusterError> {
        Ok(self.topology()?.replicas())
    }

    /// Indices of the replicas of `master` now (from [`topology`](Self::topology)).
    pub fn replicas_of(&self, master: usize) -> Result<Vec<usize>, ClusterError> {
        Ok(self.topology()?.replicas_of(master))
    }

    /// The hash slot of `key`, computed by a running node (`CLUSTER KEYSLOT`).
    pub fn key_slot(&self, key: &str) -> Result<u16, ClusterError> {
        let port = self.observer()?;
        let slot: i64 = query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))?;
        u16::try_from(slot)
            .ok()
            .filter(|&s| s < SLOTS)
            .ok_or_else(|| ClusterError::Protocol(format!("CLUSTER KEYSLOT {key:?} = {slot}")))
    }

    /// Index of the master serving `slot` now (from [`topology`](Self::topology)).
    pub fn node_for_slot(&self, slot: u16) -> Result<usize, ClusterError> {
        let topology = self.topology()?;
        topology
            .owner_of(slot)
            .ok_or_else(|| ClusterError::Protocol(format!("no master serves slot {slot}")))
    }

    /// Index of the master serving the slot of `key` now.
    pub fn master_of_key(&self, key: &str) -> Result<usize, ClusterError> {
        self.node_for_slot(self.key_slot(key)?)
    }

    /// Kills node `index` with `SIGKILL` (a crash: no shutdown work, unsynced AOF tail lost) and
    /// reaps it. The slots it served and its replicas are remembered for
    /// [`wait_for_failover`](Self::wait_for_failover). No-op when it is not running.
    pub fn kill_node(&mut self, index: usize) -> Result<(), ClusterError> {
        self.entry(index)?;
        // Read before the kill: afterwards the views start to change.
        let killed_as = self.topology().ok().map(|topology| KilledAs {
            slots: topology
                .node(index)
                .map(|n| n.slots.clone())
                .unwrap_or_default(),
            replicas: topology.replicas_of(index),
        });
        let node = self.entry_mut(index)?;
        if node.server.pid().is_none() {
            return Ok(());
        }
        node.killed_as = killed_as;
        node.server.kill()?;
        Ok(())
    }

    /// Waits until a replica of the master `killed` (killed with [`kill_node`](Self::kill_node))
    /// serves all the slots `killed` served and the cluster has settled (every running node sees
    /// `cluster_state:ok` and the same configuration, replicas are linked). Returns the index of
    /// the promoted node.
    pub fn wait_for_failover(&mut self, killed: usize) -> Result<usize, ClusterError> {
        let (slots, replicas, probe) = match &self.entry(killed)?.killed_as {
            Some(KilledAs { slots, replicas }) if !slots.is_empty() && !replicas.is_empty() => {
                (slots.clone(), replicas.clone(), slots[0].0)
            }
            Some(KilledAs { slots, .. }) if !slots.is_empty() => {
                return Err(ClusterError::Layout(format!(
                    "node {killed} had no replica when it was killed: nothing can take over"
                )));
            }
            _ => {
                return Err(ClusterError::Layout(format!(
                    "node {killed} was not a master serving slots when kill_node killed it: \
                     no failover to wait for"
                )));
            }
        };
        let what = format!("failover of node {killed}");
        let topology = self.wait_settled(
            &what,
            |topology| {
                let owners: Vec<Option<usize>> = slots
                    .iter()
                    .flat_map(|&(first, last)| [first, last])
                    .map(|slot| topology.owner_of(slot))
                    .collect();
                match owners.first().copied().flatten() {
                    Some(owner)
                        if replicas.contains(&owner)
                            && owners.iter().all(|&o| o == Some(owner)) =>
                    {
                        Ok(())
                    }
                    _ => Err(format!(
                        "slots of node {killed} served by {owners:?}, not by one of its \
                         replicas {replicas:?}"
                    )),
                }
            },
            None,
        )?;
        topology
            .owner_of(probe)
            .ok_or_else(|| ClusterError::Protocol(format!("slot {probe} has no owner")))
    }

    /// Starts node `index` again (after [`kill_node`](Self::kill_node)) on the same port, bus
    /// port and directory, so it keeps its node id and reloads its AOF; a master that was failed
    /// over comes back as a replica of the node that took over. Returns once the cluster has
    /// settled with it.
    pub fn restart_node(&mut self, index: usize) -> Result<Topology, ClusterError> {
        let node = self.entry_mut(index)?;
        node.server.restart()?;
        node.killed_as = None;
        let what = format!("the cluster to settle after restarting node {index}");
        self.wait_settled(&what, |_| Ok(()), None)
    }

    /// Waits until the cluster has settled: every running node reports `cluster_state:ok`, knows
    /// every running node as healthy, and sees the same roles, replica masters and slots; every
    /// slot is served by a running master; every running replica's master link is up; no node
    /// is loading data or rewriting its AOF. Returns the settled [`Topology`].
    pub fn wait_converged(&mut self) -> Result<Topology, ClusterError> {
        self.wait_settled("the cluster to settle", |_| Ok(()), None)
    }

    /// A cluster client builder seeded with [`urls`](Self::urls), to add options (RESP3 and a
    /// push sender for pub/sub, timeouts) before `build()`.
    pub fn client_builder(&self) -> ClusterClientBuilder {
        ClusterClientBuilder::new(self.urls())
    }

    /// A cluster client with default options, seeded with [`urls`](Self::urls).
    pub fn client(&self) -> Result<ClusterClient, ClusterError> {
        Ok(self.client_builder().build()?)
    }

    /// A new async cluster connection with default options.
    pub async fn connection(&self) -> Result<ClusterConnection, ClusterError> {
        Ok(self.client()?.get_async_connection().await?)
    }

    /// A new plain (non-cluster) multiplexed connection to node `index`: commands for slots it
    /// does not serve get `MOVED`.
    pub async fn node_connection(
        &self,
        index: usize,
    ) -> Result<redis::aio::MultiplexedConnection, ClusterError> {
        Ok(self.node(index)?.client().await?)
    }

    fn entry(&self, index: usize) -> Result<&Node, ClusterError> {
        self.nodes.get(index).ok_or(ClusterError::NoSuchNode {
            index,
            len: self.nodes.len(),
        })
    }

    fn entry_mut(&mut self, index: usize) -> Result<&mut Node, ClusterError> {
        let len = self.nodes.len();
        self.nodes
            .get_mut(index)
            .ok_or(ClusterError::NoSuchNode { index, len })
    }

    /// Port of the lowest-index running node.
    fn observer(&self) -> Result<u16, ClusterError> {
        self.nodes
            .iter()
            .find(|n| n.server.pid().is_some())
            .map(|n| n.server.port())
            .ok_or_else(|| ClusterError::Layout(String::from("no cluster node is running")))
    }

    /// Runs `redis-cli --cluster create` over all nodes, bounded by the wait timeout.
    fn create(&self, cli: &Path) -> Result<(), ClusterError> {
        let first = self.entry(0)?;
        let output_path = first.server.dir().join(CREATE_OUTPUT_FILE);
        let output = File::create(&output_path)
            .map_err(|e| ClusterError::io("creating the redis-cli output file", e))?;
        let output_err = output
            .try_clone()
            .map_err(|e| ClusterError::io("duplicating the redis-cli output file", e))?;
        let mut command = Command::new(cli);
        command.arg("--cluster").arg("create");
        for node in &self.nodes {
            command.arg(format!("127.0.0.1:{}", node.server.port()));
        }
        command
            .arg("--cluster-replicas")
            .arg(self.options.replicas_per_master.to_string())
            .arg("--cluster-yes")
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(output_err);
        let mut child = command
            .spawn()
            .map_err(|e| ClusterError::io(format!("spawning {}", cli.display()), e))?;
        let timeout = self.options.wait_timeout;
        let deadline = Instant::now() + timeout;
        let tail = || file_tail(&output_path, OUTPUT_TAIL_LINES);
        loop {
            let status = child
                .try_wait()
                .map_err(|e| ClusterError::io("checking redis-cli", e))?;
            match status {
                Some(status) if status.success() => return Ok(()),
                Some(status) => {
                    return Err(ClusterError::Create {
                        outcome: format!("failed ({})", describe(status)),
                        output: tail(),
                    });
                }
                None if Instant::now() >= deadline => {
                    // Not reaped yet, so `kill` cannot hit another process.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ClusterError::Create {
                        outcome: format!("did not finish within {timeout:?}"),
                        output: tail(),
                    });
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Joins 1 or 2 masters without replicas, which `redis-cli --cluster create` refuses: each
    /// node gets an even, contiguous range of the slots and a distinct config epoch (as that
    /// tool sets them, so that no epoch collision has to be resolved), then node 0 meets every
    /// other node on its client and bus ports. The caller waits for the cluster to settle.
    fn join_by_hand(&self) -> Result<(), ClusterError> {
        let count = self.nodes.len();
        let slots = usize::from(SLOTS);
        for (index, node) in self.nodes.iter().enumerate() {
            let port = node.server.port();
            let _: () = query(
                port,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(index + 1),
            )?;
            let _: () = query(
                port,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(slots * index / count)
                    .arg(slots * (index + 1) / count - 1),
            )?;
        }
        let first = self.entry(0)?.server.port();
        for node in self.nodes.iter().skip(1) {
            let _: () = query(
                first,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(node.server.port())
                    .arg(node.bus_port),
            )?;
        }
        Ok(())
    }

    /// Polls [`check_settled`](Self::check_settled) plus `extra` until both pass, a node that
    /// should run has exited, or the wait timeout.
    fn wait_settled(
        &mut self,
        what: &str,
        extra: impl Fn(&Topology) -> Result<(), String>,
        layout: Option<(usize, usize)>,
    ) -> Result<Topology, ClusterError> {
        let timeout = self.options.wait_timeout;
        let deadline = Instant::now() + timeout;
        let mut backoff = Duration::from_millis(10);
        loop {
            self.check_alive()?;
            let last_problem = match self
                .check_settled(layout)
                .and_then(|t| extra(&t).map(|()| t))
            {
                Ok(topology) => return Ok(topology),
                Err(problem) => problem,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(ClusterError::Timeout {
                    what: what.to_owned(),
                    timeout,
                    last_problem,
                });
            }
            std::thread::sleep(backoff.min(deadline - now));
            backoff = (backoff * 2).min(Duration::from_millis(100));
        }
    }

    /// Fails when a node that was not killed on purpose has exited.
    fn check_alive(&mut self) -> Result<(), ClusterError> {
        for (index, node) in self.nodes.iter_mut().enumerate() {
            if node.server.pid().is_some() && !node.server.is_running() {
                return Err(ClusterError::NodeExited {
                    index,
                    port: node.server.port(),
                    status: String::from("crashed or stopped outside the harness"),
                    log_tail: node.server.log_tail(OUTPUT_TAIL_LINES),
                });
            }
        }
        Ok(())
    }

    /// One check of the settled state; `Err` says what is not there yet.
    fn check_settled(&self, layout: Option<(usize, usize)>) -> Result<Topology, String> {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].server.pid().is_some())
            .collect();
        let mut agreed: Option<(usize, Topology, BTreeMap<usize, Config>)> = None;
        for &index in &running {
            let port = self.nodes[index].server.port();
            let at = |e: ClusterError| format!("node {index} (port {port}): {e}");
            let info = query_string(port, redis::cmd("CLUSTER").arg("INFO")).map_err(at)?;
            if !info.lines().any(|l| l.trim_end() == "cluster_state:ok") {
                let state = info
                    .lines()
                    .find(|l| l.starts_with("cluster_state:"))
                    .unwrap_or("no cluster_state");
                return Err(format!("node {index}: {}", state.trim_end()));
            }
            let text = query_string(port, redis::cmd("CLUSTER").arg("NODES")).map_err(at)?;
            let topology = self
                .parse_nodes(&text)
                .map_err(|e| format!("node {index}: {e}"))?;
            let mut config = BTreeMap::new();
            for &other in &running {
                let seen = topology
                    .node(other)
                    .ok_or_else(|| format!("node {index} does not know node {other} yet"))?;
                if seen.failing {
                    return Err(format!("node {index} flags node {other} as failing"));
                }
                config.insert(other, (seen.role, seen.slots.clone()));
            }
            match &agreed {
                None => agreed = Some((index, topology, config)),
                Some((first, _, first_config)) if *first_config != config => {
                    return Err(format!(
                        "nodes {first} and {index} disagree: {first_config:?} vs {config:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        let Some((_, topology, config)) = agreed else {
            return Err(String::from("no node is running"));
        };

        // Every slot is served by exactly one running master.
        let mut ranges: Vec<(u16, u16)> = config
            .values()
            .filter(|(role, _)| *role == Role::Master)
            .flat_map(|(_, slots)| slots.iter().copied())
            .collect();
        ranges.sort_unstable();
        let mut next: u32 = 0;
        for (first, last) in ranges {
            if u32::from(first) != next {
                return Err(format!(
                    "slots from {next} are not served by a running master"
                ));
            }
            next = u32::from(last) + 1;
        }
        if next != u32::from(SLOTS) {
            return Err(format!(
                "slots from {next} are not served by a running master"
            ));
        }

        // Every running replica follows a running master and is linked to it; no node is
        // loading or rewriting its AOF.
        for (&index, (role, _)) in &config {
            let port = self.nodes[index].server.port();
            let info = query_string(
                port,
                redis::cmd("INFO").arg("replication").arg("persistence"),
            )
            .map_err(|e| format!("node {index} (port {port}): {e}"))?;
            let has = |line: &str| info.lines().any(|l| l.trim_end() == line);
            if !(has("loading:0")
                && has("aof_rewrite_in_progress:0")
                && has("aof_rewrite_scheduled:0"))
            {
                return Err(format!("node {index}: loading or rewriting its AOF"));
            }
            let Role::Replica { master } = *role else {
                continue;
            };
            if config.get(&master).map(|(r, _)| *r) != Some(Role::Master) {
                return Err(format!(
                    "replica {index} follows node {master}, not a running master"
                ));
            }
            if !has("master_link_status:up") {
                return Err(format!("replica {index}: master link not up yet"));
            }
        }

        if let Some((masters, replicas)) = layout {
            let serving = topology.masters();
            if serving.len() != masters || config.len() != self.nodes.len() {
                return Err(format!(
                    "{} masters serve slots and {} nodes run, expected {masters} and {}",
                    serving.len(),
                    config.len(),
                    self.nodes.len()
                ));
            }
            for master in serving {
                let count = topology.replicas_of(master).len();
                if count != replicas {
                    return Err(format!(
                        "master {master} has {count} replicas, expected {replicas}"
                    ));
                }
            }
        }
        Ok(topology)
    }

    /// Parses `CLUSTER NODES` output into node indices. Fails on node ids the harness does not
    /// know (a node in handshake carries a temporary id).
    fn parse_nodes(&self, text: &str) -> Result<Topology, String> {
        let index_of = |id: &str| {
            self.nodes
                .iter()
                .position(|n| n.id == id)
                .ok_or_else(|| format!("unknown node id {id} (handshake in progress?)"))
        };
        let mut nodes = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [
                id,
                addr,
                flags,
                master,
                _ping,
                _pong,
                _epoch,
                _link,
                slots @ ..,
            ] = &fields[..]
            else {
                return Err(format!("CLUSTER NODES line {line:?}"));
            };
            let index = index_of(id)?;
            let flags: Vec<&str> = flags.split(',').collect();
            if flags.contains(&"handshake") || flags.contains(&"noaddr") {
                return Err(format!("node {index} is flagged {flags:?}"));
            }
            let port = addr
                .split(['@', ','])
                .next()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.parse().ok())
                .ok_or_else(|| format!("address in CLUSTER NODES line {line:?}"))?;
            let role = if flags.contains(&"master") {
                Role::Master
            } else if flags.contains(&"slave") && *master != "-" {
                Role::Replica {
                    master: index_of(master)?,
                }
            } else {
                return Err(format!("node {index} has no role yet: {flags:?}"));
            };
            let mut ranges = Vec::new();
            // `[slot->-id]` / `[slot-<-id]` entries are slots being migrated: not served yet.
            for slot in slots.iter().filter(|s| !s.starts_with('[')) {
                let parse = |s: &str| s.parse::<u16>().ok().filter(|&n| n < SLOTS);
                let range = match slot.split_once('-') {
                    Some((first, last)) => parse(first).zip(parse(last)),
                    None => parse(slot).map(|s| (s, s)),
                };
                ranges.push(range.ok_or_else(|| format!("slot range {slot:?}"))?);
            }
            ranges.sort_unstable();
            nodes.push(NodeInfo {
                index,
                id: (*id).to_owned(),
                port,
                role,
                slots: ranges,
                failing: flags.contains(&"fail") || flags.contains(&"fail?"),
            });
        }
        nodes.sort_by_key(|n| n.index);
        Ok(Topology { nodes })
    }
}

/// What the settled check compares between the views of the nodes.
type Config = (Role, Vec<(u16, u16)>);

impl Drop for RedisCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let nodes: Vec<String> = self
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    format!(
                        "  node {i}: port {} bus {} id {} dir {}",
                        n.server.port(),
                        n.bus_port,
                        n.id,
                        n.server.dir().display()
                    )
                })
                .collect();
            eprintln!("redis cluster:\n{}", nodes.join("\n"));
        }
        // SIGKILL (see the module documentation); each node's own Drop then removes its
        // directory and, while the test panics, prints its log tail.
        for (index, node) in self.nodes.iter_mut().enumerate() {
            if let Err(e) = node.server.kill() {
                eprintln!("killing redis cluster node {index}: {e}");
            }
        }
    }
}

/// Starts one cluster node, retrying with a new bus port when the chosen one was taken.
fn start_node(options: &ClusterOptions) -> Result<(RedisServer, u16), ClusterError> {
    let mut last = None;
    for _ in 0..BUS_PORT_ATTEMPTS {
        let bus_port = free_port()?;
        let mut node_options = RedisOptions::default()
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg("nodes.conf")
            .arg("--cluster-node-timeout")
            .arg(options.node_timeout.as_millis().max(1).to_string())
            .arg("--cluster-port")
            .arg(bus_port.to_string())
            .arg("--cluster-replica-validity-factor")
            .arg("0")
            .arg("--cluster-allow-replica-migration")
            .arg("no")
            .arg("--repl-diskless-sync-delay")
            .arg("0")
            .arg("--shutdown-timeout")
            .arg("0")
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("everysec");
        node_options.args.extend(options.args.iter().cloned());
        match RedisServer::start_with(node_options) {
            Ok(server) => return Ok((server, bus_port)),
            // The client port is retried by RedisServer itself; when every attempt failed with
            // "Address already in use", the bus port is the likely culprit.
            Err(e @ HarnessError::PortUnavailable { .. }) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(
        || ClusterError::Layout(String::from("no attempt to start a node")),
        ClusterError::from,
    ))
}

/// A free loopback port for a node's cluster bus.
fn free_port() -> Result<u16, ClusterError> {
    Ok(redis_server::free_port()?)
}

/// A short-lived synchronous connection for the harness' status queries.
fn connect(port: u16) -> Result<redis::Connection, ClusterError> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let conn = client.get_connection_with_timeout(QUERY_TIMEOUT)?;
    conn.set_read_timeout(Some(QUERY_TIMEOUT))?;
    conn.set_write_timeout(Some(QUERY_TIMEOUT))?;
    Ok(conn)
}

fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, ClusterError> {
    let mut conn = connect(port)?;
    Ok(cmd.query(&mut conn)?)
}

fn query_string(port: u16, cmd: &redis::Cmd) -> Result<String, ClusterError> {
    query(port, cmd)
}

/// `CLUSTER MYID` of the node on `port`.
fn node_id(port: u16) -> Result<String, ClusterError> {
    let id = query_string(port, &redis::cmd("CLUSTER").arg("MYID").to_owned())?;
    if id.len() == 40 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id)
    } else {
        Err(ClusterError::Protocol(format!("CLUSTER MYID = {id:?}")))
    }
}

/// Locates `redis-cli`: `$REDIS_CLI` (a path, or a name looked up in `PATH`), else the
/// `redis-cli` beside the `redis-server` the harness runs, else `redis-cli` from `PATH`.
pub fn find_redis_cli() -> Result<PathBuf, ClusterError> {
    if let Some(value) = std::env::var_os(REDIS_CLI_ENV)
        && !value.is_empty()
    {
        return resolve_binary(value, REDIS_CLI_ENV);
    }
    if let Ok(server) = find_redis_server()
        && let Some(dir) = server.parent()
    {
        let beside = dir.join("redis-cli");
        if is_executable(&beside) {
            return Ok(beside);
        }
    }
    resolve_binary(OsString::from("redis-cli"), "PATH")
}

/// `redis_server::resolve_binary`, its failure as this harness's.
fn resolve_binary(name: OsString, origin: &str) -> Result<PathBuf, ClusterError> {
    redis_server::resolve_binary(name, origin, REDIS_CLI_ENV).map_err(|err| {
        ClusterError::CliNotFound {
            detail: err.to_string(),
        }
    })
}

/// The last `lines` lines of a file, with the ANSI colours of `redis-cli` removed.
fn file_tail(path: &Path, lines: usize) -> String {
    let Ok(text) = fs::read_to_string(path) else {
        return format!("({} is missing)", path.display());
    };
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    crate::process::plain(&all[start..].join("\n"))
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Master => write!(f, "master"),
            Self::Replica { master } => write!(f, "replica of node {master}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_redis_cli_colours() {
        assert_eq!(
            crate::process::plain("\u{1b}[29;1m>>> Done\n\u{1b}[0m[OK] x"),
            ">>> Done\n[OK] x"
        );
    }

    #[test]
    fn fewer_than_three_masters_with_replicas_is_a_layout_error() {
        let result = RedisCluster::start(2, 1);
        assert!(
            matches!(&result, Err(ClusterError::Layout(message)) if message.contains("at least 3")),
            "{result:?}"
        );
        let result = RedisCluster::start(0, 0);
        assert!(
            matches!(&result, Err(ClusterError::Layout(_))),
            "{result:?}"
        );
    }
}
