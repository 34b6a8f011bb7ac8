//! The upstream side. The connection pool, the per-channel runtime (URL, auth header and extra
//! headers compiled once per snapshot) and the header rules live in the shared
//! `switchyard-upstream` crate, which the control plane's recovery probes use too; this module
//! re-exports them and adds what one attempt gets back.

use axum::body::Body;
use http::{HeaderMap, StatusCode};

pub use switchyard_upstream::{
    channel_protocol, gemini_path, returnable, ChannelRuntime, ClientOptions, CredentialRuntime,
    HttpClient, Target, TokenError, TransportCause, MOCK_CREDENTIAL,
};

/// What one attempt got back, from the network or from the simulation.
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}
