//! `/metrics`: the instruments of [`crate::metrics`] in the Prometheus text format, for a
//! Prometheus that scrapes the processes directly (no collector in between).
//!
//! `opentelemetry-prometheus` is a second reader on the one meter provider, beside the OTLP
//! exporter when that is configured, so both paths carry the same instruments under the names
//! the OpenTelemetry-to-Prometheus conventions give them, and one dashboard serves both:
//! dots become underscores, the unit becomes a suffix (`s` → `_seconds`, `1` → `_ratio`;
//! annotations such as `{task}` add nothing) and monotonic counters end in `_total`
//! (`taskcluster.tasks.finished` → `taskcluster_tasks_finished_total`,
//! `taskcluster.task.end_to_end` → `taskcluster_task_end_to_end_seconds_bucket`).
//!
//! Two choices of the exporter's defaults are ours:
//! - no `otel_scope_name`/`otel_scope_version` label on every series: the service has one
//!   meter (`taskcluster`), so the labels would only cost bytes on every sample;
//! - `target_info` stays: one series per process with the resource (`service_name`,
//!   `service_version`, what `OTEL_RESOURCE_ATTRIBUTES` adds), to join on when needed.
//!
//! A render reads the SDK's aggregates (the cluster gauges' callbacks only read memory) and
//! writes them out; its size is bounded by the label sets, which are bounded where they are
//! recorded: entrypoints come from the catalog, routes are templates, methods a fixed set.

use prometheus::TextEncoder;

/// What a scrape answers with when rendering failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot render the metrics in the Prometheus text format: {0}")]
pub struct RenderError(#[from] prometheus::Error);

/// The metrics of this process, ready to be rendered for a scrape. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Exposition {
    registry: prometheus::Registry,
}

impl Exposition {
    /// A registry with the exporter in it, and the reader to add to the meter provider.
    pub(crate) fn new() -> Result<
        (Exposition, opentelemetry_prometheus::PrometheusExporter),
        opentelemetry_sdk::error::OTelSdkError,
    > {
        let registry = prometheus::Registry::new();
        let reader = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .scope_info_enabled(false)
            .build()?;
        Ok((Exposition { registry }, reader))
    }

    /// The `Content-Type` of [`Exposition::render`]'s text (format 0.0.4, UTF-8).
    pub fn content_type(&self) -> &'static str {
        "text/plain; version=0.0.4; charset=utf-8"
    }

    /// Every metric of the process as of now, in the text format.
    pub fn render(&self) -> Result<String, RenderError> {
        let families = self.registry.gather();
        let mut text = String::with_capacity(16 * 1024);
        TextEncoder::new().encode_utf8(&families, &mut text)?;
        Ok(text)
    }
}
