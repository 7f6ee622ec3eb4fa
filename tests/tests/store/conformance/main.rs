//! The store conformance suite: one set of behaviours every [`TaskStore`] must show, run
//! against each store through a [`Harness`] that builds it.
//!
//! - `support`: the `Harness` trait, `StoreCfg`, the per-test fixture and helpers;
//! - one module per theme: `lifecycle`, `leases`, `capacity`, `subscriptions`, `recovery`,
//!   `settlement`, `list`, `property`, `take_finish`, `turns`. Each test is `pub async fn name(h: &impl Harness) -> TestResult`.
//!
//! `conformance_tests!(module, harness_expr)` instantiates every test as a `#[tokio::test]`
//! under `module::<theme>::<test>`, evaluating `harness_expr` once per test. A new test is
//! added to its theme file and to the list in the macro (the compiler flags a test function
//! left out of the list as dead code).

mod capacity;
mod leases;
mod lifecycle;
mod list;
mod property;
mod recovery;
mod settlement;
mod subscriptions;
mod support;
mod take_finish;
mod turns;

use std::sync::Arc;

use store::{MemoryStore, MemoryStoreConfig, TaskStore};

use crate::support::{BoxError, Harness, StoreCfg};

macro_rules! conformance_tests {
    ($store:ident, $harness:expr) => {
        conformance_tests!(@store $store, $harness;
            lifecycle {
                create_queues_a_running_task,
                create_reserves_a_paid_task,
                trace_context_and_creation_time_reach_the_claim,
                duplicate_ids_are_refused,
                missing_tasks_read_as_none,
                a_run_publishes_exactly_one_result_update,
                a_failure_persists_its_error_and_publishes_it,
                cancel_during_execution_wins_over_completion,
                cancelling_a_queued_task_empties_its_queue_slot,
                compare_and_set_checks_the_expected_status,
                claiming_clears_the_admission_expiry,
                claiming_an_expired_admission_cancels_it,
                hand_off_releases_the_claim_to_the_queue,
                a_failed_completion_leaves_the_task_recoverable,
                take_next_wakes_when_a_task_is_queued,
                take_next_honours_max_entrypoints_and_fifo,
                terminal_tasks_vanish_after_retention,
            }
            leases {
                fifty_concurrent_claimers_one_winner,
                fifty_concurrent_takers_one_winner,
                a_live_claim_blocks_other_claimers,
                every_claim_gets_a_new_epoch,
                an_expired_lease_is_dead,
                stale_writes_are_fenced_after_recovery,
                a_stale_prepared_claim_cannot_activate,
                a_lease_fences_only_its_own_task,
                heartbeat_keeps_a_prepared_claim_alive,
                renewals_by_phase,
                emit_numbers_events_while_the_lease_holds,
            }
            capacity {
                a_third_live_task_exceeds_max_tasks_two,
                terminal_tasks_never_block_creation,
                reaping_happens_before_capacity_is_enforced,
                an_expired_active_lease_keeps_its_slot,
                finishing_a_task_frees_its_slot,
            }
            subscriptions {
                owner_isolation_across_reads,
                subscribe_then_snapshot_misses_nothing,
                replay_resumes_after_a_sequence_number,
                a_finished_task_replays_exactly_what_it_published,
                events_of_other_tasks_stay_out,
                dropping_a_subscription_leaves_the_others,
            }
            recovery {
                an_expired_claim_after_hand_off_is_requeued,
                an_abandoned_run_is_retried_then_failed,
                a_run_past_its_deadline_times_out,
                expired_reservations_and_early_claims_are_cancelled,
                reaping_spares_active_leases,
                recovery_follows_deadlines_and_limit,
                live_work_is_left_alone,
                concurrent_sweeps_recover_each_task_once,
                a_receipt_commits_a_claimed_reservation_to_run,
                a_late_receipt_is_attached_to_the_reaped_task,
            }
            settlement {
                a_held_claim_outlives_its_deadline_untouched,
                a_recovered_receipt_commits_a_held_task_to_run,
                the_holders_receipt_hands_a_held_task_off,
                a_held_task_can_be_cancelled,
                holding_is_fenced,
            }
            list {
                lists_the_owners_tasks_newest_first,
                filters_by_context_and_status,
                pages_with_total_and_has_more,
                the_default_page_holds_fifty,
                selects_by_small_fields_newest_update_first,
            }
            property {
                live_count_matches_the_tasks,
            }
            take_finish {
                take_active_claims_and_activates,
                take_active_counts_attempts_after_recovery,
                a_take_without_waiting_finds_what_was_queued_after_the_queue_ran_dry,
                finish_and_take_starts_the_next_task,
                a_fenced_out_finish_is_never_lost_or_applied,
                concurrent_finish_and_take_hands_each_task_out_once,
                create_watched_follows_the_run_from_its_first_event,
            }
            turns {
                a_run_can_wait_for_input_and_be_resumed,
                a_waiting_task_can_be_cancelled,
                await_input_is_fenced,
                concurrent_resumes_resume_once,
                recovery_leaves_a_waiting_task_alone,
                an_unanswered_request_times_out,
                an_answer_clears_the_waiting_deadline,
            }
        );
    };
    (@store $store:ident, $harness:expr; $($theme:ident { $($test:ident),* $(,)? })*) => {
        mod $store {
            $(
                mod $theme {
                    #[allow(unused_imports)]
                    use crate::*;

                    $(
                        // Multi-threaded: the race tests need real parallelism, and the property
                        // test blocks a worker thread on each case.
                        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                        async fn $test() -> crate::support::TestResult {
                            let harness = $harness;
                            crate::$theme::$test(&harness).await
                        }
                    )*
                }
            )*
        }
    };
}

/// The in-memory store on the system clock.
struct MemoryHarness;

impl Harness for MemoryHarness {
    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let config = MemoryStoreConfig {
            max_tasks: cfg.max_tasks,
            retention: cfg.retention,
            ..MemoryStoreConfig::default()
        };
        Ok(Arc::new(MemoryStore::new(config)))
    }
}

conformance_tests!(memory, MemoryHarness);

/// The Redis store on a private `redis-server` owned by the harness (one per test); each
/// `store()` call gets a namespace of its own, so stores of one test share nothing. `shards`
/// splits each namespace (one server does not check slots: the cluster suite below does).
struct RedisHarness {
    server: harness::redis_server::RedisServer,
    shards: u16,
    /// Namespace of the latest store, for the leak check.
    namespace: std::sync::Mutex<String>,
}

impl RedisHarness {
    fn new() -> Self {
        Self::sharded(1)
    }

    fn sharded(shards: u16) -> Self {
        match harness::redis_server::RedisServer::start() {
            Ok(server) => RedisHarness {
                server,
                shards,
                namespace: Default::default(),
            },
            Err(err) => panic!("cannot start redis-server for the suite: {err}"),
        }
    }
}

impl Harness for RedisHarness {
    fn shards(&self) -> usize {
        usize::from(self.shards)
    }

    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let mut config = store::RedisStoreConfig::new(self.server.url());
        config.namespace = format!("t{}", protocol::token::AccessToken::generate().expose());
        config.shards = self.shards;
        if let Ok(mut latest) = self.namespace.lock() {
            latest.clone_from(&config.namespace);
        }
        config.max_tasks = cfg.max_tasks;
        config.retention = cfg.retention;
        config.pool_size = 8;
        Ok(Arc::new(store::RedisStore::connect(config).await?))
    }

    /// With every task terminal, each key left must expire by itself: task records, event logs
    /// owner indexes and the retained-task index within retention, doorbells within a minute; the live set, lease and
    /// admission deadlines, queues and per-owner live counters must be gone. Only the
    /// namespace's layout stamp stays.
    async fn check_no_leaks(&self) -> Result<(), BoxError> {
        let namespace = latest(&self.namespace);
        let mut conn = self.server.client().await?;
        for tag in hash_tags(&namespace, self.shards) {
            no_leaks(&tag, &mut conn).await?;
        }
        Ok(())
    }
}

/// The hash tags (as `Keys::new` takes them) of a namespace split into `shards`: its own and,
/// when sharded, each shard's.
fn hash_tags(namespace: &str, shards: u16) -> Vec<String> {
    let mut tags = vec![namespace.to_owned()];
    if shards > 1 {
        let count = usize::from(shards);
        tags.extend((0..count).map(|shard| store::redis::shard_tag(namespace, shard, count)));
    }
    tags
}

/// The namespace of the latest store a harness made.
fn latest(namespace: &std::sync::Mutex<String>) -> String {
    namespace.lock().map(|ns| ns.clone()).unwrap_or_default()
}

/// The leak check of one hash tag of a namespace (the namespace's own, or a shard's) on the
/// server (or cluster node) that holds it.
async fn no_leaks(tag: &str, conn: &mut impl ::redis::aio::ConnectionLike) -> Result<(), BoxError> {
    let keys = store::redis::Keys::new(tag);
    let found: Vec<String> = ::redis::cmd("KEYS")
        .arg(keys.all_pattern())
        .query_async(conn)
        .await?;
    let retention_ms = i64::try_from(store::DEFAULT_RETENTION.as_millis())?;
    for key in found {
        let ttl: i64 = ::redis::cmd("PTTL").arg(&key).query_async(conn).await?;
        // `{tag}:kind:...`, where a shard's tag holds a colon too.
        let kind = key
            .split_once("}:")
            .and_then(|(_, rest)| rest.split(':').next())
            .unwrap_or_default();
        if key == keys.layout() && ttl == -1 {
            // The namespace's layout stamp: one key, kept for good (schema.rs).
            continue;
        }
        let bound = match kind {
            "task" | "events" | "owner" => retention_ms,
            // `terminal`: the retained-task index, expiring with its last entry, up to a
            // second later (TERMINAL_SLACK_MS in finish_task.lua).
            "terminal" => retention_ms + 1_000,
            "wake" => 60_000,
            // A script call's reply key on a cluster (replay.rs), deleted by the next call or
            // by its TTL.
            "rp" => i64::try_from(store::redis::REPLAY_TTL.as_millis())?,
            _ => return Err(format!("{key} outlives every task").into()),
        };
        if !(1..=bound).contains(&ttl) {
            return Err(format!("{key} would not expire (PTTL {ttl})").into());
        }
    }
    Ok(())
}

conformance_tests!(redis, RedisHarness::new());

conformance_tests!(redis_sharded, RedisHarness::sharded(3));

/// The Redis store on a real local Redis Cluster (three masters, no replicas: the conformance
/// suite checks the store, the chaos run and the failover tests check the cluster) owned by the
/// harness, one per test. Each namespace is split into three shards, whose hash tags land in
/// slots of different masters as the hash falls: every script and pipeline must stay within
/// one slot (the cluster refuses CROSSSLOT), and the store must work through the cluster
/// client's routing.
struct RedisClusterHarness {
    cluster: harness::redis_cluster::RedisCluster,
    namespace: std::sync::Mutex<String>,
}

impl RedisClusterHarness {
    fn new() -> Self {
        match harness::redis_cluster::RedisCluster::start(3, 0) {
            Ok(cluster) => RedisClusterHarness {
                cluster,
                namespace: Default::default(),
            },
            Err(err) => panic!("cannot start a Redis Cluster for the suite: {err}"),
        }
    }
}

/// Shards of each namespace of the cluster suite.
const CLUSTER_SHARDS: u16 = 3;

impl Harness for RedisClusterHarness {
    fn shards(&self) -> usize {
        usize::from(CLUSTER_SHARDS)
    }

    async fn store(&self, cfg: StoreCfg) -> Result<Arc<dyn TaskStore>, BoxError> {
        let mut config = store::RedisStoreConfig::new(String::new());
        config.cluster_urls = self.cluster.urls();
        config.namespace = format!("t{}", protocol::token::AccessToken::generate().expose());
        config.shards = CLUSTER_SHARDS;
        if let Ok(mut latest) = self.namespace.lock() {
            latest.clone_from(&config.namespace);
        }
        config.max_tasks = cfg.max_tasks;
        config.retention = cfg.retention;
        Ok(Arc::new(store::RedisStore::connect(config).await?))
    }

    async fn check_no_leaks(&self) -> Result<(), BoxError> {
        let namespace = latest(&self.namespace);
        for tag in hash_tags(&namespace, CLUSTER_SHARDS) {
            let layout = store::redis::Keys::new(&tag).layout();
            let owner = self.cluster.master_of_key(&layout)?;
            let mut conn = self.cluster.node(owner)?.client().await?;
            no_leaks(&tag, &mut conn).await?;
        }
        Ok(())
    }
}

conformance_tests!(redis_cluster, RedisClusterHarness::new());
