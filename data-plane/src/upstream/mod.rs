//! The upstream side. The connection pool, the per-channel runtime (URL, auth header and extra
//! headers compiled once per snapshot) and the header rules live in the shared
//! `switchyard-upstream` crate, which the control plane's recovery probes use too; this module
//! re-exports them and adds the upstream as one trait, [`Upstream`]: an attempt's call goes to
//! the network ([`Http`]; a Bedrock channel through its adapter, [`crate::bedrock::Bedrock`]),
//! to the in-process simulator of a mock channel ([`crate::mock::Simulator`]), or is answered
//! by the gateway itself ([`Local`]). [`Upstreams`] chooses one per send.

mod exchange;
mod http;
mod local;

pub use switchyard_upstream::{
    channel_protocol, gemini_path, returnable, ChannelRuntime, ClientOptions, CredentialRuntime,
    HttpClient, TransportCause, MOCK_CREDENTIAL,
};

pub use self::exchange::{json_headers, Attempt, SendError, Upstream, UpstreamResponse};
pub use self::http::{Http, Unsent};
pub use self::local::Local;

use switchyard_engine::{Provider, RandomSource};

use crate::bedrock::Bedrock;
use crate::mock::Simulator;

/// The upstream one send goes to, chosen from its call and its channel.
pub enum Upstreams<'a> {
    /// The gateway's own answer (a local count-tokens estimate): no upstream call.
    Local(Local<'a>),
    /// A mock channel's in-process simulation.
    Simulated(Simulator<'a>),
    /// A Bedrock channel: HTTP, its answers converted to the shape the channel is planned in.
    Bedrock(Bedrock),
    Http(Http),
}

impl<'a> Upstreams<'a> {
    /// Where `attempt`'s call goes: a local answer needs no upstream, a mock channel's
    /// simulation no network.
    pub fn of(attempt: &Attempt<'a>) -> Upstreams<'a> {
        if let Some(local) = &attempt.call.local {
            return Upstreams::Local(Local(local));
        }
        if let Some(options) = &attempt.runtime.mock {
            return Upstreams::Simulated(Simulator(options));
        }
        if attempt.runtime.provider() == Provider::Bedrock {
            return Upstreams::Bedrock(Bedrock);
        }
        Upstreams::Http(Http)
    }
}

impl Upstream for Upstreams<'_> {
    async fn send(
        &self,
        attempt: &Attempt<'_>,
        rng: &mut (impl RandomSource + Send),
    ) -> Result<UpstreamResponse, SendError> {
        match self {
            Upstreams::Local(local) => local.send(attempt, rng).await,
            Upstreams::Simulated(simulator) => simulator.send(attempt, rng).await,
            Upstreams::Bedrock(bedrock) => bedrock.send(attempt, rng).await,
            Upstreams::Http(http) => http.send(attempt, rng).await,
        }
    }
}
