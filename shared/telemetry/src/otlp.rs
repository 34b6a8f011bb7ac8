//! The OTLP span exporter: over gRPC (the default) or over HTTP with protobuf bodies, as
//! `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (else `OTEL_EXPORTER_OTLP_PROTOCOL`) says. Any other
//! value is refused with an error naming the variable and the values supported, never ignored.
//!
//! Over HTTP the exporter reads the SDK's standard variables itself (the endpoint, to which
//! `/v1/traces` is added unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` names the whole URL,
//! `_HEADERS`, `_TIMEOUT`, `_COMPRESSION`) and posts through hyper's client: plain `http://`
//! only, so an `https://` endpoint is refused at startup rather than failing every export.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};

/// The transports a protocol variable may name.
pub const SUPPORTED: &str = "grpc (the default) or http/protobuf";

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    HttpProtobuf,
}

/// The transport the environment asks for (`lookup` reads a variable): the traces variable
/// first, then the general one; neither set (or blank) is gRPC.
pub fn transport(lookup: impl Fn(&str) -> Option<String>) -> Result<Transport, String> {
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        let Some(value) = lookup(name).filter(|v| !v.trim().is_empty()) else {
            continue;
        };
        return match value.trim().to_ascii_lowercase().as_str() {
            "grpc" => Ok(Transport::Grpc),
            "http/protobuf" => Ok(Transport::HttpProtobuf),
            _ => Err(format!(
                "{name}={value:?} is not supported: set {SUPPORTED}"
            )),
        };
    }
    Ok(Transport::Grpc)
}

/// The endpoint variable in force, when it names an `https://` URL (refused over HTTP).
fn https_endpoint(lookup: &impl Fn(&str) -> Option<String>) -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find(|name| lookup(name).is_some_and(|v| !v.trim().is_empty()))
    .filter(|name| {
        lookup(name).is_some_and(|v| v.trim().to_ascii_lowercase().starts_with("https://"))
    })
    .map(str::to_owned)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The span exporter the environment asks for. Must run inside a tokio runtime: the gRPC
/// channel's worker, and every HTTP export, run on it.
pub fn exporter() -> Result<SpanExporter, String> {
    match transport(env)? {
        Transport::Grpc => SpanExporter::builder()
            .with_tonic()
            .with_protocol(Protocol::Grpc)
            .build()
            .map_err(|e| format!("OTLP/gRPC trace exporter: {e}")),
        Transport::HttpProtobuf => {
            if let Some(name) = https_endpoint(&env) {
                return Err(format!(
                    "{name} is https://, but OTLP over HTTP is sent as plain http:// here: \
                     export to a collector over http:// (it can forward over TLS), or set {SUPPORTED}"
                ));
            }
            let runtime = tokio::runtime::Handle::try_current()
                .map_err(|e| format!("OTLP/HTTP trace exporter: no tokio runtime: {e}"))?;
            // The exporter's own timeout bounds each export; the client's only backs it.
            let client = OnRuntime {
                runtime,
                client: HyperClient::with_default_connector(Duration::from_secs(60), None),
            };
            SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_http_client(client)
                .build()
                .map_err(|e| format!("OTLP/HTTP trace exporter: {e}"))
        }
    }
}

/// Hyper's client, its requests run on the tokio runtime: the SDK's batch exporter sends from a
/// thread of its own, where hyper could not spawn its connection tasks.
#[derive(Debug)]
struct OnRuntime {
    runtime: tokio::runtime::Handle,
    client: HyperClient,
}

impl HttpClient for OnRuntime {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let client = self.client.clone();
        let task = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        Box::pin(async move { task.await.map_err(|e| -> HttpError { Box::new(e) })? })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    fn vars(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_protocol_variables_choose_the_transport_and_refuse_what_is_not_supported() {
        assert_eq!(transport(vars(&[])), Ok(Transport::Grpc));
        assert_eq!(
            transport(vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")])),
            Ok(Transport::HttpProtobuf)
        );
        assert_eq!(
            transport(vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", " GRPC ")])),
            Ok(Transport::Grpc)
        );
        // The traces variable wins over the general one.
        assert_eq!(
            transport(vars(&[
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ])),
            Ok(Transport::HttpProtobuf)
        );
        let refused = transport(vars(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")])).unwrap_err();
        assert_eq!(
            refused,
            "OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\" is not supported: set grpc (the default) or http/protobuf"
        );
    }

    #[test]
    fn an_https_endpoint_is_named_when_it_is_the_one_in_force() {
        assert_eq!(
            https_endpoint(&vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://x:4318")])),
            Some("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned())
        );
        assert_eq!(
            https_endpoint(&vars(&[
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://c:4318/v1/traces"
                ),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://x:4318"),
            ])),
            None
        );
    }
}
