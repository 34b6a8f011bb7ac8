//! W3C trace context (`traceparent`, `tracestate`): a client's context is continued by the
//! request's span, and the attempt's context is sent upstream. Without trace export there are no
//! spans to continue, so the client's own headers are passed on unchanged.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Makes `span` a child of the client's trace context, when traces are exported and the client
/// sent a valid `traceparent`.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    if !crate::enabled() || span.is_disabled() {
        return;
    }
    let Some(traceparent) = traceparent else {
        return;
    };
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_owned(), traceparent.to_owned());
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(cx);
}

/// The trace and span ids of `span` (lowercase hex, 32 and 16 digits) when traces are exported,
/// so that a log line can name the trace it belongs to.
pub fn ids(span: &tracing::Span) -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt;
    if !crate::enabled() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let context = cx.span().span_context().clone();
    context.is_valid().then(|| {
        (
            context.trace_id().to_string(),
            context.span_id().to_string(),
        )
    })
}

/// The `traceparent` / `tracestate` to send upstream from inside `span`: the span's own context
/// when traces are exported, else the client's headers as they came.
pub fn upstream_headers(
    span: &tracing::Span,
    client_traceparent: Option<&str>,
    client_tracestate: Option<&str>,
) -> Vec<(&'static str, String)> {
    if crate::enabled() && !span.is_disabled() {
        let mut carrier: HashMap<String, String> = HashMap::with_capacity(2);
        TraceContextPropagator::new().inject_context(&span.context(), &mut carrier);
        let mut out = Vec::with_capacity(2);
        if let Some(parent) = carrier.remove("traceparent") {
            out.push(("traceparent", parent));
            if let Some(state) = carrier.remove("tracestate").filter(|s| !s.is_empty()) {
                out.push(("tracestate", state));
            }
            return out;
        }
    }
    let mut out = Vec::new();
    if let Some(parent) = client_traceparent {
        out.push(("traceparent", parent.to_owned()));
        if let Some(state) = client_tracestate {
            out.push(("tracestate", state.to_owned()));
        }
    }
    out
}

/// Sets a string-array attribute (such as `gen_ai.response.finish_reasons`) on `span`, which a
/// `tracing` field cannot carry. Nothing without trace export.
pub fn set_strings(span: &tracing::Span, key: &'static str, values: Vec<String>) {
    use opentelemetry::{Array, StringValue, Value};
    if !crate::enabled() || span.is_disabled() {
        return;
    }
    let values: Vec<StringValue> = values.into_iter().map(StringValue::from).collect();
    span.set_attribute(key, Value::Array(Array::String(values)));
}

/// Renames `span` once what its name needs is known (the model of a request, read from its
/// body): `otel.name` recorded late is not applied to a span whose context already exists (a
/// continued trace, or ids taken for the log line). Nothing without trace export.
pub fn rename(span: &tracing::Span, name: String) {
    use opentelemetry::trace::TraceContextExt;
    if !crate::enabled() || span.is_disabled() {
        return;
    }
    span.context().span().update_name(name);
}
