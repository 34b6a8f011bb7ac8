//! The probe request itself: a quiet `GET …/v1/models` with one credential, the cheapest call
//! every OpenAI-style upstream answers (Anthropic's `/v1/models` takes `x-api-key`; Gemini's
//! OpenAI-compatible endpoint takes a bearer token, as the proxies send it). `mock` channels are
//! simulated in-process by the proxies, so they always pass.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, AUTHORIZATION};
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use switchyard_engine::Provider;

pub type ProbeClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A small client for probes: HTTP/1.1, rustls with webpki roots, short connect timeout, few
/// idle connections (probes are rare).
pub fn client(connect_timeout: Duration) -> ProbeClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(1)
        .build(https)
}

/// A credential's secret, resolved on the control plane. Never printed.
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(****)")
    }
}

/// What a probe needs to know about a channel.
#[derive(Debug)]
pub struct ProbeTarget {
    pub channel_id: i64,
    pub name: String,
    pub provider: Provider,
    pub base_url: String,
    pub headers: BTreeMap<String, String>,
    /// Enabled credentials whose secret could be resolved, in id order.
    pub credentials: Vec<(i64, Secret)>,
}

/// `{base_url}/v1/models`, or `{base_url}/models` when the base already ends in `/v1` — the same
/// rule the proxies use for every endpoint.
pub fn models_url(base_url: &str) -> String {
    let base = base_url.trim().trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}/models")
    } else {
        format!("{base}/v1/models")
    }
}

/// The result of probing one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// This credential got a 2xx (`None`: a mock channel).
    Passed { credential_id: Option<i64> },
    /// Every credential failed; the last failure, for the log (never a secret).
    Failed { tried: usize, last_error: String },
}

impl ProbeOutcome {
    pub fn passed(&self) -> bool {
        matches!(self, ProbeOutcome::Passed { .. })
    }
}

fn request(target: &ProbeTarget, secret: &Secret) -> Result<Request<Full<Bytes>>, String> {
    let mut builder = Request::builder()
        .method(Method::GET)
        .uri(models_url(&target.base_url));
    let headers = builder
        .headers_mut()
        .ok_or_else(|| "invalid base_url".to_owned())?;
    for (name, value) in &target.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    let (name, value) = match target.provider {
        Provider::Anthropic => (
            HeaderName::from_static("x-api-key"),
            secret.0.trim().to_owned(),
        ),
        _ => (AUTHORIZATION, format!("Bearer {}", secret.0.trim())),
    };
    let mut value = HeaderValue::from_str(&value)
        .map_err(|_| "the credential is not a valid header value".to_owned())?;
    value.set_sensitive(true);
    headers.insert(name, value);
    if target.provider == Provider::Anthropic && !headers.contains_key("anthropic-version") {
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
    builder
        .body(Full::new(Bytes::new()))
        .map_err(|e| format!("cannot build the request: {e}"))
}

/// Tries the channel's credentials in turn until one gets a 2xx, each within `timeout`.
pub async fn probe(client: &ProbeClient, target: &ProbeTarget, timeout: Duration) -> ProbeOutcome {
    if target.provider == Provider::Mock {
        return ProbeOutcome::Passed {
            credential_id: None,
        };
    }
    let mut last_error = "no enabled credential with a resolvable secret".to_owned();
    let mut tried = 0;
    for (credential_id, secret) in &target.credentials {
        tried += 1;
        let request = match request(target, secret) {
            Ok(request) => request,
            Err(error) => {
                last_error = format!("credential {credential_id}: {error}");
                continue;
            }
        };
        match tokio::time::timeout(timeout, client.request(request)).await {
            Ok(Ok(response)) if response.status().is_success() => {
                return ProbeOutcome::Passed {
                    credential_id: Some(*credential_id),
                };
            }
            Ok(Ok(response)) => {
                last_error = format!("credential {credential_id}: HTTP {}", response.status());
            }
            Ok(Err(error)) => {
                last_error = format!("credential {credential_id}: {error}");
            }
            Err(_) => {
                last_error = format!(
                    "credential {credential_id}: no answer within {} ms",
                    timeout.as_millis()
                );
            }
        }
    }
    ProbeOutcome::Failed { tried, last_error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_url_follows_the_proxies_rule() {
        assert_eq!(
            models_url("https://api.openai.com/v1"),
            "https://api.openai.com/v1/models"
        );
        assert_eq!(
            models_url("https://api.openai.com/v1/"),
            "https://api.openai.com/v1/models"
        );
        assert_eq!(
            models_url("http://127.0.0.1:9000"),
            "http://127.0.0.1:9000/v1/models"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let secret = Secret::new("sk-very-secret".into());
        assert_eq!(format!("{secret:?}"), "Secret(****)");
    }

    #[test]
    fn anthropic_probes_send_x_api_key_and_a_version() {
        let target = ProbeTarget {
            channel_id: 1,
            name: "a".into(),
            provider: Provider::Anthropic,
            base_url: "https://api.anthropic.com".into(),
            headers: BTreeMap::new(),
            credentials: Vec::new(),
        };
        let req = request(&target, &Secret::new("k1".into())).unwrap();
        assert_eq!(req.uri(), "https://api.anthropic.com/v1/models");
        assert_eq!(req.headers()["x-api-key"], "k1");
        assert!(req.headers()["x-api-key"].is_sensitive());
        assert_eq!(req.headers()["anthropic-version"], "2023-06-01");
        assert!(!req.headers().contains_key(AUTHORIZATION));
    }
}
