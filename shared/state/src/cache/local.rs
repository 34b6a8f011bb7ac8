//! A lookup's connection on the thread that serves the request: each serving thread (a
//! single-threaded runtime) gets a connection of its own to the cache's Redis, whose driver runs
//! on that thread, so a lookup's round trip wakes no other thread. It is made in the background,
//! on that thread, once the store's shared connection is live; until then, and for a while after
//! it fails, lookups use the shared connection (whose driver runs on the store's own thread).

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::redis::conn::{Conn, RedisTarget};

/// How long a thread waits before it tries again to make a connection that failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The store a thread's connection belongs to: one per store, compared by address.
pub(super) type Owner = Arc<()>;

enum Slot {
    Connecting,
    Live(Conn),
    /// Failed; tried again from this instant.
    Failed(Instant),
}

thread_local! {
    /// This thread's connections, one a store (a store gone is forgotten at the next look).
    static CONNS: RefCell<Vec<(Weak<()>, Slot)>> = const { RefCell::new(Vec::new()) };
}

fn owns(weak: &Weak<()>, owner: &Owner) -> bool {
    std::ptr::eq(weak.as_ptr(), Arc::as_ptr(owner))
}

/// This thread's connection to `owner`'s Redis; `None` on a thread that is not a serving one,
/// or while there is none (one is then made in the background when the shared connection is
/// `live`).
pub(super) fn connection(
    owner: &Owner,
    target: &RedisTarget,
    timeout: Duration,
    live: bool,
) -> Option<Conn> {
    let handle = Handle::try_current().ok()?;
    if handle.runtime_flavor() != RuntimeFlavor::CurrentThread {
        return None;
    }
    CONNS.with(|conns| {
        let mut conns = conns.borrow_mut();
        conns.retain(|(weak, _)| weak.strong_count() > 0);
        let at = conns.iter().position(|(weak, _)| owns(weak, owner));
        match at.map(|at| &conns[at].1) {
            Some(Slot::Live(conn)) => return Some(conn.clone()),
            Some(Slot::Connecting) => return None,
            Some(Slot::Failed(until)) if Instant::now() < *until => return None,
            Some(Slot::Failed(_)) | None if !live => return None,
            Some(Slot::Failed(_)) | None => {}
        }
        match at {
            Some(at) => conns[at].1 = Slot::Connecting,
            None => conns.push((Arc::downgrade(owner), Slot::Connecting)),
        }
        let (weak, target) = (Arc::downgrade(owner), target.clone());
        // A single-threaded runtime runs the task on this thread: the connection's driver
        // (spawned while connecting) is this thread's too.
        handle.spawn(async move {
            let made = target.connect(timeout).await;
            CONNS.with(|conns| {
                let mut conns = conns.borrow_mut();
                if let Some((_, slot)) = conns.iter_mut().find(|(w, _)| w.ptr_eq(&weak)) {
                    *slot = match made {
                        Ok(conn) => Slot::Live(conn),
                        Err(e) => {
                            tracing::debug!(error = %e, "response cache: no connection of this thread's");
                            Slot::Failed(Instant::now() + RETRY_AFTER)
                        }
                    };
                }
            });
        });
        None
    })
}

/// Gives this thread's connection to `owner`'s Redis up (a command failed on it): a new one is
/// made after a while.
pub(super) fn give_up(owner: &Owner) {
    CONNS.with(|conns| {
        let mut conns = conns.borrow_mut();
        if let Some((_, slot)) = conns.iter_mut().find(|(weak, _)| owns(weak, owner)) {
            *slot = Slot::Failed(Instant::now() + RETRY_AFTER);
        }
    });
}

/// Whether this thread has a live connection to `owner`'s Redis.
pub(super) fn live(owner: &Owner) -> bool {
    CONNS.with(|conns| {
        conns
            .borrow()
            .iter()
            .any(|(weak, slot)| owns(weak, owner) && matches!(slot, Slot::Live(_)))
    })
}
