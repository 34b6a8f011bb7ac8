//! Google Vertex AI, as far as a proxy sees it: the model paths
//! (`/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:{action}`),
//! answered as Gemini's, which need an access token this mock issued (`Authorization: Bearer`),
//! and the OAuth token endpoint (`POST /token`) that issues them for a signed service-account
//! assertion (the JWT bearer grant).
//!
//! The token endpoint verifies the assertion as Google does: RS256, signed by the public key
//! registered for its `iss` (the service account's `client_email`), `sub` = `iss`, `aud` this
//! endpoint's URL, the `cloud-platform` scope, and not expired. It answers
//! `{"access_token","expires_in","token_type":"Bearer"}`, the lifetime being the mock's
//! ([`MockUpstream::set_vertex_token_lifetime`](crate::MockUpstream::set_vertex_token_lifetime),
//! one hour by default), and counts its exchanges. A refused assertion gets
//! `400 {"error":"invalid_grant","error_description":...}`; a model request without a valid
//! token (unknown, expired) gets Vertex's `401 UNAUTHENTICATED`.
//!
//! The mock knows the public key of the throwaway test key in `fixtures/` ([`TEST_CLIENT_EMAIL`]
//! with [`TEST_PRIVATE_KEY_PEM`]) from the start; [`UNREGISTERED_PRIVATE_KEY_PEM`] is a key it
//! does not know.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};

/// THROWAWAY TEST KEY (fixtures/README.md): the private key of the test service account.
pub const TEST_PRIVATE_KEY_PEM: &str = include_str!("../fixtures/vertex-test-key.pem");
/// The public key of [`TEST_PRIVATE_KEY_PEM`], which the mock's token endpoint knows.
pub const TEST_PUBLIC_KEY_PEM: &str = include_str!("../fixtures/vertex-test-key.pub.pem");
/// THROWAWAY TEST KEY the mock does not know: its assertions are refused (`invalid_grant`).
pub const UNREGISTERED_PRIVATE_KEY_PEM: &str =
    include_str!("../fixtures/vertex-test-key-unregistered.pem");
/// The public key of [`UNREGISTERED_PRIVATE_KEY_PEM`].
pub const UNREGISTERED_PUBLIC_KEY_PEM: &str =
    include_str!("../fixtures/vertex-test-key-unregistered.pub.pem");
/// The test service account.
pub const TEST_CLIENT_EMAIL: &str = "switchyard-test@switchyard-test.iam.gserviceaccount.com";
/// The test service account's project.
pub const TEST_PROJECT: &str = "switchyard-test";
/// The scope an assertion must ask for.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The token endpoint's path.
pub const TOKEN_PATH: &str = "/token";

/// A service-account key file (the JSON Google issues) for [`TEST_CLIENT_EMAIL`] signed with
/// `private_key_pem`, whose token endpoint is `token_uri`.
pub fn service_account_json(token_uri: &str, private_key_pem: &str) -> String {
    json!({
        "type": "service_account",
        "project_id": TEST_PROJECT,
        "private_key_id": "0123456789abcdef0123456789abcdef01234567",
        "private_key": private_key_pem,
        "client_email": TEST_CLIENT_EMAIL,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "universe_domain": "googleapis.com",
    })
    .to_string()
}

/// What a Vertex model path stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VertexPath<'a> {
    pub project: &'a str,
    pub location: &'a str,
    pub model: &'a str,
    /// The Gemini path answered for it (`/v1beta/models/{model}:{action}`).
    pub gemini: String,
}

/// The Vertex model path `path` is, if any.
pub(crate) fn parse(path: &str) -> Option<VertexPath<'_>> {
    let rest = path.strip_prefix("/v1/projects/")?;
    let (project, rest) = rest.split_once("/locations/")?;
    let (location, rest) = rest.split_once("/publishers/google/models/")?;
    let model = rest.split_once(':').map_or(rest, |(model, _)| model);
    let valid = |s: &str| !s.is_empty() && !s.contains('/');
    (valid(project) && valid(location) && valid(model)).then(|| VertexPath {
        project,
        location,
        model,
        gemini: format!("/v1beta/models/{rest}"),
    })
}

/// The Gemini path a Vertex model path is answered as.
pub(crate) fn gemini_path(path: &str) -> Option<String> {
    parse(path).map(|vertex| vertex.gemini)
}

/// Vertex's answer to a model request without a valid access token.
pub(crate) const UNAUTHENTICATED: &str = r#"{"error":{"code":401,"message":"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.","status":"UNAUTHENTICATED"}}"#;

/// The token endpoint's state: the known public keys, the tokens issued, the counters.
pub(crate) struct TokenIssuer {
    keys: HashMap<String, DecodingKey>,
    lifetime: Duration,
    issued: HashMap<String, Instant>,
    next: u64,
    exchanges: usize,
    refusals: usize,
    last_assertion: Option<String>,
}

impl Default for TokenIssuer {
    fn default() -> Self {
        let mut keys = HashMap::new();
        // The committed fixture always parses; a broken one fails every Vertex test loudly.
        if let Ok(key) = DecodingKey::from_rsa_pem(TEST_PUBLIC_KEY_PEM.as_bytes()) {
            keys.insert(TEST_CLIENT_EMAIL.to_owned(), key);
        }
        TokenIssuer {
            keys,
            lifetime: Duration::from_secs(3600),
            issued: HashMap::new(),
            next: 0,
            exchanges: 0,
            refusals: 0,
            last_assertion: None,
        }
    }
}

/// A refusal of the token endpoint: 400 with OAuth's error shape.
fn invalid_grant(description: &str) -> (u16, String) {
    (
        400,
        json!({"error": "invalid_grant", "error_description": description}).to_string(),
    )
}

impl TokenIssuer {
    /// Registers (or replaces) the public key (PEM) of the service account `client_email`.
    pub(crate) fn register(&mut self, client_email: &str, public_key_pem: &str) -> bool {
        match DecodingKey::from_rsa_pem(public_key_pem.as_bytes()) {
            Ok(key) => {
                self.keys.insert(client_email.to_owned(), key);
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn set_lifetime(&mut self, lifetime: Duration) {
        self.lifetime = lifetime;
    }

    pub(crate) fn exchanges(&self) -> usize {
        self.exchanges
    }

    pub(crate) fn refusals(&self) -> usize {
        self.refusals
    }

    pub(crate) fn last_assertion(&self) -> Option<String> {
        self.last_assertion.clone()
    }

    /// Clears the counters and the last assertion (the tokens issued stay valid).
    pub(crate) fn reset(&mut self) {
        self.exchanges = 0;
        self.refusals = 0;
        self.last_assertion = None;
    }

    /// Whether `token` was issued here and has not expired.
    pub(crate) fn valid(&self, token: Option<&str>) -> bool {
        token
            .and_then(|t| self.issued.get(t))
            .is_some_and(|expires| Instant::now() < *expires)
    }

    /// The answer (status, JSON body) to a token request with form body `body`, audience
    /// `audience` (this endpoint's URL).
    pub(crate) fn exchange(&mut self, body: &[u8], audience: &str) -> (u16, String) {
        let form = String::from_utf8_lossy(body);
        let field = |name: &str| {
            form.split('&')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        };
        let grant = field("grant_type").map(|g| g.replace("%3A", ":").replace("%3a", ":"));
        if grant.as_deref() != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
            self.refusals += 1;
            return (
                400,
                json!({"error": "unsupported_grant_type", "error_description": "Invalid grant_type"}).to_string(),
            );
        }
        let Some(assertion) = field("assertion") else {
            self.refusals += 1;
            return invalid_grant("Missing required parameter: assertion");
        };
        self.last_assertion = Some(assertion.to_owned());
        match self.verify(assertion, audience) {
            Ok(()) => {
                self.exchanges += 1;
                self.next += 1;
                let token = format!("ya29.mock-{}-{}", self.next, self.exchanges);
                self.issued
                    .insert(token.clone(), Instant::now() + self.lifetime);
                (
                    200,
                    json!({
                        "access_token": token,
                        "expires_in": self.lifetime.as_secs(),
                        "token_type": "Bearer",
                    })
                    .to_string(),
                )
            }
            Err(description) => {
                self.refusals += 1;
                invalid_grant(description)
            }
        }
    }

    /// Checks an assertion as Google's token endpoint does.
    fn verify(&self, assertion: &str, audience: &str) -> Result<(), &'static str> {
        let header = jsonwebtoken::decode_header(assertion).map_err(|_| "Invalid JWT.")?;
        if header.alg != Algorithm::RS256 {
            return Err("Invalid JWT: algorithm must be RS256.");
        }
        // Which key: the unverified issuer's; the signature check below proves it.
        let mut unverified = Validation::new(Algorithm::RS256);
        unverified.insecure_disable_signature_validation();
        unverified.validate_aud = false;
        unverified.validate_exp = false;
        let claims =
            jsonwebtoken::decode::<Value>(assertion, &DecodingKey::from_secret(&[]), &unverified)
                .map_err(|_| "Invalid JWT.")?
                .claims;
        let issuer = claims["iss"].as_str().unwrap_or_default();
        let key = self
            .keys
            .get(issuer)
            .ok_or("Invalid grant: account not found")?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.leeway = 0;
        validation.set_audience(&[audience]);
        validation.set_issuer(&[issuer]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Value>(assertion, key, &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => "Invalid JWT Signature.",
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => {
                    "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe."
                }
                jsonwebtoken::errors::ErrorKind::InvalidAudience => {
                    "Invalid JWT: audience does not match the token endpoint."
                }
                _ => "Invalid JWT.",
            })?
            .claims;
        if claims["sub"] != claims["iss"] {
            return Err("Invalid JWT: sub must be the service account.");
        }
        if claims["scope"].as_str() != Some(SCOPE) {
            return Err("Invalid JWT: scope must be cloud-platform.");
        }
        let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
        if !matches!((iat, exp), (Some(iat), Some(exp)) if exp > iat && exp - iat <= 3600) {
            return Err(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertex_paths_stand_for_gemini_ones() {
        let p = parse(
            "/v1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent",
        )
        .unwrap();
        assert_eq!(
            (p.project, p.location, p.model),
            ("p-1", "us-central1", "gemini-2.5-flash")
        );
        assert_eq!(
            p.gemini,
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
        );
        assert_eq!(
            parse("/v1/projects/p/locations/l/publishers/google/models/:x"),
            None
        );
        assert_eq!(parse("/v1beta/models/m:generateContent"), None);
        assert_eq!(
            parse("/v1/projects//locations/l/publishers/google/models/m"),
            None
        );
    }

    #[test]
    fn the_token_endpoint_refuses_what_it_cannot_verify() {
        let mut issuer = TokenIssuer::default();
        let (status, body) = issuer.exchange(b"grant_type=password", "http://x/token");
        assert_eq!(status, 400, "{body}");
        let (status, body) = issuer.exchange(
            b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=a.b.c",
            "http://x/token",
        );
        assert_eq!(status, 400);
        assert!(body.contains("invalid_grant"), "{body}");
        assert_eq!((issuer.exchanges(), issuer.refusals()), (0, 2));
        assert!(!issuer.valid(Some("ya29.mock-1-1")));
    }
}
