//! Google Vertex AI: where a `vertex` channel's requests go and how they are authorized.
//!
//! Vertex serves Gemini models with Gemini's `generateContent` protocol at
//! `{endpoint}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:{action}`.
//! A channel's `base_url` is the endpoint (`https://{location}-aiplatform.googleapis.com`, or
//! `https://aiplatform.googleapis.com` for the `global` location), optionally followed by
//! `/v1/projects/{project}/locations/{location}` ([`VertexTarget`]):
//!
//! - the project is the one in the `base_url` when it names one, else each credential's own
//!   (the key file's `project_id`);
//! - the location is the one in the `base_url` when it names one, else the endpoint's
//!   (`{location}-aiplatform.googleapis.com`, `global` for `aiplatform.googleapis.com`), else
//!   [`DEFAULT_LOCATION`] (any other host, such as a private endpoint or a test double).
//!
//! Each credential is a service-account key file (JSON, [`parse_service_account`]). The proxy
//! signs an RS256 assertion with the key (`iss` = `sub` = `client_email`, `aud` = `token_uri`,
//! `scope` = [`SCOPE`], one hour, header `kid` = `private_key_id`), exchanges it at the key's
//! `token_uri` for an access token (OAuth 2.0 JWT bearer grant) and sends
//! `Authorization: Bearer {token}` ([`TokenSource`]). Tokens are cached per process and key, and
//! refreshed before they expire; concurrent requests share one exchange.
//!
//! Nothing here ever logs, formats or returns the key, an assertion or a token.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::HttpClient;
use crate::token::{form_post, oauth_token, Fresh, Registry, TokenCache, TokenError};
use http::HeaderValue;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Serialize;
use serde_json::Value;

/// The OAuth scope the access tokens are asked for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The location of a channel whose `base_url` names none and whose host says none.
pub const DEFAULT_LOCATION: &str = "us-central1";
/// The grant type of the token exchange (RFC 7523), form-encoded.
const GRANT_TYPE: &str = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";
/// How long a signed assertion is valid (Google's maximum).
const ASSERTION_LIFETIME_SECS: u64 = 3600;

/// Where a Vertex channel's requests go: the endpoint, the project the `base_url` names (else
/// each credential's), and the location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexTarget {
    pub endpoint: String,
    pub project: Option<String>,
    pub location: String,
}

/// The shape of a Vertex `base_url`, for messages.
const BASE_URL_SHAPE: &str = "a Vertex AI base_url is the endpoint (https://{location}-aiplatform.googleapis.com), optionally followed by /v1/projects/{project}/locations/{location}";

/// A project or location as it goes into the URL path: letters, digits, `-`, `.`, `_`, `:`
/// (domain-scoped projects, `example.com:my-project`), 1 to 100 of them.
fn path_name(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 100
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':'))
}

impl VertexTarget {
    /// The target of a channel whose base URL (no trailing `/`, no query) is `base`. The
    /// message never quotes the URL (it may carry a password).
    pub fn parse(base: &str) -> Result<VertexTarget, String> {
        const PROJECTS: &str = "/v1/projects/";
        let (endpoint, project, location) = match base.find(PROJECTS) {
            Some(i) => {
                let mut parts = base[i + PROJECTS.len()..].split('/');
                match (parts.next(), parts.next(), parts.next(), parts.next()) {
                    (Some(project), Some("locations"), Some(location), None)
                        if path_name(project) && path_name(location) =>
                    {
                        (&base[..i], Some(project), Some(location))
                    }
                    _ => return Err(BASE_URL_SHAPE.to_owned()),
                }
            }
            None => (base.strip_suffix("/v1").unwrap_or(base), None, None),
        };
        if endpoint.contains("/v1/") || endpoint.ends_with("/v1") {
            return Err(BASE_URL_SHAPE.to_owned());
        }
        Ok(VertexTarget {
            endpoint: endpoint.to_owned(),
            project: project.map(str::to_owned),
            location: location.map_or_else(|| location_of(endpoint), str::to_owned),
        })
    }

    /// The URL of a Gemini model path (`/v1beta/models/{model}:{action}`, as requests are
    /// planned) for `project`, with the query string.
    pub fn url(&self, path: &str, query: Option<&str>, project: &str) -> String {
        let rest = path
            .rsplit_once("/models/")
            .map_or(path.trim_start_matches('/'), |(_, rest)| rest);
        let project = self.project.as_deref().unwrap_or(project);
        let url = format!(
            "{}/v1/projects/{project}/locations/{}/publishers/google/models/{rest}",
            self.endpoint, self.location
        );
        match query {
            Some(q) if !q.is_empty() => format!("{url}?{q}"),
            _ => url,
        }
    }
}

/// The location an endpoint serves: `{location}-aiplatform.googleapis.com` → `{location}`,
/// `aiplatform.googleapis.com` → `global`, anything else → [`DEFAULT_LOCATION`].
fn location_of(endpoint: &str) -> String {
    let authority = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let host = host.split(':').next().unwrap_or(host).to_ascii_lowercase();
    if host == "aiplatform.googleapis.com" {
        return "global".to_owned();
    }
    match host.strip_suffix("-aiplatform.googleapis.com") {
        Some(location) if path_name(location) => location.to_owned(),
        _ => DEFAULT_LOCATION.to_owned(),
    }
}

/// Checks a Vertex channel's `base_url` (already checked as an http(s) URL): the endpoint,
/// optionally followed by `/v1/projects/{project}/locations/{location}`. The message never
/// quotes the URL.
pub fn check_vertex_base_url(url: &str) -> Result<(), String> {
    VertexTarget::parse(url.trim().trim_end_matches('/')).map(|_| ())
}

/// Checks a Vertex credential's secret: a service-account key file ([`parse_service_account`]).
pub fn check_service_account(secret: &str) -> Result<(), String> {
    parse_service_account(secret).map(|_| ())
}

/// A parsed service-account key. Its `Debug` shows the account, never the key.
pub struct ServiceAccount {
    pub client_email: String,
    pub private_key_id: String,
    pub token_uri: String,
    pub project_id: String,
    key: EncodingKey,
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("project_id", &self.project_id)
            .field("token_uri", &self.token_uri)
            .finish_non_exhaustive()
    }
}

/// The assertion's claims.
#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    scope: &'a str,
    iat: u64,
    exp: u64,
}

impl ServiceAccount {
    /// The signed assertion for the token exchange, issued at `iat` (seconds since the epoch).
    fn assertion(&self, iat: u64) -> Result<String, jsonwebtoken::errors::Error> {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.private_key_id.clone());
        let claims = Claims {
            iss: &self.client_email,
            sub: &self.client_email,
            aud: &self.token_uri,
            scope: SCOPE,
            iat,
            exp: iat + ASSERTION_LIFETIME_SECS,
        };
        jsonwebtoken::encode(&header, &claims, &self.key)
    }
}

/// Parses and checks a service-account key file (the JSON Google issues): `type` is
/// `service_account`, `client_email`, `private_key_id`, `project_id` and `token_uri` are there,
/// and `private_key` is a PEM RSA private key that signs. The message names the field at fault
/// and never quotes the file or any of its values.
pub fn parse_service_account(secret: &str) -> Result<ServiceAccount, String> {
    let value: Value = serde_json::from_str(secret.trim()).map_err(|e| {
        format!(
            "is not a service-account key file: not JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    let Value::Object(map) = value else {
        return Err("is not a service-account key file: not a JSON object".to_owned());
    };
    let field = |name: &str| -> Result<String, String> {
        match map.get(name) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            Some(Value::String(_)) | None | Some(Value::Null) => Err(format!(
                "is not a service-account key file: `{name}` is missing or empty"
            )),
            Some(_) => Err(format!(
                "is not a service-account key file: `{name}` must be a string"
            )),
        }
    };
    if field("type")? != "service_account" {
        return Err(
            "is not a service-account key file: `type` must be \"service_account\"".to_owned(),
        );
    }
    let client_email = field("client_email")?;
    if !client_email.contains('@') || client_email.chars().any(char::is_control) {
        return Err("`client_email` must be an email address".to_owned());
    }
    let private_key_id = field("private_key_id")?;
    if private_key_id.chars().any(char::is_control) {
        return Err("`private_key_id` must be one line".to_owned());
    }
    let project_id = field("project_id")?;
    if !path_name(&project_id) {
        return Err(
            "`project_id` may hold only letters, digits, `-`, `.`, `_` and `:` (1 to 100)"
                .to_owned(),
        );
    }
    let token_uri = field("token_uri")?;
    if crate::checks::check_base_url(&token_uri).is_err() {
        return Err("`token_uri` must be an http:// or https:// URL".to_owned());
    }
    let private_key = field("private_key")?;
    let key = EncodingKey::from_rsa_pem(private_key.as_bytes())
        .map_err(|_| "`private_key` is not a PEM RSA private key".to_owned())?;
    let account = ServiceAccount {
        client_email,
        private_key_id,
        token_uri,
        project_id,
        key,
    };
    // The PEM is only decoded above; signing once proves the key is a usable RSA key.
    account
        .assertion(0)
        .map_err(|_| "`private_key` is not a usable RSA private key".to_owned())?;
    Ok(account)
}

/// Whose exchange a Vertex credential's token failure is (the service account), for messages.
pub fn subject(account: &str) -> String {
    format!("Vertex AI access token exchange for service account {account}")
}

/// One service account's access tokens: cached, refreshed before they expire, and obtained by
/// one exchange at a time (requests that need a token while one is being obtained wait for it
/// and share it).
pub struct TokenSource {
    account: ServiceAccount,
    tokens: TokenCache<HeaderValue>,
}

impl fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

/// The token sources of this process, by key file, so a new snapshot (which compiles its
/// channels again) keeps the tokens its predecessor obtained.
fn sources() -> &'static Registry<TokenSource> {
    static SOURCES: OnceLock<Registry<TokenSource>> = OnceLock::new();
    SOURCES.get_or_init(Registry::default)
}

/// The token source of a service-account key file: this process's, when one for the same file
/// is alive, else a new one. The message (a bad file) names the field at fault, never a value.
pub fn token_source(secret: &str) -> Result<Arc<TokenSource>, String> {
    let secret = secret.trim();
    sources().get_or_make(secret, || {
        let account = parse_service_account(secret)?;
        Ok(TokenSource {
            tokens: TokenCache::new(format!("service account {}", account.client_email)),
            account,
        })
    })
}

impl TokenSource {
    pub fn account(&self) -> &ServiceAccount {
        &self.account
    }

    /// The `Authorization` value (`Bearer {token}`, marked sensitive): the cached token while it
    /// is fresh, else a new one from the token endpoint within `budget` — one exchange at a
    /// time, which the requests arriving meanwhile wait for and share. A refresh that fails
    /// while the current token has not expired yet keeps using it (and tries again
    /// `REFRESH_RETRY` later).
    pub async fn bearer(
        &self,
        client: &HttpClient,
        budget: Duration,
    ) -> Result<HeaderValue, TokenError> {
        self.tokens.get(budget, || self.exchange(client)).await
    }

    /// Drops the cached token (the upstream refused it): the next request obtains a new one.
    pub fn forget(&self) {
        self.tokens.set(None);
    }

    /// One token exchange.
    async fn exchange(&self, client: &HttpClient) -> Result<Fresh<HeaderValue>, TokenError> {
        let account = &self.account;
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let assertion = account.assertion(iat).map_err(|_| TokenError::Request)?;
        let body = format!("grant_type={GRANT_TYPE}&assertion={assertion}");
        let request = form_post(&account.token_uri, body, "application/json")?;
        // Google's answers always say how long the token lives; an hour when one does not.
        oauth_token(
            client,
            request,
            &assertion,
            self.tokens.label(),
            Duration::from_secs(ASSERTION_LIFETIME_SECS),
        )
        .await
    }
}

/// A service-account key file for tests (the fixture key), with `edit` applied to its fields.
/// The token-source registry is keyed by the file's text: tests that must not share a cached
/// token give theirs a `token_uri` or `client_email` of their own.
#[cfg(test)]
use serde_json::json;
#[cfg(test)]
use std::sync::Mutex;

#[cfg(test)]
pub(crate) fn test_key_file(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> String {
    let mut file = json!({
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "kid-1",
        "private_key": include_str!("../../mock-upstream/fixtures/vertex-test-key.pem"),
        "client_email": "proxy@test-project.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    if let Value::Object(map) = &mut file {
        edit(map);
    }
    file.to_string()
}

/// A token endpoint on a local socket, for tests: exchange `n` (from 1) is answered after
/// `answer(n, form).0` with the raw HTTP bytes `answer(n, form).1` — `None` holds the connection
/// open and never answers — where `form` is the request's body. Each request's head and body
/// are kept in `requests`.
#[cfg(test)]
pub(crate) struct TestTokenEndpoint {
    pub url: String,
    pub requests: Arc<Mutex<Vec<(String, String)>>>,
}

#[cfg(test)]
impl TestTokenEndpoint {
    pub async fn start<F>(answer: F) -> TestTokenEndpoint
    where
        F: Fn(usize, &str) -> (Duration, Option<Vec<u8>>) + Send + Sync + 'static,
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let answer = Arc::new(answer);
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let (seen, answer) = (Arc::clone(&seen), Arc::clone(&answer));
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    // The head, then a body of the length it announces.
                    let (head, form) = loop {
                        let n = socket.read(&mut buf).await.unwrap();
                        request.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&request).to_string();
                        if let Some((head, body)) = text.split_once("\r\n\r\n") {
                            let length: usize = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse().unwrap())
                                })
                                .unwrap_or(0);
                            if body.len() >= length || n == 0 {
                                break (head.to_owned(), body.to_owned());
                            }
                        }
                        assert!(n > 0, "the request ended before its head");
                    };
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push((head, form.clone()));
                        seen.len()
                    };
                    let (delay, bytes) = answer(n, &form);
                    tokio::time::sleep(delay).await;
                    match bytes {
                        Some(bytes) => {
                            let _ = socket.write_all(&bytes).await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                });
            }
        });
        TestTokenEndpoint { url, requests }
    }

    /// A JSON answer with `status` and `headers`, closing the connection.
    pub fn json(status: u16, headers: &str, body: &str) -> Option<Vec<u8>> {
        Some(
            format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
    }

    /// An endpoint answering `tok-1`, `tok-2`... (an hour each) at once.
    pub async fn tokens() -> TestTokenEndpoint {
        TestTokenEndpoint::start(|n, _| {
            let body = format!("{{\"access_token\":\"tok-{n}\",\"expires_in\":3600}}");
            (Duration::ZERO, TestTokenEndpoint::json(200, "", &body))
        })
        .await
    }

    /// How many exchanges it was asked for.
    pub fn served(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cause::TransportCause;
    use crate::token::{refusal_reason, MAX_REASON_CHARS, MAX_TOKEN_ANSWER, REFRESH_RETRY};
    use bytes::Bytes;
    use http::{header, HeaderMap, StatusCode};
    use tokio::time::Instant;

    impl TokenError {
        /// The answer in Vertex's shape, for `account`.
        fn answer(&self, account: &str) -> Option<(StatusCode, HeaderMap, Bytes)> {
            self.answer_as(switchyard_provider::Protocol::Gemini, &subject(account))
        }
    }

    impl TokenSource {
        fn set(&self, token: Option<Fresh<HeaderValue>>) {
            self.tokens.set(token);
        }

        fn fresh(&self) -> Option<HeaderValue> {
            self.tokens.fresh()
        }
    }

    const KEY: &str = include_str!("../../mock-upstream/fixtures/vertex-test-key.pem");

    /// A token source for a key file whose token endpoint is `endpoint` (and whose
    /// `client_email` is `who`, so no other test shares its cached token).
    fn source_at(endpoint: &TestTokenEndpoint, who: &str) -> Arc<TokenSource> {
        token_source(&test_key_file(|m| {
            m.insert("token_uri".into(), json!(endpoint.url));
            m.insert("client_email".into(), json!(format!("{who}@p.iam")));
        }))
        .unwrap()
    }

    fn client() -> HttpClient {
        crate::client::build_client(Duration::from_secs(5))
    }

    const BUDGET: Duration = Duration::from_secs(10);

    struct Times {
        refresh_at: Instant,
        expires_at: Instant,
    }

    fn cached(source: &TokenSource) -> Times {
        let (refresh_at, expires_at) = source.tokens.times().unwrap();
        Times {
            refresh_at,
            expires_at,
        }
    }

    #[tokio::test]
    async fn one_exchange_serves_every_request_while_its_token_is_fresh() {
        let endpoint = TestTokenEndpoint::start(|n, _| {
            let body = format!("{{\"access_token\":\"tok-{n}\",\"expires_in\":3600}}");
            // Slow enough that the second request arrives while the first exchange runs.
            (
                Duration::from_millis(200),
                TestTokenEndpoint::json(200, "", &body),
            )
        })
        .await;
        let source = source_at(&endpoint, "shared");
        let client = client();
        let (a, b) = tokio::join!(
            source.bearer(&client, BUDGET),
            source.bearer(&client, BUDGET)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            (a.to_str().unwrap(), b.to_str().unwrap()),
            ("Bearer tok-1", "Bearer tok-1")
        );
        assert!(a.is_sensitive(), "the token is marked sensitive");
        assert_eq!(source.bearer(&client, BUDGET).await.unwrap(), a);
        assert_eq!(endpoint.served(), 1);
        // The exchange: a form-encoded JWT bearer grant, asking for JSON.
        let (head, form) = endpoint.requests.lock().unwrap()[0].clone();
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("post /token http/1.1"), "{head}");
        assert!(
            head.contains("content-type: application/x-www-form-urlencoded"),
            "{head}"
        );
        assert!(head.contains("accept: application/json"), "{head}");
        let assertion = form
            .strip_prefix(
                "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=",
            )
            .unwrap();
        let header = jsonwebtoken::decode_header(assertion).unwrap();
        assert_eq!(header.kid.as_deref(), Some("kid-1"));
    }

    #[tokio::test]
    async fn a_token_is_refreshed_before_it_expires_by_its_lifetime() {
        let endpoint = TestTokenEndpoint::start(|n, _| {
            let body = match n {
                1 => r#"{"access_token":"tok-1","expires_in":100}"#,
                2 => r#"{"access_token":"tok-2"}"#,
                _ => r#"{"access_token":"tok-3","expires_in":7200}"#,
            };
            (Duration::ZERO, TestTokenEndpoint::json(200, "", body))
        })
        .await;
        let source = source_at(&endpoint, "lifetime");
        let client = client();
        let before = Instant::now();
        source.bearer(&client, BUDGET).await.unwrap();
        let token = cached(&source);
        // 100 s: refreshed a fifth of it (20 s) before it expires.
        assert_eq!(token.expires_at - token.refresh_at, Duration::from_secs(20));
        assert!(token.expires_at >= before + Duration::from_secs(100));
        assert!(token.expires_at <= Instant::now() + Duration::from_secs(100));
        // Due for its refresh: the next request exchanges again.
        source.tokens.make_due();
        let second = source.bearer(&client, BUDGET).await.unwrap();
        assert_eq!(second.to_str().unwrap(), "Bearer tok-2");
        // No `expires_in`: an hour, refreshed five minutes before.
        let token = cached(&source);
        assert_eq!(
            token.expires_at - token.refresh_at,
            Duration::from_secs(300)
        );
        assert!(token.expires_at >= before + Duration::from_secs(3600));
        source.forget();
        source.bearer(&client, BUDGET).await.unwrap();
        let token = cached(&source);
        assert_eq!(
            token.expires_at - token.refresh_at,
            Duration::from_secs(300)
        );
        assert_eq!(endpoint.served(), 3);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_the_unexpired_token_and_an_expired_one_fails() {
        let endpoint = TestTokenEndpoint::start(|_, _| {
            (Duration::ZERO, TestTokenEndpoint::json(503, "", "{}"))
        })
        .await;
        let source = source_at(&endpoint, "refresh");
        let client = client();
        let old = HeaderValue::from_static("Bearer old");
        let keep = |expires_in: Duration| {
            source.set(Some(Fresh {
                value: old.clone(),
                refresh_at: Instant::now(),
                expires_at: Instant::now() + expires_in,
            }))
        };
        keep(Duration::from_secs(3600));
        assert_eq!(source.bearer(&client, BUDGET).await.unwrap(), old);
        // Tried again ten seconds later, not at every request.
        let token = cached(&source);
        let now = Instant::now();
        assert!(token.refresh_at > now && token.refresh_at <= now + REFRESH_RETRY);
        assert_eq!(source.bearer(&client, BUDGET).await.unwrap(), old);
        assert_eq!(endpoint.served(), 1);
        // Never past the token's own end.
        keep(Duration::from_secs(2));
        assert_eq!(source.bearer(&client, BUDGET).await.unwrap(), old);
        let token = cached(&source);
        assert_eq!(token.refresh_at, token.expires_at);
        // Expired: the refusal is the answer.
        keep(Duration::ZERO);
        let refused = source.bearer(&client, BUDGET).await.unwrap_err();
        assert!(
            matches!(refused, TokenError::Refused { status, .. } if status == StatusCode::SERVICE_UNAVAILABLE),
            "{refused:?}"
        );
        assert_eq!(endpoint.served(), 3);
    }

    /// With the clock stopped, a token is stale at its refresh time itself, and an expired one
    /// at its expiry itself (the bounds are exclusive).
    #[tokio::test(start_paused = true)]
    async fn a_token_is_stale_at_its_refresh_time_and_gone_at_its_expiry() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let unreachable = TestTokenEndpoint {
            url: format!("http://{}/token", closed.local_addr().unwrap()),
            requests: Arc::default(),
        };
        drop(closed);
        let source = source_at(&unreachable, "bounds");
        let now = Instant::now();
        source.set(Some(Fresh {
            value: HeaderValue::from_static("Bearer old"),
            refresh_at: now,
            expires_at: now,
        }));
        assert_eq!(source.fresh(), None);
        // Whatever the failed exchange's error, a token at its expiry is not used.
        assert!(source.bearer(&client(), BUDGET).await.is_err());
    }

    #[tokio::test]
    async fn each_unusable_answer_is_its_own_error() {
        let padding = "x".repeat(2_000);
        let huge = "x".repeat(MAX_TOKEN_ANSWER);
        let cases: Vec<(String, TokenError)> = vec![
            (
                "429|retry-after: 7\r\n|{\"error\":\"rate_limited\"}".to_owned(),
                TokenError::Refused {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    retry_after: Some(HeaderValue::from_static("7")),
                    reason: "rate_limited".into(),
                },
            ),
            (
                // The endpoint quotes the assertion back: it is never repeated.
                "400||{\"error\":\"invalid_grant\",\"error_description\":\"bad ASSERTION\"}".into(),
                TokenError::Refused {
                    status: StatusCode::BAD_REQUEST,
                    retry_after: None,
                    reason: "invalid_grant: bad [secret]".into(),
                },
            ),
            ("200||not json".into(), TokenError::Malformed),
            ("200||{\"access_token\":\"\"}".into(), TokenError::Malformed),
            ("200||{\"access_token\":7}".into(), TokenError::Malformed),
            (
                "200||{\"access_token\":\"a\\u0001b\"}".into(),
                TokenError::Malformed,
            ),
            (
                format!("200||{{\"pad\":\"{huge}\"}}"),
                TokenError::Transport(TransportCause::Other),
            ),
        ];
        for (i, (answer, expected)) in cases.into_iter().enumerate() {
            let endpoint = TestTokenEndpoint::start(move |_, form| {
                let assertion = form.rsplit('=').next().unwrap_or_default().to_owned();
                let mut parts = answer.splitn(3, '|');
                let status: u16 = parts.next().unwrap().parse().unwrap();
                let headers = parts.next().unwrap();
                let body = parts.next().unwrap().replace("ASSERTION", &assertion);
                (
                    Duration::ZERO,
                    TestTokenEndpoint::json(status, headers, &body),
                )
            })
            .await;
            let source = source_at(&endpoint, &format!("case{i}"));
            let error = source.bearer(&client(), BUDGET).await.unwrap_err();
            assert_eq!(error, expected, "case {i}");
        }
        // A large answer within the bound is read whole.
        let endpoint = TestTokenEndpoint::start(move |_, _| {
            let body = format!("{{\"pad\":\"{padding}\",\"access_token\":\"big\"}}");
            (Duration::ZERO, TestTokenEndpoint::json(200, "", &body))
        })
        .await;
        let big = source_at(&endpoint, "big")
            .bearer(&client(), BUDGET)
            .await
            .unwrap();
        assert_eq!(big.to_str().unwrap(), "Bearer big");
    }

    #[tokio::test]
    async fn network_failures_are_told_apart() {
        let hang = TestTokenEndpoint::start(|_, _| (Duration::ZERO, None)).await;
        let error = source_at(&hang, "hang")
            .bearer(&client(), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert_eq!(error, TokenError::Timeout);
        let close = TestTokenEndpoint::start(|_, _| (Duration::ZERO, Some(Vec::new()))).await;
        let error = source_at(&close, "close")
            .bearer(&client(), BUDGET)
            .await
            .unwrap_err();
        assert_eq!(error, TokenError::Transport(TransportCause::Reset));
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refused = TestTokenEndpoint {
            url: format!("http://{}/token", closed.local_addr().unwrap()),
            requests: Arc::default(),
        };
        drop(closed);
        let error = source_at(&refused, "refused")
            .bearer(&client(), BUDGET)
            .await
            .unwrap_err();
        assert_eq!(error, TokenError::Connect(TransportCause::Refused));
        let labels: Vec<&str> = [
            TokenError::Connect(TransportCause::Refused),
            TokenError::Transport(TransportCause::Reset),
            TokenError::Timeout,
            TokenError::Malformed,
            TokenError::Request,
            error_refused(),
        ]
        .iter()
        .map(TokenError::as_str)
        .collect();
        assert_eq!(
            labels,
            [
                "token_connect_error",
                "token_transport_error",
                "token_timeout",
                "token_malformed",
                "token_request",
                "token_refused"
            ]
        );
    }

    fn error_refused() -> TokenError {
        TokenError::Refused {
            status: StatusCode::FORBIDDEN,
            retry_after: None,
            reason: String::new(),
        }
    }

    #[test]
    fn unusable_answers_and_unsigned_assertions_have_their_own_answers() {
        let answer = |e: TokenError| {
            let (status, _, body) = e.answer("a@b").unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap();
            (status, body["error"]["status"].as_str().unwrap().to_owned())
        };
        assert_eq!(
            answer(TokenError::Malformed),
            (StatusCode::BAD_GATEWAY, "INTERNAL".to_owned())
        );
        assert_eq!(
            answer(TokenError::Request),
            (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED".to_owned())
        );
        assert_eq!(
            answer(error_refused()),
            (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED".to_owned())
        );
        let (_, _, body) = error_refused().answer("a@b").unwrap();
        assert!(String::from_utf8_lossy(&body).contains("answered status 403"));
        assert_eq!(
            refusal_reason(br#"{"error_description":" only words "}"#, ""),
            "only words"
        );
        assert_eq!(
            refusal_reason(br#"{"error":"e","error_description":""}"#, ""),
            "e"
        );
        assert_eq!(refusal_reason(b"{\"error\":\"a\\u0007b\"}", ""), "ab");
        assert_eq!(refusal_reason(b"{}", ""), "");
    }

    #[test]
    fn one_token_source_per_key_file_while_it_is_in_use() {
        let file = |who: &str| {
            test_key_file(|m| {
                m.insert("client_email".into(), json!(format!("{who}@p.iam")));
            })
        };
        let first = token_source(&file("registry")).unwrap();
        let again = token_source(&format!("  {}\n", file("registry"))).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same file, the same source"
        );
        assert_eq!(first.account().client_email, "registry@p.iam");
        let debug = format!("{first:?}");
        assert!(
            debug.starts_with("TokenSource") && debug.contains("registry@p.iam"),
            "{debug}"
        );
        assert!(
            !debug.contains("PRIVATE") && !debug.contains("kid-1"),
            "{debug}"
        );
        let other = token_source(&file("registry-2")).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        drop((first, again));
        // A source no channel holds any more is dropped from the registry at the next new one.
        let _third = token_source(&file("registry-3")).unwrap();
        assert!(!sources().holds(file("registry").as_str()));
        assert!(sources().holds(file("registry-2").as_str()));
        assert!(token_source("{}").unwrap_err().contains("`type`"));
        assert!(check_service_account(&file("ok")).is_ok());
        assert!(check_service_account("[]").is_err());
    }

    #[test]
    fn a_key_file_parses_and_its_debug_shows_no_key() {
        let account = parse_service_account(&test_key_file(|_| {})).unwrap();
        assert_eq!(
            account.client_email,
            "proxy@test-project.iam.gserviceaccount.com"
        );
        assert_eq!(account.project_id, "test-project");
        let debug = format!("{account:?}");
        assert!(
            !debug.contains("PRIVATE") && !debug.contains("kid-1"),
            "{debug}"
        );
        assert!(
            debug.starts_with("ServiceAccount") && debug.contains("test-project"),
            "{debug}"
        );
        // Pretty-printed, as Google hands it out.
        let pretty = serde_json::to_string_pretty(
            &serde_json::from_str::<Value>(&test_key_file(|_| {})).unwrap(),
        )
        .unwrap();
        parse_service_account(&pretty).unwrap();
    }

    #[test]
    fn a_bad_key_file_names_the_field_and_quotes_nothing() {
        let cases: Vec<(String, &str)> = vec![
            ("sk-SECRET1 not json".to_owned(), "not JSON"),
            ("[\"SECRET1\"]".to_owned(), "not a JSON object"),
            (
                test_key_file(|m| {
                    m.insert("type".into(), json!("authorized_user-SECRET1"));
                }),
                "`type` must be",
            ),
            (
                test_key_file(|m| {
                    m.remove("client_email");
                }),
                "`client_email` is missing",
            ),
            (
                test_key_file(|m| {
                    m.insert("private_key_id".into(), json!(7));
                }),
                "`private_key_id` must be a string",
            ),
            (
                test_key_file(|m| {
                    m.insert("client_email".into(), json!("  "));
                }),
                "`client_email` is missing or empty",
            ),
            (
                test_key_file(|m| {
                    m.insert("client_email".into(), json!("SECRET1.example.com"));
                }),
                "`client_email` must be an email address",
            ),
            (
                test_key_file(|m| {
                    m.insert("client_email".into(), json!("a@SECRET1\u{7}"));
                }),
                "`client_email` must be an email address",
            ),
            (
                test_key_file(|m| {
                    m.insert("project_id".into(), json!("a/SECRET1"));
                }),
                "`project_id` may hold only",
            ),
            (
                test_key_file(|m| {
                    m.insert("token_uri".into(), json!("ftp://SECRET1"));
                }),
                "`token_uri` must be",
            ),
            (
                test_key_file(|m| {
                    m.insert("private_key".into(), json!("SECRET1"));
                }),
                "`private_key` is not a PEM RSA private key",
            ),
            (
                test_key_file(|m| {
                    let broken = KEY.replacen("MII", "MIJ", 1);
                    m.insert("private_key".into(), json!(broken));
                }),
                "`private_key` is not",
            ),
        ];
        for (file, expected) in cases {
            let message = parse_service_account(&file).unwrap_err();
            assert!(message.contains(expected), "{message} / {expected}");
            assert!(
                !message.contains("SECRET1") && !message.contains("MII"),
                "{message}"
            );
        }
    }

    #[test]
    fn targets_come_from_the_base_url() {
        let t = VertexTarget::parse("https://europe-west4-aiplatform.googleapis.com").unwrap();
        assert_eq!(t.project, None);
        assert_eq!(t.location, "europe-west4");
        assert_eq!(
            t.url("/v1beta/models/gemini-2.5-flash:streamGenerateContent", Some("alt=sse"), "p1"),
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/p1/locations/europe-west4/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        let t = VertexTarget::parse("https://aiplatform.googleapis.com/v1").unwrap();
        assert_eq!(t.endpoint, "https://aiplatform.googleapis.com");
        assert_eq!(t.location, "global");
        let t = VertexTarget::parse(
            "https://us-central1-aiplatform.googleapis.com/v1/projects/other:proj/locations/us-east5",
        )
        .unwrap();
        assert_eq!(t.project.as_deref(), Some("other:proj"));
        assert_eq!(t.location, "us-east5");
        assert_eq!(
            t.url("/v1beta/models/m:generateContent", None, "from-key"),
            "https://us-central1-aiplatform.googleapis.com/v1/projects/other:proj/locations/us-east5/publishers/google/models/m:generateContent"
        );
        let t = VertexTarget::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(t.location, DEFAULT_LOCATION);
        assert!(
            t.url("/v1beta/models/m:generateContent", Some(""), "p")
                .ends_with("/models/m:generateContent"),
            "an empty query string adds no `?`"
        );
        // A host that only ends like a regional endpoint names no location.
        let t = VertexTarget::parse("https://-aiplatform.googleapis.com").unwrap();
        assert_eq!(t.location, DEFAULT_LOCATION);
        assert!(check_vertex_base_url("https://europe-west4-aiplatform.googleapis.com/ ").is_ok());
        assert_eq!(
            check_vertex_base_url("https://x/v1/projects/p"),
            Err(BASE_URL_SHAPE.to_owned())
        );
        for bad in [
            "https://x/v1/projects/p",
            "https://x/v1/projects/p/locations/l/extra",
            "https://x/v1/projects/p/zones/l",
            "https://x/v1/projects/a b/locations/l",
            "https://x/v1/publishers",
        ] {
            assert!(VertexTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_refusal_is_the_providers_401_without_secrets() {
        let refused = TokenError::Refused {
            status: StatusCode::BAD_REQUEST,
            retry_after: None,
            reason: refusal_reason(
                br#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#,
                "",
            ),
        };
        let (status, headers, body) = refused.answer("a@b").unwrap();
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("a@b") && message.contains("invalid_grant: Invalid JWT Signature."),
            "{message}"
        );
        let limited = TokenError::Refused {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: Some(HeaderValue::from_static("7")),
            reason: String::new(),
        };
        let (status, headers, body) = limited.answer("a@b").unwrap();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers[header::RETRY_AFTER], "7");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
        assert_eq!(body["error"]["code"], 429);
        let (status, _, body) = TokenError::Refused {
            status: StatusCode::BAD_GATEWAY,
            retry_after: None,
            reason: String::new(),
        }
        .answer("a")
        .unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["status"], "UNAVAILABLE");
        assert!(TokenError::Connect(TransportCause::Dns)
            .answer("a")
            .is_none());
        assert_eq!(refusal_reason(b"<html>", ""), "");
        assert_eq!(refusal_reason(&[b'{'; 3], ""), "");
        let long = format!("{{\"error\":\"{}\"}}", "x".repeat(500));
        assert_eq!(refusal_reason(long.as_bytes(), "").len(), MAX_REASON_CHARS);
    }

    #[test]
    fn the_assertion_carries_the_claims_and_the_key_id() {
        let account = parse_service_account(&test_key_file(|_| {})).unwrap();
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let jwt = account.assertion(iat).unwrap();
        let header = jsonwebtoken::decode_header(&jwt).unwrap();
        assert_eq!(header.alg, Algorithm::RS256);
        assert_eq!(header.kid.as_deref(), Some("kid-1"));
        let public = jsonwebtoken::DecodingKey::from_rsa_pem(include_bytes!(
            "../../mock-upstream/fixtures/vertex-test-key.pub.pem"
        ))
        .unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::RS256);
        validation.set_audience(&["https://oauth2.googleapis.com/token"]);
        let claims = jsonwebtoken::decode::<Value>(&jwt, &public, &validation)
            .unwrap()
            .claims;
        assert_eq!(claims["iss"], "proxy@test-project.iam.gserviceaccount.com");
        assert_eq!(claims["sub"], claims["iss"]);
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(claims["iat"], iat);
        assert_eq!(claims["exp"], iat + 3600);
    }
}
