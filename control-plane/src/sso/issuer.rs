//! The OpenID provider as this control plane sees it: its discovery document and signing keys,
//! fetched when first needed and kept for `SWITCHYARD_SSO_KEYS_MAX_AGE_SECS`, and the token
//! endpoint's code exchange.
//!
//! A token naming a key not held is how a key rotation shows: the keys are fetched again at
//! once, but no more often than `SWITCHYARD_SSO_KEYS_REFETCH_SECS`, so tokens naming made-up
//! keys cannot make this control plane hammer the provider. One fetch runs at a time; callers
//! waiting meanwhile take its result.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full, Limited};
use jsonwebtoken::jwk::JwkSet;
use serde::Deserialize;
use switchyard_upstream::HttpClient;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::settings::{check_url, SsoSettings};

/// The most any answer of the provider may weigh.
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// How long one call to the provider may take, connect to last byte.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The parts of the discovery document sign-in uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
}

/// Why the provider could not be used; the message names the step, never a secret.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct IssuerError(pub String);

#[derive(Default)]
struct Cache {
    discovery: Option<(Arc<Discovery>, Instant)>,
    keys: Option<(Arc<JwkSet>, Instant)>,
}

pub struct Issuer {
    settings: Arc<SsoSettings>,
    client: HttpClient,
    cache: Mutex<Cache>,
}

/// Whether the key set fetched `age` ago must be fetched again for a token naming `kid`.
/// `None`: nothing is held yet.
pub fn keys_due(
    age: Option<Duration>,
    holds_kid: bool,
    max_age: Duration,
    refetch: Duration,
) -> bool {
    match age {
        None => true,
        Some(age) if age >= max_age => true,
        Some(age) => !holds_kid && age >= refetch,
    }
}

impl Issuer {
    pub fn new(settings: Arc<SsoSettings>, client: HttpClient) -> Issuer {
        Issuer {
            settings,
            client,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The discovery document, fetched when not held or older than the keys' max age.
    pub async fn discovery(&self) -> Result<Arc<Discovery>, IssuerError> {
        let mut cache = self.cache.lock().await;
        if let Some((doc, at)) = &cache.discovery {
            if at.elapsed() < self.settings.keys_max_age {
                return Ok(Arc::clone(doc));
            }
        }
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.settings.issuer.trim_end_matches('/')
        );
        let doc: Discovery =
            serde_json::from_slice(&self.get(&url, "discovery document").await?)
                .map_err(|e| IssuerError(format!("the discovery document is not usable: {e}")))?;
        check_discovery(&doc, &self.settings.issuer)?;
        let doc = Arc::new(doc);
        cache.discovery = Some((Arc::clone(&doc), Instant::now()));
        Ok(doc)
    }

    /// The signing keys to check a token naming `kid` with (see the module's rules on when they
    /// are fetched again).
    pub async fn keys(&self, kid: Option<&str>) -> Result<Arc<JwkSet>, IssuerError> {
        let jwks_uri = self.discovery().await?.jwks_uri.clone();
        let mut cache = self.cache.lock().await;
        let held = cache.keys.clone();
        let holds_kid = match (&held, kid) {
            (Some((keys, _)), Some(kid)) => keys.find(kid).is_some(),
            (Some(_), None) => true,
            (None, _) => false,
        };
        let age = held.as_ref().map(|(_, at)| at.elapsed());
        if !keys_due(
            age,
            holds_kid,
            self.settings.keys_max_age,
            self.settings.keys_refetch,
        ) {
            if let Some((keys, _)) = held {
                return Ok(keys);
            }
        }
        match self.fetch_keys(&jwks_uri).await {
            Ok(keys) => {
                tracing::info!(
                    keys = keys.keys.len(),
                    "fetched the identity provider's signing keys"
                );
                let keys = Arc::new(keys);
                cache.keys = Some((Arc::clone(&keys), Instant::now()));
                Ok(keys)
            }
            // Keys held are still good for the tokens they verify while the provider is away.
            Err(error) => match held {
                Some((keys, _)) => {
                    tracing::warn!(error = %error, "could not fetch the identity provider's signing keys; using those held");
                    Ok(keys)
                }
                None => Err(error),
            },
        }
    }

    async fn fetch_keys(&self, url: &str) -> Result<JwkSet, IssuerError> {
        let body = self.get(url, "signing keys (JWKS)").await?;
        // Keys of kinds this version does not know are skipped, not fatal.
        let raw: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| IssuerError(format!("the signing keys are not JSON: {e}")))?;
        let keys = raw
            .get("keys")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| IssuerError("the signing keys document has no keys".into()))?
            .iter()
            .filter_map(|k| serde_json::from_value(k.clone()).ok())
            .collect();
        Ok(JwkSet { keys })
    }

    /// Exchanges an authorization code (with its PKCE verifier) for the ID token.
    pub async fn exchange(&self, code: &str, verifier: &str) -> Result<String, IssuerError> {
        let discovery = self.discovery().await?;
        let settings = &self.settings;
        // Built whole before any await: the serializer is not `Send`.
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &settings.redirect_uri)
            .append_pair("code_verifier", verifier)
            .append_pair("client_id", &settings.client_id)
            .finish();
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(&discovery.token_endpoint)
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            )
            .header(header::ACCEPT, HeaderValue::from_static("application/json"))
            .header(header::CONTENT_LENGTH, HeaderValue::from(form.len()));
        if let Some(secret) = &settings.client_secret {
            // RFC 6749 section 2.3.1: each part form-encoded before the Basic encoding.
            let user = url::form_urlencoded::byte_serialize(settings.client_id.as_bytes())
                .collect::<String>();
            let pass = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect::<String>();
            let mut value = HeaderValue::from_str(&format!(
                "Basic {}",
                STANDARD.encode(format!("{user}:{pass}"))
            ))
            .map_err(|_| IssuerError("the client credentials are not a header value".into()))?;
            value.set_sensitive(true);
            request = request.header(header::AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| IssuerError(format!("the token request cannot be built: {e}")))?;
        let (status, body) = self.call(request, "token endpoint").await?;
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if !status.is_success() {
            let error = answer.get("error").and_then(serde_json::Value::as_str);
            return Err(IssuerError(format!(
                "the token endpoint refused the code ({status}{})",
                error
                    .map(|e| format!(": {}", printable(e)))
                    .unwrap_or_default()
            )));
        }
        answer
            .get("id_token")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| IssuerError("the token endpoint's answer has no id_token".into()))
    }

    async fn get(&self, url: &str, what: &str) -> Result<Bytes, IssuerError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(url)
            .header(header::ACCEPT, HeaderValue::from_static("application/json"))
            .body(Full::new(Bytes::new()))
            .map_err(|e| IssuerError(format!("the {what} URL is not usable: {e}")))?;
        let (status, body) = self.call(request, what).await?;
        if !status.is_success() {
            return Err(IssuerError(format!("the {what} answered {status}")));
        }
        Ok(body)
    }

    async fn call(
        &self,
        request: Request<Full<Bytes>>,
        what: &str,
    ) -> Result<(http::StatusCode, Bytes), IssuerError> {
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| IssuerError(format!("the {what} could not be reached: {e}")))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| IssuerError(format!("the {what}'s answer could not be read: {e}")))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| IssuerError(format!("the {what} did not answer in time")))?
    }
}

/// The document must be the configured issuer's, offer S256 (when it lists methods) and point
/// at URLs held to the same rules as the issuer's own.
fn check_discovery(doc: &Discovery, issuer: &str) -> Result<(), IssuerError> {
    if doc.issuer != issuer {
        return Err(IssuerError(format!(
            "the discovery document names issuer {:?}, not the configured {issuer:?}",
            printable(&doc.issuer)
        )));
    }
    if let Some(methods) = &doc.code_challenge_methods_supported {
        if !methods.iter().any(|m| m == "S256") {
            return Err(IssuerError(
                "the provider does not offer PKCE with S256".into(),
            ));
        }
    }
    for (name, url) in [
        ("authorization_endpoint", &doc.authorization_endpoint),
        ("token_endpoint", &doc.token_endpoint),
        ("jwks_uri", &doc.jwks_uri),
    ] {
        check_url(name, url).map_err(IssuerError)?;
    }
    Ok(())
}

/// At most 200 printable ASCII characters of what the provider said.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(3600);
    const REFETCH: Duration = Duration::from_secs(10);

    #[test]
    fn keys_are_fetched_when_missing_stale_or_missing_a_kid_not_too_often() {
        let s = Duration::from_secs;
        assert!(keys_due(None, false, MAX, REFETCH));
        assert!(!keys_due(Some(s(5)), true, MAX, REFETCH));
        assert!(keys_due(Some(s(3600)), true, MAX, REFETCH));
        // An unknown key id: fetched again, but not within the refetch interval.
        assert!(!keys_due(Some(s(9)), false, MAX, REFETCH));
        assert!(keys_due(Some(s(10)), false, MAX, REFETCH));
    }

    fn doc() -> Discovery {
        Discovery {
            issuer: "https://idp.example.com".into(),
            authorization_endpoint: "https://idp.example.com/auth".into(),
            token_endpoint: "https://idp.example.com/token".into(),
            jwks_uri: "https://idp.example.com/jwks".into(),
            code_challenge_methods_supported: Some(vec!["plain".into(), "S256".into()]),
        }
    }

    #[test]
    fn the_discovery_document_must_be_the_issuers_and_offer_s256() {
        assert!(check_discovery(&doc(), "https://idp.example.com").is_ok());
        assert!(check_discovery(&doc(), "https://idp.example.com/").is_err());
        let mut plain = doc();
        plain.code_challenge_methods_supported = Some(vec!["plain".into()]);
        assert!(check_discovery(&plain, "https://idp.example.com").is_err());
        let mut http = doc();
        http.token_endpoint = "http://idp.example.com/token".into();
        assert!(check_discovery(&http, "https://idp.example.com").is_err());
    }
}
