//! The recovery probe of one credential: a real, minimal generation request in the channel's own
//! protocol, the request a client's traffic would make, so a probe passes only when the upstream
//! can generate again (not merely list its models):
//!
//! - OpenAI: `POST /v1/chat/completions`
//!   `{"model": M, "messages": [{"role": "user", "content": "ping"}], "max_completion_tokens": 1}`;
//! - Anthropic: `POST /v1/messages`
//!   `{"model": M, "max_tokens": 1, "messages": [{"role": "user", "content": "ping"}]}`;
//! - Gemini: `POST /v1beta/models/{M}:generateContent`
//!   `{"contents": [{"role": "user", "parts": [{"text": "ping"}]}],
//!   "generationConfig": {"maxOutputTokens": 1}}`.
//!
//! `M` is one of the channel's members' upstream models ([`probe_model`]). URL, auth and extra
//! headers come from the channel's [`ChannelRuntime`], exactly as for client traffic: an Azure
//! channel is probed with OpenAI's request at its deployment `M`'s URL
//! (`/openai/deployments/{M}/chat/completions?api-version=...`) with its `api-key`; a Vertex
//! channel with Gemini's request at its project/location URL, with an access token obtained from
//! the credential's service-account key (a refused key fails the probe as the provider's 401, an
//! unreachable token endpoint as a transport failure); a Bedrock channel with Anthropic's
//! request converted to a Converse request at its model's path, signed with the credential's
//! AWS access key (a refused signature fails the probe as Bedrock's 403). A 2xx answer
//! passes; any other status, a timeout or a transport error fails. A `mock` channel is answered
//! by the simulation (its latency and failure rate, [`MockOptions`]). The result carries a
//! low-cardinality reason and the status, never a secret, a URL or an error text.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::json;
use switchyard_engine::{ChannelId, RandomSource, Snapshot};
use switchyard_provider::Protocol;

use crate::cause::TransportCause;
use crate::channel::{channel_protocol, gemini_path, ChannelRuntime, CredentialRuntime, Target};
use crate::client::HttpClient;
use crate::mock::MockOptions;
use crate::token::TokenError;

/// The prompt of every probe.
pub const PROBE_PROMPT: &str = "ping";

/// Why a probe failed. Low-cardinality: fit for a log field or a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeFailure {
    /// The upstream answered with a non-2xx status.
    Status,
    /// No response head within the probe's budget.
    Timeout,
    /// Connecting or talking to the upstream failed, for this cause.
    Transport(TransportCause),
    /// The request could not be built (e.g. a model that is not valid in a URL path).
    Request,
}

impl ProbeFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeFailure::Status => "status",
            ProbeFailure::Timeout => "timeout",
            ProbeFailure::Transport(_) => "transport",
            ProbeFailure::Request => "request",
        }
    }

    /// A transport failure's cause (`dns`, `refused`, `reset`, `tls`, `timeout`, `other`).
    pub fn cause(self) -> Option<TransportCause> {
        match self {
            ProbeFailure::Transport(cause) => Some(cause),
            _ => None,
        }
    }
}

/// What one probe of one credential brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Passed {
        status: u16,
    },
    Failed {
        reason: ProbeFailure,
        /// The upstream's status, when it answered.
        status: Option<u16>,
    },
}

impl ProbeResult {
    pub fn passed(&self) -> bool {
        matches!(self, ProbeResult::Passed { .. })
    }

    /// The upstream's (or the simulation's) status, when there was an answer.
    pub fn status(&self) -> Option<u16> {
        match *self {
            ProbeResult::Passed { status } => Some(status),
            ProbeResult::Failed { status, .. } => status,
        }
    }
}

impl fmt::Display for ProbeResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ProbeResult::Passed { status } => write!(f, "passed (HTTP {status})"),
            ProbeResult::Failed {
                status: Some(status),
                ..
            } => write!(f, "failed (HTTP {status})"),
            ProbeResult::Failed {
                reason: ProbeFailure::Transport(cause),
                ..
            } => write!(f, "failed (transport: {})", cause.as_str()),
            ProbeResult::Failed { reason, .. } => write!(f, "failed ({})", reason.as_str()),
        }
    }
}

/// The model a channel is probed with: the upstream model of its first enabled member in the
/// snapshot (routes in snapshot order, members in tier order). `None` when the channel has no
/// enabled member: there is no model to ask for.
pub fn probe_model(snapshot: &Snapshot, channel: ChannelId) -> Option<&str> {
    snapshot
        .routes()
        .iter()
        .flat_map(|route| route.members.iter())
        .find(|member| member.channel_id == channel && member.enabled)
        .map(|member| member.upstream_model.as_str())
}

/// The probe's path and JSON body in `protocol`, asking `model` for one token.
pub fn probe_body(protocol: Protocol, model: &str) -> (String, Bytes) {
    let (path, body) = match protocol {
        Protocol::OpenAi => (
            "/v1/chat/completions".to_owned(),
            json!({
                "model": model,
                "messages": [{"role": "user", "content": PROBE_PROMPT}],
                "max_completion_tokens": 1,
            }),
        ),
        Protocol::Anthropic => (
            "/v1/messages".to_owned(),
            json!({
                "model": model,
                "max_tokens": 1,
                "messages": [{"role": "user", "content": PROBE_PROMPT}],
            }),
        ),
        Protocol::Gemini => (
            gemini_path(model, "generateContent"),
            json!({
                "contents": [{"role": "user", "parts": [{"text": PROBE_PROMPT}]}],
                "generationConfig": {"maxOutputTokens": 1},
            }),
        ),
    };
    (path, Bytes::from(body.to_string()))
}

/// The probe request for this channel and credential: its protocol's minimal generation (a mock
/// channel, never sent, would be asked in OpenAI's), with the channel's URL, extra headers and
/// this credential's auth.
pub fn probe_request(
    channel: &ChannelRuntime,
    credential: &CredentialRuntime,
    model: &str,
) -> Result<Request<Full<Bytes>>, crate::bedrock::RequestError> {
    let protocol = channel_protocol(channel.provider(), Protocol::OpenAi);
    let (path, body) = probe_body(protocol, model);
    let target = Target {
        method: &Method::POST,
        path: &path,
        query: None,
        model,
    };
    channel.request(target, None, credential, body)
}

/// Probes one credential of a channel within `timeout`. `rng` draws a mock channel's simulated
/// failure (unused otherwise).
pub async fn probe_credential(
    client: &HttpClient,
    channel: &ChannelRuntime,
    credential: &CredentialRuntime,
    model: &str,
    timeout: Duration,
    rng: &mut impl RandomSource,
) -> ProbeResult {
    if let Some(options) = &channel.mock {
        let failure = options.draw_failure(rng);
        return simulate(options, failure, timeout).await;
    }
    let credential = match credential.authorized(client, timeout).await {
        Ok(credential) => credential,
        Err(e) => {
            let (reason, status) = match &e {
                TokenError::Connect(cause) | TokenError::Transport(cause) => {
                    (ProbeFailure::Transport(*cause), None)
                }
                TokenError::Timeout => (ProbeFailure::Timeout, None),
                _ => (
                    ProbeFailure::Status,
                    credential
                        .token_failure_answer(&e)
                        .map(|(status, _, _)| status.as_u16()),
                ),
            };
            return ProbeResult::Failed { reason, status };
        }
    };
    let Ok(request) = probe_request(channel, &credential, model) else {
        return ProbeResult::Failed {
            reason: ProbeFailure::Request,
            status: None,
        };
    };
    match tokio::time::timeout(timeout, client.request(request)).await {
        Ok(Ok(response)) if response.status().is_success() => ProbeResult::Passed {
            status: response.status().as_u16(),
        },
        Ok(Ok(response)) => ProbeResult::Failed {
            reason: ProbeFailure::Status,
            status: Some(response.status().as_u16()),
        },
        Ok(Err(e)) => ProbeResult::Failed {
            reason: ProbeFailure::Transport(e.cause()),
            status: None,
        },
        Err(_) => ProbeResult::Failed {
            reason: ProbeFailure::Timeout,
            status: None,
        },
    }
}

/// The simulation's answer to a probe: after its latency (a timeout when that exceeds the
/// budget), the drawn failure status or 200.
async fn simulate(
    options: &MockOptions,
    failure: Option<http::StatusCode>,
    timeout: Duration,
) -> ProbeResult {
    if tokio::time::timeout(timeout, tokio::time::sleep(options.latency()))
        .await
        .is_err()
    {
        return ProbeResult::Failed {
            reason: ProbeFailure::Timeout,
            status: None,
        };
    }
    match failure {
        Some(status) => ProbeResult::Failed {
            reason: ProbeFailure::Status,
            status: Some(status.as_u16()),
        },
        None => ProbeResult::Passed { status: 200 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::{
        Capabilities, Channel, ChannelStatus, Credential, Member, Provider, Route, RoutingMode,
        SecretSource, SnapshotParts, SplitMix64,
    };

    #[test]
    fn a_channel_is_probed_with_its_first_enabled_members_model() {
        let member = |id, channel_id, model: &str, enabled| Member {
            id,
            channel_id,
            upstream_model: model.into(),
            group_name: "default".into(),
            priority: 0,
            weight: 1,
            enabled,
            canary: false,
            capabilities: Capabilities::default(),
        };
        let route = |id, members| Route {
            id,
            model_pattern: format!("r{id}"),
            enabled: true,
            routing_mode: RoutingMode::Auto,
            single_member_id: None,
            sticky_session: None,
            stable_first: None,
            stable_first_denominator: None,
            retry_times: None,
            channel_retry_times: None,
            cooldown_seconds: None,
            members,
        };
        let snapshot = Snapshot::new(SnapshotParts {
            routes: vec![
                route(
                    1,
                    vec![member(1, 7, "off", false), member(2, 8, "eight", true)],
                ),
                route(
                    2,
                    vec![member(4, 7, "later", true), member(3, 7, "seven", true)],
                ),
            ],
            ..SnapshotParts::default()
        });
        // Channel 7: its disabled member is passed over, and of the next route's two the first
        // in tier order (the lower id) is taken.
        assert_eq!(probe_model(&snapshot, 7), Some("seven"));
        assert_eq!(probe_model(&snapshot, 8), Some("eight"));
        assert_eq!(probe_model(&snapshot, 9), None, "no member, no model");
    }

    #[test]
    fn a_result_says_whether_it_passed_and_the_status_it_saw() {
        let passed = ProbeResult::Passed { status: 200 };
        assert!(passed.passed());
        assert_eq!(passed.status(), Some(200));
        assert_eq!(passed.to_string(), "passed (HTTP 200)");
        let refused = ProbeResult::Failed {
            reason: ProbeFailure::Status,
            status: Some(503),
        };
        assert!(!refused.passed());
        assert_eq!(refused.status(), Some(503));
        assert_eq!(refused.to_string(), "failed (HTTP 503)");
        let silent = ProbeResult::Failed {
            reason: ProbeFailure::Timeout,
            status: None,
        };
        assert_eq!(silent.status(), None);
        assert_eq!(silent.to_string(), "failed (timeout)");
        let labels: Vec<&str> = [
            ProbeFailure::Status,
            ProbeFailure::Timeout,
            ProbeFailure::Transport(TransportCause::Refused),
            ProbeFailure::Request,
        ]
        .into_iter()
        .map(ProbeFailure::as_str)
        .collect();
        assert_eq!(labels, ["status", "timeout", "transport", "request"]);
    }

    /// Probes the one credential of a Vertex channel whose token endpoint is `token_uri`.
    async fn probe(token_uri: &str, budget: Duration) -> ProbeResult {
        let client = crate::client::build_client(Duration::from_secs(5));
        let rt = vertex(token_uri);
        let mut rng = SplitMix64::new(1);
        probe_credential(
            &client,
            &rt,
            &rt.credentials[0],
            "gemini-x",
            budget,
            &mut rng,
        )
        .await
    }

    /// A Vertex channel whose service account's token endpoint is `token_uri`.
    fn vertex(token_uri: &str) -> ChannelRuntime {
        let key_file = crate::vertex::test_key_file(|f| {
            f.insert("token_uri".into(), token_uri.into());
        });
        let channel = Channel {
            id: 1,
            name: "v".into(),
            provider: Provider::Vertex,
            base_url: "https://us-central1-aiplatform.googleapis.com".into(),
            status: ChannelStatus::Enabled,
            auto_ban: false,
            max_concurrency: None,
            capabilities: Capabilities::default(),
            credentials: vec![Credential {
                id: 1,
                enabled: true,
                secret: SecretSource::Inline(key_file),
            }],
            retry_status_codes: vec![],
            retry_error_patterns: vec![],
            headers: vec![],
            secrets_withheld: false,
            responses_api: true,
            preset: None,
            passthrough: vec![],
        };
        ChannelRuntime::compile(&channel, &|_| None)
    }

    #[tokio::test]
    async fn a_token_endpoint_that_cannot_be_reached_or_never_answers_fails_the_probe() {
        // Nothing listens on the port (bound, then closed): the exchange cannot connect.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", closed.local_addr().unwrap());
        drop(closed);
        assert_eq!(
            probe(&url, Duration::from_secs(5)).await,
            ProbeResult::Failed {
                reason: ProbeFailure::Transport(TransportCause::Refused),
                status: None
            }
        );
        // A listener that accepts and never answers: the probe's budget ends the exchange.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/oauth/token", silent.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut sockets = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                sockets.push(socket);
            }
        });
        let result = probe(&url, Duration::from_millis(300)).await;
        held.abort();
        assert_eq!(
            result,
            ProbeResult::Failed {
                reason: ProbeFailure::Timeout,
                status: None
            }
        );
    }
}
