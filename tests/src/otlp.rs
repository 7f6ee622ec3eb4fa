//! An in-process OTLP receiver for tests: one loopback port that accepts OTLP/HTTP
//! (`POST /v1/traces`, `/v1/metrics`, `/v1/logs`, protobuf bodies) and OTLP/gRPC (the
//! collector's `TraceService`, `MetricsService` and `LogsService`, over HTTP/2 without TLS),
//! decodes what arrives with `opentelemetry-proto`, and keeps it. Tests wait for what they
//! expect with [`OtlpReceiver::wait_for`], which wakes on every arrival: no sleeping.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::sync::{oneshot, watch};

#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    #[error("nothing matched within {0:?}; received so far:\n{1}")]
    Timeout(Duration, String),
}

/// How a batch arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Grpc,
}

/// Everything received so far, in arrival order.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub traces: Vec<(Transport, ExportTraceServiceRequest)>,
    pub metrics: Vec<(Transport, ExportMetricsServiceRequest)>,
    pub logs: Vec<(Transport, ExportLogsServiceRequest)>,
    /// Every request body as it came (protobuf), for byte-level checks such as "this secret
    /// appears nowhere".
    pub raw: Vec<Vec<u8>>,
}

/// One received span with the `service.name` of the resource that sent it.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub span: Span,
}

/// One data point of a received metric: its attributes and value (a sum or gauge value, or a
/// histogram's count).
#[derive(Debug, Clone)]
pub struct ReceivedPoint {
    pub service: String,
    pub metric: String,
    pub unit: String,
    pub attributes: Vec<KeyValue>,
    pub value: f64,
}

impl Received {
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let mut spans = Vec::new();
        for (_, request) in &self.traces {
            for resource in &request.resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| attribute(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for scope in &resource.scope_spans {
                    for span in &scope.spans {
                        spans.push(ReceivedSpan {
                            service: service.clone(),
                            span: span.clone(),
                        });
                    }
                }
            }
        }
        spans
    }

    /// Data points of the metric called `name`, from every export.
    pub fn points(&self, name: &str) -> Vec<ReceivedPoint> {
        let mut points = Vec::new();
        for (_, request) in &self.metrics {
            for resource in &request.resource_metrics {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| attribute(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for scope in &resource.scope_metrics {
                    for metric in scope.metrics.iter().filter(|m| m.name == name) {
                        points.extend(metric_points(&service, metric));
                    }
                }
            }
        }
        points
    }

    /// A short listing for failure messages.
    pub fn summary(&self) -> String {
        let spans: Vec<String> = self
            .spans()
            .iter()
            .map(|s| format!("{}: {} (kind {})", s.service, s.span.name, s.span.kind))
            .collect();
        let mut metrics: Vec<String> = self
            .metrics
            .iter()
            .flat_map(|(_, r)| &r.resource_metrics)
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(|m| m.name.clone())
            .collect();
        metrics.sort();
        metrics.dedup();
        format!("spans: {spans:#?}\nmetrics: {metrics:?}")
    }
}

fn metric_points(service: &str, metric: &Metric) -> Vec<ReceivedPoint> {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    let number = |value: &Option<Value>| match value {
        Some(Value::AsDouble(v)) => *v,
        Some(Value::AsInt(v)) => *v as f64,
        None => 0.0,
    };
    let point = |attributes: &[KeyValue], value: f64| ReceivedPoint {
        service: service.to_owned(),
        metric: metric.name.clone(),
        unit: metric.unit.clone(),
        attributes: attributes.to_vec(),
        value,
    };
    match &metric.data {
        Some(metric::Data::Sum(sum)) => sum
            .data_points
            .iter()
            .map(|p| point(&p.attributes, number(&p.value)))
            .collect(),
        Some(metric::Data::Gauge(gauge)) => gauge
            .data_points
            .iter()
            .map(|p| point(&p.attributes, number(&p.value)))
            .collect(),
        Some(metric::Data::Histogram(histogram)) => histogram
            .data_points
            .iter()
            .map(|p| point(&p.attributes, p.count as f64))
            .collect(),
        _ => Vec::new(),
    }
}

/// The value of attribute `key` as text (strings as they are, numbers and booleans printed).
pub fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(any_value_text)
}

fn any_value_text(value: &AnyValue) -> Option<String> {
    match value.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// Shared between the handlers and the test.
struct Inbox {
    received: Mutex<Received>,
    /// Bumped on every arrival; waiters wake on it.
    arrivals: watch::Sender<u64>,
}

impl Inbox {
    fn add(&self, raw: &[u8], add: impl FnOnce(&mut Received)) {
        {
            let mut received = self.received.lock().unwrap_or_else(PoisonError::into_inner);
            received.raw.push(raw.to_vec());
            add(&mut received);
        }
        self.arrivals.send_modify(|n| *n += 1);
    }
}

/// The running receiver; stops when dropped.
pub struct OtlpReceiver {
    address: SocketAddr,
    inbox: Arc<Inbox>,
    _stop: oneshot::Sender<()>,
}

impl OtlpReceiver {
    /// Listens on a free loopback port (inside the current Tokio runtime).
    pub async fn start() -> Result<OtlpReceiver, OtlpError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let inbox = Arc::new(Inbox {
            received: Mutex::new(Received::default()),
            arrivals: watch::channel(0).0,
        });
        let grpc = tonic::service::Routes::new(TraceServiceServer::new(Grpc(inbox.clone())))
            .add_service(MetricsServiceServer::new(Grpc(inbox.clone())))
            .add_service(LogsServiceServer::new(Grpc(inbox.clone())))
            .into_axum_router();
        let app = Router::new()
            .route("/v1/traces", post(http_traces))
            .route("/v1/metrics", post(http_metrics))
            .route("/v1/logs", post(http_logs))
            .with_state(inbox.clone())
            .merge(grpc);
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(err) = served.await {
                eprintln!("otlp receiver stopped: {err}");
            }
        });
        Ok(OtlpReceiver {
            address,
            inbox,
            _stop: stop,
        })
    }

    /// The base URL for `OTEL_EXPORTER_OTLP_ENDPOINT` (both protocols).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A copy of everything received so far.
    pub fn received(&self) -> Received {
        self.inbox
            .received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `check` finds what it looks for in what was received, re-checking on every
    /// arrival; fails after `timeout` with a summary of what did arrive.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&Received) -> Option<T>,
    ) -> Result<T, OtlpError> {
        let mut arrivals = self.inbox.arrivals.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            arrivals.borrow_and_update();
            let received = self.received();
            if let Some(found) = check(&received) {
                return Ok(found);
            }
            match tokio::time::timeout_at(deadline, arrivals.changed()).await {
                Ok(Ok(())) => {}
                // The sender lives as long as `self`; a timeout ends the wait.
                Ok(Err(_)) | Err(_) => {
                    return Err(OtlpError::Timeout(timeout, self.received().summary()));
                }
            }
        }
    }
}

fn protobuf_response(message: impl Message) -> Response {
    let mut response = (StatusCode::OK, message.encode_to_vec()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

fn bad_request(err: prost::DecodeError) -> Response {
    (StatusCode::BAD_REQUEST, err.to_string()).into_response()
}

async fn http_traces(State(inbox): State<Arc<Inbox>>, body: Bytes) -> Response {
    match ExportTraceServiceRequest::decode(body.as_ref()) {
        Ok(request) => {
            inbox.add(&body, |r| r.traces.push((Transport::Http, request)));
            protobuf_response(ExportTraceServiceResponse::default())
        }
        Err(err) => bad_request(err),
    }
}

async fn http_metrics(State(inbox): State<Arc<Inbox>>, body: Bytes) -> Response {
    match ExportMetricsServiceRequest::decode(body.as_ref()) {
        Ok(request) => {
            inbox.add(&body, |r| r.metrics.push((Transport::Http, request)));
            protobuf_response(ExportMetricsServiceResponse::default())
        }
        Err(err) => bad_request(err),
    }
}

async fn http_logs(State(inbox): State<Arc<Inbox>>, body: Bytes) -> Response {
    match ExportLogsServiceRequest::decode(body.as_ref()) {
        Ok(request) => {
            inbox.add(&body, |r| r.logs.push((Transport::Http, request)));
            protobuf_response(ExportLogsServiceResponse::default())
        }
        Err(err) => bad_request(err),
    }
}

/// The gRPC services, over the same inbox.
struct Grpc(Arc<Inbox>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.0.add(&request.encode_to_vec(), |r| {
            r.traces.push((Transport::Grpc, request))
        });
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.0.add(&request.encode_to_vec(), |r| {
            r.metrics.push((Transport::Grpc, request))
        });
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        self.0.add(&request.encode_to_vec(), |r| {
            r.logs.push((Transport::Grpc, request))
        });
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}
