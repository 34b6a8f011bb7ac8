//! The shared probe against a tiny scripted HTTP/1.1 server: the request each protocol sends,
//! and which answers pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use switchyard_engine::{
    Capabilities, Channel, ChannelStatus, Credential, Provider, RandomSource, SecretSource,
    SplitMix64,
};
use switchyard_upstream::{
    build_client, probe_credential, ChannelRuntime, ProbeFailure, ProbeResult, TransportCause,
    MOCK_CREDENTIAL,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as the server read it: head and body.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: String,
}

enum Answer {
    Status(u16),
    Hang,
}

/// Serves every connection one request, answering `answer`; records what it read.
async fn server(answer: Answer) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let log = Arc::clone(&log);
            let answer = Arc::clone(&answer);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = socket.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    let Some(end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let head = text[..end].to_owned();
                    let length = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + length {
                        break (head, text[end + 4..end + 4 + length].to_owned());
                    }
                };
                log.lock().unwrap().push(Seen { head, body });
                match *answer {
                    Answer::Status(status) => {
                        let body = r#"{"ok":true}"#;
                        let response = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = socket.write_all(response.as_bytes()).await;
                    }
                    Answer::Hang => tokio::time::sleep(Duration::from_secs(30)).await,
                }
            });
        }
    });
    (format!("http://{addr}"), seen)
}

fn channel(provider: Provider, base_url: &str) -> Channel {
    Channel {
        id: 1,
        name: "c".into(),
        provider,
        base_url: base_url.into(),
        status: ChannelStatus::AutoDisabled,
        auto_ban: false,
        max_concurrency: None,
        capabilities: Capabilities::default(),
        credentials: vec![Credential {
            id: 7,
            enabled: true,
            secret: SecretSource::Inline("sk-probe-secret".into()),
        }],
        retry_status_codes: vec![],
        retry_error_patterns: vec![],
        headers: vec![("x-extra".into(), "1".into())],
        secrets_withheld: false,
        responses_api: true,
        preset: None,
        passthrough: vec![],
    }
}

async fn probe(provider: Provider, base_url: &str, timeout: Duration) -> ProbeResult {
    let runtime = ChannelRuntime::compile(&channel(provider, base_url), &|_| None);
    let client = build_client(Duration::from_millis(500));
    let mut rng = SplitMix64::new(1);
    probe_credential(
        &client,
        &runtime,
        &runtime.credentials[0],
        "model-x",
        timeout,
        &mut rng,
    )
    .await
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn openai_probe_is_a_one_token_chat_completion() {
    let (url, seen) = server(Answer::Status(200)).await;
    let result = probe(
        Provider::Openai,
        &format!("{url}/v1"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(result, ProbeResult::Passed { status: 200 });
    let seen = seen.lock().unwrap()[0].clone();
    assert!(
        seen.head.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{}",
        seen.head
    );
    assert_eq!(
        header(&seen.head, "authorization"),
        Some("Bearer sk-probe-secret")
    );
    assert_eq!(header(&seen.head, "x-extra"), Some("1"));
    assert_eq!(header(&seen.head, "content-type"), Some("application/json"));
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["model"], "model-x");
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"], "ping");
    assert_eq!(body["max_completion_tokens"], 1);
}

#[tokio::test]
async fn azure_probe_is_openais_request_at_the_deployments_url() {
    let (url, seen) = server(Answer::Status(200)).await;
    let result = probe(Provider::Azure, &url, Duration::from_secs(2)).await;
    assert_eq!(result, ProbeResult::Passed { status: 200 });
    let seen = seen.lock().unwrap()[0].clone();
    assert!(
        seen.head.starts_with(
            "POST /openai/deployments/model-x/chat/completions?api-version=2024-10-21 HTTP/1.1"
        ),
        "{}",
        seen.head
    );
    assert_eq!(header(&seen.head, "api-key"), Some("sk-probe-secret"));
    assert_eq!(header(&seen.head, "authorization"), None);
    assert_eq!(header(&seen.head, "x-extra"), Some("1"));
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["model"], "model-x");
    assert_eq!(body["messages"][0]["content"], "ping");
    assert_eq!(body["max_completion_tokens"], 1);
}

#[tokio::test]
async fn anthropic_probe_is_a_one_token_message() {
    let (url, seen) = server(Answer::Status(200)).await;
    let result = probe(Provider::Anthropic, &url, Duration::from_secs(2)).await;
    assert!(result.passed(), "{result}");
    let seen = seen.lock().unwrap()[0].clone();
    assert!(
        seen.head.starts_with("POST /v1/messages HTTP/1.1"),
        "{}",
        seen.head
    );
    assert_eq!(header(&seen.head, "x-api-key"), Some("sk-probe-secret"));
    assert_eq!(header(&seen.head, "anthropic-version"), Some("2023-06-01"));
    assert_eq!(header(&seen.head, "authorization"), None);
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["model"], "model-x");
    assert_eq!(body["max_tokens"], 1);
    assert_eq!(body["messages"][0]["content"], "ping");
}

#[tokio::test]
async fn gemini_probe_is_a_one_token_generate_content() {
    let (url, seen) = server(Answer::Status(200)).await;
    let result = probe(
        Provider::Gemini,
        &format!("{url}/v1beta"),
        Duration::from_secs(2),
    )
    .await;
    assert!(result.passed(), "{result}");
    let seen = seen.lock().unwrap()[0].clone();
    assert!(
        seen.head
            .starts_with("POST /v1beta/models/model-x:generateContent HTTP/1.1"),
        "{}",
        seen.head
    );
    assert_eq!(
        header(&seen.head, "x-goog-api-key"),
        Some("sk-probe-secret")
    );
    let body: Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(body["generationConfig"]["maxOutputTokens"], 1);
    assert_eq!(body["contents"][0]["parts"][0]["text"], "ping");
    assert!(body.get("model").is_none(), "the model is in the path");
}

#[tokio::test]
async fn only_a_2xx_passes() {
    for status in [201, 204] {
        let (url, _) = server(Answer::Status(status)).await;
        let result = probe(Provider::Openai, &url, Duration::from_secs(2)).await;
        assert_eq!(result, ProbeResult::Passed { status });
    }
    for status in [400, 401, 404, 429, 500, 503, 529] {
        let (url, _) = server(Answer::Status(status)).await;
        let result = probe(Provider::Openai, &url, Duration::from_secs(2)).await;
        assert_eq!(
            result,
            ProbeResult::Failed {
                reason: ProbeFailure::Status,
                status: Some(status)
            }
        );
        assert_eq!(result.to_string(), format!("failed (HTTP {status})"));
    }
}

#[tokio::test]
async fn a_hang_times_out_and_a_dead_port_is_a_transport_failure() {
    let (url, _) = server(Answer::Hang).await;
    let started = tokio::time::Instant::now();
    let result = probe(Provider::Openai, &url, Duration::from_millis(200)).await;
    assert_eq!(
        result,
        ProbeResult::Failed {
            reason: ProbeFailure::Timeout,
            status: None
        }
    );
    assert!(started.elapsed() < Duration::from_secs(2));

    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let result = probe(
        Provider::Openai,
        &format!("http://{addr}"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(
        result,
        ProbeResult::Failed {
            reason: ProbeFailure::Transport(TransportCause::Refused),
            status: None
        }
    );
    // Never a secret or a URL in what is reported.
    let shown = format!("{result} {result:?}");
    assert!(
        !shown.contains("sk-probe") && !shown.contains("127.0.0.1"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_mock_channel_is_answered_by_the_simulation() {
    let client = build_client(Duration::from_millis(500));
    let mut rng = SplitMix64::new(3);
    let mut probe_mock = |base_url: &str| {
        let mut channel = channel(Provider::Mock, base_url);
        channel.credentials.clear();
        let runtime = ChannelRuntime::compile(&channel, &|_| None);
        assert_eq!(runtime.credentials[0].id, MOCK_CREDENTIAL);
        let client = client.clone();
        let mut seeded = SplitMix64::new(rng.next_u64());
        async move {
            probe_credential(
                &client,
                &runtime,
                &runtime.credentials[0],
                "m",
                Duration::from_millis(300),
                &mut seeded,
            )
            .await
        }
    };
    assert_eq!(
        probe_mock("mock://").await,
        ProbeResult::Passed { status: 200 }
    );
    assert_eq!(
        probe_mock("mock://sim?failure_rate=1&failure_status=529").await,
        ProbeResult::Failed {
            reason: ProbeFailure::Status,
            status: Some(529)
        }
    );
    assert_eq!(
        probe_mock("mock://sim?latency_ms=5000").await,
        ProbeResult::Failed {
            reason: ProbeFailure::Timeout,
            status: None
        }
    );
}
