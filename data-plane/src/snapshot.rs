//! The proxy's view of the current snapshot: the engine's [`Snapshot`] plus what the hot path
//! needs precompiled (token hash index, per-channel URLs and auth headers). Rebuilt once per
//! snapshot revision, swapped atomically; requests in flight keep the view they started with.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use switchyard_engine::passthrough::team_reaches_channel;
use switchyard_engine::{
    Channel, ChannelId, Provider, RouteId, Snapshot, TeamId, Token, AZURE_BIT,
    CHAT_COMPLETIONS_ONLY_BIT,
};
use switchyard_provider::Protocol;
use switchyard_state::{unix_ms, StateStore};
use tokio::sync::watch;

use crate::endpoint::Endpoint;
use crate::upstream::{channel_protocol, ChannelRuntime};

/// Where snapshots come from: the YAML watcher in standalone mode, the control plane's gRPC
/// stream otherwise. `None` until the first snapshot arrives.
pub type SnapshotSender = watch::Sender<Option<Arc<Snapshot>>>;
pub type SnapshotReceiver = watch::Receiver<Option<Arc<Snapshot>>>;

pub struct View {
    pub snapshot: Arc<Snapshot>,
    /// When this proxy installed the snapshot (Unix ms).
    pub installed_at_ms: u64,
    /// Enabled tokens by the SHA-256 digest of their plaintext (their stored hash, decoded).
    tokens: HashMap<[u8; 32], usize>,
    channels: HashMap<ChannelId, ChannelRuntime>,
    /// Per route, the protocols its members' channels speak (bit `i` = `Protocol::ALL[i]`;
    /// simulated channels speak whatever the client does and set no bit).
    route_protocols: HashMap<RouteId, u8>,
    /// Names of the channels the control plane sent without their secrets (it has no fleet
    /// token): this proxy never selects them.
    pub secrets_withheld: Vec<String>,
    /// The channels that allow pass-through, by name.
    passthrough: HashMap<String, ChannelId>,
    /// Per team, the pass-through channels its keys may reach (see
    /// [`team_reaches_channel`]).
    team_passthrough: HashMap<TeamId, Vec<ChannelId>>,
}

impl View {
    pub fn compile(snapshot: Arc<Snapshot>) -> View {
        let env = |name: &str| std::env::var(name).ok();
        let tokens = snapshot
            .tokens()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.enabled)
            .filter_map(|(i, t)| Some((switchyard_proto::digest_from_hex(&t.hash)?, i)))
            .collect();
        let channels = snapshot
            .channels()
            .map(|c| (c.id, ChannelRuntime::compile(c, &env)))
            .collect();
        let route_protocols = snapshot
            .routes()
            .iter()
            .map(|route| {
                let mask = route
                    .members
                    .iter()
                    .filter_map(|m| snapshot.channel(m.channel_id))
                    .filter(|c| c.provider != Provider::Mock)
                    .fold(0u8, |mask, c| {
                        let bit = protocol_bit(channel_protocol(c.provider, Protocol::OpenAi));
                        // No Responses API: a Responses request needs translating for it.
                        let chat_only = if c.chat_completions_only() {
                            CHAT_COMPLETIONS_ONLY_BIT
                        } else {
                            0
                        };
                        // Azure: an endpoint it does not serve is refused for it.
                        let azure = if c.provider == Provider::Azure {
                            AZURE_BIT
                        } else {
                            0
                        };
                        mask | bit | chat_only | azure
                    });
                (route.id, mask)
            })
            .collect();
        let secrets_withheld = snapshot
            .channels()
            .filter(|c| c.secrets_withheld)
            .map(|c| c.name.clone())
            .collect();
        let (passthrough, team_passthrough) = passthrough_index(&snapshot);
        View {
            secrets_withheld,
            passthrough,
            team_passthrough,
            snapshot,
            installed_at_ms: unix_ms(),
            tokens,
            channels,
            route_protocols,
        }
    }

    /// Whether any member of the route speaks another protocol than the endpoint's, i.e.
    /// whether a request to `endpoint` on it may need translating: a Responses request also
    /// needs it for an OpenAI-compatible member without the Responses API, and a request of an
    /// endpoint Azure does not serve for an Azure member (which then cannot take it).
    pub fn route_needs_translation(&self, route: RouteId, endpoint: Endpoint) -> bool {
        let mut others = !protocol_bit(endpoint.protocol());
        if endpoint != Endpoint::Responses {
            others &= !CHAT_COMPLETIONS_ONLY_BIT;
        }
        if !endpoint.azure_lacks() {
            others &= !AZURE_BIT;
        }
        self.route_protocols
            .get(&route)
            .is_some_and(|mask| mask & others != 0)
    }

    /// The enabled token with this SHA-256 hex hash.
    /// The enabled token whose plaintext `presented` is (hashed once, looked up by digest).
    pub fn token(&self, presented: &str) -> Option<&Token> {
        self.tokens
            .get(&switchyard_proto::token_digest(presented))
            .and_then(|i| self.snapshot.tokens().get(*i))
    }

    pub fn channel_runtime(&self, id: ChannelId) -> Option<&ChannelRuntime> {
        self.channels.get(&id)
    }

    /// The channel named `name` when it allows pass-through and a key of `team` (none: a key
    /// without a team) may reach it; `None` otherwise, whichever the reason.
    pub fn passthrough_channel(&self, name: &str, team: Option<TeamId>) -> Option<&Channel> {
        let id = *self.passthrough.get(name)?;
        if let Some(team) = team {
            if !self.team_passthrough.get(&team)?.contains(&id) {
                return None;
            }
        }
        self.snapshot.channel(id)
    }
}

/// The channels allowing pass-through by name, and per team the ones among them its keys may
/// reach: computed once per snapshot, so a pass-through request makes two hash probes.
fn passthrough_index(
    snapshot: &Snapshot,
) -> (HashMap<String, ChannelId>, HashMap<TeamId, Vec<ChannelId>>) {
    let open: HashMap<String, ChannelId> = snapshot
        .channels()
        .filter(|c| !c.passthrough.is_empty())
        .map(|c| (c.name.clone(), c.id))
        .collect();
    let teams = snapshot
        .teams()
        .map(|team| {
            let reached = open
                .values()
                .copied()
                .filter(|id| team_reaches_channel(snapshot.routes(), team, *id))
                .collect();
            (team.id, reached)
        })
        .collect();
    (open, teams)
}

/// Makes `snapshot` the one requests select over: the state view's health records are laid out
/// for its slots first (so its first selection already reads them by index; selections still
/// running over the previous snapshot fall back to hash lookups), then the view is swapped.
pub fn install(views: &ArcSwapOption<View>, store: &dyn StateStore, snapshot: Arc<Snapshot>) {
    store.align_health(snapshot.health_slots());
    let view = View::compile(snapshot);
    if !view.secrets_withheld.is_empty() {
        tracing::warn!(
            revision = view.snapshot.revision,
            channels = ?view.secrets_withheld,
            "the control plane sent these channels without their secrets (credentials, header values, URL passwords) because it has no fleet token; this proxy cannot call them and excludes them as `secrets_withheld`. Set SWITCHYARD_FLEET_TOKEN on the control plane and the proxies"
        );
    }
    views.store(Some(Arc::new(view)));
}

fn protocol_bit(protocol: Protocol) -> u8 {
    1 << crate::wire::protocol_index(protocol)
}

/// Keeps `views` in step with the snapshot source until the source closes.
pub async fn follow(
    mut rx: SnapshotReceiver,
    views: Arc<ArcSwapOption<View>>,
    store: Arc<dyn StateStore>,
) {
    loop {
        let current = rx.borrow_and_update().clone();
        if let Some(snapshot) = current {
            let revision = snapshot.revision;
            install(&views, &*store, snapshot);
            tracing::info!(revision, "snapshot applied");
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    #[test]
    fn a_route_needs_translation_only_when_a_member_speaks_another_protocol() {
        let yaml = r#"
channels:
  - { name: oa, provider: openai, base_url: "http://127.0.0.1:1/v1", credentials: ["k"] }
  - { name: an, provider: anthropic, base_url: "http://127.0.0.1:1", credentials: ["k"] }
  - { name: az, provider: azure, base_url: "http://127.0.0.1:1", credentials: ["k"] }
  - { name: sim, provider: mock }
  - { name: chat, provider: openai, base_url: "http://127.0.0.1:1/v1", credentials: ["k"], responses_api: false }
routes:
  - model_pattern: openai-only
    members: [{ channel: oa }, { channel: az }, { channel: sim }]
  - model_pattern: mixed
    members: [{ channel: oa }, { channel: an }]
  - model_pattern: simulated
    members: [{ channel: sim }]
  - model_pattern: chat-only
    members: [{ channel: oa }, { channel: chat }]
"#;
        let view = View::compile(Arc::new(Snapshot::new(
            crate::config::parse_yaml(yaml, 1).unwrap(),
        )));
        let id = |pattern: &str| view.snapshot.resolve_route(pattern).unwrap().id;
        // Same protocol (Azure speaks OpenAI's, a simulated channel the client's): pass through,
        // never parse.
        let (chat, responses, messages, gemini) = (
            Endpoint::ChatCompletions,
            Endpoint::Responses,
            Endpoint::Messages,
            Endpoint::GeminiGenerate,
        );
        assert!(!view.route_needs_translation(id("openai-only"), chat));
        assert!(!view.route_needs_translation(id("openai-only"), responses));
        assert!(!view.route_needs_translation(id("simulated"), gemini));
        // Any other protocol among the members: translation may be needed.
        assert!(view.route_needs_translation(id("openai-only"), messages));
        assert!(view.route_needs_translation(id("mixed"), chat));
        assert!(view.route_needs_translation(id("mixed"), messages));
        assert!(view.route_needs_translation(id("mixed"), gemini));
        assert!(!view.route_needs_translation(9_999, chat));
        // A member without the Responses API: Responses requests are translated for it, Chat
        // Completions pass through, other protocols are translated as for any OpenAI member.
        assert!(view.route_needs_translation(id("chat-only"), responses));
        assert!(!view.route_needs_translation(id("chat-only"), chat));
        assert!(view.route_needs_translation(id("chat-only"), messages));
        // An Azure member cannot take what Azure does not serve; OpenAI and the simulator can.
        for endpoint in [Endpoint::Moderations, Endpoint::Rerank] {
            assert!(view.route_needs_translation(id("openai-only"), endpoint));
            assert!(!view.route_needs_translation(id("chat-only"), endpoint));
            assert!(!view.route_needs_translation(id("simulated"), endpoint));
            assert!(view.route_needs_translation(id("mixed"), endpoint));
        }
        assert!(!view.route_needs_translation(id("openai-only"), Endpoint::Embeddings));
    }
}
