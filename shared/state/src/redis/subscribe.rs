//! The subscriber: merges other proxies' change notifications into the local view.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::StreamExt;
use redis::RedisError;
use tokio::sync::{watch, Notify};

use super::conn::RedisTarget;
use super::sync::{decode_counts, parse_update};
use super::worker::{Keys, Notice, Reporter, BACKOFF_MAX, BACKOFF_MIN};
use super::Shared;

pub(super) async fn subscriber(
    shared: Arc<Shared>,
    target: RedisTarget,
    mut stop: watch::Receiver<bool>,
    resync: Arc<Notify>,
    reporter: Arc<Reporter>,
) {
    let channel = Keys::new(&shared.config.prefix, &shared.instance).events;
    let nodes = target.pubsub_nodes();
    let mut backoff = BACKOFF_MIN;
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
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    _ = stop.changed() => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                continue;
            }
        };
        backoff = BACKOFF_MIN;
        // Whatever was published while we were not listening is only in a resync.
        resync.notify_one();
        let mut messages = pubsub.on_message();
        loop {
            tokio::select! {
                msg = messages.next() => match msg {
                    Some(msg) => handle_notice(&shared, msg.get_payload_bytes()),
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
    shared
        .counters
        .notifications_applied
        .fetch_add(applied, Ordering::Relaxed);
}
