//! W3C trace context (`traceparent`, `tracestate`) across process boundaries: from an HTTP
//! request into the server span, from the span that creates a task into the task record, and
//! from the record into the span of the worker that runs it. Only those two keys are read or
//! written; no other header or field ever reaches a span.

use std::collections::BTreeMap;

use http::HeaderMap;
use opentelemetry::global;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct RecordInjector<'a>(&'a mut BTreeMap<String, String>);

impl Injector for RecordInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

struct RecordExtractor<'a>(&'a BTreeMap<String, String>);

impl Extractor for RecordExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

/// The trace context of `span`, to store with a task it creates. Empty when traces are off.
pub fn inject(span: &tracing::Span) -> BTreeMap<String, String> {
    let mut carrier = BTreeMap::new();
    if super::traces_enabled() {
        let cx = span.context();
        global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&cx, &mut RecordInjector(&mut carrier))
        });
    }
    carrier
}

/// Makes `span` (not yet entered) a child of the caller's span named by the request's
/// `traceparent`, if it names a valid one.
pub fn continue_remote(span: &tracing::Span, headers: &HeaderMap) {
    if !super::traces_enabled() || !headers.contains_key("traceparent") {
        return;
    }
    let cx =
        global::get_text_map_propagator(|propagator| propagator.extract(&HeaderExtractor(headers)));
    if cx.span().span_context().is_valid() {
        // Fails only when the span is disabled or already started: then it stays a root.
        let _ = span.set_parent(cx);
    }
}

/// Makes `span` (not yet entered) follow the producer whose context a task record carries: a
/// link to the producer span, and its child too, so that one trace covers the task from the
/// gateway to the worker.
pub fn follow_producer(span: &tracing::Span, trace_context: &BTreeMap<String, String>) {
    if !super::traces_enabled() || trace_context.is_empty() {
        return;
    }
    let cx = global::get_text_map_propagator(|propagator| {
        propagator.extract(&RecordExtractor(trace_context))
    });
    let producer = cx.span().span_context().clone();
    if producer.is_valid() {
        span.add_link(producer);
        let _ = span.set_parent(cx);
    }
}
