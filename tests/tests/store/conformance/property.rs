//! Randomized life cycles: whatever sequence of creates, claims, renewals, hand-offs,
//! activations, cancels, completions, expiries and sweeps runs, the store's own counts agree
//! with its tasks, and a terminal status never changes.
//!
//! "Expired" leases, admissions and run deadlines are given a zero duration: they are dead the
//! moment they are granted, so the sequence decides every outcome and no case depends on timing. The runner
//! uses a fixed seed and no failure file, so every run tries the same cases.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use protocol::{TaskError, TaskStatus};
use serde_json::json;
use store::{Admission, Lease, Phase};

use crate::support::{EMPTY_WAIT, Fx, Harness, LONG, TestResult, progress};

const CASES: u32 = 64;
const MAX_OPS: usize = 60;

#[derive(Debug, Clone)]
enum Op {
    Create {
        reserved: bool,
        expired: bool,
        max_attempts: u32,
    },
    Claim {
        task: Index,
        expired: bool,
    },
    Take {
        expired: bool,
    },
    Renew {
        task: Index,
    },
    HandOff {
        task: Index,
    },
    Activate {
        task: Index,
        expired: bool,
        overrun: bool,
    },
    Emit {
        task: Index,
    },
    Cancel {
        task: Index,
    },
    Complete {
        task: Index,
        fenced: bool,
    },
    Fail {
        task: Index,
    },
    Recover,
    Reap,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), any::<bool>(), 1..=2u32).prop_map(|(reserved, expired, max_attempts)| {
            Op::Create { reserved, expired, max_attempts }
        }),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(task, expired)| Op::Claim { task, expired }),
        4 => any::<bool>().prop_map(|expired| Op::Take { expired }),
        2 => any::<Index>().prop_map(|task| Op::Renew { task }),
        1 => any::<Index>().prop_map(|task| Op::HandOff { task }),
        4 => (any::<Index>(), any::<bool>(), any::<bool>())
            .prop_map(|(task, expired, overrun)| Op::Activate { task, expired, overrun }),
        1 => any::<Index>().prop_map(|task| Op::Emit { task }),
        1 => any::<Index>().prop_map(|task| Op::Cancel { task }),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(task, fenced)| Op::Complete { task, fenced }),
        1 => any::<Index>().prop_map(|task| Op::Fail { task }),
        3 => Just(Op::Recover),
        1 => Just(Op::Reap),
    ]
}

fn fail(error: impl Display) -> TestCaseError {
    TestCaseError::fail(error.to_string())
}

fn ttl(expired: bool) -> Duration {
    if expired { Duration::ZERO } else { LONG }
}

/// What the test remembers between operations: the ids, the latest lease it was granted per
/// task, and what it observed last.
struct Run {
    fx: Fx,
    ids: Vec<String>,
    leases: BTreeMap<String, Lease>,
    terminal: HashMap<String, TaskStatus>,
    seqs: HashMap<String, u64>,
}

impl Run {
    fn pick(&self, task: &Index) -> Option<String> {
        (!self.ids.is_empty()).then(|| self.ids[task.index(self.ids.len())].clone())
    }

    /// One of the leases granted so far (the latest per task), live or not.
    fn held(&self, task: &Index) -> Option<Lease> {
        let n = self.leases.len();
        (n > 0)
            .then(|| self.leases.values().nth(task.index(n)).cloned())
            .flatten()
    }

    async fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let store = self.fx.store.clone();
        match op {
            Op::Create {
                reserved,
                expired,
                max_attempts,
            } => {
                let name = format!("t{}", self.ids.len());
                let admission = if *reserved {
                    Admission::Reserved { ttl: ttl(*expired) }
                } else {
                    Admission::Queued
                };
                let mut new = self.fx.new_task(&name, admission);
                new.max_attempts = *max_attempts;
                let task = store.create(new).await.map_err(fail)?;
                self.ids.push(task.task_id);
            }
            Op::Claim { task, expired } => {
                if let Some(id) = self.pick(task) {
                    let claim = store.claim_execution(&id, "claimer", ttl(*expired)).await;
                    if let Some(claim) = claim.map_err(fail)? {
                        self.leases.insert(id, claim.lease);
                    }
                }
            }
            Op::Take { expired } => {
                if self.fx.queue_depth().await.map_err(fail)? > 0 {
                    let entrypoints = [self.fx.entrypoint.clone()];
                    let claims = store
                        .take_next(&entrypoints, "taker", ttl(*expired), 1, EMPTY_WAIT)
                        .await
                        .map_err(fail)?;
                    prop_assert_eq!(claims.len(), 1, "a non-empty queue yields a task");
                    for claim in claims {
                        self.leases.insert(claim.lease.task_id.clone(), claim.lease);
                    }
                }
            }
            Op::Renew { task } => {
                if let Some(lease) = self.held(task) {
                    let renewed = store.renew_leases(&[lease], LONG).await.map_err(fail)?;
                    prop_assert_eq!(renewed.len(), 1);
                }
            }
            Op::HandOff { task } => {
                if let Some(lease) = self.held(task) {
                    store.hand_off(&lease).await.map_err(fail)?;
                }
            }
            Op::Activate {
                task,
                expired,
                overrun,
            } => {
                if let Some(lease) = self.held(task) {
                    let activation = store
                        .activate_execution(&lease, ttl(*expired), ttl(*overrun))
                        .await
                        .map_err(fail)?;
                    if let Some(activation) = activation {
                        self.leases.insert(lease.task_id, activation.lease);
                    }
                }
            }
            Op::Emit { task } => {
                if let Some(lease) = self.held(task) {
                    store.emit(&lease, progress(0)).await.map_err(fail)?;
                }
            }
            Op::Cancel { task } => {
                if let Some(id) = self.pick(task) {
                    self.fx.cancel(&id).await.map_err(fail)?;
                }
            }
            Op::Complete { task, fenced } => {
                // A worker's fenced write with a lease it was granted, or an unfenced one.
                let target = if *fenced {
                    self.held(task)
                        .map(|lease| (lease.task_id.clone(), Some(lease)))
                } else {
                    self.pick(task).map(|id| (id, None))
                };
                if let Some((id, fence)) = target {
                    let outcome = self.fx.complete(&id, fence.as_ref(), json!(id)).await;
                    outcome.map_err(fail)?;
                }
            }
            Op::Fail { task } => {
                if let Some(id) = self.pick(task) {
                    let error = TaskError::new("internal_error", "boom");
                    let fence = self.leases.get(&id);
                    self.fx.fail(&id, fence, error).await.map_err(fail)?;
                }
            }
            Op::Recover => {
                let report = store.recover_expired(1_000).await.map_err(fail)?;
                for (ids, status, phase) in [
                    (&report.requeued, TaskStatus::Running, Phase::Queued),
                    (&report.failed, TaskStatus::Failed, Phase::Terminal),
                    (&report.cancelled, TaskStatus::Cancelled, Phase::Terminal),
                ] {
                    for id in ids {
                        let stored = self.fx.stored(id).await.map_err(fail)?;
                        prop_assert_eq!((stored.task.status, stored.phase), (status, phase));
                    }
                }
            }
            Op::Reap => {
                store.reap_expired_admissions().await.map_err(fail)?;
            }
        }
        Ok(())
    }

    /// Reads every task back and checks the store's counts and per-task invariants.
    async fn check(&mut self) -> Result<(), TestCaseError> {
        let mut live = 0;
        let mut queued = 0;
        for id in &self.ids {
            let stored = self.fx.stored(id).await.map_err(fail)?;
            let status = stored.task.status;
            let running = status == TaskStatus::Running;
            prop_assert_eq!(running, stored.phase != Phase::Terminal, "{:?}", stored);
            if matches!(stored.phase, Phase::Queued | Phase::Terminal) {
                prop_assert_eq!(&stored.lease, &None, "{:?}", stored);
            }
            live += u64::from(running);
            queued += u64::from(stored.phase == Phase::Queued);
            match self.terminal.get(id) {
                Some(first) => prop_assert_eq!(*first, status, "terminal status changed"),
                None if !running => {
                    self.terminal.insert(id.clone(), status);
                }
                None => {}
            }
            let last_seq = self.seqs.insert(id.clone(), stored.seq).unwrap_or(0);
            prop_assert!(stored.seq >= last_seq.max(1), "seq went back: {:?}", stored);
        }
        prop_assert_eq!(self.fx.store.live_count().await.map_err(fail)?, live);
        prop_assert_eq!(self.fx.queue_depth().await.map_err(fail)?, queued);
        Ok(())
    }
}

async fn run_case(h: &impl Harness, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fx = Fx::new(h).await.map_err(fail)?;
    let mut run = Run {
        fx,
        ids: Vec::new(),
        leases: BTreeMap::new(),
        terminal: HashMap::new(),
        seqs: HashMap::new(),
    };
    for op in &ops {
        run.apply(op).await?;
        run.check().await?;
    }
    // Finish whatever is still running; then nothing may be left that does not expire.
    for id in run.ids.clone() {
        run.fx.cancel(&id).await.map_err(fail)?;
    }
    run.check().await?;
    prop_assert_eq!(run.fx.store.live_count().await.map_err(fail)?, 0);
    h.check_no_leaks().await.map_err(fail)?;
    run.fx.store.close().await;
    Ok(())
}

/// The property: after every operation, `live_count()` equals the number of tasks `get()`
/// reads as running, and `queue_depth()` the number read as queued; once all are finished, no
/// key is leaked.
pub async fn live_count_matches_the_tasks(h: &impl Harness) -> TestResult {
    let handle = tokio::runtime::Handle::current();
    let config = Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let ops = proptest::collection::vec(op(), 1..MAX_OPS);
    // The runner is synchronous: each case blocks this worker thread on the async case.
    let outcome =
        tokio::task::block_in_place(|| runner.run(&ops, |ops| handle.block_on(run_case(h, ops))));
    match outcome {
        Ok(()) => Ok(()),
        Err(TestError::Fail(reason, ops)) => {
            Err(format!("{reason}; minimal failing sequence: {ops:#?}").into())
        }
        Err(error) => Err(error.to_string().into()),
    }
}
