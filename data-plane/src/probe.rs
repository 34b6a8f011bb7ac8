//! Recovery probes for standalone mode. In a fleet the control plane runs them (one leader); a
//! standalone proxy has no control plane, so without this a tripped breaker would never close.
//! Same probe as the control plane's (`switchyard_upstream::probe_credential`): a minimal
//! generation request in the channel's own protocol, asking the upstream model of the channel's
//! first enabled member for one token, across the channel's credentials; a 2xx closes the breaker
//! and clears its members' failure state. A channel with no enabled member has nothing to ask
//! for and is skipped. A credential disabled at runtime (a keyword rule on a multi-key channel) is
//! probed on its own; success lifts its disable.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use switchyard_engine::{ChannelId, ChannelStatus, CredentialId, MemberId, SplitMix64};
use switchyard_upstream::{probe_model, ChannelRuntime, CredentialRuntime, ProbeResult};
use tokio::sync::watch;

use crate::AppState;

/// Probes every `recovery_probe_interval_seconds` (re-read from the current snapshot) until
/// `stop` turns true.
pub async fn recovery_loop(state: Arc<AppState>, mut stop: watch::Receiver<bool>) {
    let mut waited = 0u64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        waited += 1;
        let interval = state
            .views
            .load()
            .as_ref()
            .map(|v| u64::from(v.snapshot.settings.recovery_probe_interval_seconds))
            .unwrap_or(0);
        if interval > 0 && waited >= interval {
            waited = 0;
            probe_round(&state).await;
        }
    }
}

/// What one probe round brought back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Channels whose breaker a passed probe closed.
    pub channels: Vec<ChannelId>,
    /// Runtime-disabled credentials whose own probe passed: usable again.
    pub credentials: Vec<CredentialId>,
}

/// Probes each channel whose breaker is open once; returns the channels that recovered.
pub async fn probe_once(state: &AppState) -> Vec<i64> {
    probe_round(state).await.channels
}

/// One round: first every runtime-disabled credential on its own (a pass lifts its disable),
/// then each channel whose breaker is open (a pass closes it).
pub async fn probe_round(state: &AppState) -> Recovered {
    let mut recovered = Recovered::default();
    let Some(view) = state.views.load_full() else {
        return recovered;
    };
    let settings = &view.snapshot.settings;
    if !settings.fault_protection_enabled || !settings.recovery_probe_enabled {
        return recovered;
    }
    let timeout =
        Duration::from_millis(settings.connect_timeout_ms + settings.first_byte_timeout_ms);
    let dump = state.store.dump(crate::unix_ms());

    let disabled: HashSet<CredentialId> = dump
        .credentials_disabled
        .iter()
        .map(|c| c.credential_id)
        .collect();
    if !disabled.is_empty() {
        for channel in view.snapshot.channels() {
            // A manual disable is never undone by a probe, nor probed.
            if channel.status == ChannelStatus::Disabled {
                continue;
            }
            let Some(runtime) = view.channel_runtime(channel.id) else {
                continue;
            };
            if !runtime.credentials.iter().any(|c| disabled.contains(&c.id)) {
                continue;
            }
            let Some(model) = probe_model(&view.snapshot, channel.id) else {
                tracing::info!(channel = %channel.name, "no enabled member to probe with; runtime-disabled credentials not probed");
                continue;
            };
            for credential in &runtime.credentials {
                if !disabled.contains(&credential.id) {
                    continue;
                }
                // A disable set after this instant (the key failed again meanwhile) stays.
                let started = crate::unix_ms();
                let result = probe_credential(state, runtime, credential, model, timeout).await;
                if result.passed() {
                    state.store.enable_credential(credential.id, started);
                    tracing::info!(
                        channel = %channel.name,
                        credential_id = credential.id,
                        "recovery probe passed; runtime-disabled credential re-enabled"
                    );
                    recovered.credentials.push(credential.id);
                } else {
                    tracing::info!(
                        channel = %channel.name,
                        credential_id = credential.id,
                        result = %result,
                        "recovery probe failed; credential stays disabled"
                    );
                }
            }
        }
    }

    let open: Vec<i64> = dump
        .channels
        .into_iter()
        .filter(|c| c.breaker_open)
        .map(|c| c.channel_id)
        .collect();
    for channel_id in open {
        let (Some(channel), Some(runtime)) = (
            view.snapshot.channel(channel_id),
            view.channel_runtime(channel_id),
        ) else {
            continue;
        };
        // A manual disable is never undone by a probe.
        if channel.status == ChannelStatus::Disabled {
            continue;
        }
        let Some(model) = probe_model(&view.snapshot, channel_id) else {
            tracing::info!(channel = %channel.name, "no enabled member to probe with; channel not probed");
            continue;
        };
        let mut passed = false;
        let mut last = None;
        for credential in &runtime.credentials {
            // Still disabled at runtime: requests would not use it, so it proves nothing.
            let mut still_disabled = false;
            state.store.with_view(&mut |v| {
                still_disabled = v.credential_disabled(credential.id);
            });
            if still_disabled {
                continue;
            }
            let result = probe_credential(state, runtime, credential, model, timeout).await;
            passed = result.passed();
            last = Some(result);
            if passed {
                break;
            }
        }
        if passed {
            let members: Vec<MemberId> = view
                .snapshot
                .routes()
                .iter()
                .flat_map(|r| r.members.iter())
                .filter(|m| m.channel_id == channel_id)
                .map(|m| m.id)
                .collect();
            state.store.reset_channel(channel_id, &members);
            tracing::info!(channel = %channel.name, "recovery probe passed; channel re-enabled");
            recovered.channels.push(channel_id);
        } else {
            let result = last.map_or_else(|| "no usable credential".to_owned(), |r| r.to_string());
            tracing::info!(channel = %channel.name, result = %result, "recovery probe failed; channel stays disabled");
        }
    }
    recovered
}

/// One probe with this credential (simulated for a mock channel) within `timeout`.
async fn probe_credential(
    state: &AppState,
    runtime: &ChannelRuntime,
    credential: &CredentialRuntime,
    model: &str,
    timeout: Duration,
) -> ProbeResult {
    let mut rng = SplitMix64::new(state.next_seed());
    switchyard_upstream::probe_credential(
        &state.client,
        runtime,
        credential,
        model,
        timeout,
        &mut rng,
    )
    .await
}
