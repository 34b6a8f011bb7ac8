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
mod io;

use std::fmt;
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

#[cfg(test)]
mod tests {
    use super::*;

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
