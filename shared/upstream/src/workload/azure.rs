//! Azure workload identity, for `azure` channels: Entra ID's client credentials grant, as
//! Azure's libraries take it from the environment:
//!
//! - `AZURE_CLIENT_ID` and `AZURE_TENANT_ID`, and `AZURE_AUTHORITY_HOST` (else
//!   `https://login.microsoftonline.com/`): the token endpoint is
//!   `{authority}{tenant}/oauth2/v2.0/token`;
//! - `AZURE_FEDERATED_TOKEN_FILE` (AKS workload identity; read at each exchange, the kubelet
//!   rotates it) sent as the client assertion, else `AZURE_CLIENT_SECRET` as the client secret.
//!
//! The token is asked for [`SCOPE`] (Azure OpenAI) and sent as `Authorization: Bearer` in place
//! of an `api-key`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::HeaderValue;

use super::io::{read_file, var};
use crate::client::HttpClient;
use crate::token::{form, form_post, oauth_token, Fresh, Registry, TokenCache, TokenError};

/// The scope of Azure OpenAI's (Azure AI services') tokens.
pub const SCOPE: &str = "https://cognitiveservices.azure.com/.default";
/// Entra ID's public cloud authority when `AZURE_AUTHORITY_HOST` is unset.
pub const AUTHORITY_HOST: &str = "https://login.microsoftonline.com/";
/// The client assertion type of a federated token (RFC 7523).
const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// The lifetime of a token whose answer says none.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// How the client proves itself.
#[derive(Debug, PartialEq, Eq)]
enum Proof {
    FederatedTokenFile(PathBuf),
    ClientSecret(String),
}

/// One Entra ID application (workload identity) and its access tokens.
pub struct AzureIdentity {
    client_id: String,
    token_url: String,
    proof: Proof,
    tokens: TokenCache<HeaderValue>,
}

fn identities() -> &'static Registry<AzureIdentity> {
    static IDENTITIES: OnceLock<Registry<AzureIdentity>> = OnceLock::new();
    IDENTITIES.get_or_init(Registry::default)
}

/// A tenant as it goes into the URL path: a GUID or a domain (letters, digits, `-`, `.`).
fn valid_tenant(tenant: &str) -> bool {
    !tenant.is_empty()
        && tenant.len() <= 128
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'))
}

/// The Azure identity of this environment. The message names the missing variables, never a
/// value.
pub fn identity(env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<AzureIdentity>, String> {
    let (Some(client_id), Some(tenant)) =
        (var(env, "AZURE_CLIENT_ID"), var(env, "AZURE_TENANT_ID"))
    else {
        return Err("no Azure workload identity in this process's environment (AZURE_CLIENT_ID and AZURE_TENANT_ID, with AZURE_FEDERATED_TOKEN_FILE or AZURE_CLIENT_SECRET)".to_owned());
    };
    if !valid_tenant(&tenant) {
        return Err("AZURE_TENANT_ID must be a tenant id or domain".to_owned());
    }
    let proof = match (var(env, "AZURE_FEDERATED_TOKEN_FILE"), env("AZURE_CLIENT_SECRET")) {
        (Some(file), _) => Proof::FederatedTokenFile(PathBuf::from(file)),
        (None, Some(secret)) if !secret.is_empty() => Proof::ClientSecret(secret),
        _ => return Err("no Azure client proof in this process's environment (AZURE_FEDERATED_TOKEN_FILE or AZURE_CLIENT_SECRET)".to_owned()),
    };
    let authority = var(env, "AZURE_AUTHORITY_HOST").unwrap_or_else(|| AUTHORITY_HOST.to_owned());
    let token_url = format!(
        "{}/{tenant}/oauth2/v2.0/token",
        authority.trim_end_matches('/')
    );
    crate::checks::check_base_url(&token_url)
        .map_err(|m| format!("AZURE_AUTHORITY_HOST does not make a URL: {m}"))?;
    // The key tells identities apart (it is never logged).
    let key = format!("{client_id}|{token_url}|{proof:?}");
    identities().get_or_make(&key, || {
        let kind = match proof {
            Proof::FederatedTokenFile(_) => "federated token",
            Proof::ClientSecret(_) => "client secret",
        };
        Ok(AzureIdentity {
            tokens: TokenCache::new(format!("Entra ID application {client_id} ({kind})")),
            client_id,
            token_url,
            proof,
        })
    })
}

impl AzureIdentity {
    pub fn describe(&self) -> String {
        self.tokens.label().to_owned()
    }

    pub fn forget(&self) {
        self.tokens.set(None);
    }

    /// The `Authorization` value: the cached token, or a new one within `budget`.
    pub async fn bearer(
        &self,
        client: &HttpClient,
        budget: Duration,
    ) -> Result<HeaderValue, TokenError> {
        self.tokens.get(budget, || self.fetch(client)).await
    }

    async fn fetch(&self, client: &HttpClient) -> Result<Fresh<HeaderValue>, TokenError> {
        let (body, secret) = match &self.proof {
            Proof::FederatedTokenFile(file) => {
                let assertion = read_file(file)?;
                let body = form(&[
                    ("client_id", &self.client_id),
                    ("scope", SCOPE),
                    ("grant_type", "client_credentials"),
                    ("client_assertion_type", ASSERTION_TYPE),
                    ("client_assertion", &assertion),
                ]);
                (body, assertion)
            }
            Proof::ClientSecret(secret) => {
                let body = form(&[
                    ("client_id", &self.client_id),
                    ("scope", SCOPE),
                    ("grant_type", "client_credentials"),
                    ("client_secret", secret),
                ]);
                (body, secret.clone())
            }
        };
        let request = form_post(&self.token_url, body, "application/json")?;
        oauth_token(
            client,
            request,
            &secret,
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
    async fn a_federated_token_is_the_client_assertion() {
        let endpoint = TestTokenEndpoint::start(|_, _| {
            (
                Duration::ZERO,
                TestTokenEndpoint::json(
                    200,
                    "",
                    r#"{"token_type":"Bearer","expires_in":3599,"access_token":"entra"}"#,
                ),
            )
        })
        .await;
        let file = std::env::temp_dir().join(format!("switchyard-azure-{}", std::process::id()));
        std::fs::write(&file, "federated.jwt\n").unwrap();
        let authority = endpoint.url.trim_end_matches("/token").to_owned();
        let identity = identity(&env_of(vec![
            ("AZURE_CLIENT_ID", "app-1".into()),
            ("AZURE_TENANT_ID", "tenant-1".into()),
            ("AZURE_AUTHORITY_HOST", authority),
            ("AZURE_FEDERATED_TOKEN_FILE", file.display().to_string()),
        ]))
        .unwrap();
        let client = crate::client::build_client(Duration::from_secs(5));
        let bearer = identity
            .bearer(&client, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(bearer.to_str().unwrap(), "Bearer entra");
        let (head, form) = endpoint.requests.lock().unwrap()[0].clone();
        assert!(
            head.starts_with("POST /tenant-1/oauth2/v2.0/token "),
            "{head}"
        );
        assert_eq!(
            form,
            "client_id=app-1&scope=https%3A%2F%2Fcognitiveservices.azure.com%2F.default&grant_type=client_credentials&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer&client_assertion=federated.jwt"
        );
        assert!(identity.describe().contains("app-1") && identity.describe().contains("federated"));
    }

    #[tokio::test]
    async fn a_refused_client_secret_is_not_quoted() {
        let endpoint = TestTokenEndpoint::start(|_, _| {
            (
                Duration::ZERO,
                TestTokenEndpoint::json(401, "", r#"{"error":"invalid_client","error_description":"AADSTS7000215: bad secret s3cr3t"}"#),
            )
        })
        .await;
        let identity = identity(&env_of(vec![
            ("AZURE_CLIENT_ID", "app-2".into()),
            ("AZURE_TENANT_ID", "contoso.onmicrosoft.com".into()),
            (
                "AZURE_AUTHORITY_HOST",
                endpoint.url.trim_end_matches("/token").to_owned(),
            ),
            ("AZURE_CLIENT_SECRET", "s3cr3t".into()),
        ]))
        .unwrap();
        let client = crate::client::build_client(Duration::from_secs(5));
        let TokenError::Refused { reason, .. } = identity
            .bearer(&client, Duration::from_secs(5))
            .await
            .unwrap_err()
        else {
            panic!("not a refusal");
        };
        assert_eq!(reason, "invalid_client: AADSTS7000215: bad secret [secret]");
        let (_, form) = endpoint.requests.lock().unwrap()[0].clone();
        assert!(
            form.ends_with("grant_type=client_credentials&client_secret=s3cr3t"),
            "{form}"
        );
    }

    #[test]
    fn missing_settings_are_named() {
        let message = identity(&env_of(vec![])).err().unwrap();
        assert!(message.contains("AZURE_CLIENT_ID"), "{message}");
        let message = identity(&env_of(vec![
            ("AZURE_CLIENT_ID", "a".into()),
            ("AZURE_TENANT_ID", "t".into()),
        ]))
        .err()
        .unwrap();
        assert!(message.contains("AZURE_FEDERATED_TOKEN_FILE"), "{message}");
        let message = identity(&env_of(vec![
            ("AZURE_CLIENT_ID", "a".into()),
            ("AZURE_TENANT_ID", "t/../x".into()),
            ("AZURE_CLIENT_SECRET", "s".into()),
        ]))
        .err()
        .unwrap();
        assert!(message.contains("AZURE_TENANT_ID"), "{message}");
    }
}
