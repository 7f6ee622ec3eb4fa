//! With no OTLP endpoint configured, telemetry set-up installs logging only: the guard reports
//! itself disabled, no export thread starts, and nothing is injected into task records.
//! (Its own test binary: it installs the process-wide log subscriber.)

use telemetry::settings::Settings;
use telemetry::{self, LogFormat};

/// Threads of this process named like the SDK's export threads.
fn export_threads() -> Result<Vec<String>, std::io::Error> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task")? {
        let comm = std::fs::read_to_string(task?.path().join("comm"))?;
        if comm.starts_with("OpenTelemetry") {
            names.push(comm.trim().to_owned());
        }
    }
    Ok(names)
}

#[test]
fn without_an_endpoint_the_guard_is_disabled() -> Result<(), Box<dyn std::error::Error>> {
    // Everything that would shape an export, except an endpoint.
    let settings = Settings::from_lookup("test", |name| {
        let value = match name {
            "OTEL_EXPORTER_OTLP_PROTOCOL" => "grpc",
            "OTEL_TRACES_SAMPLER" => "always_on",
            "OTEL_SERVICE_NAME" => "silent",
            "OTEL_METRIC_EXPORT_INTERVAL" => "10",
            _ => return None,
        };
        Some(value.to_owned())
    });
    let guard = telemetry::init_with(settings, LogFormat::Json)?;
    assert!(!guard.is_enabled());
    assert!(!telemetry::traces_enabled() && !telemetry::metrics_enabled());
    let span = tracing::info_span!("work");
    assert!(telemetry::inject(&span).is_empty());
    assert!(telemetry::traced_span(|| tracing::info_span!("traced only")).is_none());
    assert_eq!(export_threads()?, Vec::<String>::new());
    guard.shutdown();
    Ok(())
}
