//! What the standard `OTEL_*` environment variables ask for, read once at start-up.
//!
//! Only the decisions this crate makes itself live here: whether each signal is exported at all
//! (an OTLP endpoint variable is set and the SDK is not disabled) and which `service.name` to
//! default to. Everything else (protocol, endpoints, headers, sampler, batch delay, export
//! interval, resource attributes) is read by the OpenTelemetry SDK and exporter themselves,
//! from the same variables.

use std::time::Duration;

/// The signals to export and how; `Settings::default()` exports nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Spans go to an OTLP endpoint.
    pub traces: bool,
    /// Metrics go to an OTLP endpoint.
    pub metrics: bool,
    /// Metrics are kept for a Prometheus scrape (`/metrics`). No `OTEL_*` variable sets it:
    /// the binaries do, from their `--metrics-listen`, so `OTEL_SDK_DISABLED` and
    /// `OTEL_METRICS_EXPORTER=none` leave an asked-for `/metrics` on.
    pub prometheus: bool,
    /// `service.name` to set when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES`
    /// names the service.
    pub default_service_name: Option<String>,
    /// How often metrics are exported (`OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default); values
    /// sampled in the background (cluster gauges) are refreshed about as often.
    pub metric_interval: Duration,
}

impl Settings {
    /// Reads the process environment.
    pub fn from_env(service: &str) -> Settings {
        Settings::from_lookup(service, |name| std::env::var(name).ok())
    }

    /// Reads variables through `lookup` (tests pass a map).
    pub fn from_lookup(service: &str, lookup: impl Fn(&str) -> Option<String>) -> Settings {
        let set = |name: &str| lookup(name).is_some_and(|value| !value.trim().is_empty());
        let disabled = lookup("OTEL_SDK_DISABLED")
            .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"));
        // `OTEL_{TRACES,METRICS}_EXPORTER=none` turns one signal off; any other value means
        // OTLP, the only exporter this build has.
        let exporter_off = |name: &str| {
            lookup(name).is_some_and(|value| value.trim().eq_ignore_ascii_case("none"))
        };
        let generic = set("OTEL_EXPORTER_OTLP_ENDPOINT");
        let traces = !disabled
            && !exporter_off("OTEL_TRACES_EXPORTER")
            && (generic || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
        let metrics = !disabled
            && !exporter_off("OTEL_METRICS_EXPORTER")
            && (generic || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"));
        let named = set("OTEL_SERVICE_NAME")
            || lookup("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attributes| {
                attributes
                    .split(',')
                    .any(|pair| pair.split('=').next().map(str::trim) == Some("service.name"))
            });
        let metric_interval = lookup("OTEL_METRIC_EXPORT_INTERVAL")
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .map_or(Duration::from_secs(60), Duration::from_millis);
        Settings {
            traces,
            metrics,
            prometheus: false,
            default_service_name: (!named).then(|| service.to_owned()),
            metric_interval,
        }
    }

    /// Whether anything is exported or served at all.
    pub fn any(&self) -> bool {
        self.traces || self.metrics || self.prometheus
    }

    /// Whether metrics are recorded: exported over OTLP, served for Prometheus, or both.
    pub fn metrics_recorded(&self) -> bool {
        self.metrics || self.prometheus
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Settings {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup("gateway", |name| vars.get(name).cloned())
    }

    #[test]
    fn nothing_is_exported_without_an_endpoint() {
        let settings = read(&[
            ("OTEL_SERVICE_NAME", "x"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ]);
        assert!(!settings.any());
        assert!(!read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]).any());
    }

    #[test]
    fn the_generic_endpoint_turns_both_signals_on() {
        let settings = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")]);
        assert!(settings.traces && settings.metrics);
        assert_eq!(settings.default_service_name.as_deref(), Some("gateway"));
        assert_eq!(settings.metric_interval, Duration::from_secs(60));
    }

    #[test]
    fn signal_endpoints_turn_on_one_signal() {
        let traces = read(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c/v1/traces")]);
        assert!(traces.traces && !traces.metrics);
        let metrics = read(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c/v1/metrics")]);
        assert!(!metrics.traces && metrics.metrics);
    }

    #[test]
    fn the_sdk_can_be_disabled_whole_or_per_signal() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c");
        assert!(!read(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]).any());
        assert!(read(&[endpoint, ("OTEL_SDK_DISABLED", "false")]).any());
        let no_traces = read(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]);
        assert!(!no_traces.traces && no_traces.metrics);
        let no_metrics = read(&[endpoint, ("OTEL_METRICS_EXPORTER", "none")]);
        assert!(no_metrics.traces && !no_metrics.metrics);
    }

    #[test]
    fn a_service_name_from_the_environment_wins() {
        assert_eq!(
            read(&[("OTEL_SERVICE_NAME", "api")]).default_service_name,
            None
        );
        let attributes = read(&[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod, service.name=api",
        )]);
        assert_eq!(attributes.default_service_name, None);
        let other = read(&[("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=tc")]);
        assert_eq!(other.default_service_name.as_deref(), Some("gateway"));
    }

    #[test]
    fn the_export_interval_is_read_in_milliseconds() {
        let settings = read(&[("OTEL_METRIC_EXPORT_INTERVAL", "250")]);
        assert_eq!(settings.metric_interval, Duration::from_millis(250));
        let bad = read(&[("OTEL_METRIC_EXPORT_INTERVAL", "soon")]);
        assert_eq!(bad.metric_interval, Duration::from_secs(60));
    }
}
