//! Everything that talks to an LLM upstream, shared by both planes, so that the
//! proxies' traffic and the control plane's recovery probes are built by the same rules:
//!
//! - [`client`]: the upstream connection pool (HTTP/1.1, and HTTP/2 when a TLS upstream offers
//!   it; rustls with ring, the public web roots plus the operator's) and the percent-encoding of
//!   a name put in a URL path;
//! - [`channel`]: per-channel runtime facts compiled once per snapshot ([`ChannelRuntime`]:
//!   URL joining, Azure's deployment URLs and `api-version`, each provider's auth header, extra
//!   headers) and the header rules (what a client may send upstream, what comes back);
//! - [`vertex`]: Google Vertex AI's URLs (project, location) and its access tokens (a
//!   service-account key's signed assertion exchanged at its token endpoint, cached and
//!   refreshed, one exchange at a time);
//! - [`token`]: short-lived credentials cached per identity and refreshed before they expire,
//!   one fetch at a time (Vertex's access tokens and workload identities share it);
//! - [`workload`]: an `auth: workload` channel's credentials from the proxy's own cloud identity
//!   (AWS web identity or EKS Pod Identity, Google's metadata server or application default
//!   credentials, Entra ID with a federated token or client secret);
//! - [`bedrock`]: AWS Bedrock's Converse URLs, its access-key credentials and their SigV4
//!   signatures (the Anthropic-shaped body converted by `switchyard_provider::bedrock`);
//! - [`realtime`]: the WebSocket handshake of a Realtime API session with a channel (its URL and
//!   auth by the channel's rules, on a connection of its own);
//! - [`probe`]: the recovery probe of one credential, a minimal generation request in the
//!   channel's own protocol;
//! - [`schedule`]: when each channel is probed (jittered first probe, doubling backoff capped at
//!   8× the interval), the same for both planes;
//! - [`mock`]: a `provider: mock` channel's options (the answers it gives are built by the
//!   `switchyard-sim` crate).
//!
//! Protocol translation is not here: it is the pure `switchyard-provider` crate.

pub mod bedrock;
mod cause;
pub mod channel;
pub mod checks;
pub mod client;
pub mod embed;
mod h1;
mod http2;
pub mod mock;
pub mod probe;
pub mod realtime;
pub mod schedule;
pub mod token;
pub mod vertex;
pub mod workload;

pub use bedrock::{check_aws_credential, check_bedrock_base_url};
pub use cause::TransportCause;
pub use channel::{
    azure_api_version_entries, channel_protocol, check_api_version, forwardable, gemini_path,
    is_azure_api_version_entry, returnable, ChannelRuntime, CredentialRuntime, Target,
    AZURE_API_KINDS, AZURE_API_VERSION_HEADER, AZURE_DEFAULT_API_VERSION,
    AZURE_REALTIME_API_VERSION, AZURE_RESPONSES_API_VERSION, MOCK_CREDENTIAL,
};
pub use checks::check_base_url;
pub use client::{
    build_client, read_roots, ClientError, ClientOptions, HttpClient, UpgradableIo, UpstreamBody,
    MAX_STREAMS_PER_CONNECTION,
};
#[doc(hidden)]
pub use h1::fuzz_chunked;
pub use mock::MockOptions;
pub use probe::{
    probe_body, probe_credential, probe_model, probe_request, ProbeFailure, ProbeResult,
    PROBE_PROMPT,
};
pub use schedule::{
    backoff_ms, first_probe_at, Due, ProbeSchedule, ProbeSchedules, MAX_BACKOFF_FACTOR,
};
pub use token::TokenError;
pub use vertex::{check_service_account, check_vertex_base_url};
