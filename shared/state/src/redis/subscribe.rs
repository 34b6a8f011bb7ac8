//! The subscriber: merges other proxies' change notifications into the local view.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::StreamExt;
use redis::RedisError;
use tokio::sync::{watch, Notify};

use super::conn::RedisTarget;
use super::keys::{Keys, Notice};
use super::lag::now_us;
use super::outage::{Backoff, Reporter};
use super::shared::Shared;
use super::sync::{decode_counts, parse_update};

pub(super) async fn subscriber(
    shared: Arc<Shared>,
    target: RedisTarget,
    mut stop: watch::Receiver<bool>,
    resync: Arc<Notify>,
    reporter: Arc<Reporter>,
) {
    let channel = Keys::new(&shared.config.prefix, &shared.instance).events;
    let nodes = target.pubsub_nodes();
    let mut backoff = Backoff::new();
    let mut attempt = 0usize;
    while !*stop.borrow() {
        let node = &nodes[attempt % nodes.len()];
        attempt += 1;
        let connected = async {
            let client = redis::Client::open(node.as_str())?;
            let mut pubsub = tokio::time::timeout(shared.config.timeout, client.get_async_pubsub())
                .await
                .map_err(|_| {
                    RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "subscribe timed out",
                    ))
                })??;
            pubsub.subscribe(&channel).await?;
            Ok::<_, RedisError>(pubsub)
        }
        .await;
        let mut pubsub = match connected {
            Ok(p) => p,
            Err(e) => {
                reporter.report(&shared, "subscribe", &e);
                backoff.wait(&mut stop).await;
                continue;
            }
        };
        backoff.reset();
        // Whatever was published while we were not listening is only in a resync.
        resync.notify_one();
        let mut messages = pubsub.on_message();
        loop {
            tokio::select! {
                msg = messages.next() => match msg {
                    Some(msg) => {
                        let delay = shared.config.apply_delay;
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        handle_notice(&shared, msg.get_payload_bytes());
                    }
                    None => break,
                },
                _ = stop.changed() => return,
            }
        }
        reporter.report(
            &shared,
            "subscription",
            &RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "pub/sub connection closed",
            )),
        );
    }
}

fn handle_notice(shared: &Shared, payload: &[u8]) {
    let Ok(notice) = serde_json::from_slice::<Notice>(payload) else {
        return;
    };
    // Any notification (ours too) proves the subscription is delivering.
    shared.counters.last_sync.mark();
    if notice.o == shared.instance {
        return;
    }
    let mut applied = 0;
    let mut state = shared.lock();
    let mut view = shared.view.write_view();
    for (kind, field, raw) in &notice.u {
        if let Some(u) = parse_update(kind, field, raw) {
            if state.versions.merge(&mut view, &u) {
                applied += 1;
            }
        }
    }
    if let Some(counts) = &notice.l {
        let state = &mut *state;
        state
            .leases
            .set(&mut view, &notice.o, decode_counts(counts));
    }
    if let Some(mut report) = notice.s {
        report.instance.clone_from(&notice.o);
        state.reports.insert(notice.o.clone(), report);
    }
    drop(view);
    drop(state);
    // In the view now: each update's lag from its writer's stamp (older publishers send none).
    if !notice.t.is_empty() {
        let now = now_us();
        for queued_at in notice.t.iter().take(notice.u.len()) {
            shared.counters.lag.observe(now.saturating_sub(*queued_at));
        }
    }
    shared
        .counters
        .notifications_applied
        .fetch_add(applied, Ordering::Relaxed);
}
