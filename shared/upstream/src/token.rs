//! Short-lived upstream credentials, shared by every kind that has them (a Vertex service
//! account's access tokens, a workload identity's tokens and temporary AWS keys):
//!
//! - [`TokenCache`]: one credential cached, refreshed before it expires (a fifth of its
//!   lifetime, at most five minutes, ahead), obtained by one fetch at a time that the requests
//!   arriving meanwhile wait for and share; a refresh that fails while the cached one is still
//!   valid keeps it (and tries again [`REFRESH_RETRY`] later);
//! - [`Registry`]: the caches of this process by identity, so a new snapshot (which compiles its
//!   channels again) keeps what its predecessor obtained;
//! - [`fetch`]: one bounded exchange with a token endpoint, its failures told apart
//!   ([`TokenError`]), and the answer's pieces ([`bearer_answer`], [`refusal_reason`], [`form`]).
//!
//! Nothing here logs, formats or returns a token, a key or an assertion.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::{json, Value};
use switchyard_provider::Protocol;
use tokio::time::Instant;

use crate::cause::TransportCause;
use crate::client::HttpClient;

/// A credential is refreshed this long before it expires (or at 80 % of its lifetime when that
/// is shorter).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// How long a credential that could not be refreshed (but has not expired) is used before the
/// next try.
pub const REFRESH_RETRY: Duration = Duration::from_secs(10);
/// Most bytes of a token endpoint's answer read.
pub const MAX_TOKEN_ANSWER: usize = 64 * 1024;
/// Most characters of a token endpoint's own words quoted in an error.
pub const MAX_REASON_CHARS: usize = 200;

/// Why no credential could be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// The token endpoint answered with an error status: the identity was refused (400/401/403:
    /// revoked, deleted, wrong), or the endpoint is limited (429) or failing (5xx).
    Refused {
        status: StatusCode,
        retry_after: Option<HeaderValue>,
        /// The endpoint's own error words, bounded (never an assertion or a token).
        reason: String,
    },
    /// The token endpoint could not be reached, for this cause.
    Connect(TransportCause),
    /// The connection failed after it was up, or the answer could not be read, for this cause.
    Transport(TransportCause),
    /// No answer within the budget.
    Timeout,
    /// A 2xx answer without a usable credential in it.
    Malformed,
    /// The exchange could not be asked: an assertion that could not be signed, a token file
    /// that could not be read, a request that could not be built.
    Request,
}

impl TokenError {
    /// The answer an attempt is classified by, in the channel's error shape (`protocol`), when
    /// the failure is the token endpoint's answer: a refused identity is the provider's 401 (the
    /// credential is at fault), a limited or failing endpoint its 429 or 503 (retryable), an
    /// unusable answer a 502. `None` for network failures (classified as such). `subject` says
    /// whose exchange failed (an account, a role), never a key, an assertion or a token.
    pub fn answer_as(
        &self,
        protocol: Protocol,
        subject: &str,
    ) -> Option<(StatusCode, HeaderMap, Bytes)> {
        let (status, words, retry_after) = match self {
            TokenError::Refused {
                status,
                retry_after,
                reason,
            } => {
                let mapped = if *status == StatusCode::TOO_MANY_REQUESTS {
                    StatusCode::TOO_MANY_REQUESTS
                } else if status.is_server_error() {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::UNAUTHORIZED
                };
                let words = if reason.is_empty() {
                    format!("the token endpoint answered status {}", status.as_u16())
                } else {
                    format!(
                        "the token endpoint answered status {}: {reason}",
                        status.as_u16()
                    )
                };
                (mapped, words, retry_after.clone())
            }
            TokenError::Malformed => (
                StatusCode::BAD_GATEWAY,
                "the token endpoint answered a success without a usable credential".to_owned(),
                None,
            ),
            TokenError::Request => (
                StatusCode::UNAUTHORIZED,
                "the exchange could not be asked (an assertion not signed, or a token file not read)"
                    .to_owned(),
                None,
            ),
            TokenError::Connect(_) | TokenError::Transport(_) | TokenError::Timeout => return None,
        };
        let message = format!("{subject} failed: {words}");
        let body = error_body(protocol, status, &message);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(retry_after) = retry_after {
            headers.insert(header::RETRY_AFTER, retry_after);
        }
        Some((status, headers, Bytes::from(body.to_string())))
    }

    /// A network failure's cause (`None` for the endpoint's answer or our own request).
    pub fn cause(&self) -> Option<TransportCause> {
        match self {
            TokenError::Connect(cause) | TokenError::Transport(cause) => Some(*cause),
            TokenError::Timeout => Some(TransportCause::Timeout),
            _ => None,
        }
    }

    /// The low-cardinality label in logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            TokenError::Refused { .. } => "token_refused",
            TokenError::Connect(_) => "token_connect_error",
            TokenError::Transport(_) => "token_transport_error",
            TokenError::Timeout => "token_timeout",
            TokenError::Malformed => "token_malformed",
            TokenError::Request => "token_request",
        }
    }
}

/// An error body with `status` and `message` in `protocol`'s own shape (Gemini's for Vertex,
/// Anthropic's for Bedrock, which is planned as Anthropic, OpenAI's for Azure).
fn error_body(protocol: Protocol, status: StatusCode, message: &str) -> Value {
    match protocol {
        Protocol::Gemini => {
            let code = match status {
                StatusCode::TOO_MANY_REQUESTS => "RESOURCE_EXHAUSTED",
                StatusCode::SERVICE_UNAVAILABLE => "UNAVAILABLE",
                StatusCode::BAD_GATEWAY => "INTERNAL",
                _ => "UNAUTHENTICATED",
            };
            json!({"error": {"code": status.as_u16(), "message": message, "status": code}})
        }
        Protocol::Anthropic => {
            let kind = match status {
                StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
                StatusCode::BAD_GATEWAY => "api_error",
                _ => "authentication_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Protocol::OpenAi => {
            let kind = match status {
                StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => "server_error",
                _ => "authentication_error",
            };
            json!({"error": {"message": message, "type": kind, "code": status.as_u16().to_string()}})
        }
    }
}

/// A cached credential and when it is due.
#[derive(Clone)]
pub struct Fresh<T> {
    pub value: T,
    /// When a request should obtain a new one.
    pub refresh_at: Instant,
    /// When the endpoint said it expires.
    pub expires_at: Instant,
}

impl<T> Fresh<T> {
    /// A credential asked for at `started` that lives `lifetime`: refreshed [`REFRESH_MARGIN`]
    /// (at most a fifth of its lifetime) before it expires.
    pub fn new(value: T, started: Instant, lifetime: Duration) -> Fresh<T> {
        let margin = REFRESH_MARGIN.min(lifetime / 5);
        Fresh {
            value,
            refresh_at: started + lifetime.saturating_sub(margin),
            expires_at: started + lifetime,
        }
    }
}

/// One identity's credential: cached, refreshed before it expires, obtained by one fetch at a
/// time (requests that need it while one runs wait for it and share it). `label` names the
/// identity in logs (an account, a role: never a secret).
pub struct TokenCache<T> {
    label: String,
    /// The current credential, read without waiting by every request.
    current: std::sync::RwLock<Option<Fresh<T>>>,
    /// Held across a fetch: one at a time, the others wait for its result.
    fetching: tokio::sync::Mutex<()>,
}

impl<T> fmt::Debug for TokenCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenCache")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl<T: Clone> TokenCache<T> {
    pub fn new(label: impl Into<String>) -> TokenCache<T> {
        TokenCache {
            label: label.into(),
            current: std::sync::RwLock::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Whom the cache holds credentials for (for messages).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The current credential, if it is still fresh.
    pub fn fresh(&self) -> Option<T> {
        let current = self
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        current
            .as_ref()
            .filter(|t| Instant::now() < t.refresh_at)
            .map(|t| t.value.clone())
    }

    /// Replaces the cached credential (`None`: forgets it, the next request fetches anew).
    pub fn set(&self, fresh: Option<Fresh<T>>) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    }

    /// The cached credential while it is fresh, else a new one from `fetch` within `budget`:
    /// one fetch at a time, which the requests arriving meanwhile wait for and share. A fetch
    /// that fails while the current credential has not expired yet keeps using it (and tries
    /// again [`REFRESH_RETRY`] later).
    pub async fn get<F, Fut>(&self, budget: Duration, fetch: F) -> Result<T, TokenError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Fresh<T>, TokenError>>,
    {
        if let Some(value) = self.fresh() {
            return Ok(value);
        }
        let deadline = Instant::now() + budget;
        let _fetching = tokio::time::timeout_at(deadline, self.fetching.lock())
            .await
            .map_err(|_| TokenError::Timeout)?;
        // Obtained by the fetch this request waited for.
        if let Some(value) = self.fresh() {
            return Ok(value);
        }
        let fetched = tokio::time::timeout_at(deadline, fetch())
            .await
            .unwrap_or(Err(TokenError::Timeout));
        match fetched {
            Ok(fresh) => {
                let value = fresh.value.clone();
                self.set(Some(fresh));
                Ok(value)
            }
            Err(e) => {
                let mut current = self
                    .current
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match current.as_mut() {
                    Some(held) if Instant::now() < held.expires_at => {
                        tracing::warn!(identity = %self.label, error = e.as_str(), "credential refresh failed; the current one is used until it expires");
                        held.refresh_at = (Instant::now() + REFRESH_RETRY).min(held.expires_at);
                        Ok(held.value.clone())
                    }
                    _ => Err(e),
                }
            }
        }
    }

    /// The cached credential's times, for tests.
    #[cfg(test)]
    pub(crate) fn times(&self) -> Option<(Instant, Instant)> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|t| (t.refresh_at, t.expires_at))
    }

    /// Makes the cached credential due for its refresh now, for tests.
    #[cfg(test)]
    pub(crate) fn make_due(&self) {
        if let Some(held) = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_mut()
        {
            held.refresh_at = Instant::now();
        }
    }
}

/// This process's caches of one kind, by identity (the key: whatever tells identities apart), so
/// a new snapshot keeps the credentials its predecessor obtained; a cache no channel holds any
/// more is dropped at the next new one.
pub struct Registry<V> {
    entries: Mutex<HashMap<String, Weak<V>>>,
}

impl<V> Default for Registry<V> {
    fn default() -> Registry<V> {
        Registry {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<V> Registry<V> {
    /// The value for `key`: the live one, else `make`'s (an error is returned as it is).
    pub fn get_or_make<E>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(value) = entries.get(key).and_then(Weak::upgrade) {
            return Ok(value);
        }
        entries.retain(|_, value| value.strong_count() > 0);
        let value = Arc::new(make()?);
        entries.insert(key.to_owned(), Arc::downgrade(&value));
        Ok(value)
    }

    /// Whether a live value is held for `key`, for tests.
    #[cfg(test)]
    pub(crate) fn holds(&self, key: &str) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(key)
    }
}

/// A token endpoint's answer: its status, its `Retry-After`, and its body (at most
/// [`MAX_TOKEN_ANSWER`] bytes).
pub struct Answer {
    pub status: StatusCode,
    pub retry_after: Option<HeaderValue>,
    pub body: Bytes,
}

/// Sends `request` to a token endpoint and reads its answer within the bound; network failures
/// told apart (the caller bounds the time).
pub async fn fetch(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
) -> Result<Answer, TokenError> {
    let response = client.request(request).await.map_err(|e| {
        if e.is_connect() {
            TokenError::Connect(e.cause())
        } else {
            TokenError::Transport(e.cause())
        }
    })?;
    let status = response.status();
    let retry_after = response.headers().get(header::RETRY_AFTER).cloned();
    let body = Limited::new(response.into_body(), MAX_TOKEN_ANSWER)
        .collect()
        .await
        .map_err(|_| TokenError::Transport(TransportCause::Other))?
        .to_bytes();
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// A form POST to a token endpoint at `uri` with `body` (already form-encoded), asking for
/// `accept`.
pub fn form_post(
    uri: &str,
    body: String,
    accept: &'static str,
) -> Result<Request<Full<Bytes>>, TokenError> {
    Request::builder()
        .method(http::Method::POST)
        .uri(uri)
        .header(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        )
        .header(header::ACCEPT, HeaderValue::from_static(accept))
        .header(header::CONTENT_LENGTH, HeaderValue::from(body.len()))
        .body(Full::new(Bytes::from(body)))
        .map_err(|_| TokenError::Request)
}

/// One OAuth token exchange: `request` sent, a refusal told with the endpoint's words (`secret`,
/// what the request proved itself with, never quoted), a success read as a bearer token living
/// its `expires_in`, else `default_lifetime`. `label` names the identity in the log.
pub async fn oauth_token(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    secret: &str,
    label: &str,
    default_lifetime: Duration,
) -> Result<Fresh<HeaderValue>, TokenError> {
    let started = Instant::now();
    let answer = fetch(client, request).await?;
    if !answer.status.is_success() {
        let reason = refusal_reason(&answer.body, secret);
        tracing::warn!(identity = %label, status = answer.status.as_u16(), reason = %reason, "the token endpoint refused");
        return Err(TokenError::Refused {
            status: answer.status,
            retry_after: answer.retry_after,
            reason,
        });
    }
    let (bearer, lifetime) = bearer_answer(&answer.body, default_lifetime)?;
    tracing::debug!(identity = %label, lifetime_s = lifetime.as_secs(), "access token obtained");
    Ok(Fresh::new(bearer, started, lifetime))
}

/// An OAuth token answer (`{"access_token": ..., "expires_in": ...}`) as the `Authorization`
/// value `Bearer {token}` (marked sensitive) and its lifetime: `expires_in` (a number, or a
/// string of digits as some endpoints send), else `default_lifetime`.
pub fn bearer_answer(
    body: &[u8],
    default_lifetime: Duration,
) -> Result<(HeaderValue, Duration), TokenError> {
    let answer: Value = serde_json::from_slice(body).map_err(|_| TokenError::Malformed)?;
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or(TokenError::Malformed)?;
    let mut bearer =
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| TokenError::Malformed)?;
    bearer.set_sensitive(true);
    let lifetime = match answer.get("expires_in") {
        Some(Value::Number(n)) => n.as_u64().map(Duration::from_secs),
        Some(Value::String(s)) => s.trim().parse().ok().map(Duration::from_secs),
        _ => None,
    }
    .unwrap_or(default_lifetime);
    Ok((bearer, lifetime))
}

/// The token endpoint's `error` and `error_description` (OAuth's error answer), printable
/// characters only and bounded; empty when the answer has neither. A `secret` the endpoint
/// quotes back (an assertion) is replaced before the words are cut to their bound (a cut one
/// would no longer be found).
pub fn refusal_reason(body: &[u8], secret: &str) -> String {
    let Ok(answer) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let text = |name: &str| answer.get(name).and_then(Value::as_str).map(str::trim);
    let reason = match (text("error"), text("error_description")) {
        (Some(error), Some(description)) if !description.is_empty() => {
            format!("{error}: {description}")
        }
        (Some(error), _) => error.to_owned(),
        (None, Some(description)) => description.to_owned(),
        (None, None) => String::new(),
    };
    bounded_words(&reason, secret)
}

/// `words` with `secret` replaced, control characters dropped, at most [`MAX_REASON_CHARS`].
pub fn bounded_words(words: &str, secret: &str) -> String {
    let words = if secret.is_empty() {
        words.to_owned()
    } else {
        words.replace(secret, "[secret]")
    };
    words
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_REASON_CHARS)
        .collect()
}

/// `pairs` as an `application/x-www-form-urlencoded` body (every byte but letters, digits and
/// `-._~` percent-encoded).
pub fn form(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode_into(&mut out, name);
        out.push('=');
        encode_into(&mut out, value);
    }
    out
}

fn encode_into(out: &mut String, text: &str) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(
            form(&[("RoleArn", "arn:aws:iam::1:role/x y"), ("a", "b~-._")]),
            "RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fx%20y&a=b~-._"
        );
    }

    #[test]
    fn a_bearer_answer_gives_its_lifetime_as_a_number_or_digits() {
        let hour = Duration::from_secs(3600);
        let (bearer, life) =
            bearer_answer(br#"{"access_token":"t","expires_in":60}"#, hour).unwrap();
        assert_eq!(bearer.to_str().unwrap(), "Bearer t");
        assert!(bearer.is_sensitive());
        assert_eq!(life, Duration::from_secs(60));
        let (_, life) = bearer_answer(br#"{"access_token":"t","expires_in":"90"}"#, hour).unwrap();
        assert_eq!(life, Duration::from_secs(90));
        let (_, life) = bearer_answer(br#"{"access_token":"t"}"#, hour).unwrap();
        assert_eq!(life, hour);
        for bad in [
            &b"<html>"[..],
            br#"{"access_token":""}"#,
            br#"{"token":"t"}"#,
        ] {
            assert_eq!(bearer_answer(bad, hour).unwrap_err(), TokenError::Malformed);
        }
    }

    #[test]
    fn an_identity_failure_is_answered_in_the_channels_shape() {
        let refused = TokenError::Refused {
            status: StatusCode::FORBIDDEN,
            retry_after: None,
            reason: "AccessDenied: not authorized".into(),
        };
        let body = |p: Protocol| {
            let (status, _, body) = refused.answer_as(p, "who").unwrap();
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            serde_json::from_slice::<Value>(&body).unwrap()
        };
        let anthropic = body(Protocol::Anthropic);
        assert_eq!(anthropic["error"]["type"], "authentication_error");
        assert!(anthropic["error"]["message"]
            .as_str()
            .unwrap()
            .contains("who failed: the token endpoint answered status 403: AccessDenied"));
        assert_eq!(body(Protocol::OpenAi)["error"]["code"], "401");
        assert_eq!(body(Protocol::Gemini)["error"]["status"], "UNAUTHENTICATED");
        assert!(TokenError::Timeout
            .answer_as(Protocol::OpenAi, "x")
            .is_none());
        assert_eq!(bounded_words("a\u{7}SECRETb", "SECRET"), "a[secret]b");
    }
}
