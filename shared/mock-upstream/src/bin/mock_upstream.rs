//! `switchyard-mock-upstream`: the mock upstream as a process, scripted over its HTTP control API
//! (`/__mock/rules`, `/__mock/hits`, `/__mock/requests`, `/__mock/reset`).
//!
//! It speaks OpenAI (`/v1/chat/completions`, ...), Anthropic Messages (`/v1/messages`,
//! `/v1/messages/count_tokens`) and Gemini (`/v1beta/models/{model}:generateContent`,
//! `:streamGenerateContent?alt=sse`, `:countTokens`) natively; see `AFTER_HELP` for the rule
//! fields (also printed by `--help`).

/// The control API's rule format, printed after `--help`.
const AFTER_HELP: &str = r#"PROTOCOLS:
  OpenAI     /v1/chat/completions /v1/completions /v1/responses /v1/embeddings /v1/models
             /v1/images/generations /v1/audio/{speech,transcriptions}   (Authorization: Bearer)
  Anthropic  /v1/messages /v1/messages/count_tokens                    (x-api-key)
  Gemini     /v1beta/models/{model}:generateContent
             /v1beta/models/{model}:streamGenerateContent?alt=sse
             /v1beta/models/{model}:countTokens                       (x-goog-api-key or ?key=)
  Errors take the shape of the path's protocol.

CONTROL API:
  POST /__mock/rules    {"matcher": {...}, "behavior": {...}}  -> {"index": N}
  GET  /__mock/rules    GET /__mock/hits    GET /__mock/requests    POST /__mock/reset

  matcher (all optional, all must match):
    path, credential, model   (model: body "model" or the Gemini path's {model})
  behavior (all optional):
    status            HTTP status; non-2xx answers an error in the path's protocol shape
    body              verbatim body         headers   {"name": "value"}
    retry_after       seconds (Retry-After) latency_ms  delay before the head
    hang              never answer          malformed   200 with a body that is not JSON
    empty_completion  an answer that says nothing (in the protocol's shape)
    text              assistant text (before tool calls, if any)
    tool_calls        [{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]
                      (arguments: JSON object or its text) -> OpenAI tool_calls,
                      Anthropic tool_use blocks, Gemini functionCall parts
    cached_tokens     N prompt tokens reported as cached, in each protocol's field
    stream            {"chunks": N, "gap_ms": M}  force an SSE answer
    cut_before_first_byte   close before answering
    cut_after_chunks  N     send N events, then drop the connection
    times             N     the rule answers N requests, then no longer matches

EXAMPLE:
  curl -X POST localhost:9000/__mock/rules -d '{"matcher":{"path":"/v1/messages"},
    "behavior":{"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]}}'"#;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use switchyard_mock_upstream::{MockOptions, MockUpstream};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(name = "switchyard-mock-upstream", version, about, after_help = AFTER_HELP)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "MOCK_LISTEN", default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// How many recent requests to keep for `GET /__mock/requests` (counters stay exact).
    #[arg(long, env = "MOCK_RECORD_LIMIT", default_value_t = 1000)]
    record_limit: usize,
    /// Models listed by `GET /v1/models` (comma-separated).
    #[arg(long, env = "MOCK_MODELS", value_delimiter = ',')]
    models: Vec<String>,
    /// How long in-flight responses may take to finish after SIGTERM / ctrl-c.
    #[arg(long, env = "MOCK_GRACE_MS", default_value_t = 5000)]
    grace_ms: u64,
    /// Serve TLS (HTTP/2 or HTTP/1.1 by ALPN) with a self-signed certificate for `localhost`
    /// and `127.0.0.1` made at start, written (PEM) to this file for clients to trust.
    #[arg(long, env = "MOCK_TLS_CERT_OUT")]
    tls_cert_out: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let mut options = MockOptions {
        listen: args.listen,
        record_limit: args.record_limit,
        tls: args.tls_cert_out.is_some(),
        ..MockOptions::default()
    };
    if !args.models.is_empty() {
        options.models = args.models;
    }
    let mock = match MockUpstream::start_with(options).await {
        Ok(mock) => mock,
        Err(error) => {
            tracing::error!(%error, "mock upstream failed to start");
            eprintln!("switchyard-mock-upstream: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let (Some(path), Some(pem)) = (&args.tls_cert_out, mock.certificate_pem()) {
        if let Err(error) = std::fs::write(path, pem) {
            eprintln!(
                "switchyard-mock-upstream: cannot write {}: {error}",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    }
    tracing::info!(addr = %mock.addr(), base_url = %mock.base_url(), "mock upstream listening");
    shutdown_signal().await;
    tracing::info!("mock upstream shutting down");
    mock.shutdown(Duration::from_millis(args.grace_ms)).await;
    ExitCode::SUCCESS
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; ctrl-c only");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
