//! Per-channel runtime facts compiled once per snapshot: the base URL, each credential's auth
//! header value (marked sensitive), the channel's extra headers, and building one upstream
//! request with the provider's auth rule (`Authorization: Bearer` for OpenAI, `api-key` for
//! Azure OpenAI, `x-api-key` + `anthropic-version` for Anthropic, `x-goog-api-key` for Gemini,
//! `Authorization: Bearer` with an access token obtained from the credential's service-account key
//! for Vertex AI, see [`crate::vertex`]; an AWS Signature Version 4 from the credential's access
//! keys for Bedrock, whose Anthropic-shaped requests go to its Converse API, see
//! [`crate::bedrock`]). Also which client headers may go upstream and which upstream headers may
//! come back.
//!
//! Azure OpenAI speaks OpenAI's protocol at other URLs. Requests are planned with OpenAI's paths
//! (`/v1/chat/completions`, ...) and the runtime places them on one of Azure's two surfaces:
//!
//! - the deployments surface (any base URL not ending in `/openai/v1`, typically
//!   `https://my-resource.openai.azure.com`):
//!   `{base_url}/openai/deployments/{deployment}/{operation}?api-version={version}`, where the
//!   deployment is the member's upstream model; the Responses API, which is not per deployment,
//!   is `{base_url}/openai/responses?api-version={version}`;
//! - the v1 surface (a base URL ending in `/openai/v1`): `{base_url}/{operation}`, the model in
//!   the body as with OpenAI, no `api-version` unless the channel sets one.
//!
//! The version depends on the endpoint's kind (the operation's first segment: `chat`,
//! `completions`, `embeddings`, `responses`, `images`, `audio`): the channel's
//! `api-version-{kind}` header entry when it has one, else its `api-version` entry, else on the
//! deployments surface the kind's default ([`AZURE_RESPONSES_API_VERSION`] for the Responses API,
//! which older versions lack; [`AZURE_DEFAULT_API_VERSION`] for every other kind). The entries are
//! taken as the query parameter, never sent as headers.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, Request};
use http_body_util::Full;
use switchyard_engine::{Channel, Credential, CredentialId, Provider, SecretSource};
use switchyard_provider::Protocol;

use crate::bedrock::{AwsKeys, RequestError};
use crate::client::{path_segment, HttpClient};
use crate::mock::MockOptions;
use crate::token::TokenError;
use crate::vertex::{TokenSource, VertexTarget};
use crate::workload::{Issued, Workload};

/// A credential ready to use: its id and the auth header value (marked sensitive). A Vertex
/// credential's auth value is its current access token, which [`CredentialRuntime::authorized`]
/// puts in.
#[derive(Debug, Clone)]
pub struct CredentialRuntime {
    pub id: CredentialId,
    auth: HeaderValue,
    /// A Vertex credential's service account and access tokens.
    vertex: Option<Arc<TokenSource>>,
    /// A Bedrock credential's access keys (a workload identity's: the current temporary ones).
    aws: Option<Arc<AwsKeys>>,
    /// An `auth: workload` channel's identity.
    workload: Option<Workload>,
}

impl CredentialRuntime {
    /// This credential ready for one request: itself, or for a Vertex credential a copy
    /// carrying a fresh access token (the cached one, or a new one obtained within `budget`).
    pub async fn authorized(
        &self,
        client: &HttpClient,
        budget: Duration,
    ) -> Result<Cow<'_, CredentialRuntime>, TokenError> {
        if let Some(workload) = &self.workload {
            // Boxed, as the token exchange below.
            let issued = Box::pin(workload.issue(client, budget)).await?;
            let (auth, aws) = match issued {
                Issued::Bearer(auth) => (auth, None),
                Issued::Aws(keys) => (HeaderValue::from_static(""), Some(keys)),
            };
            return Ok(Cow::Owned(CredentialRuntime {
                id: self.id,
                auth,
                vertex: None,
                aws,
                workload: self.workload.clone(),
            }));
        }
        let Some(source) = &self.vertex else {
            return Ok(Cow::Borrowed(self));
        };
        // Boxed: the token exchange's future (about 1.4 KB) would otherwise be part of every
        // request's attempt, Vertex or not, and be copied as it is awaited.
        let auth = Box::pin(source.bearer(client, budget)).await?;
        Ok(Cow::Owned(CredentialRuntime {
            id: self.id,
            auth,
            vertex: self.vertex.clone(),
            aws: None,
            workload: None,
        }))
    }

    /// A Vertex credential's service-account email (for messages), `None` for other providers.
    pub fn service_account(&self) -> Option<&str> {
        self.vertex
            .as_deref()
            .map(|source| source.account().client_email.as_str())
    }

    /// After the upstream refused this credential's access token (401): drops it from the cache
    /// so the next request obtains a new one. Nothing for credentials without one.
    pub fn forget_token(&self) {
        if let Some(source) = &self.vertex {
            source.forget();
        }
        if let Some(workload) = &self.workload {
            workload.forget();
        }
    }

    /// The workload identity this credential uses (`auth: workload`), if any.
    pub fn workload(&self) -> Option<&Workload> {
        self.workload.as_ref()
    }

    /// Whose token exchange a [`TokenError`] of this credential is (a service account, a
    /// workload identity), for logs and messages; never a secret.
    pub fn token_subject(&self) -> String {
        match (&self.workload, self.service_account()) {
            (Some(workload), _) => format!("workload identity ({})", workload.describe()),
            (None, Some(account)) => crate::vertex::subject(account),
            (None, None) => "token exchange".to_owned(),
        }
    }

    /// The provider's answer an attempt is classified by when this credential got no token
    /// (see [`TokenError::answer_as`]), in the channel's error shape; `None` for network
    /// failures.
    pub fn token_failure_answer(
        &self,
        e: &TokenError,
    ) -> Option<(http::StatusCode, HeaderMap, Bytes)> {
        let protocol = match &self.workload {
            Some(workload) => workload.protocol(),
            None => Protocol::Gemini,
        };
        e.answer_as(protocol, &self.token_subject())
    }
}

/// Per-channel facts compiled once per snapshot, so the hot path only formats a URL.
#[derive(Debug, Clone)]
pub struct ChannelRuntime {
    pub mock: Option<MockOptions>,
    base: String,
    pub credentials: Vec<CredentialRuntime>,
    headers: Vec<(HeaderName, HeaderValue)>,
    provider: Provider,
    /// An Azure channel's surface and `api-version` (`None` for other providers).
    azure: Option<AzureTarget>,
    /// A Vertex channel's endpoint, project and location (`None` for other providers).
    vertex: Option<VertexTarget>,
    /// A Bedrock channel's region from its base URL's host (`None` for other providers, or a
    /// host that names none: then each credential's region, else the default).
    bedrock_region: Option<String>,
}

/// Azure OpenAI's `api-version` on the deployments surface when the channel sets none: the
/// latest generally available version when this was written.
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";

/// Azure OpenAI's `api-version` for the Responses API when the channel sets none: the Responses
/// API needs `2025-03-01-preview` or later.
pub const AZURE_RESPONSES_API_VERSION: &str = "2025-04-01-preview";

/// Azure OpenAI's `api-version` for the Realtime API (`/openai/realtime`, a WebSocket) when the
/// channel sets none: the version its deployments surface serves realtime sessions at.
pub const AZURE_REALTIME_API_VERSION: &str = "2024-10-01-preview";

/// The channel header entry that sets an Azure channel's `api-version` for every kind of
/// endpoint; `api-version-{kind}` (a kind of [`AZURE_API_KINDS`]) sets it for one kind. They
/// are sent as the query parameter Azure reads, not as headers.
pub const AZURE_API_VERSION_HEADER: &str = "api-version";

/// The kinds of endpoint an Azure channel's `api-version` can be set for one by one: the first
/// segment of the OpenAI operation (`chat` for `chat/completions`, `audio` for both audio
/// operations, `images` for `images/generations`, `realtime` for the Realtime API's sessions).
pub const AZURE_API_KINDS: [&str; 7] = [
    "chat",
    "completions",
    "embeddings",
    "responses",
    "images",
    "audio",
    "realtime",
];

/// The kind of endpoint an Azure `api-version-{kind}` entry names, as its index in
/// [`AZURE_API_KINDS`]; `None` for a name of no such entry (the plain `api-version` included).
fn azure_kind_entry(name: &str) -> Option<usize> {
    let kind = name
        .get(..AZURE_API_VERSION_HEADER.len() + 1)
        .filter(|prefix| prefix.eq_ignore_ascii_case("api-version-"))
        .and_then(|_| name.get(AZURE_API_VERSION_HEADER.len() + 1..))?;
    AZURE_API_KINDS
        .iter()
        .position(|k| k.eq_ignore_ascii_case(kind))
}

/// Whether header entry `name` of an Azure channel sets an `api-version` (the plain entry or one
/// of a kind): such entries are versions, no secrets, and never sent as headers.
pub fn is_azure_api_version_entry(name: &str) -> bool {
    name.eq_ignore_ascii_case(AZURE_API_VERSION_HEADER) || azure_kind_entry(name).is_some()
}

/// The names of every Azure `api-version` entry, lowercase: the plain one, then one per kind.
pub fn azure_api_version_entries() -> impl Iterator<Item = String> {
    std::iter::once(AZURE_API_VERSION_HEADER.to_owned()).chain(
        AZURE_API_KINDS
            .iter()
            .map(|kind| format!("{AZURE_API_VERSION_HEADER}-{kind}")),
    )
}

/// The `api-version` an Azure channel without entries gets for `kind` (an index in
/// [`AZURE_API_KINDS`], `None` for an operation of no listed kind) on the deployments surface.
fn azure_default_version(kind: Option<usize>) -> &'static str {
    match kind.map(|k| AZURE_API_KINDS[k]) {
        Some("responses") => AZURE_RESPONSES_API_VERSION,
        Some("realtime") => AZURE_REALTIME_API_VERSION,
        _ => AZURE_DEFAULT_API_VERSION,
    }
}

/// Where an Azure channel's requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AzureTarget {
    /// The base URL ends in `/openai/v1`: OpenAI's paths under it, the model in the body.
    v1: bool,
    /// The `api-version=...` query pair of each kind's requests, indexed like
    /// [`AZURE_API_KINDS`] (none on the v1 surface unless the channel sets one).
    by_kind: [Option<String>; AZURE_API_KINDS.len()],
    /// The pair of an operation of no listed kind.
    other: Option<String>,
}

impl AzureTarget {
    /// The `api-version=...` pair for an OpenAI operation (`chat/completions`, `responses`, ...).
    fn version_pair(&self, operation: &str) -> Option<&str> {
        let kind = operation.split('/').next().unwrap_or(operation);
        match AZURE_API_KINDS.iter().position(|k| *k == kind) {
            Some(i) => self.by_kind[i].as_deref(),
            None => self.other.as_deref(),
        }
    }
}

/// One upstream request's target: the method, the path planned in the channel's protocol
/// (OpenAI's `/v1/...`, Anthropic's, or a Gemini model path), the query string, and the member's
/// upstream model (an Azure deployment's name, which goes in the URL).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub model: &'a str,
}

/// The credential id a mock channel's attempts are recorded under (it needs none).
pub const MOCK_CREDENTIAL: CredentialId = 0;

/// The wire protocol spoken to a channel: its provider's, or the client's own for the
/// in-process mock (which answers natively in every protocol).
pub fn channel_protocol(provider: Provider, client: Protocol) -> Protocol {
    match provider {
        Provider::Openai | Provider::Azure => Protocol::OpenAi,
        Provider::Anthropic | Provider::Bedrock => Protocol::Anthropic,
        Provider::Gemini | Provider::Vertex => Protocol::Gemini,
        Provider::Mock => client,
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

/// Checks an Azure `api-version` value: what Azure names its versions with (`2024-10-21`,
/// `2025-04-01-preview`, `preview`), letters, digits, `-`, `.` and `_`, 1 to 64 of them, so it
/// goes into a query string as is. The message never quotes the value.
pub fn check_api_version(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > 64 {
        return Err("must be 1 to 64 characters".to_owned());
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err("may hold only letters, digits, `-`, `.` and `_`".to_owned());
    }
    Ok(())
}

/// An Azure channel's surface, from its base URL, and its `api-version` entries (checked; a bad
/// one, which the control plane and the YAML loader refuse, is ignored with a warning, as if the
/// channel had none): each kind's version is its own entry's, else the plain entry's, else (on
/// the deployments surface) the kind's default.
fn azure_target(channel: &Channel, base: &str) -> AzureTarget {
    let v1 = base.ends_with("/openai/v1");
    let valid = |value: &str| {
        let valid = check_api_version(value).is_ok();
        if !valid {
            tracing::warn!(channel = %channel.name, "an api-version entry is not a valid Azure api-version; ignored");
        }
        valid
    };
    let mut plain: Option<&str> = None;
    let mut by_kind: [Option<&str>; AZURE_API_KINDS.len()] = [None; AZURE_API_KINDS.len()];
    for (name, value) in &channel.headers {
        let value = value.trim();
        if name.eq_ignore_ascii_case(AZURE_API_VERSION_HEADER) {
            if plain.is_none() && valid(value) {
                plain = Some(value);
            }
        } else if let Some(kind) = azure_kind_entry(name) {
            if by_kind[kind].is_none() && valid(value) {
                by_kind[kind] = Some(value);
            }
        }
    }
    let pair = |set: Option<&str>, kind: Option<usize>| {
        let version = match set.or(plain) {
            Some(value) => Some(value),
            None if v1 => None,
            None => Some(azure_default_version(kind)),
        };
        version.map(|v| format!("{AZURE_API_VERSION_HEADER}={v}"))
    };
    AzureTarget {
        v1,
        by_kind: std::array::from_fn(|i| pair(by_kind[i], Some(i))),
        other: pair(None, None),
    }
}

/// A simulated channel's options, read from its `mock://` base URL (the defaults when they do
/// not parse); `None` for a real upstream.
fn mock_options(channel: &Channel) -> Option<MockOptions> {
    if channel.provider != Provider::Mock {
        return None;
    }
    match MockOptions::from_url(&channel.base_url) {
        Ok(options) => Some(options),
        Err(e) => {
            tracing::warn!(channel = %channel.name, error = %e, "bad mock options; using defaults");
            Some(MockOptions::default())
        }
    }
}

/// A Vertex channel's endpoint, project and location, read from its base URL (used as the
/// endpoint when it is not a Vertex AI endpoint URL).
fn vertex_target(channel: &Channel, base: &str) -> VertexTarget {
    VertexTarget::parse(base).unwrap_or_else(|e| {
        // The control plane and the YAML loader refuse such URLs.
        tracing::warn!(channel = %channel.name, problem = %e, "base_url is not a Vertex AI endpoint URL; used as the endpoint");
        VertexTarget {
            endpoint: base.to_owned(),
            project: None,
            location: crate::vertex::DEFAULT_LOCATION.to_owned(),
        }
    })
}

/// One credential as the channel's requests use it: a Vertex service-account token source, a
/// Bedrock AWS key, or the auth header (`Bearer`, or the bare key for Anthropic, Gemini and
/// Azure). `None`, with a warning naming the credential and never its secret, when its secret
/// cannot be resolved or used.
fn credential_runtime(
    channel: &Channel,
    cred: &Credential,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<CredentialRuntime> {
    let secret = match &cred.secret {
        SecretSource::Inline(s) => Some(s.clone()),
        SecretSource::Env(name) => env(name),
        SecretSource::Workload => return workload_runtime(channel, cred, env),
    };
    let Some(secret) = secret else {
        tracing::warn!(channel = %channel.name, credential_id = cred.id, "credential's environment variable is not set; credential skipped");
        return None;
    };
    if channel.provider == Provider::Vertex {
        return match crate::vertex::token_source(&secret) {
            Ok(source) => Some(CredentialRuntime {
                id: cred.id,
                auth: HeaderValue::from_static(""),
                vertex: Some(source),
                aws: None,
                workload: None,
            }),
            Err(problem) => {
                tracing::warn!(channel = %channel.name, credential_id = cred.id, %problem, "credential is not a usable service-account key; skipped");
                None
            }
        };
    }
    if channel.provider == Provider::Bedrock {
        return match crate::bedrock::parse_aws_keys(&secret) {
            Ok(keys) => Some(CredentialRuntime {
                id: cred.id,
                auth: HeaderValue::from_static(""),
                vertex: None,
                aws: Some(Arc::new(keys)),
                workload: None,
            }),
            Err(problem) => {
                tracing::warn!(channel = %channel.name, credential_id = cred.id, %problem, "credential is not a usable AWS access key; skipped");
                None
            }
        };
    }
    let value = match channel.provider {
        Provider::Anthropic | Provider::Gemini | Provider::Azure => {
            HeaderValue::from_str(secret.trim())
        }
        _ => HeaderValue::from_str(&format!("Bearer {}", secret.trim())),
    };
    match value {
        Ok(mut auth) => {
            auth.set_sensitive(true);
            Some(CredentialRuntime {
                id: cred.id,
                auth,
                vertex: None,
                aws: None,
                workload: None,
            })
        }
        Err(_) => {
            tracing::warn!(channel = %channel.name, credential_id = cred.id, "credential is not a valid header value; skipped");
            None
        }
    }
}

/// An `auth: workload` channel's credential: the identity this process's environment gives its
/// provider. `None`, with a warning saying what is missing (never a value), when there is none:
/// the proxy cannot call the channel, as with an unset environment variable.
fn workload_runtime(
    channel: &Channel,
    cred: &Credential,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<CredentialRuntime> {
    match Workload::resolve(channel.provider, env) {
        Ok(workload) => Some(CredentialRuntime {
            id: cred.id,
            auth: HeaderValue::from_static(""),
            vertex: None,
            aws: None,
            workload: Some(workload),
        }),
        Err(problem) => {
            tracing::warn!(channel = %channel.name, credential_id = cred.id, %problem, "no workload identity for this channel; credential skipped");
            None
        }
    }
}

impl ChannelRuntime {
    /// Compiles a channel. Credentials whose secret cannot be resolved (unset env var) or is not
    /// a valid header value are left out, with a warning naming the credential, never its value.
    pub fn compile(channel: &Channel, env: &dyn Fn(&str) -> Option<String>) -> ChannelRuntime {
        let mock = mock_options(channel);
        let mut base = if mock.is_some() {
            channel.base_url.trim().trim_end_matches('/').to_owned()
        } else {
            base_of(channel)
        };
        let azure = (channel.provider == Provider::Azure).then(|| azure_target(channel, &base));
        if azure.as_ref().is_some_and(|a| !a.v1) {
            // `https://r.openai.azure.com/openai` names the same resource: the paths add
            // `/openai` themselves.
            if let Some(resource) = base.strip_suffix("/openai") {
                base = resource.to_owned();
            }
        }
        let vertex = (channel.provider == Provider::Vertex).then(|| vertex_target(channel, &base));
        let bedrock_region = (channel.provider == Provider::Bedrock)
            .then(|| crate::bedrock::region_of_base_url(&base))
            .flatten();
        let mut credentials: Vec<CredentialRuntime> = channel
            .credentials
            .iter()
            .filter_map(|cred| credential_runtime(channel, cred, env))
            .collect();
        let headers = channel
            .headers
            .iter()
            .filter(|(k, _)| azure.is_none() || !is_azure_api_version_entry(k))
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
                vertex: None,
                aws: None,
                workload: None,
            });
        }
        ChannelRuntime {
            mock,
            base,
            credentials,
            headers,
            provider: channel.provider,
            azure,
            vertex,
            bedrock_region,
        }
    }

    /// The provider whose URL and auth rules this channel follows.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The upstream's host and port, for traces (`server.address`, `server.port`): never the
    /// base URL's userinfo or path. `None` for the simulator and for a base URL without a host.
    pub fn server(&self) -> Option<(String, u16)> {
        if self.mock.is_some() {
            return None;
        }
        let uri: http::Uri = self.base.parse().ok()?;
        let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        })?;
        Some((host.to_owned(), port))
    }

    pub fn credential(&self, id: CredentialId) -> Option<&CredentialRuntime> {
        self.credentials.iter().find(|c| c.id == id)
    }

    /// The upstream URL for `path` (which starts with its API version, `/v1/...` or
    /// `/v1beta/...`): a base URL that already ends in that version segment does not repeat it.
    /// An Azure channel places OpenAI's paths on its surface, `model` being the deployment, and
    /// adds its `api-version` (in place of any the client sent).
    pub fn url(&self, path: &str, query: Option<&str>, model: &str) -> String {
        let Some(azure) = &self.azure else {
            return self.joined(path, query);
        };
        let operation = path
            .strip_prefix("/v1/")
            .unwrap_or(path.trim_start_matches('/'));
        // A realtime session on the deployments surface names its deployment in the query
        // (`/openai/realtime?api-version=...&deployment=...`), in place of OpenAI's `model`.
        let realtime = !azure.v1 && operation == "realtime";
        let kept = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some("api-version"))
            .filter(|pair| !realtime || pair.split('=').next() != Some("model"));
        let version = azure.version_pair(operation);
        let deployment = realtime.then(|| format!("deployment={}", path_segment(model)));
        let query = kept
            .map(str::to_owned)
            .chain(version.map(str::to_owned))
            .chain(deployment)
            .collect::<Vec<_>>()
            .join("&");
        if azure.v1 {
            return self.joined(path, Some(&query));
        }
        let per_resource = ["responses", "models", "realtime"].iter().any(|p| {
            operation
                .strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
        let path = if per_resource {
            format!("/openai/{operation}")
        } else {
            format!("/openai/deployments/{}/{operation}", path_segment(model))
        };
        self.joined(&path, Some(&query))
    }

    /// The base URL joined with `path` and the query, without repeating a version segment the
    /// base ends in.
    fn joined(&self, path: &str, query: Option<&str>) -> String {
        let version_end = path.get(1..).and_then(|p| p.find('/')).map_or(0, |i| i + 1);
        let version = &path[..version_end];
        let path = if !version.is_empty() && self.base.ends_with(version) {
            &path[version_end..]
        } else {
            path
        };
        let query = query.filter(|q| !q.is_empty());
        let mut url =
            String::with_capacity(self.base.len() + path.len() + query.map_or(0, |q| q.len() + 1));
        url.push_str(&self.base);
        url.push_str(path);
        if let Some(q) = query {
            url.push('?');
            url.push_str(q);
        }
        url
    }

    /// The upstream request. Passed through (`client_headers` given): the client's own headers
    /// minus hop-by-hop, auth and gateway headers. Translated (`None`): JSON only. Then
    /// `accept-encoding: identity`, the channel's extra headers, this credential's auth in the
    /// provider's header, and the body.
    /// A Bedrock request is the Converse request for the Anthropic one planned, signed (the
    /// client's headers are not sent to AWS).
    pub fn request(
        &self,
        target: Target<'_>,
        client_headers: Option<&HeaderMap>,
        credential: &CredentialRuntime,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, RequestError> {
        if self.provider == Provider::Bedrock {
            let Some(keys) = &credential.aws else {
                return Err(RequestError::Build("no AWS access key".to_owned()));
            };
            let region = self.region_for(keys);
            return crate::bedrock::request(
                &self.base,
                target.path,
                target.model,
                region,
                keys,
                &self.headers,
                &body,
                std::time::SystemTime::now(),
            );
        }
        let uri = match (&self.vertex, &credential.vertex) {
            (Some(vertex), Some(source)) => {
                vertex.url(target.path, target.query, &source.account().project_id)
            }
            // A workload identity's channel names its project in its base URL.
            (Some(vertex), None) => vertex.url(target.path, target.query, ""),
            _ => self.url(target.path, target.query, target.model),
        };
        let mut builder = Request::builder().method(target.method.clone()).uri(uri);
        if let Some(headers) = builder.headers_mut() {
            // Room for all of them at once (the client's, the channel's, encoding, auth, version
            // and length), not a growth of the map while they are added.
            headers.reserve(client_headers.map_or(1, HeaderMap::len) + self.headers.len() + 4);
            match client_headers {
                Some(client_headers) => copy_forwardable(client_headers, headers),
                None => {
                    headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                }
            }
            // The gateway reads answers (checks, usage, translation): it asks for them
            // unencoded (the client's own `accept-encoding` is not forwarded). A channel's
            // extra headers may still ask otherwise.
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
            for (name, value) in &self.headers {
                headers.insert(name.clone(), value.clone());
            }
            self.authenticate(headers, credential);
            if !body.is_empty() {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
            }
        }
        builder
            .body(Full::new(body))
            .map_err(|e| RequestError::Build(e.to_string()))
    }
}

impl ChannelRuntime {
    /// A pass-through request: `target`'s method, path and query (as the client sent them)
    /// appended to the channel's base URL as they are (a version segment the base URL ends in is
    /// not repeated; no Azure deployment or `api-version`, no Vertex project is added), with the
    /// client's forwardable headers (never its credentials), the channel's extra headers and this
    /// credential's auth. A Bedrock request carries only the client's `content-type` and
    /// `accept` besides the channel's headers, and is signed (SigV4) over exactly that method,
    /// URL, those headers and `body`.
    pub fn passthrough_request(
        &self,
        target: Target<'_>,
        client_headers: &HeaderMap,
        credential: &CredentialRuntime,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, RequestError> {
        if self.mock.is_some() {
            return Err(RequestError::Build(
                "a mock channel has no upstream to pass requests through to".to_owned(),
            ));
        }
        let uri = self.joined(target.path, target.query);
        let mut request = Request::builder()
            .method(target.method.clone())
            .uri(uri)
            .body(Full::new(Bytes::new()))
            .map_err(|e| RequestError::Build(e.to_string()))?;
        let headers = request.headers_mut();
        if self.provider == Provider::Bedrock {
            for name in [header::CONTENT_TYPE, header::ACCEPT] {
                if let Some(value) = client_headers.get(&name) {
                    headers.insert(name, value.clone());
                }
            }
        } else {
            copy_forwardable(client_headers, headers);
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        if !body.is_empty() {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        }
        if self.provider == Provider::Bedrock {
            let Some(keys) = &credential.aws else {
                return Err(RequestError::Build("no AWS access key".to_owned()));
            };
            let region = self.region_for(keys);
            let now = std::time::SystemTime::now();
            crate::bedrock::sign_request(&mut request, region, keys, &body, now)?;
        } else {
            self.authenticate(request.headers_mut(), credential);
        }
        *request.body_mut() = Full::new(body);
        Ok(request)
    }

    /// The region a Bedrock request with `keys` is signed for: the base URL's, else the
    /// credential's, else the default.
    fn region_for<'k>(&'k self, keys: &'k AwsKeys) -> &'k str {
        self.bedrock_region
            .as_deref()
            .or(keys.region.as_deref())
            .unwrap_or(crate::bedrock::DEFAULT_REGION)
    }

    /// This credential's auth, in the provider's own header (and Anthropic's version header,
    /// unless the channel's extra headers set one).
    fn authenticate(&self, headers: &mut HeaderMap, credential: &CredentialRuntime) {
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
            Provider::Openai | Provider::Vertex => {
                headers.insert(header::AUTHORIZATION, credential.auth.clone());
            }
            // A workload identity's Entra ID token is a bearer token, not a key.
            Provider::Azure if credential.workload.is_some() => {
                headers.insert(header::AUTHORIZATION, credential.auth.clone());
            }
            Provider::Azure => {
                headers.insert("api-key", credential.auth.clone());
            }
            Provider::Mock | Provider::Bedrock => {}
        }
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

/// Upstream response headers that are not passed back to the client: hop-by-hop, length (the
/// gateway frames the answer), cookies, the gateway's own, and what names the upstream's software
/// (`server`, `x-powered-by`: the client talks to the gateway, and a provider's stack is nobody's
/// business downstream).
pub fn returnable(name: &HeaderName) -> bool {
    !matches!(
        name.as_str(),
        "server"
            | "x-powered-by"
            | "connection"
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
            responses_api: true,
            preset: None,
            passthrough: vec![],
        }
    }

    fn target<'a>(method: &'a Method, path: &'a str) -> Target<'a> {
        Target {
            method,
            path,
            query: None,
            model: "m",
        }
    }

    #[test]
    fn urls_join_with_or_without_v1() {
        let none = |_: &str| None;
        let a = ChannelRuntime::compile(&channel("https://api.x.com/v1/", Provider::Openai), &none);
        assert_eq!(
            a.url("/v1/chat/completions", None, "m"),
            "https://api.x.com/v1/chat/completions"
        );
        let b = ChannelRuntime::compile(&channel("http://127.0.0.1:9", Provider::Openai), &none);
        assert_eq!(
            b.url("/v1/embeddings", Some("a=1"), "m"),
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
            g.url(&gemini_path("gemini-2.0-flash", "streamGenerateContent"), Some("alt=sse"), "gemini-2.0-flash"),
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
                rt.url("/v1/chat/completions", None, "m"),
                "https://api.x.com/v1/chat/completions",
                "{url}"
            );
        }
    }

    #[test]
    fn every_request_asks_for_an_unencoded_answer_whatever_the_client_accepts() {
        let rt = ChannelRuntime::compile(&channel("http://u", Provider::Openai), &|_| None);
        let mut client = HeaderMap::new();
        client.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, br"),
        );
        for client_headers in [Some(&client), None] {
            let req = rt
                .request(
                    target(&Method::POST, "/v1/chat/completions"),
                    client_headers,
                    &rt.credentials[0],
                    Bytes::from_static(b"{}"),
                )
                .unwrap();
            let accepted: Vec<_> = req
                .headers()
                .get_all(header::ACCEPT_ENCODING)
                .iter()
                .collect();
            assert_eq!(accepted, ["identity"]);
        }
    }

    /// A pass-through request goes to the base URL joined with the client's path and query as
    /// they are, carries the provider's auth from the channel's credential in place of whatever
    /// the client sent, the channel's extra headers, and the client's other headers.
    #[test]
    fn a_pass_through_request_carries_the_channels_auth_in_each_providers_header() {
        let mut client = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer client"),
            ("x-api-key", "client"),
            ("api-key", "client"),
            ("x-goog-api-key", "client"),
            ("cookie", "s=client"),
            ("anthropic-beta", "files-api-2025-04-14"),
        ] {
            client.insert(name, HeaderValue::from_static(value));
        }
        let cases = [
            (
                Provider::Openai,
                "http://u/v1",
                "authorization",
                "Bearer k1",
                "http://u/v1/files?limit=2",
            ),
            (
                Provider::Anthropic,
                "http://u",
                "x-api-key",
                "k1",
                "http://u/v1/files?limit=2",
            ),
            (
                Provider::Azure,
                "http://r.openai.azure.com/openai",
                "api-key",
                "k1",
                "http://r.openai.azure.com/v1/files?limit=2",
            ),
            (
                Provider::Gemini,
                "http://g/v1beta",
                "x-goog-api-key",
                "k1",
                "http://g/v1beta/v1/files?limit=2",
            ),
        ];
        for (provider, base, auth, value, url) in cases {
            let rt = ChannelRuntime::compile(&channel(base, provider), &|_| None);
            let req = rt
                .passthrough_request(
                    Target {
                        query: Some("limit=2"),
                        ..target(&Method::GET, "/v1/files")
                    },
                    &client,
                    &rt.credentials[0],
                    Bytes::new(),
                )
                .unwrap();
            assert_eq!(req.uri().to_string(), url, "{provider:?}");
            let h = req.headers();
            assert_eq!(h[auth], value, "{provider:?}");
            assert!(h[auth].is_sensitive(), "{provider:?}");
            let clients = h
                .iter()
                .filter(|(_, v)| v.to_str().is_ok_and(|v| v.contains("client")));
            assert_eq!(clients.count(), 0, "{provider:?}: {h:?}");
            assert_eq!(h["anthropic-beta"], "files-api-2025-04-14");
            assert_eq!(h["x-extra"], "1");
        }
        let anth = ChannelRuntime::compile(&channel("http://u", Provider::Anthropic), &|_| None);
        let req = anth
            .passthrough_request(
                target(&Method::GET, "/v1/models"),
                &client,
                &anth.credentials[0],
                Bytes::new(),
            )
            .unwrap();
        assert_eq!(req.headers()["anthropic-version"], "2023-06-01");
        let mock = ChannelRuntime::compile(&channel("mock://", Provider::Mock), &|_| None);
        assert!(mock
            .passthrough_request(
                target(&Method::GET, "/v1/models"),
                &client,
                &mock.credentials[0],
                Bytes::new()
            )
            .is_err());
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
                target(&Method::POST, "/v1/chat/completions"),
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
                target(&Method::POST, "/v1/messages"),
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
                target(&Method::POST, &gemini_path("m", "generateContent")),
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

    #[test]
    fn the_server_is_the_base_urls_host_and_port_without_userinfo() {
        let server = |url: &str| {
            ChannelRuntime::compile(&channel(url, Provider::Openai), &|_| None).server()
        };
        assert_eq!(
            server("https://user:secret@api.example.com/v1"),
            Some(("api.example.com".to_owned(), 443))
        );
        assert_eq!(
            server("http://10.0.0.7:8080"),
            Some(("10.0.0.7".to_owned(), 8080))
        );
        assert_eq!(server("http://[::1]:9"), Some(("::1".to_owned(), 9)));
        assert_eq!(server("not a url"), None);
    }

    fn azure(base_url: &str, api_version: Option<&str>) -> ChannelRuntime {
        let mut c = channel(base_url, Provider::Azure);
        if let Some(v) = api_version {
            c.headers.push(("api-version".into(), v.into()));
        }
        ChannelRuntime::compile(&c, &|_| None)
    }

    #[test]
    fn azure_deployment_urls_carry_the_deployment_and_the_api_version() {
        let rt = azure("https://my-resource.openai.azure.com/", None);
        assert_eq!(
            rt.url("/v1/chat/completions", None, "gpt-4o-prod"),
            "https://my-resource.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            rt.url("/v1/embeddings", None, "embed-large"),
            "https://my-resource.openai.azure.com/openai/deployments/embed-large/embeddings?api-version=2024-10-21"
        );
        assert_eq!(
            rt.url("/v1/completions", None, "instruct"),
            "https://my-resource.openai.azure.com/openai/deployments/instruct/completions?api-version=2024-10-21"
        );
        assert_eq!(
            rt.url("/v1/audio/transcriptions", None, "whisper"),
            "https://my-resource.openai.azure.com/openai/deployments/whisper/audio/transcriptions?api-version=2024-10-21"
        );
        // The Responses API is per resource, not per deployment (the model is in the body),
        // and by default at a version that has it.
        assert_eq!(
            rt.url("/v1/responses", None, "gpt-4o-prod"),
            "https://my-resource.openai.azure.com/openai/responses?api-version=2025-04-01-preview"
        );
        assert_eq!(
            rt.url("/v1/responsesx", None, "d"),
            "https://my-resource.openai.azure.com/openai/deployments/d/responsesx?api-version=2024-10-21"
        );
        // A base URL naming `/openai` already is the same resource.
        let rt = azure(
            "https://my-resource.openai.azure.com/openai",
            Some("2025-04-01-preview"),
        );
        assert_eq!(
            rt.url("/v1/chat/completions", Some("api-version=1999-01-01&x=1"), "d"),
            "https://my-resource.openai.azure.com/openai/deployments/d/chat/completions?x=1&api-version=2025-04-01-preview",
            "the channel's version replaces the client's"
        );
        // A deployment name stays one path segment.
        assert_eq!(
            rt.url("/v1/chat/completions", None, "a/../b?c d"),
            "https://my-resource.openai.azure.com/openai/deployments/a%2F..%2Fb%3Fc%20d/chat/completions?api-version=2025-04-01-preview"
        );
        assert_eq!(path_segment("ok-1.2_x~"), "ok-1.2_x~");
        assert_eq!(path_segment("\u{e9}"), "%C3%A9");
    }

    #[test]
    fn azure_v1_urls_follow_openai_paths() {
        let rt = azure("https://my-resource.openai.azure.com/openai/v1/", None);
        assert_eq!(
            rt.url("/v1/chat/completions", None, "gpt-4o-prod"),
            "https://my-resource.openai.azure.com/openai/v1/chat/completions"
        );
        assert_eq!(
            rt.url("/v1/responses", Some("api-version=x"), "d"),
            "https://my-resource.openai.azure.com/openai/v1/responses"
        );
        let rt = azure(
            "https://my-resource.openai.azure.com/openai/v1",
            Some("preview"),
        );
        assert_eq!(
            rt.url("/v1/embeddings", None, "d"),
            "https://my-resource.openai.azure.com/openai/v1/embeddings?api-version=preview"
        );
    }

    #[test]
    fn azure_api_versions_are_set_per_kind_over_the_plain_entry() {
        let with = |base: &str, entries: &[(&str, &str)]| {
            let mut c = channel(base, Provider::Azure);
            for (name, value) in entries {
                c.headers.push(((*name).into(), (*value).into()));
            }
            ChannelRuntime::compile(&c, &|_| None)
        };
        let query = |rt: &ChannelRuntime, path: &str| {
            let url = rt.url(path, None, "d");
            url.split_once('?').map(|(_, q)| q.to_owned())
        };
        let q = |v: &str| Some(format!("api-version={v}"));
        // A kind's own entry beats the plain one, which beats the kind's default.
        let rt = with(
            "https://r.openai.azure.com",
            &[
                ("api-version", "2024-06-01"),
                ("Api-Version-Embeddings", "2023-05-15"),
            ],
        );
        assert_eq!(query(&rt, "/v1/embeddings"), q("2023-05-15"));
        assert_eq!(query(&rt, "/v1/chat/completions"), q("2024-06-01"));
        assert_eq!(query(&rt, "/v1/responses"), q("2024-06-01"));
        let rt = with(
            "https://r.openai.azure.com",
            &[("api-version-responses", "2025-05-01-preview")],
        );
        assert_eq!(query(&rt, "/v1/responses"), q("2025-05-01-preview"));
        assert_eq!(query(&rt, "/v1/chat/completions"), q("2024-10-21"));
        assert_eq!(query(&rt, "/v1/audio/speech"), q("2024-10-21"));
        // Kind entries are versions, never sent as headers; an invalid one is ignored.
        let rt = with(
            "https://r.openai.azure.com",
            &[
                ("api-version-chat", "bad value"),
                ("api-version-audio", "2025-03-01-preview"),
            ],
        );
        assert_eq!(query(&rt, "/v1/chat/completions"), q("2024-10-21"));
        assert_eq!(
            query(&rt, "/v1/audio/transcriptions"),
            q("2025-03-01-preview")
        );
        let req = rt
            .request(
                target(&Method::POST, "/v1/audio/speech"),
                None,
                &rt.credentials[0],
                Bytes::new(),
            )
            .unwrap();
        assert!(req
            .headers()
            .keys()
            .all(|k| !k.as_str().starts_with("api-version")));
        // On the v1 surface a kind's entry applies to that kind only; no default is added.
        let rt = with(
            "https://r.openai.azure.com/openai/v1",
            &[("api-version-responses", "preview")],
        );
        assert_eq!(query(&rt, "/v1/responses"), q("preview"));
        assert_eq!(query(&rt, "/v1/chat/completions"), None);
        // Which names are entries.
        for name in ["api-version", "API-VERSION-responses", "api-version-chat"] {
            assert!(is_azure_api_version_entry(name), "{name}");
        }
        for name in [
            "api-version-",
            "api-version-rerank",
            "api-versions",
            "x-api-version",
        ] {
            assert!(!is_azure_api_version_entry(name), "{name}");
        }
        assert_eq!(
            azure_api_version_entries().count(),
            1 + AZURE_API_KINDS.len()
        );
        assert!(azure_api_version_entries().all(|n| is_azure_api_version_entry(&n)));
    }

    #[test]
    fn azure_realtime_sessions_name_their_deployment_in_the_query() {
        let rt = azure("https://r.openai.azure.com", None);
        assert_eq!(
            rt.url("/v1/realtime", Some("model=gpt-realtime"), "rt prod"),
            "https://r.openai.azure.com/openai/realtime?api-version=2024-10-01-preview&deployment=rt%20prod"
        );
        let rt = azure("https://r.openai.azure.com", Some("2025-04-01-preview"));
        assert_eq!(
            rt.url("/v1/realtime", Some("model=x"), "d"),
            "https://r.openai.azure.com/openai/realtime?api-version=2025-04-01-preview&deployment=d"
        );
        // The v1 surface takes OpenAI's own path and `model`.
        let rt = azure("https://r.openai.azure.com/openai/v1", None);
        assert_eq!(
            rt.url("/v1/realtime", Some("model=gpt-realtime"), "d"),
            "https://r.openai.azure.com/openai/v1/realtime?model=gpt-realtime"
        );
    }

    #[test]
    fn an_invalid_api_version_is_ignored() {
        let rt = azure("https://r.openai.azure.com", Some("2024-10-21&evil=1"));
        assert_eq!(
            rt.url("/v1/chat/completions", None, "d"),
            "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
        );
        let rt = azure("https://r.openai.azure.com/openai/v1", Some(""));
        assert_eq!(
            rt.url("/v1/chat/completions", None, "d"),
            "https://r.openai.azure.com/openai/v1/chat/completions"
        );
    }

    #[test]
    fn api_versions_are_checked_without_quoting_them() {
        for good in ["2024-10-21", "2025-04-01-preview", "preview", "v1.0_x"] {
            assert!(check_api_version(good).is_ok(), "{good}");
        }
        for bad in ["", "2024-10-21&secret=1", "a b", "ü", &"9".repeat(65)] {
            let message = check_api_version(bad).unwrap_err();
            assert!(!message.contains("secret"), "{message}");
        }
        assert!(check_api_version(&"9".repeat(64)).is_ok());
    }

    #[test]
    fn vertex_sends_the_access_token_to_the_credentials_project() {
        let key_file = crate::vertex::test_key_file(|f| {
            f.insert("project_id".into(), "key-project".into());
            f.insert(
                "client_email".into(),
                "sa@key-project.iam.gserviceaccount.com".into(),
            );
        });
        let mut c = channel(
            "https://europe-west4-aiplatform.googleapis.com/",
            Provider::Vertex,
        );
        c.credentials[0].secret = SecretSource::Inline(key_file);
        let rt = ChannelRuntime::compile(&c, &|_| None);
        // The unset env credential is skipped; the key file is a token source.
        assert_eq!(rt.credentials.len(), 1);
        let credential = &rt.credentials[0];
        assert_eq!(
            credential.service_account(),
            Some("sa@key-project.iam.gserviceaccount.com")
        );
        let mut bearer = HeaderValue::from_static("Bearer ya29.t");
        bearer.set_sensitive(true);
        let authorized = CredentialRuntime {
            auth: bearer,
            ..credential.clone()
        };
        let mut client = HeaderMap::new();
        client.insert("x-goog-api-key", HeaderValue::from_static("AIza-client"));
        client.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer sk-client"),
        );
        let path = gemini_path("gemini-2.5-flash", "streamGenerateContent");
        let req = rt
            .request(
                Target {
                    method: &Method::POST,
                    path: &path,
                    query: Some("alt=sse"),
                    model: "gemini-2.5-flash",
                },
                Some(&client),
                &authorized,
                Bytes::from_static(b"{}"),
            )
            .unwrap();
        assert_eq!(
            req.uri().to_string(),
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/key-project/locations/europe-west4/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        let h = req.headers();
        assert_eq!(h[header::AUTHORIZATION], "Bearer ya29.t");
        assert!(h[header::AUTHORIZATION].is_sensitive());
        assert!(!h.contains_key("x-goog-api-key"));
        assert_eq!(
            channel_protocol(Provider::Vertex, Protocol::OpenAi),
            Protocol::Gemini
        );
        // A file that is not a key: skipped.
        c.credentials[0].secret = SecretSource::Inline("AIza-not-a-key-file".into());
        assert!(ChannelRuntime::compile(&c, &|_| None)
            .credentials
            .is_empty());
    }

    #[test]
    fn bedrock_signs_the_converse_request_in_the_endpoints_region() {
        let key = serde_json::json!({
            "access_key_id": "AKIAIOSFODNN7EXAMPLE",
            "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "region": "us-east-1",
        })
        .to_string();
        let mut c = channel(
            "https://bedrock-runtime.eu-west-3.amazonaws.com/",
            Provider::Bedrock,
        );
        c.credentials[0].secret = SecretSource::Inline(key);
        let rt = ChannelRuntime::compile(&c, &|_| None);
        // The unset env credential is skipped; the key is parsed.
        assert_eq!(rt.credentials.len(), 1);
        let mut client = HeaderMap::new();
        client.insert("x-api-key", HeaderValue::from_static("sk-ant-client"));
        client.insert("anthropic-beta", HeaderValue::from_static("tools-2024"));
        let body =
            br#"{"model":"claude","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
        let req = rt
            .request(
                target(&Method::POST, "/v1/messages"),
                Some(&client),
                &rt.credentials[0],
                Bytes::from_static(body),
            )
            .unwrap();
        assert_eq!(
            req.uri().to_string(),
            "https://bedrock-runtime.eu-west-3.amazonaws.com/model/m/converse"
        );
        let h = req.headers();
        let auth = h[header::AUTHORIZATION].to_str().unwrap();
        // The endpoint's region wins over the credential's.
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/")
                && auth.contains("/eu-west-3/bedrock/aws4_request"),
            "{auth}"
        );
        assert!(h[header::AUTHORIZATION].is_sensitive());
        assert_eq!(
            h["x-extra"], "1",
            "the channel's headers are sent (and signed)"
        );
        assert!(auth.contains("x-extra"), "{auth}");
        assert!(!h.contains_key("x-api-key") && !h.contains_key("anthropic-beta"));
        assert_eq!(
            channel_protocol(Provider::Bedrock, Protocol::OpenAi),
            Protocol::Anthropic
        );
        // A secret that is not an access key: skipped.
        c.credentials[0].secret = SecretSource::Inline("AKIA:secret".into());
        assert!(ChannelRuntime::compile(&c, &|_| None)
            .credentials
            .is_empty());
    }

    #[test]
    fn azure_sends_the_key_in_api_key_and_the_version_in_the_query() {
        let rt = azure("https://r.openai.azure.com", Some("2025-01-01-preview"));
        let mut client = HeaderMap::new();
        client.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer client"),
        );
        client.insert("api-key", HeaderValue::from_static("client-azure-key"));
        let req = rt
            .request(
                Target {
                    method: &Method::POST,
                    path: "/v1/chat/completions",
                    query: None,
                    model: "gpt-4o-prod",
                },
                Some(&client),
                &rt.credentials[0],
                Bytes::from_static(b"{}"),
            )
            .unwrap();
        assert_eq!(
            req.uri().to_string(),
            "https://r.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions?api-version=2025-01-01-preview"
        );
        let h = req.headers();
        assert_eq!(h["api-key"], "k1", "the channel's key, not the client's");
        assert!(h["api-key"].is_sensitive());
        assert!(!h.contains_key(header::AUTHORIZATION));
        assert!(
            !h.contains_key("api-version"),
            "a query parameter, not a header"
        );
        assert_eq!(h["x-extra"], "1");
        assert_eq!(
            channel_protocol(Provider::Azure, Protocol::Gemini),
            Protocol::OpenAi
        );
        // Another provider's `api-version` entry is just a header.
        let mut c = channel("http://u", Provider::Openai);
        c.headers.push(("api-version".into(), "2".into()));
        let rt = ChannelRuntime::compile(&c, &|_| None);
        let req = rt
            .request(
                target(&Method::POST, "/v1/chat/completions"),
                None,
                &rt.credentials[0],
                Bytes::new(),
            )
            .unwrap();
        assert_eq!(req.headers()["api-version"], "2");
        assert_eq!(req.uri().to_string(), "http://u/v1/chat/completions");
    }

    #[test]
    fn credentials_are_found_by_id() {
        let rt = ChannelRuntime::compile(&channel("http://u", Provider::Openai), &|_| None);
        // Credential 2's variable is unset: only 1 is compiled.
        assert_eq!(rt.credential(1).map(|c| c.id), Some(1));
        assert!(rt.credential(2).is_none());
        assert!(rt.credential(7).is_none());
        let both = ChannelRuntime::compile(&channel("http://u", Provider::Openai), &|_| {
            Some("k2".to_owned())
        });
        assert_eq!(both.credential(2).map(|c| c.id), Some(2));
        assert_eq!(both.credential(1).map(|c| c.id), Some(1));
    }

    #[test]
    fn a_plain_http_upstream_without_a_port_is_port_80() {
        let rt =
            ChannelRuntime::compile(&channel("http://api.local/v1", Provider::Openai), &|_| None);
        assert_eq!(rt.server(), Some(("api.local".to_owned(), 80)));
        let rt = ChannelRuntime::compile(&channel("mock://sim", Provider::Mock), &|_| None);
        assert_eq!(rt.server(), None, "the simulator has no server");
    }

    #[test]
    fn a_body_carries_its_length_and_an_empty_one_none() {
        let rt = ChannelRuntime::compile(&channel("http://u", Provider::Openai), &|_| None);
        let send = |body: &'static [u8]| {
            rt.request(
                target(&Method::POST, "/v1/chat/completions"),
                None,
                &rt.credentials[0],
                Bytes::from_static(body),
            )
            .unwrap()
        };
        assert_eq!(send(b"{\"a\":1}").headers()[header::CONTENT_LENGTH], "7");
        assert!(!send(b"").headers().contains_key(header::CONTENT_LENGTH));
    }

    #[test]
    fn azure_deployments_base_with_openai_names_the_same_resource() {
        // A deployments-surface base URL that ends in `/openai`: the paths add it themselves.
        let rt = azure("https://r.openai.azure.com/openai", None);
        assert_eq!(
            rt.url("/v1/chat/completions", None, "d"),
            "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21"
        );
    }

    #[test]
    fn hop_by_hop_gateway_and_upstream_software_headers_never_come_back() {
        for name in [
            "connection",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "te",
            "trailer",
            "upgrade",
            "content-length",
            "set-cookie",
            "x-switchyard-channel",
            "server",
            "x-powered-by",
        ] {
            assert!(!returnable(&HeaderName::from_static(name)), "{name}");
        }
        for name in [
            "content-type",
            "x-request-id",
            "openai-processing-ms",
            "retry-after",
        ] {
            assert!(returnable(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[tokio::test]
    async fn a_forgotten_vertex_token_is_exchanged_again() {
        let endpoint = crate::vertex::TestTokenEndpoint::tokens().await;
        let key_file = crate::vertex::test_key_file(|f| {
            f.insert("token_uri".into(), endpoint.url.clone().into());
        });
        let mut c = channel(
            "https://us-central1-aiplatform.googleapis.com",
            Provider::Vertex,
        );
        c.credentials[0].secret = SecretSource::Inline(key_file);
        let rt = ChannelRuntime::compile(&c, &|_| None);
        let credential = &rt.credentials[0];
        let client = crate::client::build_client(Duration::from_secs(5));
        let budget = Duration::from_secs(10);
        let auth = |c: &CredentialRuntime| c.auth.to_str().unwrap().to_owned();
        let first = credential.authorized(&client, budget).await.unwrap();
        assert_eq!(auth(&first), "Bearer tok-1");
        let cached = credential.authorized(&client, budget).await.unwrap();
        assert_eq!(auth(&cached), "Bearer tok-1", "the fresh token is reused");
        assert_eq!(endpoint.served(), 1);
        credential.forget_token();
        let again = credential.authorized(&client, budget).await.unwrap();
        assert_eq!(
            auth(&again),
            "Bearer tok-2",
            "a forgotten token is exchanged again"
        );
        // Other providers have no token to forget.
        let plain = ChannelRuntime::compile(&channel("http://u", Provider::Openai), &|_| None);
        plain.credentials[0].forget_token();
        assert_eq!(auth(&plain.credentials[0]), "Bearer k1");
    }
}
