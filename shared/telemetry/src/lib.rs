//! OpenTelemetry traces and metrics, and the log set-up of the gateway and worker binaries.
//!
//! Off unless an OTLP endpoint variable is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, or the
//! `_TRACES_`/`_METRICS_` one) or a binary asks for `/metrics` ([`settings::Settings::prometheus`]):
//! otherwise no exporter, no background thread, and the only cost left on hot paths is a
//! relaxed atomic load per instrumented call ([`traces_enabled`], [`metrics_enabled`]).
//!
//! - [`settings`]: what the `OTEL_*` variables ask for (always compiled, no dependencies);
//! - `setup` (feature `sdk`): [`init`] builds the providers, OTLP exporters (HTTP/protobuf
//!   or gRPC, per `OTEL_EXPORTER_OTLP_PROTOCOL`) and the `tracing` subscriber, and returns the
//!   [`Telemetry`] guard whose [`Telemetry::shutdown`] flushes on exit;
//! - `logs`: log lines carry `trace_id`/`span_id` of the span they are written in;
//! - `context`: W3C trace context in and out of HTTP headers and task records;
//! - `metrics`: the service's instruments, by the names dashboards use;
//! - [`tally`]: what this process did since the console's stats publisher last asked
//!   (always on, no OpenTelemetry; the `metrics` recorders feed it).
//!
//! Spans themselves are plain `tracing` spans (with `otel.kind`, `otel.name` and semantic
//! convention fields), so library code such as the Redis store needs no OpenTelemetry types.

pub mod settings;
pub mod tally;

#[cfg(feature = "sdk")]
mod context;
#[cfg(feature = "sdk")]
mod logs;
#[cfg(feature = "sdk")]
pub mod metrics;
#[cfg(feature = "sdk")]
pub mod prometheus;
#[cfg(feature = "sdk")]
mod setup;

#[cfg(feature = "sdk")]
pub use context::{continue_remote, follow_producer, inject};
#[cfg(feature = "sdk")]
pub use logs::WithTraceIds;
#[cfg(feature = "sdk")]
pub use prometheus::Exposition;
#[cfg(feature = "sdk")]
pub use setup::{LogFormat, Telemetry, TelemetryError, init, init_with};

use std::sync::atomic::{AtomicBool, Ordering};

static TRACES: AtomicBool = AtomicBool::new(false);
static METRICS: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: instrumentation that costs more than a `tracing` span (an extra
/// span per Redis call, trace-context injection) checks this first.
pub fn traces_enabled() -> bool {
    TRACES.load(Ordering::Relaxed)
}

/// `make()` when spans are exported, else a disabled span: spans that exist for tracing only
/// (with many semantic-convention fields) then cost nothing and add nothing to log lines.
pub fn traced_span(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if traces_enabled() {
        make()
    } else {
        tracing::Span::none()
    }
}

/// Whether metrics are recorded (exported over OTLP, served on `/metrics`, or both);
/// recording is skipped entirely otherwise.
pub fn metrics_enabled() -> bool {
    METRICS.load(Ordering::Relaxed)
}

#[cfg(feature = "sdk")]
fn set_enabled(traces: bool, metrics: bool) {
    TRACES.store(traces, Ordering::Relaxed);
    METRICS.store(metrics, Ordering::Relaxed);
}
