//! What a worker waits on: the doorbells of its entrypoints' queues (a blocking read, on
//! connections reserved for it: a blocked connection carries nothing else), and the
//! cancellations of the tasks it holds (pub/sub).

use std::time::Duration;

use super::pool::{self, Connections};
use super::shards::Shard;
use super::{RedisStore, subscriber};
use crate::StoreError;

/// A connection reserved for blocking reads.
pub(super) enum Blocking {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Blocking {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self {
            Blocking::Single(conn) => cmd.query_async(conn).await,
            Blocking::Cluster(conn) => cmd.query_async(conn).await,
        }
    }
}

impl RedisStore {
    /// A new connection for blocking reads: to the server, or a cluster connection of its own
    /// (a blocked node connection cannot carry the store's other commands).
    async fn blocking_connection(&self) -> Result<Blocking, StoreError> {
        let config = &self.inner.core.config;
        if config.cluster_urls.is_empty() {
            let connection = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.timeout))
                .set_response_timeout(None);
            return Ok(Blocking::Single(
                self.inner
                    .client
                    .get_multiplexed_async_connection_with_config(&connection)
                    .await?,
            ));
        }
        let client = pool::cluster_client(&config.cluster_urls, None)?;
        Ok(Blocking::Cluster(client.get_async_connection().await?))
    }

    /// Blocks on the doorbells of `entrypoints` in every shard for up to `wait`; true when one
    /// rang. The shard and entrypoint that rang are marked as holding work ([`take::Hints`]), so
    /// the next take visits that shard; a wait that times out forgets what was known of
    /// `entrypoints` everywhere, so the next take looks at every shard (a task whose ring
    /// another process took is still found). One blocking read covers them all, except on a
    /// Redis Cluster with several shards, where a command cannot name keys of several slots:
    /// there each shard gets its own read, and the first ring ends the wait
    /// ([`Self::wait_for_any_shard`]).
    pub(super) async fn wait_for_doorbell(
        &self,
        entrypoints: &[String],
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let core = &self.inner.core;
        let wake_keys = |shard: &Shard| -> Vec<String> {
            entrypoints.iter().map(|ep| shard.keys.wake(ep)).collect()
        };
        let clustered = matches!(core.connections, Connections::Cluster { .. });
        let rang = if !clustered || core.shards.len() == 1 {
            let keys: Vec<String> = core.shards.iter().flat_map(wake_keys).collect();
            self.blocking_pop(&keys, wait).await?
        } else {
            self.wait_for_any_shard(core.shards.iter().map(wake_keys).collect(), wait)
                .await?
        };
        let Some(key) = rang else {
            for shard in &core.shards {
                shard.hints.forget(entrypoints);
            }
            return Ok(false);
        };
        // The key that rang names its shard (by its tag) and its entrypoint (after it).
        if let Some((shard, entrypoint)) = core
            .shards
            .iter()
            .find_map(|shard| Some((shard, key.strip_prefix(&shard.keys.wake(""))?)))
        {
            shard.hints.rang(entrypoint);
        }
        Ok(true)
    }

    /// One blocking read per group of keys, concurrently; the key of the first ring. A read
    /// that rings after the wait ended puts its ring back, so that another worker gets it.
    async fn wait_for_any_shard(
        &self,
        groups: Vec<Vec<String>>,
        wait: Duration,
    ) -> Result<Option<String>, StoreError> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(groups.len());
        for keys in groups {
            let store = self.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let popped = store.blocking_pop(&keys, wait).await;
                if let Err(tokio::sync::mpsc::error::SendError(Ok(Some(key)))) =
                    tx.send(popped).await
                {
                    store.ring_again(&key).await;
                }
            });
        }
        drop(tx);
        let mut failure = None;
        let mut rang = None;
        while let Some(popped) = rx.recv().await {
            match popped {
                Ok(Some(key)) => {
                    rang = Some(key);
                    break;
                }
                Ok(None) => {}
                Err(err) => failure = Some(err),
            }
        }
        // Reads still blocked will find the channel closed and put their rings back; rings
        // already delivered but unread are put back here.
        rx.close();
        while let Ok(popped) = rx.try_recv() {
            if let Ok(Some(key)) = popped {
                self.ring_again(&key).await;
            }
        }
        match failure {
            Some(err) if rang.is_none() => Err(err),
            _ => Ok(rang),
        }
    }

    /// Puts back a doorbell ring nobody will act on.
    async fn ring_again(&self, wake_key: &str) {
        let mut pipe = redis::pipe();
        pipe.cmd("LPUSH")
            .arg(wake_key)
            .arg("1")
            .ignore()
            .cmd("PEXPIRE")
            .arg(wake_key)
            .arg(60_000)
            .ignore();
        if let Err(err) = self.pipe::<()>(&pipe).await {
            tracing::debug!(error = %err, "could not put a doorbell ring back");
        }
    }

    /// BLPOP on `keys` for up to `wait`: the key that rang, if one did.
    async fn blocking_pop(
        &self,
        keys: &[String],
        wait: Duration,
    ) -> Result<Option<String>, StoreError> {
        let taken = self.inner.blocking.lock().await.pop();
        let mut conn = match taken {
            Some(conn) => conn,
            // No response timeout here: the server holds the reply for `wait` on purpose; the
            // client-side bound below is `wait` plus the usual timeout.
            None => self.blocking_connection().await?,
        };
        let seconds = wait.as_secs_f64().max(0.01);
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(keys).arg(seconds);
        let bound = wait + self.inner.core.config.timeout;
        let reply: Result<Result<Option<(String, String)>, redis::RedisError>, _> =
            tokio::time::timeout(bound, conn.query(&cmd)).await;
        match reply {
            Ok(Ok(rang)) => {
                self.inner.blocking.lock().await.push(conn);
                Ok(rang.map(|(key, _)| key))
            }
            Ok(Err(err)) => {
                // The spares broke with this one (a Redis restart): open fresh ones next time.
                self.inner.blocking.lock().await.clear();
                Err(err.into())
            }
            Err(_) => Err(StoreError::Unavailable("blocking read timed out".into())),
        }
    }

    /// Listens for cancellations of tasks that `worker_id` holds: yields task ids. Each shard
    /// publishes on its own channel for the worker (in the shard's slot), so this listens on
    /// all of them.
    pub(super) async fn cancellation_feed(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError> {
        let listeners = futures::future::try_join_all(self.inner.core.shards.iter().map(|shard| {
            self.inner
                .dispatcher
                .listen(shard.keys.worker_channel(worker_id))
        }))
        .await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for mut listener in listeners {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(signal) = listener.signals.recv().await {
                    if let subscriber::Signal::Message(id) = signal
                        && tx.send(id).is_err()
                    {
                        break;
                    }
                }
            });
        }
        Ok(rx)
    }
}
