//! Per-channel runtime facts compiled once per snapshot: the base URL, each credential's auth
//! header value (marked sensitive), the channel's extra headers, and building one upstream
//! request with the provider's auth rule (`Authorization: Bearer` for OpenAI, `x-api-key` +
//! `anthropic-version` for Anthropic, `x-goog-api-key` for Gemini). Also which client headers
//! may go upstream and which upstream headers may come back.

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, Request};
use http_body_util::Full;
use switchyard_engine::{Channel, CredentialId, Provider, SecretSource};
use switchyard_provider::Protocol;

use crate::mock::MockOptions;

/// A credential ready to use: its id and the auth header value (marked sensitive).
#[derive(Debug, Clone)]
pub struct CredentialRuntime {
    pub id: CredentialId,
    auth: HeaderValue,
}

/// Per-channel facts compiled once per snapshot, so the hot path only formats a URL.
#[derive(Debug, Clone)]
pub struct ChannelRuntime {
    pub mock: Option<MockOptions>,
    base: String,
    pub credentials: Vec<CredentialRuntime>,
    headers: Vec<(HeaderName, HeaderValue)>,
    provider: Provider,
}

/// The credential id a mock channel's attempts are recorded under (it needs none).
pub const MOCK_CREDENTIAL: CredentialId = 0;

/// The wire protocol spoken to a channel: its provider's, or the client's own for the
/// in-process mock (which answers natively in every protocol).
pub fn channel_protocol(provider: Provider, client: Protocol) -> Protocol {
    match provider {
        Provider::Openai => Protocol::OpenAi,
        Provider::Anthropic => Protocol::Anthropic,
        Provider::Gemini => Protocol::Gemini,
        Provider::Mock => client,
    }
}

/// Checks an upstream channel's `base_url`: an absolute `http://` or `https://` URL with a host,
/// and no query string or fragment — request paths are appended to it, so a `?` or `#` in it
/// would turn them into a query or a fragment and send the request somewhere else. The message
/// never quotes the URL (it may carry a password).
pub fn check_base_url(url: &str) -> Result<(), String> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("must be an http:// or https:// URL".to_owned());
    }
    if url.contains(['?', '#']) {
        return Err("must not carry a query string or fragment (`?` or `#`)".to_owned());
    }
    match url.parse::<http::Uri>() {
        Ok(uri) if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        _ => Err("must be an http:// or https:// URL with a host".to_owned()),
    }
}

/// The base that request paths are appended to: scheme, authority and path of `url`, without a
/// trailing `/`, and without any query string or fragment (a stored URL from before they were
/// refused is cut there, with a warning).
fn base_of(channel: &Channel) -> String {
    let trimmed = channel.base_url.trim();
    let base = match trimmed.find(['?', '#']) {
        Some(cut) => {
            tracing::warn!(channel = %channel.name, "base_url has a query string or fragment; it is ignored");
            &trimmed[..cut]
        }
        None => trimmed,
    };
    base.trim_end_matches('/').to_owned()
}

/// A Gemini model path: `/v1beta/models/{model}:{action}` (`generateContent`,
/// `streamGenerateContent`, `countTokens`).
pub fn gemini_path(model: &str, action: &str) -> String {
    format!("/v1beta/models/{model}:{action}")
}

impl ChannelRuntime {
    /// Compiles a channel. Credentials whose secret cannot be resolved (unset env var) or is not
    /// a valid header value are left out, with a warning naming the credential, never its value.
    pub fn compile(channel: &Channel, env: &dyn Fn(&str) -> Option<String>) -> ChannelRuntime {
        let mock = if channel.provider == Provider::Mock {
            match MockOptions::from_url(&channel.base_url) {
                Ok(options) => Some(options),
                Err(e) => {
                    tracing::warn!(channel = %channel.name, error = %e, "bad mock options; using defaults");
                    Some(MockOptions::default())
                }
            }
        } else {
            None
        };
        let base = if mock.is_some() {
            channel.base_url.trim().trim_end_matches('/').to_owned()
        } else {
            base_of(channel)
        };
        let mut credentials = Vec::with_capacity(channel.credentials.len());
        for cred in &channel.credentials {
            let secret = match &cred.secret {
                SecretSource::Inline(s) => Some(s.clone()),
                SecretSource::Env(name) => env(name),
            };
            let Some(secret) = secret else {
                tracing::warn!(channel = %channel.name, credential_id = cred.id, "credential's environment variable is not set; credential skipped");
                continue;
            };
            let value = match channel.provider {
                Provider::Anthropic | Provider::Gemini => HeaderValue::from_str(secret.trim()),
                _ => HeaderValue::from_str(&format!("Bearer {}", secret.trim())),
            };
            match value {
                Ok(mut auth) => {
                    auth.set_sensitive(true);
                    credentials.push(CredentialRuntime { id: cred.id, auth });
                }
                Err(_) => {
                    tracing::warn!(channel = %channel.name, credential_id = cred.id, "credential is not a valid header value; skipped");
                }
            }
        }
        let headers = channel
            .headers
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    HeaderName::from_bytes(k.as_bytes()).ok()?,
                    HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        if mock.is_some() && credentials.is_empty() {
            credentials.push(CredentialRuntime {
                id: MOCK_CREDENTIAL,
                auth: HeaderValue::from_static(""),
            });
        }
        ChannelRuntime {
            mock,
            base,
            credentials,
            headers,
            provider: channel.provider,
        }
    }

    /// The provider whose URL and auth rules this channel follows.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    pub fn credential(&self, id: CredentialId) -> Option<&CredentialRuntime> {
        self.credentials.iter().find(|c| c.id == id)
    }

    /// The upstream URL for `path` (which starts with its API version, `/v1/...` or
    /// `/v1beta/...`): a base URL that already ends in that version segment does not repeat it.
    pub fn url(&self, path: &str, query: Option<&str>) -> String {
        let version_end = path.get(1..).and_then(|p| p.find('/')).map_or(0, |i| i + 1);
        let version = &path[..version_end];
        let path = if !version.is_empty() && self.base.ends_with(version) {
            &path[version_end..]
        } else {
            path
        };
        match query {
            Some(q) if !q.is_empty() => format!("{}{path}?{q}", self.base),
            _ => format!("{}{path}", self.base),
        }
    }

    /// The upstream request. Passed through (`client_headers` given): the client's own headers
    /// minus hop-by-hop, auth and gateway headers. Translated (`None`): JSON only. Then the
    /// channel's extra headers, this credential's auth in the provider's header, and the body.
    pub fn request(
        &self,
        method: Method,
        path: &str,
        query: Option<&str>,
        client_headers: Option<&HeaderMap>,
        credential: &CredentialRuntime,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut builder = Request::builder().method(method).uri(self.url(path, query));
        if let Some(headers) = builder.headers_mut() {
            match client_headers {
                Some(client_headers) => copy_forwardable(client_headers, headers),
                None => {
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
            }
            for (name, value) in &self.headers {
                headers.insert(name.clone(), value.clone());
            }
            match self.provider {
                Provider::Anthropic => {
                    headers.insert("x-api-key", credential.auth.clone());
                    if !headers.contains_key("anthropic-version") {
                        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
                    }
                }
                Provider::Gemini => {
                    headers.insert("x-goog-api-key", credential.auth.clone());
                }
                Provider::Openai => {
                    headers.insert(header::AUTHORIZATION, credential.auth.clone());
                }
                Provider::Mock => {}
            }
            if !body.is_empty() {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            }
        }
        builder.body(Full::new(body))
    }
}

/// The client's headers that may go upstream: not hop-by-hop (including those the client named
/// in `Connection`, RFC 9110 §7.6.1), not credentials, not gateway controls.
fn copy_forwardable(client_headers: &HeaderMap, headers: &mut HeaderMap) {
    let hop: Vec<&str> = client_headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    for (name, value) in client_headers {
        if forwardable(name) && !hop.iter().any(|h| name.as_str().eq_ignore_ascii_case(h)) {
            headers.append(name.clone(), value.clone());
        }
    }
}

/// Client headers that are not forwarded upstream: hop-by-hop, the client's own credentials,
/// length/encoding (recomputed; identity keeps bodies inspectable), and gateway controls.
pub fn forwardable(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "host"
            | "authorization"
            | "x-api-key"
            | "api-key"
            | "x-goog-api-key"
            | "content-length"
            | "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authorization"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "accept-encoding"
            | "cookie"
    ) && !name.as_str().starts_with("x-switchyard-")
}

/// Upstream response headers that are not passed back to the client.
pub fn returnable(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "content-length"
            | "set-cookie"
    ) && !name.as_str().starts_with("x-switchyard-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_engine::{Capabilities, ChannelStatus, Credential};

    fn channel(base_url: &str, provider: Provider) -> Channel {
        Channel {
            id: 1,
            name: "c".into(),
            provider,
            base_url: base_url.into(),
            status: ChannelStatus::Enabled,
            auto_ban: false,
            max_concurrency: None,
            capabilities: Capabilities::default(),
            credentials: vec![
                Credential {
                    id: 1,
                    enabled: true,
                    secret: SecretSource::Inline("k1".into()),
                },
                Credential {
                    id: 2,
                    enabled: true,
                    secret: SecretSource::Env("SWITCHYARD_UNSET_FOR_TEST".into()),
                },
            ],
            retry_status_codes: vec![],
            retry_error_patterns: vec![],
            headers: vec![("x-extra".into(), "1".into())],
            secrets_withheld: false,
        }
    }

    #[test]
    fn urls_join_with_or_without_v1() {
        let none = |_: &str| None;
        let a = ChannelRuntime::compile(&channel("https://api.x.com/v1/", Provider::Openai), &none);
        assert_eq!(
            a.url("/v1/chat/completions", None),
            "https://api.x.com/v1/chat/completions"
        );
        let b = ChannelRuntime::compile(&channel("http://127.0.0.1:9", Provider::Openai), &none);
        assert_eq!(
            b.url("/v1/embeddings", Some("a=1")),
            "http://127.0.0.1:9/v1/embeddings?a=1"
        );
        let g = ChannelRuntime::compile(
            &channel(
                "https://generativelanguage.googleapis.com/v1beta",
                Provider::Gemini,
            ),
            &none,
        );
        assert_eq!(
            g.url(&gemini_path("gemini-2.0-flash", "streamGenerateContent"), Some("alt=sse")),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
        );
        // The env credential is unset: skipped.
        assert_eq!(a.credentials.len(), 1);
    }

    #[test]
    fn a_stored_query_or_fragment_never_redirects_the_path() {
        let none = |_: &str| None;
        for url in [
            "https://api.x.com/v1?to=/evil",
            "https://api.x.com/v1/#/evil",
        ] {
            let rt = ChannelRuntime::compile(&channel(url, Provider::Openai), &none);
            assert_eq!(
                rt.url("/v1/chat/completions", None),
                "https://api.x.com/v1/chat/completions",
                "{url}"
            );
        }
    }

    #[test]
    fn base_urls_are_checked_without_quoting_them() {
        assert!(check_base_url("https://api.x.com/v1").is_ok());
        assert!(check_base_url(" http://127.0.0.1:9 ").is_ok());
        for bad in [
            "ftp://u:secret@x",
            "https://x/v1?a=1",
            "https://x/v1#f",
            "https://",
            "api.x.com",
        ] {
            let message = check_base_url(bad).unwrap_err();
            assert!(
                !message.contains("secret") && !message.contains("x/v1"),
                "{message}"
            );
        }
    }

    #[test]
    fn request_replaces_client_auth_and_drops_hop_headers() {
        let rt = ChannelRuntime::compile(&channel("http://u", Provider::Openai), &|_| None);
        let mut client = HeaderMap::new();
        client.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer client"),
        );
        client.insert("x-switchyard-pin-member", HeaderValue::from_static("3"));
        client.insert("openai-beta", HeaderValue::from_static("assistants=v2"));
        client.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-hop"),
        );
        client.insert("x-hop", HeaderValue::from_static("secret-ish"));
        client.insert("api-key", HeaderValue::from_static("client-azure-key"));
        client.insert(
            "x-goog-api-key",
            HeaderValue::from_static("client-gemini-key"),
        );
        let req = rt
            .request(
                Method::POST,
                "/v1/chat/completions",
                None,
                Some(&client),
                &rt.credentials[0],
                Bytes::from_static(b"{}"),
            )
            .unwrap();
        let h = req.headers();
        assert_eq!(h[header::AUTHORIZATION], "Bearer k1");
        assert!(h[header::AUTHORIZATION].is_sensitive());
        assert_eq!(h["openai-beta"], "assistants=v2");
        assert_eq!(h["x-extra"], "1");
        assert!(!h.contains_key("x-switchyard-pin-member") && !h.contains_key(header::CONNECTION));
        assert!(!h.contains_key("x-hop"), "named in Connection: hop-by-hop");
        assert!(!h.contains_key("api-key") && !h.contains_key("x-goog-api-key"));
        let anth = ChannelRuntime::compile(&channel("http://u", Provider::Anthropic), &|_| None);
        let req = anth
            .request(
                Method::POST,
                "/v1/messages",
                None,
                Some(&client),
                &anth.credentials[0],
                Bytes::new(),
            )
            .unwrap();
        assert_eq!(req.headers()["x-api-key"], "k1");
        assert!(!req.headers().contains_key(header::AUTHORIZATION));
        assert_eq!(req.headers()["anthropic-version"], "2023-06-01");
        let gem = ChannelRuntime::compile(&channel("http://u", Provider::Gemini), &|_| None);
        let req = gem
            .request(
                Method::POST,
                &gemini_path("m", "generateContent"),
                None,
                None,
                &gem.credentials[0],
                Bytes::from_static(b"{}"),
            )
            .unwrap();
        assert_eq!(req.headers()["x-goog-api-key"], "k1");
        assert!(req.headers()["x-goog-api-key"].is_sensitive());
        assert!(!req.headers().contains_key(header::AUTHORIZATION));
        assert!(
            !req.headers().contains_key("openai-beta"),
            "translated: client headers stay"
        );
    }
}
