//! The connected-proxy registry: which proxies hold a snapshot stream (`Watch`) open on *this*
//! replica, the revision each was last sent, and when this replica last heard from it (stream
//! opened, a snapshot sent, or a usage report under the same client id).
//!
//! Per replica by design: a proxy is connected to one replica at a time, and each replica knows
//! its own streams only (the registry is memory, not Postgres), so with several replicas an
//! operator reads `/api/v1/state` from each (or the console of each) to see the whole fleet. An
//! entry lives exactly as long as its stream: the stream's state owns a [`Registration`] whose
//! drop removes it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use switchyard_state::unix_ms;

/// One open snapshot stream.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConnectedProxy {
    /// This replica's id for the stream (unique while the process runs).
    pub stream_id: u64,
    /// The identity the proxy announced (`client_id` of its watch request; free-form, not
    /// authenticated).
    pub client_id: String,
    /// The peer address as this replica saw it, when known.
    pub peer: Option<String>,
    /// Presented a valid fleet token (its snapshots carry credentials).
    pub authenticated: bool,
    /// The revision the proxy held when it connected.
    pub revision_at_connect: u64,
    /// The newest revision sent on this stream: what the proxy now holds (0: none yet).
    pub revision: u64,
    /// Unix milliseconds.
    pub connected_at_ms: u64,
    pub last_contact_ms: u64,
}

#[derive(Debug, Default)]
pub struct ProxyRegistry {
    next: AtomicU64,
    streams: Mutex<BTreeMap<u64, ConnectedProxy>>,
}

impl ProxyRegistry {
    /// Records a newly opened stream; the entry goes when the returned guard is dropped.
    pub fn register(
        self: &Arc<Self>,
        client_id: &str,
        peer: Option<String>,
        authenticated: bool,
        have_revision: u64,
    ) -> Registration {
        let stream_id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let now = unix_ms();
        let entry = ConnectedProxy {
            stream_id,
            // Bounded: it is the proxy's own text.
            client_id: client_id.chars().take(128).collect(),
            peer,
            authenticated,
            revision_at_connect: have_revision,
            revision: have_revision,
            connected_at_ms: now,
            last_contact_ms: now,
        };
        self.lock().insert(stream_id, entry);
        Registration {
            registry: Arc::clone(self),
            stream_id,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ConnectedProxy>> {
        // A panic while holding this lock cannot leave the map half-updated (single inserts and
        // removes), so a poisoned lock is still good to use.
        self.streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A usage report from `client_id`: contact from every stream of that client.
    pub fn touch_client(&self, client_id: &str) {
        // A proxy that announced no identity cannot be told apart from another one.
        if client_id.is_empty() {
            return;
        }
        let now = unix_ms();
        for entry in self.lock().values_mut() {
            if entry.client_id == client_id {
                entry.last_contact_ms = now;
            }
        }
    }

    /// Every open stream, oldest first.
    pub fn list(&self) -> Vec<ConnectedProxy> {
        self.lock().values().cloned().collect()
    }
}

/// Keeps one stream's entry; dropping it (the stream ended) removes the entry.
#[derive(Debug)]
pub struct Registration {
    registry: Arc<ProxyRegistry>,
    stream_id: u64,
}

impl Registration {
    /// `revision` was just sent on this stream.
    pub fn sent(&self, revision: u64) {
        if let Some(entry) = self.registry.lock().get_mut(&self.stream_id) {
            entry.revision = revision;
            entry.last_contact_ms = unix_ms();
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.stream_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_as_long_as_its_registration() {
        let registry = Arc::new(ProxyRegistry::default());
        let a = registry.register("proxy-a", None, true, 3);
        let b = registry.register("proxy-b", Some("127.0.0.1:1".into()), false, 0);
        a.sent(7);
        // A usage report under no identity refreshes no one; under a known one, that stream.
        let contact = registry.list()[1].last_contact_ms;
        registry.touch_client("");
        assert_eq!(registry.list()[1].last_contact_ms, contact);
        let listed = registry.list();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].client_id, "proxy-a");
        assert_eq!((listed[0].revision_at_connect, listed[0].revision), (3, 7));
        assert_eq!(listed[1].revision, 0);
        drop(a);
        let listed = registry.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].client_id, "proxy-b");
        drop(b);
        assert!(registry.list().is_empty());
    }
}
