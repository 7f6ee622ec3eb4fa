//! Log lines that name the trace they belong to: inside a traced span, a JSON line gains
//! `"trace_id"` and `"span_id"` members and a text line ends with `trace_id=… span_id=…`, so a
//! log search leads to the trace and back.

use std::fmt;

use opentelemetry::trace::{SpanId, TraceContextExt, TraceId};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Wraps an event formatter (text or JSON) and appends the current span's trace ids.
pub struct WithTraceIds<F> {
    inner: F,
    json: bool,
    /// Whether spans are traced at all; when not, lines are written exactly as before.
    traced: bool,
}

impl<F> WithTraceIds<F> {
    pub fn new(inner: F, json: bool, traced: bool) -> Self {
        WithTraceIds {
            inner,
            json,
            traced,
        }
    }
}

/// The ids of the OpenTelemetry span active on this thread (the tracing layer activates a
/// span's context while the span is entered).
fn current_ids() -> Option<(TraceId, SpanId)> {
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let context = span.span_context();
    context
        .is_valid()
        .then(|| (context.trace_id(), context.span_id()))
}

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let ids = if self.traced { current_ids() } else { None };
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        // The inner formatter ends its line itself; format into a buffer to add before the end.
        // (The buffer has no ANSI colours: these lines are for machines first.)
        let mut line = String::with_capacity(256);
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
        match (self.json, body.strip_suffix('}')) {
            (true, Some(open)) => writeln!(
                writer,
                "{open},\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"}}"
            ),
            (true, None) => writer.write_str(&line),
            (false, _) => writeln!(writer, "{body} trace_id={trace_id} span_id={span_id}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::fmt::format::JsonFields;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    impl Buffer {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// Logs one line outside any span and one inside a traced span; returns both and the
    /// span's trace id.
    fn log_twice(json: bool) -> (Vec<String>, String) {
        let buffer = Buffer::default();
        let provider = SdkTracerProvider::builder().build();
        let tracing_layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        let subscriber = tracing_subscriber::registry().with(tracing_layer);
        let logs = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(buffer.clone());
        let mut trace_id = String::new();
        let run = |trace_id: &mut String| {
            tracing::info!("outside");
            let span = tracing::info_span!("work");
            let _entered = span.enter();
            *trace_id = current_ids()
                .map(|(trace, _)| trace.to_string())
                .unwrap_or_default();
            tracing::info!(answer = 42, "inside");
        };
        if json {
            let logs = logs
                .fmt_fields(JsonFields::new())
                .event_format(WithTraceIds::new(
                    tracing_subscriber::fmt::format().json(),
                    true,
                    true,
                ));
            tracing::subscriber::with_default(subscriber.with(logs), || run(&mut trace_id));
        } else {
            let logs = logs.event_format(WithTraceIds::new(
                tracing_subscriber::fmt::format(),
                false,
                true,
            ));
            tracing::subscriber::with_default(subscriber.with(logs), || run(&mut trace_id));
        }
        (buffer.lines(), trace_id)
    }

    #[test]
    fn json_lines_in_a_span_carry_its_ids() -> Result<(), serde_json::Error> {
        let (lines, trace_id) = log_twice(true);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(trace_id.len(), 32);
        let outside: serde_json::Value = serde_json::from_str(&lines[0])?;
        assert!(outside.get("trace_id").is_none(), "{outside}");
        let inside: serde_json::Value = serde_json::from_str(&lines[1])?;
        assert_eq!(inside["trace_id"], trace_id.as_str(), "{inside}");
        assert_eq!(inside["span_id"].as_str().map(str::len), Some(16));
        assert_eq!(inside["fields"]["answer"], 42);
        Ok(())
    }

    #[test]
    fn text_lines_in_a_span_end_with_its_ids() {
        let (lines, trace_id) = log_twice(false);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(!lines[0].contains("trace_id="), "{}", lines[0]);
        assert!(
            lines[1].contains(&format!(" trace_id={trace_id} span_id=")),
            "{}",
            lines[1]
        );
        assert!(lines[1].contains("answer=42"));
    }
}
