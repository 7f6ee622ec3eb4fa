//! Building the providers, exporters and the `tracing` subscriber.

use opentelemetry::global;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{ExporterBuildError, MetricExporter, SpanExporter};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use super::logs::WithTraceIds;
use super::prometheus::Exposition;
use super::settings::Settings;

/// Crates whose spans and events become OpenTelemetry spans and span events. Dependencies
/// stay out: the exporters' own HTTP and gRPC clients would otherwise trace their exports.
/// These are crate (target) names: a crate of the workspace that records spans of its own must
/// be listed here, or its spans are dropped (the store's Redis script spans live in `store`).
const TRACED_CRATES: [&str; 4] = ["gateway", "worker", "store", "server"];

/// The log line format (`LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// `json` is JSON; anything else is text.
    pub fn parse(text: &str) -> LogFormat {
        if text.trim().eq_ignore_ascii_case("json") {
            LogFormat::Json
        } else {
            LogFormat::Text
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot build the OTLP {signal} exporter: {source}")]
    Exporter {
        signal: &'static str,
        source: ExporterBuildError,
    },
    #[error("cannot set up the Prometheus exposition: {0}")]
    Prometheus(opentelemetry_sdk::error::OTelSdkError),
    #[error("cannot install the log subscriber: {0}")]
    Subscriber(#[from] tracing_subscriber::util::TryInitError),
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes what is buffered.
pub struct Telemetry {
    settings: Settings,
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    exposition: Option<Exposition>,
}

impl Telemetry {
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether anything is exported.
    pub fn is_enabled(&self) -> bool {
        self.tracer.is_some() || self.meter.is_some()
    }

    /// The metrics for `/metrics`, when the settings asked for them ([`Settings::prometheus`]).
    pub fn exposition(&self) -> Option<Exposition> {
        self.exposition.clone()
    }

    /// Exports what is buffered and stops the exporters. It blocks (the SDK's export threads
    /// do the work): call it from `spawn_blocking` or outside the runtime.
    pub fn shutdown(self) {
        super::set_enabled(false, false);
        if let Some(tracer) = self.tracer
            && let Err(err) = tracer.shutdown()
        {
            tracing::warn!(error = %err, "telemetry: flushing spans failed");
        }
        if let Some(meter) = self.meter
            && let Err(err) = meter.shutdown()
        {
            tracing::warn!(error = %err, "telemetry: flushing metrics failed");
        }
    }
}

/// Installs logging and, when the environment asks for it, OTLP export of traces and metrics
/// (the Prometheus exposition is asked for by [`Settings::prometheus`], through [`init_with`]).
/// `service` is the default `service.name`. Call once, inside the Tokio runtime (the gRPC
/// exporter binds to it).
pub fn init(service: &str, format: LogFormat) -> Result<Telemetry, TelemetryError> {
    init_with(Settings::from_env(service), format)
}

/// [`init`] with settings read elsewhere.
pub fn init_with(settings: Settings, format: LogFormat) -> Result<Telemetry, TelemetryError> {
    let resource = settings.any().then(|| resource(&settings));
    let tracer = match (&resource, settings.traces) {
        (Some(resource), true) => {
            let exporter =
                SpanExporter::builder()
                    .build()
                    .map_err(|source| TelemetryError::Exporter {
                        signal: "trace",
                        source,
                    })?;
            // The batch processor reads OTEL_BSP_*, the default config OTEL_TRACES_SAMPLER.
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource.clone())
                    .build(),
            )
        }
        _ => None,
    };
    let (meter, exposition) = match &resource {
        Some(resource) if settings.metrics_recorded() => {
            let (provider, exposition) = meter_provider(&settings, resource.clone())?;
            (Some(provider), exposition)
        }
        _ => (None, None),
    };

    let log_filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let traced = tracer.is_some();
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .event_format(WithTraceIds::new(
                tracing_subscriber::fmt::format(),
                false,
                traced,
            ))
            .with_filter(log_filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(WithTraceIds::new(
                tracing_subscriber::fmt::format().json(),
                true,
                traced,
            ))
            .with_filter(log_filter)
            .boxed(),
    };
    let spans = tracer.as_ref().map(|provider| {
        let targets = TRACED_CRATES.iter().fold(Targets::new(), |targets, name| {
            targets.with_target(*name, Level::INFO)
        });
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("taskcluster"))
            // Thread names and source locations on every span cost more than they tell here.
            .with_threads(false)
            .with_location(false)
            .with_tracked_inactivity(false)
            .with_filter(targets)
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(spans)
        .try_init()?;

    if let Some(provider) = &tracer {
        global::set_text_map_propagator(TraceContextPropagator::new());
        global::set_tracer_provider(provider.clone());
    }
    if let Some(provider) = &meter {
        global::set_meter_provider(provider.clone());
    }
    super::set_enabled(tracer.is_some(), meter.is_some());
    Ok(Telemetry {
        settings,
        tracer,
        meter,
        exposition,
    })
}

/// The meter provider with a reader per path asked for: the OTLP periodic exporter, the
/// Prometheus exposition, or both (one set of instruments, read by each).
fn meter_provider(
    settings: &Settings,
    resource: Resource,
) -> Result<(SdkMeterProvider, Option<Exposition>), TelemetryError> {
    let mut builder = SdkMeterProvider::builder().with_resource(resource);
    if settings.metrics {
        let exporter =
            MetricExporter::builder()
                .build()
                .map_err(|source| TelemetryError::Exporter {
                    signal: "metric",
                    source,
                })?;
        // The periodic reader reads OTEL_METRIC_EXPORT_INTERVAL.
        builder = builder.with_periodic_exporter(exporter);
    }
    let exposition = if settings.prometheus {
        let (exposition, reader) = Exposition::new().map_err(TelemetryError::Prometheus)?;
        builder = builder.with_reader(reader);
        Some(exposition)
    } else {
        None
    };
    Ok((builder.build(), exposition))
}

/// `service.name` (the environment's, else the default), `service.version`, and whatever
/// `OTEL_RESOURCE_ATTRIBUTES` adds.
fn resource(settings: &Settings) -> Resource {
    let builder = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        opentelemetry_semantic_conventions::resource::SERVICE_VERSION,
        env!("CARGO_PKG_VERSION"),
    ));
    match &settings.default_service_name {
        Some(name) => builder.with_service_name(name.clone()).build(),
        None => builder.build(),
    }
}
