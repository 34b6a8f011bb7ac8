//! The upstream side. The connection pool, the per-channel runtime (URL, auth header and extra
//! headers compiled once per snapshot) and the header rules live in the shared
//! `switchyard-upstream` crate, which the control plane's recovery probes use too; this module
//! re-exports them and adds the upstream as one trait, [`Upstream`]: an attempt's call goes to
//! the network ([`Http`]; a Bedrock channel through its adapter, [`Bedrock`]),
//! to the in-process simulator of a mock channel ([`Simulator`]), or is answered
//! by the gateway itself ([`Local`]). [`Upstreams`] chooses one per send.

mod bedrock;
mod exchange;
mod http;
mod local;
mod mock;

pub use switchyard_upstream::{
    channel_protocol, returnable, ChannelRuntime, ClientOptions, CredentialRuntime, HttpClient,
    TransportCause, MOCK_CREDENTIAL,
};

pub use self::exchange::{json_headers, Attempt, SendError, Upstream, UpstreamResponse};
pub use self::http::{propagate_trace, Http};
pub use self::local::Local;

use switchyard_engine::{Provider, RandomSource};

use self::bedrock::Bedrock;
use self::mock::Simulator;

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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ::http::{HeaderMap, Method};
    use bytes::Bytes;
    use switchyard_provider::Protocol;
    use tokio::time::Instant;

    use super::*;
    use crate::endpoint::Endpoint;
    use crate::request::Inspected;
    use crate::wire::Call;

    /// A send goes to the gateway's own answer when its call has one, else to a mock channel's
    /// simulation, a Bedrock channel's adapter, or the network for every other channel.
    #[test]
    fn each_send_goes_to_the_upstream_of_its_call_and_channel() {
        let runtime =
            |provider| ChannelRuntime::compile(&crate::testing::channel(provider, true), &|_| None);
        let mock = runtime(Provider::Mock);
        let credential = mock.credential(MOCK_CREDENTIAL).unwrap();
        let client = HttpClient::new(ClientOptions::new(Duration::from_secs(1)));
        let (inspected, headers) = (Inspected::default(), HeaderMap::new());
        let channel = crate::testing::channel(Provider::Openai, true);
        let call = |local: Option<&str>| Call {
            method: Method::POST,
            path: "/v1/chat/completions".into(),
            query: None,
            body: Bytes::new(),
            upstream: Protocol::OpenAi,
            client: Protocol::OpenAi,
            passthrough: true,
            include_usage: false,
            strip_usage_chunk: false,
            local: local.map(|body| Bytes::copy_from_slice(body.as_bytes())),
        };
        let upstream = |call: &Call, runtime: &ChannelRuntime| {
            let attempt = Attempt {
                client: &client,
                endpoint: Endpoint::ChatCompletions,
                inspected: &inspected,
                upstream_model: "m",
                call,
                client_headers: &headers,
                channel: &channel,
                runtime,
                credential,
                first_byte_timeout: Duration::from_secs(1),
                idle_timeout: Duration::from_secs(1),
                deadline: Instant::now() + Duration::from_secs(1),
            };
            match Upstreams::of(&attempt) {
                Upstreams::Local(Local(body)) => format!("local {}", String::from_utf8_lossy(body)),
                Upstreams::Simulated(_) => "simulated".to_owned(),
                Upstreams::Bedrock(_) => "bedrock".to_owned(),
                Upstreams::Http(_) => "http".to_owned(),
            }
        };
        let (sent, answered) = (call(None), call(Some("{}")));
        assert_eq!(upstream(&answered, &runtime(Provider::Openai)), "local {}");
        assert_eq!(upstream(&sent, &mock), "simulated");
        assert_eq!(upstream(&sent, &runtime(Provider::Bedrock)), "bedrock");
        for provider in [
            Provider::Openai,
            Provider::Azure,
            Provider::Anthropic,
            Provider::Gemini,
            Provider::Vertex,
        ] {
            assert_eq!(upstream(&sent, &runtime(provider)), "http", "{provider:?}");
        }
    }
}
