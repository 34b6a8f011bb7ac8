//! What every upstream is given for one send ([`Attempt`]), what it gives back
//! ([`UpstreamResponse`], or a [`SendError`]), and the trait every upstream implements.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use switchyard_engine::{Channel, RandomSource};
use switchyard_upstream::{ChannelRuntime, CredentialRuntime, HttpClient, TransportCause};
use tokio::time::Instant;

use crate::endpoint::Endpoint;
use crate::request::Inspected;
use crate::wire::Call;

/// One send of a request to one member with one credential: the request as the client sent it,
/// the call planned for the member, and the time it has. Its own type, borrowed for one send:
/// the live proxy and the shadow sender (which has no request context) both make one.
pub struct Attempt<'a> {
    pub client: &'a HttpClient,
    pub endpoint: Endpoint,
    /// The client's request as inspected (its model is the one translated answers echo).
    pub inspected: &'a Inspected,
    pub upstream_model: &'a str,
    pub call: &'a Call,
    pub client_headers: &'a HeaderMap,
    pub channel: &'a Channel,
    pub runtime: &'a ChannelRuntime,
    pub credential: &'a CredentialRuntime,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub deadline: Instant,
}

impl Attempt<'_> {
    /// What is left of the request's budget.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// How long the answer's head (a stream: its first chunk) may take from now.
    pub fn first_byte_limit(&self) -> Duration {
        self.first_byte_timeout.min(self.left())
    }

    /// How long a body being read may stall from now.
    pub fn idle_limit(&self) -> Duration {
        self.idle_timeout.min(self.left())
    }
}

/// What one attempt got back, from the network or from the simulation.
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

/// Why a send got no answer head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// Nothing within the first-byte limit.
    Timeout,
    /// No connection, for this cause.
    Connect(TransportCause),
    /// The connection failed once it was up, for this cause.
    Transport(TransportCause),
    /// The connection closed before a stream's answer started, for this cause.
    StreamCut(TransportCause),
    /// The upstream request could not be built.
    BadRequest,
}

/// An upstream: sends an attempt's call and gives back the answer's head. The attempt reads and
/// classifies what comes back, whichever upstream answered. Called through
/// [`super::Upstreams`], an enum over the implementations (static dispatch: no boxed future and
/// no virtual call on the request path).
pub trait Upstream {
    fn send(
        &self,
        attempt: &Attempt<'_>,
        rng: &mut (impl RandomSource + Send),
    ) -> impl Future<Output = Result<UpstreamResponse, SendError>> + Send;
}

/// `Content-Type: application/json`.
pub fn json_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers
}
