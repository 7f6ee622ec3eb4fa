//! The service's metrics, under the names its dashboards use. Every recorder returns at once
//! when metrics are off ([`super::metrics_enabled`]), before building any attribute.
//!
//! | name | kind | attributes |
//! |---|---|---|
//! | `taskcluster.tasks.admitted` | counter | `entrypoint` |
//! | `taskcluster.tasks.finished` | counter | `entrypoint`, `status` |
//! | `taskcluster.tasks.recovered` | counter | `entrypoint`, `outcome` |
//! | `taskcluster.fenced_writes.rejected` | counter | `entrypoint`, `operation` |
//! | `taskcluster.task.queue_wait` | histogram, s | `entrypoint` |
//! | `taskcluster.task.run_time` | histogram, s | `entrypoint`, `status` |
//! | `taskcluster.task.end_to_end` | histogram, s | `entrypoint`, `status` |
//! | `taskcluster.queue.depth` | gauge | `entrypoint` |
//! | `taskcluster.tasks.live`, `taskcluster.leases.active` | gauge | |
//! | `taskcluster.workers.live`, `taskcluster.workers.capacity` | gauge | |
//! | `taskcluster.store.memory.fill` | gauge, 1 | `node` |
//! | `taskcluster.store.memory.high_water` | gauge, 1 | |
//! | `taskcluster.settlements.unreconciled` | gauge | |
//! | `taskcluster.admissions.refused` | counter | `reason` |
//! | `taskcluster.push.deliveries` | counter | `outcome` (`delivered`, `retried`, `exhausted`, `dropped`) |
//! | `taskcluster.push.delivery_time` | histogram, s | `outcome` |
//! | `http.server.request.duration` | histogram, s | `http.request.method`, `http.route`, `http.response.status_code`, `url.scheme` |
//! | `http.server.active_requests` | up-down counter | `http.request.method`, `url.scheme` |
//!
//! The cluster gauges (queue depth, live tasks, leases, workers, capacity, memory fill) are
//! the cluster's, not the process's: one process reports them ([`register_cluster_gauges`]).
//! On `/metrics` ([`crate::prometheus`]) the names follow the OpenTelemetry-to-Prometheus
//! conventions: `taskcluster_tasks_finished_total`, `taskcluster_task_end_to_end_seconds`,
//! `taskcluster_store_memory_fill_ratio`, `http_server_request_duration_seconds`, ...

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::global;
use opentelemetry::metrics::{Counter, Gauge, Histogram, ObservableGauge, UpDownCounter};
use opentelemetry_semantic_conventions::attribute as semconv;
use opentelemetry_semantic_conventions::metric as semconv_metric;

use protocol::{Task, TaskStatus};

/// Bucket bounds for task durations: milliseconds for short handlers up to an hour for long
/// ones (the default run limit is 15 minutes).
const TASK_BUCKETS: [f64; 19] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    900.0, 1800.0, 3600.0,
];
/// The HTTP semantic conventions' recommended bounds for request durations.
const HTTP_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

struct Instruments {
    admitted: Counter<u64>,
    finished: Counter<u64>,
    recovered: Counter<u64>,
    fenced: Counter<u64>,
    queue_wait: Histogram<f64>,
    run_time: Histogram<f64>,
    end_to_end: Histogram<f64>,
    http_duration: Histogram<f64>,
    http_active: UpDownCounter<i64>,
    unreconciled: Gauge<u64>,
    high_water: Gauge<f64>,
    refused: Counter<u64>,
    push: Counter<u64>,
    push_time: Histogram<f64>,
}

/// Built on first use, after [`super::init`] installed the meter provider.
fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = global::meter("taskcluster");
        let seconds = |name: &'static str, description: &'static str, buckets: &[f64]| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(buckets.to_vec())
                .build()
        };
        Instruments {
            admitted: meter
                .u64_counter("taskcluster.tasks.admitted")
                .with_description("Tasks created (POST /tasks, invoke, stream)")
                .build(),
            finished: meter
                .u64_counter("taskcluster.tasks.finished")
                .with_description("Terminal writes: completed, failed or cancelled")
                .build(),
            recovered: meter
                .u64_counter("taskcluster.tasks.recovered")
                .with_description("Tasks settled by a recovery sweep after their lease expired")
                .build(),
            fenced: meter
                .u64_counter("taskcluster.fenced_writes.rejected")
                .with_description("Writes refused because the writer's lease was no longer current")
                .build(),
            queue_wait: seconds(
                "taskcluster.task.queue_wait",
                "From creation to the start of the first run",
                &TASK_BUCKETS,
            ),
            run_time: seconds(
                "taskcluster.task.run_time",
                "From activation to the run's terminal write",
                &TASK_BUCKETS,
            ),
            end_to_end: seconds(
                "taskcluster.task.end_to_end",
                "From creation to the terminal status",
                &TASK_BUCKETS,
            ),
            http_duration: seconds(
                semconv_metric::HTTP_SERVER_REQUEST_DURATION,
                "Duration of HTTP server requests",
                &HTTP_BUCKETS,
            ),
            http_active: meter
                .i64_up_down_counter(semconv_metric::HTTP_SERVER_ACTIVE_REQUESTS)
                .with_unit("{request}")
                .with_description("Active HTTP server requests")
                .build(),
            unreconciled: meter
                .u64_gauge("taskcluster.settlements.unreconciled")
                .with_unit("{credential}")
                .with_description(
                    "Payment credentials left settling past any settle call whose outcome the \
                     last settlement recovery sweep did not learn (their tasks stay held)",
                )
                .build(),
            high_water: meter
                .f64_gauge("taskcluster.store.memory.high_water")
                .with_unit("1")
                .with_description(
                    "The gateway's store memory high-water mark (REDIS_MEMORY_HIGH_WATER) as a \
                     fraction of maxmemory: past it, new tasks are refused. Compare with \
                     taskcluster.store.memory.fill",
                )
                .build(),
            refused: meter
                .u64_counter("taskcluster.admissions.refused")
                .with_description("New tasks a gateway refused before storing them")
                .build(),
            push: meter
                .u64_counter("taskcluster.push.deliveries")
                .with_description(
                    "A2A push notification attempts by outcome: delivered, retried (a failure \
                     with attempts left) or exhausted (given up, kept for inspection); dropped: \
                     events a full outbox dropped before they were delivered",
                )
                .build(),
            push_time: seconds(
                "taskcluster.push.delivery_time",
                "One push notification attempt, from its request to the receiver's answer",
                &HTTP_BUCKETS,
            ),
        }
    })
}

fn entrypoint(name: &str) -> KeyValue {
    KeyValue::new("entrypoint", name.to_owned())
}

fn status(status: TaskStatus) -> KeyValue {
    KeyValue::new("status", status.as_str())
}

/// A task was created.
pub fn task_admitted(name: &str) {
    super::tally::admitted();
    if super::metrics_enabled() {
        instruments().admitted.add(1, &[entrypoint(name)]);
    }
}

/// A terminal write applied: counts it and records creation → terminal from the store's
/// timestamps.
pub fn task_finished(name: &str, task: &Task) {
    if let Some(error) = &task.error {
        super::tally::failure(&task.task_id, name, &error.code);
    }
    let elapsed_ms = task.updated_at.0.saturating_sub(task.created_at.0);
    task_settled(name, task.status, Some(Duration::from_millis(elapsed_ms)));
}

/// A task reached `outcome` (a terminal status); `end_to_end` is creation → terminal when the
/// writer knows it (a recovery sweep does not read the task's timestamps).
pub fn task_settled(name: &str, outcome: TaskStatus, end_to_end: Option<Duration>) {
    super::tally::finished(outcome, end_to_end);
    if !super::metrics_enabled() || !outcome.is_terminal() {
        return;
    }
    let attributes = [entrypoint(name), status(outcome)];
    let instruments = instruments();
    instruments.finished.add(1, &attributes);
    if let Some(elapsed) = end_to_end {
        instruments
            .end_to_end
            .record(elapsed.as_secs_f64(), &attributes);
    }
}

/// A recovery sweep settled a task whose lease expired: `outcome` is `requeued`, `failed` or
/// `cancelled`.
pub fn task_recovered(name: &str, outcome: &'static str) {
    super::tally::recovered();
    if super::metrics_enabled() {
        instruments()
            .recovered
            .add(1, &[entrypoint(name), KeyValue::new("outcome", outcome)]);
    }
}

/// A write carrying a lease was refused because the lease is no longer current (another worker
/// holds the task, or it is finished): `operation` is `activate`, `renew`, `emit` or `finish`.
pub fn fenced_write_rejected(name: &str, operation: &'static str) {
    if super::metrics_enabled() {
        instruments().fenced.add(
            1,
            &[entrypoint(name), KeyValue::new("operation", operation)],
        );
    }
}

/// A push notification attempt ended: `delivered`, `retried` or `exhausted`.
pub fn push_delivery(outcome: &'static str, took: Duration) {
    if super::metrics_enabled() {
        let instruments = instruments();
        let attributes = [KeyValue::new("outcome", outcome)];
        instruments.push.add(1, &attributes);
        instruments
            .push_time
            .record(took.as_secs_f64(), &attributes);
    }
}

/// `events` a full push outbox dropped before they were delivered (counted by the store,
/// taken by one deliverer).
pub fn push_dropped(events: u64) {
    if super::metrics_enabled() && events > 0 {
        instruments()
            .push
            .add(events, &[KeyValue::new("outcome", "dropped")]);
    }
}

/// Creates the push delivery counters at zero (a gateway that delivers push notifications),
/// so that the first exhausted delivery is an increase `increase()` can see.
pub fn prime_push_counters() {
    if super::metrics_enabled() {
        for outcome in ["delivered", "retried", "exhausted", "dropped"] {
            instruments()
                .push
                .add(0, &[KeyValue::new("outcome", outcome)]);
        }
    }
}

/// Creates the worker-side counters of `entrypoints` at zero (finished by status, recovered by
/// outcome, fenced writes by operation), so that their first event is an increase Prometheus'
/// `increase()`/`rate()` can see: a series that first appears at 1 counts nothing.
pub fn prime_worker_counters<'a>(entrypoints: impl IntoIterator<Item = &'a str>) {
    if !super::metrics_enabled() {
        return;
    }
    let instruments = instruments();
    for name in entrypoints {
        for outcome in [
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            instruments
                .finished
                .add(0, &[entrypoint(name), status(outcome)]);
        }
        for outcome in ["requeued", "failed", "cancelled"] {
            instruments
                .recovered
                .add(0, &[entrypoint(name), KeyValue::new("outcome", outcome)]);
        }
        for operation in ["activate", "renew", "emit", "finish", "stale"] {
            instruments.fenced.add(
                0,
                &[entrypoint(name), KeyValue::new("operation", operation)],
            );
        }
    }
}

/// The store memory high-water mark this gateway admits under, as a fraction (a setting, so
/// each gateway reports its own; they are normally equal).
pub fn store_memory_high_water(ratio: f64) {
    if super::metrics_enabled() {
        instruments().high_water.record(ratio, &[]);
    }
}

/// What one settlement recovery sweep left unresolved: credentials `settling` past any settle
/// call whose outcome it could not learn (the facilitator offers no lookup, or the lookup
/// failed). Their paid tasks stay held until someone reconciles them.
pub fn settlements_unreconciled(count: u64) {
    if super::metrics_enabled() {
        instruments().unreconciled.record(count, &[]);
    }
}

/// A new task was refused before it was stored; `reason` is `store_memory` (the store is past
/// its memory high-water mark).
pub fn admission_refused(reason: &'static str) {
    if super::metrics_enabled() {
        instruments()
            .refused
            .add(1, &[KeyValue::new("reason", reason)]);
    }
}

/// Time a task waited from creation to its first activation.
pub fn queue_wait(name: &str, waited: Duration) {
    if super::metrics_enabled() {
        instruments()
            .queue_wait
            .record(waited.as_secs_f64(), &[entrypoint(name)]);
    }
}

/// How long a run took from activation to its outcome.
pub fn run_time(name: &str, outcome: TaskStatus, took: Duration) {
    if super::metrics_enabled() {
        instruments()
            .run_time
            .record(took.as_secs_f64(), &[entrypoint(name), status(outcome)]);
    }
}

/// One HTTP request served. `route` is the matched route template, `None` when nothing matched
/// (then it is left out, as the conventions ask, to keep the series bounded).
pub fn http_request(method: &str, route: Option<&str>, status_code: u16, took: Duration) {
    if !super::metrics_enabled() {
        return;
    }
    let mut attributes = vec![
        KeyValue::new(semconv::HTTP_REQUEST_METHOD, method.to_owned()),
        KeyValue::new(semconv::HTTP_RESPONSE_STATUS_CODE, i64::from(status_code)),
        KeyValue::new(semconv::URL_SCHEME, "http"),
    ];
    if let Some(route) = route {
        attributes.push(KeyValue::new(semconv::HTTP_ROUTE, route.to_owned()));
    }
    instruments()
        .http_duration
        .record(took.as_secs_f64(), &attributes);
}

/// Counts a request in (`+1`) or out (`-1`) of `http.server.active_requests`.
pub fn http_active(method: &str, delta: i64) {
    if super::metrics_enabled() {
        instruments().http_active.add(
            delta,
            &[
                KeyValue::new(semconv::HTTP_REQUEST_METHOD, method.to_owned()),
                KeyValue::new(semconv::URL_SCHEME, "http"),
            ],
        );
    }
}

/// Cluster-wide values sampled in the background by the process that reports them; the
/// gauges' callbacks only read these, so an export or a scrape never waits on Redis.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ClusterSample {
    /// Ready-queue length by entrypoint.
    pub queue_depth: Vec<(String, u64)>,
    /// Non-terminal tasks in the cluster (what `MAX_TASKS` bounds).
    pub tasks_live: Option<u64>,
    /// Live leases (prepared and active) in the cluster, when the store counts them.
    pub leases_active: Option<u64>,
    /// Workers with a live registry entry, when there is a registry.
    pub workers_live: Option<u64>,
    /// The sum of those workers' concurrency: tasks the cluster runs at once.
    pub workers_capacity: Option<u64>,
    /// `used_memory / maxmemory` per store server with a `maxmemory` (`host:port` of a
    /// cluster master, or `server`).
    pub memory_fill: Vec<(String, f64)>,
}

/// The latest [`ClusterSample`]; empty (the gauges report nothing) until the first one, and
/// again after [`ClusterGauges::clear`] (this process stopped reporting).
#[derive(Default)]
pub struct ClusterGauges {
    latest: Mutex<Option<ClusterSample>>,
}

impl ClusterGauges {
    pub fn update(&self, sample: ClusterSample) {
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(sample);
    }

    /// No values any more: another process reports the cluster now (or nobody can tell).
    pub fn clear(&self) {
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn read<T>(&self, f: impl FnOnce(&ClusterSample) -> T) -> Option<T> {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(f)
    }
}

/// The registered gauges; they report while this is kept.
pub struct ClusterGaugeHandles {
    _counts: Vec<ObservableGauge<u64>>,
    _fill: ObservableGauge<f64>,
}

/// Registers the cluster gauges, read from `gauges`: `taskcluster.queue.depth`,
/// `taskcluster.tasks.live`, `taskcluster.leases.active`, `taskcluster.workers.live`,
/// `taskcluster.workers.capacity` and `taskcluster.store.memory.fill`. They observe nothing
/// while `gauges` holds no sample, so a process that does not report the cluster exports none
/// of them. `None` when metrics are off.
pub fn register_cluster_gauges(gauges: Arc<ClusterGauges>) -> Option<ClusterGaugeHandles> {
    if !super::metrics_enabled() {
        return None;
    }
    let meter = global::meter("taskcluster");
    let depth = gauges.clone();
    let count = |name: &'static str,
                 unit: &'static str,
                 description: &'static str,
                 read: fn(&ClusterSample) -> Option<u64>| {
        let gauges = gauges.clone();
        meter
            .u64_observable_gauge(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(move |observer| {
                if let Some(value) = gauges.read(read).flatten() {
                    observer.observe(value, &[]);
                }
            })
            .build()
    };
    let counts = vec![
        meter
            .u64_observable_gauge("taskcluster.queue.depth")
            .with_unit("{task}")
            .with_description("Tasks waiting in each entrypoint's ready queue (cluster-wide)")
            .with_callback(move |observer| {
                depth.read(|sample| {
                    for (name, depth) in &sample.queue_depth {
                        observer.observe(*depth, &[entrypoint(name)]);
                    }
                });
            })
            .build(),
        count(
            "taskcluster.tasks.live",
            "{task}",
            "Non-terminal tasks in the cluster (queued, running or waiting)",
            |sample| sample.tasks_live,
        ),
        count(
            "taskcluster.leases.active",
            "{lease}",
            "Live task leases in the cluster",
            |sample| sample.leases_active,
        ),
        count(
            "taskcluster.workers.live",
            "{worker}",
            "Workers with a live registry entry",
            |sample| sample.workers_live,
        ),
        count(
            "taskcluster.workers.capacity",
            "{task}",
            "Tasks the live workers run at once (the sum of their concurrency)",
            |sample| sample.workers_capacity,
        ),
    ];
    let fill = gauges.clone();
    let fill = meter
        .f64_observable_gauge("taskcluster.store.memory.fill")
        .with_unit("1")
        .with_description(
            "Redis used_memory / maxmemory per server (every master of a cluster) with a \
             maxmemory",
        )
        .with_callback(move |observer| {
            fill.read(|sample| {
                for (node, ratio) in &sample.memory_fill {
                    observer.observe(*ratio, &[KeyValue::new("node", node.clone())]);
                }
            });
        })
        .build();
    Some(ClusterGaugeHandles {
        _counts: counts,
        _fill: fill,
    })
}
