//! The fleet's semantic cache vectors, tailed: a background task reads each semantic rule's
//! shared stream (in Redis; a store in memory has none) from where it last stopped into this
//! proxy's local index, a few times a second, and now and then drops the indexes of rules gone
//! and the entries expired. A dead Redis delays sharing, never a request.

use std::sync::Weak;
use std::time::Duration;

use switchyard_engine::semantic::SemanticEntry;
use switchyard_state::unix_ms;
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// How often the streams are read.
const TAIL_EVERY: Duration = Duration::from_millis(250);
/// Records read per call.
const PAGE: usize = 500;
/// Pages read per rule per round (the rest waits for the next round).
const MAX_PAGES: usize = 20;
/// Rounds between two sweeps of rules gone and entries expired.
const SWEEP_EVERY: u32 = 40;

/// Tails until `stop` fires or the state is dropped.
pub async fn run(state: Weak<AppState>, stop: CancellationToken) {
    let mut round = 0u32;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(TAIL_EVERY) => {}
        }
        let Some(state) = state.upgrade() else {
            return;
        };
        round = round.wrapping_add(1);
        tail(&state, round.is_multiple_of(SWEEP_EVERY)).await;
    }
}

/// One round: every enabled semantic rule's new records into the index.
async fn tail(state: &AppState, sweep: bool) {
    let Some(view) = state.views.load_full() else {
        return;
    };
    let rules: Vec<(i64, &str)> = view
        .snapshot
        .cache_rules()
        .iter()
        .filter(|r| r.enabled)
        .filter_map(|r| r.semantic.as_ref().map(|s| (r.id, s.model.as_str())))
        .collect();
    if sweep {
        state.semantic.retain(&rules, unix_ms());
    }
    let cache = state.cache();
    for (rule, model) in rules {
        for _ in 0..MAX_PAGES {
            let after = state.semantic.cursor(rule);
            let records = match cache.shared_vectors(rule, &after, PAGE).await {
                Ok(records) => records,
                Err(e) => {
                    tracing::debug!(rule, error = %e, "semantic cache: the shared stream was not read");
                    return;
                }
            };
            let now = unix_ms();
            let full = records.len() == PAGE;
            let mut last = None;
            for (id, bytes) in records {
                if let Some(entry) = SemanticEntry::decode(&bytes) {
                    state.semantic.insert(rule, model, entry, now);
                }
                last = Some(id);
            }
            if let Some(id) = last {
                state.semantic.set_cursor(rule, model, id);
            }
            if !full {
                break;
            }
        }
    }
}
