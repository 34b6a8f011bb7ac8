//! Google workload identity, for `vertex` channels, as Google's libraries find it:
//!
//! - **application default credentials**: the file `GOOGLE_APPLICATION_CREDENTIALS` names (read
//!   when the channel is compiled): a service-account key (`type: service_account`, exchanged
//!   as a Vertex credential's key is, [`crate::vertex::TokenSource`]) or an authorized user's
//!   refresh token (`type: authorized_user`: `client_id`, `client_secret`, `refresh_token`,
//!   exchanged with the refresh-token grant at its `token_uri`, else Google's);
//! - else **the metadata server** (GKE Workload Identity, Compute Engine, Cloud Run):
//!   `GET http://{GCE_METADATA_HOST}/computeMetadata/v1/instance/service-accounts/default/token`
//!   with `Metadata-Flavor: Google` (the host `metadata.google.internal` when the variable is
//!   unset).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use serde_json::Value;

use super::io::{read_file, var};
use crate::client::HttpClient;
use crate::token::{form, form_post, oauth_token, Fresh, Registry, TokenCache, TokenError};
use crate::vertex::TokenSource;

/// The metadata server's host when `GCE_METADATA_HOST` is unset.
pub const METADATA_HOST: &str = "metadata.google.internal";
/// The metadata server's token path.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
/// Google's token endpoint, for an authorized user's file without `token_uri`.
const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// The lifetime of a token whose answer says none.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// Where the access tokens come from.
enum Source {
    Metadata {
        url: String,
    },
    ServiceAccount(Arc<TokenSource>),
    AuthorizedUser {
        client_id: String,
        client_secret: String,
        refresh_token: String,
        token_uri: String,
    },
}

/// One Google workload identity and its access tokens.
pub struct GoogleIdentity {
    source: Source,
    tokens: TokenCache<HeaderValue>,
}

fn identities() -> &'static Registry<GoogleIdentity> {
    static IDENTITIES: OnceLock<Registry<GoogleIdentity>> = OnceLock::new();
    IDENTITIES.get_or_init(Registry::default)
}

/// The Google identity of this environment: the application default credentials file when one
/// is named, else the metadata server. A file that cannot be read or used is an error naming
/// the problem, never a value.
pub fn identity(env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<GoogleIdentity>, String> {
    let (key, source) = match var(env, "GOOGLE_APPLICATION_CREDENTIALS") {
        Some(path) => {
            let text = read_file(Path::new(&path)).map_err(|_| {
                "GOOGLE_APPLICATION_CREDENTIALS names a file that cannot be read".to_owned()
            })?;
            (format!("adc|{text}"), credentials_file(&text)?)
        }
        None => {
            let host = var(env, "GCE_METADATA_HOST").unwrap_or_else(|| METADATA_HOST.to_owned());
            let url = format!("http://{host}{METADATA_TOKEN_PATH}");
            crate::checks::check_base_url(&url)
                .map_err(|m| format!("GCE_METADATA_HOST does not make a URL: {m}"))?;
            (format!("metadata|{url}"), Source::Metadata { url })
        }
    };
    identities().get_or_make(&key, || {
        Ok(GoogleIdentity {
            tokens: TokenCache::new(describe(&source)),
            source,
        })
    })
}

/// An application default credentials file's source.
fn credentials_file(text: &str) -> Result<Source, String> {
    let file: Value = serde_json::from_str(text)
        .map_err(|_| "the application default credentials file is not JSON".to_owned())?;
    match file.get("type").and_then(Value::as_str) {
        Some("service_account") => crate::vertex::token_source(text)
            .map(Source::ServiceAccount)
            .map_err(|m| format!("the application default credentials file {m}")),
        Some("authorized_user") => {
            let field = |name: &str| {
                file.get(name)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
                    .ok_or_else(|| format!("the application default credentials file has no `{name}`"))
            };
            let token_uri = field("token_uri").unwrap_or_else(|_| GOOGLE_TOKEN_URI.to_owned());
            crate::checks::check_base_url(&token_uri)
                .map_err(|m| format!("the application default credentials file's `token_uri` {m}"))?;
            Ok(Source::AuthorizedUser {
                client_id: field("client_id")?,
                client_secret: field("client_secret")?,
                refresh_token: field("refresh_token")?,
                token_uri,
            })
        }
        _ => Err("the application default credentials file's `type` must be service_account or authorized_user".to_owned()),
    }
}

/// The kind and the account (or client), never a secret.
fn describe(source: &Source) -> String {
    match source {
        Source::Metadata { .. } => "Google metadata server's default service account".to_owned(),
        Source::ServiceAccount(source) => format!(
            "Google application default credentials for service account {}",
            source.account().client_email
        ),
        Source::AuthorizedUser { client_id, .. } => {
            format!(
                "Google application default credentials for authorized user of client {client_id}"
            )
        }
    }
}

impl GoogleIdentity {
    pub fn describe(&self) -> String {
        self.tokens.label().to_owned()
    }

    pub fn forget(&self) {
        match &self.source {
            Source::ServiceAccount(source) => source.forget(),
            _ => self.tokens.set(None),
        }
    }

    /// The `Authorization` value: the cached token, or a new one within `budget`.
    pub async fn bearer(
        &self,
        client: &HttpClient,
        budget: Duration,
    ) -> Result<HeaderValue, TokenError> {
        match &self.source {
            Source::ServiceAccount(source) => source.bearer(client, budget).await,
            _ => self.tokens.get(budget, || self.fetch(client)).await,
        }
    }

    async fn fetch(&self, client: &HttpClient) -> Result<Fresh<HeaderValue>, TokenError> {
        let (request, secret) = match &self.source {
            Source::Metadata { url } => (
                Request::builder()
                    .method(Method::GET)
                    .uri(url.as_str())
                    .header("metadata-flavor", HeaderValue::from_static("Google"))
                    .body(Full::new(Bytes::new()))
                    .map_err(|_| TokenError::Request)?,
                "",
            ),
            Source::AuthorizedUser {
                client_id,
                client_secret,
                refresh_token,
                token_uri,
            } => {
                let body = form(&[
                    ("grant_type", "refresh_token"),
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                    ("refresh_token", refresh_token),
                ]);
                let request = form_post(token_uri, body, "application/json")?;
                (request, refresh_token.as_str())
            }
            Source::ServiceAccount(_) => return Err(TokenError::Request),
        };
        oauth_token(
            client,
            request,
            secret,
            self.tokens.label(),
            DEFAULT_LIFETIME,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::super::io::env_of;
    use super::*;
    use crate::vertex::TestTokenEndpoint;

    #[tokio::test]
    async fn the_metadata_server_is_asked_with_its_flavor_header() {
        let endpoint = TestTokenEndpoint::start(|n, _| {
            let body = format!(
                "{{\"access_token\":\"meta-{n}\",\"expires_in\":3599,\"token_type\":\"Bearer\"}}"
            );
            (Duration::ZERO, TestTokenEndpoint::json(200, "", &body))
        })
        .await;
        let host = endpoint
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/token")
            .to_owned();
        let identity = identity(&env_of(vec![("GCE_METADATA_HOST", host)])).unwrap();
        let client = crate::client::build_client(Duration::from_secs(5));
        let bearer = identity
            .bearer(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(bearer.to_str().unwrap(), "Bearer meta-1");
        assert!(bearer.is_sensitive());
        let (head, _) = endpoint.requests.lock().unwrap()[0].clone();
        assert!(
            head.starts_with(&format!("GET {METADATA_TOKEN_PATH} ")),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("metadata-flavor: google"),
            "{head}"
        );
        identity.forget();
        let again = identity
            .bearer(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(again.to_str().unwrap(), "Bearer meta-2");
    }

    #[tokio::test]
    async fn an_authorized_user_file_uses_the_refresh_token_grant() {
        let endpoint = TestTokenEndpoint::start(|_, form| {
            let body = if form.contains("refresh_token=1%2Frefresh") {
                TestTokenEndpoint::json(
                    200,
                    "",
                    r#"{"access_token":"user-token","expires_in":3600}"#,
                )
            } else {
                TestTokenEndpoint::json(400, "", r#"{"error":"invalid_grant"}"#)
            };
            (Duration::ZERO, body)
        })
        .await;
        let path = std::env::temp_dir().join(format!("switchyard-adc-{}", std::process::id()));
        let file = serde_json::json!({
            "type": "authorized_user", "client_id": "cid.apps.googleusercontent.com",
            "client_secret": "csecret", "refresh_token": "1/refresh", "token_uri": endpoint.url,
        });
        std::fs::write(&path, file.to_string()).unwrap();
        let identity = identity(&env_of(vec![(
            "GOOGLE_APPLICATION_CREDENTIALS",
            path.display().to_string(),
        )]))
        .unwrap();
        assert!(
            identity.describe().contains("cid.apps"),
            "{}",
            identity.describe()
        );
        let client = crate::client::build_client(Duration::from_secs(5));
        let bearer = identity
            .bearer(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(bearer.to_str().unwrap(), "Bearer user-token");
        let (_, form) = endpoint.requests.lock().unwrap()[0].clone();
        assert!(form.starts_with("grant_type=refresh_token&client_id=cid.apps.googleusercontent.com&client_secret=csecret"), "{form}");
    }

    #[test]
    fn a_bad_credentials_file_is_named_without_its_values() {
        let path = std::env::temp_dir().join(format!("switchyard-adc-bad-{}", std::process::id()));
        for (text, expected) in [
            ("not json SECRET", "not JSON"),
            (
                r#"{"type":"external_account","x":"SECRET"}"#,
                "`type` must be",
            ),
            (
                r#"{"type":"authorized_user","client_id":"c","client_secret":"SECRET"}"#,
                "no `refresh_token`",
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let message = identity(&env_of(vec![(
                "GOOGLE_APPLICATION_CREDENTIALS",
                path.display().to_string(),
            )]))
            .err()
            .unwrap();
            assert!(
                message.contains(expected) && !message.contains("SECRET"),
                "{message}"
            );
        }
        let message = identity(&env_of(vec![(
            "GOOGLE_APPLICATION_CREDENTIALS",
            "/nonexistent/adc.json".into(),
        )]))
        .err()
        .unwrap();
        assert!(message.contains("cannot be read"), "{message}");
    }
}
