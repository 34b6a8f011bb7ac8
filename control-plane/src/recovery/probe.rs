//! Probing a channel from the control plane with the shared probe of `switchyard-upstream`: the
//! same request the proxies' standalone probes send (a one-token generation in the channel's own
//! protocol), built by the same per-channel runtime that builds the proxies' traffic (URL
//! joining, each provider's auth header, extra headers), so the two planes cannot disagree on
//! what an upstream is asked. Secrets are resolved here (inline from the snapshot, or the control
//! plane's own environment for `secret_env`), carried only in sensitive header values, and never
//! logged or reported.

use std::time::Duration;

use switchyard_engine::{Channel, Credential, CredentialId, SplitMix64};
use switchyard_upstream::{ChannelRuntime, HttpClient, ProbeResult};

/// What one channel's probe tries: its runtime (with only the credentials to try) and the
/// upstream model it asks for.
pub struct ProbeTarget {
    pub runtime: ChannelRuntime,
    pub model: String,
}

impl ProbeTarget {
    /// `channel` with only the `credentials` it keeps (enabled in the snapshot, not disabled at
    /// runtime, or the one being probed on its own). A credential whose secret cannot be resolved
    /// here (unset env var, bad header value) is left out, with a warning naming its id.
    pub fn new(
        channel: &Channel,
        credentials: impl Fn(&Credential) -> bool,
        model: &str,
    ) -> ProbeTarget {
        let mut channel = channel.clone();
        channel.credentials.retain(|c| credentials(c));
        let env = |name: &str| std::env::var(name).ok();
        ProbeTarget {
            runtime: ChannelRuntime::compile(&channel, &env),
            model: model.to_owned(),
        }
    }
}

/// The result of probing one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// This credential got a 2xx (for a mock channel without credentials, the simulation's
    /// placeholder id `switchyard_upstream::MOCK_CREDENTIAL`).
    Passed { credential_id: CredentialId },
    /// Every credential failed (`last`: the last one's result; `None` when there was no
    /// credential to try).
    Failed {
        tried: usize,
        last: Option<ProbeResult>,
    },
}

impl ProbeOutcome {
    pub fn passed(&self) -> bool {
        matches!(self, ProbeOutcome::Passed { .. })
    }
}

/// Tries the target's credentials in order until one passes, each within `timeout`.
pub async fn probe(
    client: &HttpClient,
    target: &ProbeTarget,
    timeout: Duration,
    seed: u64,
) -> ProbeOutcome {
    let mut rng = SplitMix64::new(seed);
    let mut last = None;
    let mut tried = 0;
    for credential in &target.runtime.credentials {
        tried += 1;
        let result = switchyard_upstream::probe_credential(
            client,
            &target.runtime,
            credential,
            &target.model,
            timeout,
            &mut rng,
        )
        .await;
        if result.passed() {
            return ProbeOutcome::Passed {
                credential_id: credential.id,
            };
        }
        last = Some(result);
    }
    ProbeOutcome::Failed { tried, last }
}

/// `last` for a log line: the last result, or why nothing was tried.
pub fn describe(last: Option<ProbeResult>) -> String {
    last.map_or_else(
        || "no enabled credential with a resolvable secret".to_owned(),
        |result| result.to_string(),
    )
}
