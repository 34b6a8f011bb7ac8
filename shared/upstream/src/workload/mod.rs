//! Workload identity: an `auth: workload` channel stores no secret; the proxy obtains
//! short-lived credentials from the identity its pod runs as, in the way each cloud's own
//! libraries do, from the same environment variables:
//!
//! - [`aws`] (`bedrock` channels): a web identity token file exchanged at STS
//!   (`AssumeRoleWithWebIdentity`; EKS IAM roles for service accounts), or EKS Pod Identity's
//!   container credentials endpoint: temporary keys and a session token, signed into SigV4;
//! - [`google`] (`vertex` channels): an application default credentials file (a service-account
//!   key, exchanged as a key credential is; an authorized user's refresh token), else the
//!   metadata server's token (GKE Workload Identity);
//! - [`azure`] (`azure` channels): Entra ID client credentials, the federated token file of AKS
//!   workload identity as a client assertion, or a client secret: a token for Azure AI services,
//!   sent as `Authorization: Bearer`.
//!
//! Each identity's credential is cached per process ([`crate::token::TokenCache`]), refreshed
//! ahead of its expiry by one fetch that concurrent requests share; every identity endpoint is
//! reached with the attempt's time bound and its answer read within a size bound. A failure is
//! the attempt's ([`TokenError`]), so the route fails over. Nothing here logs, formats or returns
//! a token, a key or a secret.

pub mod aws;
pub mod azure;
pub mod google;

use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use switchyard_engine::Provider;
use switchyard_provider::Protocol;

use crate::bedrock::AwsKeys;
use crate::client::HttpClient;
use crate::token::TokenError;
use crate::vertex::VertexTarget;

/// Most time one identity exchange may take, whatever the attempt's budget.
pub const IDENTITY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a token or credentials file read.
const MAX_FILE: u64 = 64 * 1024;

/// A channel's workload identity, resolved from this process's environment.
#[derive(Clone)]
pub enum Workload {
    Aws(Arc<aws::AwsIdentity>),
    Google(Arc<google::GoogleIdentity>),
    Azure(Arc<azure::AzureIdentity>),
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Workload").field(&self.describe()).finish()
    }
}

/// What a workload identity hands one request.
pub enum Issued {
    /// The `Authorization` value (`Bearer {token}`, marked sensitive).
    Bearer(HeaderValue),
    /// Temporary AWS keys with their session token.
    Aws(Arc<AwsKeys>),
}

impl Workload {
    /// The identity a `provider` channel uses, from the environment (`env` reads a variable).
    /// The message says which variables are missing, never a value.
    pub fn resolve(
        provider: Provider,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Workload, String> {
        match provider {
            Provider::Bedrock => aws::identity(env).map(Workload::Aws),
            Provider::Vertex => google::identity(env).map(Workload::Google),
            Provider::Azure => azure::identity(env).map(Workload::Azure),
            other => Err(format!(
                "{} channels have no workload identity",
                other.as_str()
            )),
        }
    }

    /// A credential for one request: the cached one, or one obtained now within `budget` (and
    /// [`IDENTITY_TIMEOUT`]).
    pub async fn issue(&self, client: &HttpClient, budget: Duration) -> Result<Issued, TokenError> {
        let budget = budget.min(IDENTITY_TIMEOUT);
        match self {
            Workload::Aws(identity) => identity.keys(client, budget).await.map(Issued::Aws),
            Workload::Google(identity) => identity.bearer(client, budget).await.map(Issued::Bearer),
            Workload::Azure(identity) => identity.bearer(client, budget).await.map(Issued::Bearer),
        }
    }

    /// Drops the cached credential (the upstream refused it): the next request obtains anew.
    pub fn forget(&self) {
        match self {
            Workload::Aws(identity) => identity.forget(),
            Workload::Google(identity) => identity.forget(),
            Workload::Azure(identity) => identity.forget(),
        }
    }

    /// Which identity this is, for logs and messages: its kind and whom it names (a role, an
    /// account, a client id), never a secret.
    pub fn describe(&self) -> String {
        match self {
            Workload::Aws(identity) => identity.describe(),
            Workload::Google(identity) => identity.describe(),
            Workload::Azure(identity) => identity.describe(),
        }
    }

    /// The error shape of the channel's answers (Bedrock's are Anthropic's).
    pub fn protocol(&self) -> Protocol {
        match self {
            Workload::Aws(_) => Protocol::Anthropic,
            Workload::Google(_) => Protocol::Gemini,
            Workload::Azure(_) => Protocol::OpenAi,
        }
    }

    /// The AWS region of the identity's environment (`AWS_REGION`), for signing.
    pub fn region(&self) -> Option<&str> {
        match self {
            Workload::Aws(identity) => identity.region(),
            _ => None,
        }
    }
}

/// Checks that a `provider` channel at `base_url` can use `auth: workload`: the provider has a
/// workload identity, and a Vertex channel's `base_url` names its project (no key file does).
/// The message never quotes the URL.
pub fn check_channel(provider: Provider, base_url: &str) -> Result<(), String> {
    if !provider.has_workload_identity() {
        return Err(format!(
            "auth: workload is for azure, bedrock and vertex channels, not {}",
            provider.as_str()
        ));
    }
    if provider == Provider::Vertex {
        let target = VertexTarget::parse(base_url.trim().trim_end_matches('/'))?;
        if target.project.is_none() {
            return Err("a vertex channel with auth: workload names its project in base_url (https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location})".to_owned());
        }
    }
    Ok(())
}

/// A non-empty environment variable.
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// A token or credentials file's text, at most [`MAX_FILE`] bytes, trimmed (read at each
/// exchange: the kubelet rotates projected tokens).
fn read_file(path: &Path) -> Result<String, TokenError> {
    let mut text = String::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE + 1).read_to_string(&mut text));
    match read {
        Ok(n) if n as u64 <= MAX_FILE && !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) => {
            tracing::warn!(file = %path.display(), "workload identity token file is empty or too large");
            Err(TokenError::Request)
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e.kind(), "workload identity token file could not be read");
            Err(TokenError::Request)
        }
    }
}

/// The refusal of an identity endpoint that answered `status`, with its words.
fn refused(answer: &crate::token::Answer, reason: String) -> TokenError {
    TokenError::Refused {
        status: answer.status,
        retry_after: answer.retry_after.clone(),
        reason,
    }
}

/// Seconds since the Unix epoch of an ISO 8601 UTC time (`2026-12-08T12:00:00Z`, fractional
/// seconds and `+00:00` accepted), `None` for anything else.
fn unix_seconds(text: &str) -> Option<i64> {
    let text = text.trim();
    let text = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = switchyard_engine::limit::days_from_civil(year, month, day);
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

/// How long a credential that expires at `expiration` (ISO 8601) has left; `None` when the
/// time cannot be read.
fn lifetime_until(expiration: &str) -> Option<Duration> {
    let at = unix_seconds(expiration)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs();
    Some(Duration::from_secs(
        u64::try_from(at).ok()?.saturating_sub(now),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expirations_are_read_as_utc() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2026-12-08T12:00:00Z"), Some(1_796_731_200));
        assert_eq!(
            unix_seconds("2026-12-08T12:00:00.123+00:00"),
            Some(1_796_731_200)
        );
        for bad in [
            "",
            "2026-12-08",
            "2026-13-08T00:00:00Z",
            "2026-12-08T12:00:00+02:00",
            "x",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad}");
        }
        assert_eq!(lifetime_until("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
    }

    #[test]
    fn only_three_providers_have_workload_identity_and_vertex_names_its_project() {
        for provider in [
            Provider::Openai,
            Provider::Anthropic,
            Provider::Gemini,
            Provider::Mock,
        ] {
            assert!(check_channel(provider, "https://x")
                .unwrap_err()
                .contains("not"));
        }
        assert!(check_channel(
            Provider::Bedrock,
            "https://bedrock-runtime.us-east-1.amazonaws.com"
        )
        .is_ok());
        assert!(check_channel(Provider::Azure, "https://r.openai.azure.com").is_ok());
        let message = check_channel(
            Provider::Vertex,
            "https://us-central1-aiplatform.googleapis.com",
        )
        .unwrap_err();
        assert!(message.contains("names its project"), "{message}");
        assert!(check_channel(
            Provider::Vertex,
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1"
        )
        .is_ok());
    }
}
