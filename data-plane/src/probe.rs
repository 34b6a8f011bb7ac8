//! Recovery probes for standalone mode. In a fleet the control plane runs them (one leader); a
//! standalone proxy has no control plane, so without this a tripped breaker would never close.
//! Same probe as the control plane's (`switchyard_upstream::probe_credential`): a minimal
//! generation request in the channel's own protocol, asking the upstream model of the channel's
//! first enabled member for one token, across the channel's credentials; a 2xx closes the breaker,
//! clears its members' failure state and starts the channel's recovering window (slow start,
//! `StateStore::begin_recovery`). A channel with no enabled member has nothing to ask for and is
//! skipped. A credential disabled at runtime (a keyword rule on a multi-key channel) is probed on
//! its own; success lifts its disable. Each channel and credential is probed on its own
//! schedule (`switchyard_upstream::ProbeSchedule`, the control plane's): first probe jittered
//! within one interval, each failure doubling the wait up to 8× the interval.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use switchyard_engine::{Channel, ChannelId, ChannelStatus, CredentialId, MemberId, SplitMix64};
use switchyard_state::unix_ms;
use switchyard_upstream::{
    probe_model, ChannelRuntime, CredentialRuntime, Due, ProbeResult, ProbeSchedule, ProbeSchedules,
};
use tokio_util::sync::CancellationToken;

use crate::snapshot::View;
use crate::state::AppState;

/// Every second, probes what is due on its schedule (`recovery_probe_interval_seconds`
/// re-read from the current snapshot; 0 = off) until `stop` is cancelled.
pub async fn recovery_loop(state: Arc<AppState>, stop: CancellationToken) {
    let mut schedules = Schedules::new(state.next_seed());
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = stop.cancelled() => return,
        }
        let interval_s = state
            .views
            .load()
            .as_ref()
            .map(|v| u64::from(v.snapshot.settings.recovery_probe_interval_seconds))
            .unwrap_or(0);
        if interval_s > 0 {
            schedules.now = unix_ms();
            schedules.interval_ms = interval_s.saturating_mul(1000);
            round(&state, Some(&mut schedules)).await;
        }
    }
}

/// When each channel and runtime-disabled credential is next probed, and this round's clock.
pub struct Schedules {
    probes: ProbeSchedules,
    now: u64,
    interval_ms: u64,
}

impl Schedules {
    pub fn new(seed: u64) -> Schedules {
        Schedules {
            probes: ProbeSchedules::new(seed),
            now: 0,
            interval_ms: 0,
        }
    }

    fn due(&self) -> Due {
        Due::Scheduled {
            now: self.now,
            interval_ms: self.interval_ms,
        }
    }
}

/// Of `needed`, what the schedule lets this round probe (all of it without a schedule).
fn due<K>(
    schedules: &mut Option<&mut Schedules>,
    pick: impl Fn(&mut ProbeSchedules, Due, Vec<K>) -> Vec<K>,
    needed: Vec<K>,
) -> Vec<K> {
    match schedules.as_deref_mut() {
        Some(s) => {
            let due = s.due();
            pick(&mut s.probes, due, needed)
        }
        None => needed,
    }
}

/// Records a probe's outcome in the schedule, if there is one.
fn outcome<K: Copy + Eq + std::hash::Hash>(
    schedules: &mut Option<&mut Schedules>,
    pick: impl Fn(&mut ProbeSchedules) -> &mut ProbeSchedule<K>,
    key: K,
    passed: bool,
) {
    if let Some(s) = schedules.as_deref_mut() {
        let interval_ms = s.interval_ms;
        pick(&mut s.probes).record(key, passed, unix_ms(), interval_ms);
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
/// then each channel whose breaker is open (a pass closes it and starts its recovering window).
pub async fn probe_round(state: &AppState) -> Recovered {
    round(state, None).await
}

/// A round over what `schedules` says is due (everything without one).
async fn round(state: &AppState, mut schedules: Option<&mut Schedules>) -> Recovered {
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
    let dump = state.store.dump(unix_ms());

    let runtime_disabled: Vec<CredentialId> = dump
        .credentials_disabled
        .iter()
        .map(|c| c.credential_id)
        .collect();
    let disabled: HashSet<CredentialId> = due(
        &mut schedules,
        ProbeSchedules::due_credentials,
        runtime_disabled,
    )
    .into_iter()
    .collect();
    if !disabled.is_empty() {
        for channel in view.snapshot.channels() {
            recovered.credentials.extend(
                probe_disabled_credentials(
                    state,
                    &view,
                    channel,
                    &disabled,
                    timeout,
                    &mut schedules,
                )
                .await,
            );
        }
    }

    let open: Vec<i64> = dump
        .channels
        .into_iter()
        .filter(|c| c.breaker_open)
        .map(|c| c.channel_id)
        .collect();
    for channel_id in due(&mut schedules, ProbeSchedules::due_channels, open) {
        if probe_open_channel(state, &view, channel_id, timeout, &mut schedules).await {
            recovered.channels.push(channel_id);
        }
    }
    recovered
}

/// Probes `channel`'s runtime-disabled credentials that are due (in `disabled`), each on its
/// own; returns those whose probe passed (their disable is lifted).
async fn probe_disabled_credentials(
    state: &AppState,
    view: &View,
    channel: &Channel,
    disabled: &HashSet<CredentialId>,
    timeout: Duration,
    schedules: &mut Option<&mut Schedules>,
) -> Vec<CredentialId> {
    let mut passed = Vec::new();
    // A manual disable is never undone by a probe, nor probed.
    if channel.status == ChannelStatus::Disabled {
        return passed;
    }
    let Some(runtime) = view.channel_runtime(channel.id) else {
        return passed;
    };
    if !runtime.credentials.iter().any(|c| disabled.contains(&c.id)) {
        return passed;
    }
    let Some(model) = probe_model(&view.snapshot, channel.id) else {
        tracing::info!(channel = %channel.name, "no enabled member to probe with; runtime-disabled credentials not probed");
        for credential in runtime
            .credentials
            .iter()
            .filter(|c| disabled.contains(&c.id))
        {
            outcome(schedules, |s| &mut s.credentials, credential.id, false);
        }
        return passed;
    };
    for credential in &runtime.credentials {
        if !disabled.contains(&credential.id) {
            continue;
        }
        // A disable set after this instant (the key failed again meanwhile) stays.
        let started = unix_ms();
        let result = probe_credential(state, runtime, credential, model, timeout).await;
        outcome(
            schedules,
            |s| &mut s.credentials,
            credential.id,
            result.passed(),
        );
        if result.passed() {
            state.store.enable_credential(credential.id, started);
            tracing::info!(
                channel = %channel.name,
                credential_id = credential.id,
                "recovery probe passed; runtime-disabled credential re-enabled"
            );
            passed.push(credential.id);
        } else {
            tracing::info!(
                channel = %channel.name,
                credential_id = credential.id,
                result = %result,
                "recovery probe failed; credential stays disabled"
            );
        }
    }
    passed
}

/// Probes a channel whose breaker is open with its usable credentials until one passes; a pass
/// closes the breaker and starts the recovering window. Whether it passed.
async fn probe_open_channel(
    state: &AppState,
    view: &View,
    channel_id: ChannelId,
    timeout: Duration,
    schedules: &mut Option<&mut Schedules>,
) -> bool {
    let (Some(channel), Some(runtime)) = (
        view.snapshot.channel(channel_id),
        view.channel_runtime(channel_id),
    ) else {
        return false;
    };
    // A manual disable is never undone by a probe.
    if channel.status == ChannelStatus::Disabled {
        return false;
    }
    let Some(model) = probe_model(&view.snapshot, channel_id) else {
        tracing::info!(channel = %channel.name, "no enabled member to probe with; channel not probed");
        // Nothing to ask with: wait like a failed probe rather than retry every second.
        outcome(schedules, |s| &mut s.channels, channel_id, false);
        return false;
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
    outcome(schedules, |s| &mut s.channels, channel_id, passed);
    if !passed {
        let result = last.map_or_else(|| "no usable credential".to_owned(), |r| r.to_string());
        tracing::info!(channel = %channel.name, result = %result, "recovery probe failed; channel stays disabled");
        return false;
    }
    let settings = &view.snapshot.settings;
    let members: Vec<MemberId> = view
        .snapshot
        .routes()
        .iter()
        .flat_map(|r| r.members.iter())
        .filter(|m| m.channel_id == channel_id)
        .map(|m| m.id)
        .collect();
    let slow_start_ms = u64::from(settings.slow_start_seconds).saturating_mul(1000);
    state
        .store
        .begin_recovery(channel_id, &members, unix_ms(), slow_start_ms);
    tracing::info!(
        channel = %channel.name,
        slow_start_seconds = settings.slow_start_seconds,
        "recovery probe passed; channel re-enabled, recovering"
    );
    true
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
        state.client(),
        runtime,
        credential,
        model,
        timeout,
        &mut rng,
    )
    .await
}
