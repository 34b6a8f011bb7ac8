//! The names of one fleet namespace's keys in Redis, and the change notification the proxies
//! publish to each other: what the writer writes and the subscriber reads.

use serde::{Deserialize, Serialize};

use super::lag::SyncReport;
use crate::limits::LimitKey;

/// Keys of one fleet namespace. One hash tag for all: every script's keys share a Cluster slot.
pub(crate) struct Keys {
    pub(super) ver: String,
    pub(super) member: String,
    pub(super) channel: String,
    pub(super) recovering: String,
    pub(super) health: String,
    pub(super) cred: String,
    pub(super) sticky: String,
    pub(super) sticky_exp: String,
    pub(super) leases: String,
    pub(super) lease_prefix: String,
    pub(super) lease: String,
    /// Limit counters: `limit:<limit>:<window start>`, `conc:<limit>`.
    limit_prefix: String,
    conc_prefix: String,
    pub(super) events: String,
    /// Indexes and claims ([`crate::records`]): `rec:<name>`, `claim:<name>`.
    tag: String,
}

impl Keys {
    /// A windowed limit's fleet counter for the window starting at `window_start`.
    pub(crate) fn counter(&self, key: &LimitKey, window_start: u64) -> String {
        format!("{}{}:{window_start}", self.limit_prefix, key.name())
    }

    /// A concurrency limit's reservations (one field per proxy).
    pub(crate) fn concurrent(&self, key: &LimitKey) -> String {
        format!("{}{}", self.conc_prefix, key.name())
    }

    /// An index's hash.
    pub(crate) fn record(&self, name: &str) -> String {
        format!("{}:rec:{name}", self.tag)
    }

    /// A claim's key.
    pub(crate) fn claim(&self, name: &str) -> String {
        format!("{}:claim:{name}", self.tag)
    }

    /// The sorted set of live proxies' leases (score: expiry, Unix ms).
    pub(crate) fn leases(&self) -> &str {
        &self.leases
    }

    pub(crate) fn new(prefix: &str, instance: &str) -> Keys {
        let t = format!("{{sy:{prefix}}}");
        Keys {
            ver: format!("{t}:ver"),
            member: format!("{t}:member"),
            channel: format!("{t}:channel"),
            recovering: format!("{t}:recovering"),
            health: format!("{t}:health"),
            cred: format!("{t}:cred"),
            sticky: format!("{t}:sticky"),
            sticky_exp: format!("{t}:sticky_exp"),
            leases: format!("{t}:leases"),
            lease_prefix: format!("{t}:lease:"),
            lease: format!("{t}:lease:{instance}"),
            limit_prefix: format!("{t}:limit:"),
            conc_prefix: format!("{t}:conc:"),
            events: format!("{t}:events"),
            tag: t,
        }
    }
}

/// One change notification: the publisher, the new versioned values, its in-flight lease.
/// `t` (aligned with `u`) is the wall-clock µs each update's write was queued at on the
/// publisher; `s` its sync report (with lease refreshes). Readers ignore fields they do not know.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Notice {
    pub(super) o: String,
    #[serde(default)]
    pub(super) u: Vec<(String, String, String)>,
    #[serde(default)]
    pub(super) l: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) t: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) s: Option<SyncReport>,
}
