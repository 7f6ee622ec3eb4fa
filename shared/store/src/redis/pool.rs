//! Redis connections for ordinary commands and scripts: a pool of connections to one server,
//! or one multiplexed Redis Cluster connection ([`Connections`]).
//!
//! deadpool-redis creates the connections; the manager here only replaces its recycle step,
//! which sends UNWATCH + PING on every checkout: one extra round trip per store operation,
//! doubling the cost of the hot path. We never WATCH, and a broken connection is detected by
//! the command that hits it and removed from the pool then ([`discard_if_broken`]).

use std::time::Duration;

use deadpool::managed::{self, Metrics, Object, RecycleResult};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::replay::{self, CALL_DEADLINE, Replays};
use crate::StoreError;

pub struct Manager {
    inner: deadpool_redis::Manager,
}

impl managed::Manager for Manager {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        managed::Manager::create(&self.inner).await
    }

    async fn recycle(
        &self,
        _: &mut MultiplexedConnection,
        _: &Metrics,
    ) -> RecycleResult<RedisError> {
        Ok(())
    }
}

pub type Pool = managed::Pool<Manager>;
pub type Pooled = Object<Manager>;

/// Builds the pool. `timeout` bounds connecting, waiting for a free connection and each reply,
/// so an unreachable Redis fails requests fast instead of hanging them.
pub fn build(url: &str, size: usize, timeout: Duration) -> Result<Pool, StoreError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let inner = deadpool_redis::Manager::new_with_config(url, config)?;
    Pool::builder(Manager { inner })
        .max_size(size)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .runtime(deadpool::Runtime::Tokio1)
        .build()
        .map_err(|err| StoreError::Unavailable(err.to_string()))
}

/// Drops a connection from the pool when `err` says it can no longer be trusted, and with it
/// every idle connection: they share its fate (a Redis restart breaks them all), and each
/// would otherwise fail one more request before being found out.
fn discard_if_broken(pool: &Pool, conn: Pooled, err: &RedisError) {
    if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.is_unrecoverable_error()
    {
        let _ = Object::take(conn);
        pool.retain(|_, _| false);
    }
}

/// The outcome of one command on `conn`, which goes back to the pool unless the error says it
/// broke.
pub fn settle<T>(
    pool: &Pool,
    conn: Pooled,
    result: redis::RedisResult<T>,
) -> Result<T, StoreError> {
    result.map_err(|err| {
        discard_if_broken(pool, conn, &err);
        err.into()
    })
}

pub async fn get(pool: &Pool) -> Result<Pooled, StoreError> {
    pool.get()
        .await
        .map_err(|err| StoreError::Unavailable(err.to_string()))
}

/// Where commands go: one server through the pool, or a Redis Cluster through the redis
/// crate's cluster client, which routes each command by its keys' slot and follows MOVED and
/// ASK. Every key of a command, pipeline or script carries the namespace's hash tag, so each
/// lands on one slot.
pub enum Connections {
    Single(Pool),
    Cluster {
        connection: redis::cluster_async::ClusterConnection,
        /// Reply keys of script calls, which make a resent call run once ([`replay`]).
        replays: Replays,
    },
}

impl Connections {
    /// Opens them: a pool to `url`, or, with `cluster_urls` given, a cluster connection seeded
    /// by them. `timeout` bounds connecting and each reply either way.
    pub async fn open(
        url: &str,
        cluster_urls: &[String],
        size: usize,
        timeout: Duration,
    ) -> Result<Connections, StoreError> {
        if cluster_urls.is_empty() {
            return build(url, size, timeout).map(Connections::Single);
        }
        let client = cluster_client(cluster_urls, Some(timeout))?;
        let connection = client.get_async_connection().await?;
        Ok(Connections::Cluster {
            connection,
            replays: Replays::default(),
        })
    }

    pub async fn pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        match self {
            Connections::Single(pool) => {
                let mut conn = get(pool).await?;
                let result = pipe.query_async(&mut *conn).await;
                settle(pool, conn, result)
            }
            Connections::Cluster { connection, .. } => {
                Ok(pipe.query_async(&mut connection.clone()).await?)
            }
        }
    }

    /// [`Self::query`], with Redis's own error kept whole for a caller that tells refusals
    /// apart; the outer error: no connection could be had.
    pub async fn query_answer<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<redis::RedisResult<T>, StoreError> {
        match self {
            Connections::Single(pool) => {
                let mut conn = get(pool).await?;
                let result = cmd.query_async(&mut *conn).await;
                if let Err(err) = &result {
                    discard_if_broken(pool, conn, err);
                }
                Ok(result)
            }
            Connections::Cluster { connection, .. } => {
                Ok(cmd.query_async(&mut connection.clone()).await)
            }
        }
    }

    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, StoreError> {
        Ok(self.query_answer(cmd).await??)
    }

    /// EVALSHA, reloading the script on NOSCRIPT; on a cluster with `replicated`, then WAIT
    /// until the script's writes reached that many replicas of its master. `tag` names the
    /// slot the script runs in: on a cluster the call's reply key goes there ([`replay`]), so
    /// the cluster client's resends of the call run it once.
    pub async fn eval<T: redis::FromRedisValue>(
        &self,
        invocation: &mut super::invocation::ScriptCall<'_>,
        tag: &str,
        replicated: Option<Replicated<'_>>,
    ) -> Result<T, StoreError> {
        match self {
            Connections::Single(pool) => {
                replay::attach_none(invocation);
                let mut conn = get(pool).await?;
                let result = invocation.invoke_async(&mut *conn).await;
                settle(pool, conn, result)
            }
            Connections::Cluster {
                connection,
                replays,
            } => {
                let (key, forget) = replays.attach(invocation, tag);
                let mut conn = connection.clone();
                let call = async {
                    let reply = invocation.invoke_async(&mut conn).await?;
                    if let Some(replicated) = replicated {
                        replicated.wait(&mut conn).await?;
                    }
                    Ok(reply)
                };
                let outcome = match tokio::time::timeout(CALL_DEADLINE, call).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(StoreError::Unavailable(format!(
                        "no reply from the cluster within {CALL_DEADLINE:?}"
                    ))),
                };
                match &outcome {
                    Ok(_) => replays.done(key),
                    Err(_) => replays.failed(&key, forget),
                }
                outcome
            }
        }
    }

    /// Stops handing out connections (the pool's); a cluster connection closes when its last
    /// clone is dropped.
    pub fn close(&self) {
        if let Connections::Single(pool) = self {
            pool.close();
        }
    }
}

/// A cluster client seeded by `urls`; `response_timeout` `None` for blocking commands.
pub fn cluster_client(
    urls: &[String],
    response_timeout: Option<Duration>,
) -> Result<redis::cluster::ClusterClient, StoreError> {
    Ok(cluster_builder(urls, response_timeout).build()?)
}

/// The settings every cluster client of the store shares: seeds, and connect and reply bounds
/// (none for blocking commands).
pub fn cluster_builder(
    urls: &[String],
    response_timeout: Option<Duration>,
) -> redis::cluster::ClusterClientBuilder {
    let builder = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str));
    match response_timeout {
        Some(timeout) => builder
            .connection_timeout(timeout)
            .response_timeout(timeout),
        None => builder,
    }
}

/// A write that must reach `replicas` replicas before it is acknowledged: on a Redis Cluster a
/// failover promotes a replica, and replication is asynchronous, so a write only the old master
/// held is lost with it. WAIT makes the acknowledgement wait for the copies.
#[derive(Debug, Clone, Copy)]
pub struct Replicated<'a> {
    /// Any key in the written slot: WAIT goes to that slot's master, over the same node
    /// connection as the write (WAIT counts the acknowledged offset of its own connection).
    pub route_key: &'a str,
    pub replicas: usize,
    pub timeout: Duration,
}

impl Replicated<'_> {
    async fn wait(
        self,
        conn: &mut redis::cluster_async::ClusterConnection,
    ) -> Result<(), StoreError> {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas)
            .arg(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX));
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(
            self.route_key,
            SlotAddr::Master,
        )));
        let acknowledged: usize = redis::from_redis_value(conn.route_command(cmd, route).await?)
            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
        if acknowledged < self.replicas {
            return Err(StoreError::Unavailable(format!(
                "a write reached {acknowledged} of {} replicas within {:?}; it may be lost in a failover",
                self.replicas, self.timeout
            )));
        }
        Ok(())
    }
}
