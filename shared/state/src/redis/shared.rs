//! What the Redis store's request path and its background tasks share: the configuration, the
//! counters, the queued writes and the state behind one lock. The bottom of the store's modules:
//! the writer, the subscriber and the write folding all read it, and it calls none of them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use switchyard_engine::{ChannelId, CredentialId, MemberId, RouteId, UnixMillis};
use tokio::sync::{watch, Notify};

use super::lag::{self, SyncReport};
use super::sync::{Entity, RemoteLeases, Versions};
use crate::limits::Limiter;
use crate::memory::InMemoryStore;
use crate::types::FailureKind;

/// How the store talks to Redis; [`RedisConfig::new`] gives production defaults.
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// `redis://[user:pass@]host:port[/db]` (one node); `redis+cluster://host:port,host:port`
    /// or a comma-separated list of `redis://` URLs (Redis Cluster seed nodes).
    pub url: String,
    /// Namespace of every key and of the notification channel (`{sy:PREFIX}:…`).
    pub prefix: String,
    /// Full resync period (the safety net behind notifications).
    pub resync_every: Duration,
    /// How often this proxy refreshes its in-flight lease.
    pub lease_refresh: Duration,
    /// How long a lease outlives its last refresh: a killed proxy's in-flight counts vanish after
    /// at most this long.
    pub lease_ttl: Duration,
    /// TTL set on every state key at each write: idle state disappears by itself.
    pub state_ttl: Duration,
    /// Most writes held while Redis is unreachable; beyond it the oldest are dropped (counted).
    pub max_queue: usize,
    /// Most queued writes per pipelined batch (each member's successes in it fold into one
    /// script call, so a batch usually runs far fewer scripts).
    pub batch_size: usize,
    /// How long the writer lets successes and sticky bindings gather before sending a batch
    /// that is not full: fewer round trips and wake-ups per request, at the cost of this much
    /// propagation delay. A queued failure, cooldown, breaker or credential change is sent at
    /// once (with whatever is queued beside it).
    pub flush_linger: Duration,
    /// Connect and response timeout of every Redis call.
    pub timeout: Duration,
    /// Test hook: the subscriber waits this long before merging each received notification
    /// (simulates a slow or starved subscriber). Zero in production.
    pub apply_delay: Duration,
}

impl RedisConfig {
    pub fn new(url: impl Into<String>, prefix: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            prefix: prefix.into(),
            resync_every: Duration::from_millis(1000),
            lease_refresh: Duration::from_millis(1000),
            lease_ttl: Duration::from_millis(5000),
            state_ttl: Duration::from_secs(7 * 24 * 3600),
            max_queue: 100_000,
            batch_size: 256,
            flush_linger: Duration::from_millis(2),
            timeout: Duration::from_millis(1000),
            apply_delay: Duration::ZERO,
        }
    }
}

/// Bad Redis configuration (the only error the store ever returns: Redis being down is not one).
#[derive(Debug)]
pub struct RedisConfigError(pub String);

impl std::fmt::Display for RedisConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedisConfigError {}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct RedisCounters {
    pub errors: AtomicU64,
    pub batches: AtomicU64,
    pub scripts: AtomicU64,
    pub notifications_applied: AtomicU64,
    pub resyncs: AtomicU64,
    pub dropped_writes: AtomicU64,
    pub connected: AtomicBool,
    /// Other proxies' updates: writer's queue time → in this view.
    pub(crate) lag: lag::LagHistogram,
    /// The last full resync or received notification.
    pub(crate) last_sync: lag::LastSync,
}

/// A queued success (its own type, so the writer's run of one is built from it by one function).
#[derive(Debug, Clone)]
pub(crate) struct SuccessOp {
    pub member: MemberId,
    pub channel: ChannelId,
    pub model: String,
    pub latency_ms: f64,
    pub canary: bool,
    pub promote_after: u32,
    pub now: UnixMillis,
}

/// A queued failure of one member (its own type, so its script call is built by one function).
#[derive(Debug, Clone)]
pub(crate) struct FailureOp {
    pub member: MemberId,
    pub channel: ChannelId,
    pub model: String,
    pub kind: FailureKind,
    pub retry_after_ms: u64,
    pub fault_protection: bool,
    pub cooldown_ms: u64,
    pub now: UnixMillis,
}

/// One queued write: the trait call, replayed as its script in Redis.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Failure(FailureOp),
    Success(SuccessOp),
    ChannelFailure {
        channel: ChannelId,
        fault_protection: bool,
        threshold: u32,
        now: UnixMillis,
    },
    Trip {
        channel: ChannelId,
        reason: String,
        now: UnixMillis,
    },
    /// `reset_channel` (`since` = `until` = 0) or `begin_recovery` (a window `since..until`).
    Reset {
        channel: ChannelId,
        members: Vec<MemberId>,
        since: UnixMillis,
        until: UnixMillis,
    },
    Cooldown {
        member: MemberId,
        until: UnixMillis,
    },
    Credential {
        credential: CredentialId,
        reason: String,
        now: UnixMillis,
    },
    EnableCredential {
        credential: CredentialId,
        now: UnixMillis,
    },
    Sticky {
        route: RouteId,
        key: String,
        member: MemberId,
        expires_at: UnixMillis,
        now: UnixMillis,
    },
}

impl Op {
    /// Whether the writer sends this write at once instead of letting writes gather for the
    /// linger: everything that can change which members and channels are chosen (a failure, a
    /// cooldown, a breaker's trip or reset, a credential's state). A success or a sticky binding
    /// changes only the odds or one session, and is the bulk of the writes under load.
    pub(crate) fn urgent(&self) -> bool {
        !matches!(self, Op::Success(_) | Op::Sticky { .. })
    }

    /// The entities this write touches (shielded from remote values until its result is back).
    pub(crate) fn entities(&self) -> Vec<Entity> {
        match self {
            Op::Failure(f) => vec![
                Entity::Member(f.member),
                Entity::Health(f.channel, f.model.clone()),
            ],
            Op::Success(s) => vec![
                Entity::Member(s.member),
                Entity::Channel(s.channel),
                Entity::Health(s.channel, s.model.clone()),
            ],
            Op::ChannelFailure { channel, .. } | Op::Trip { channel, .. } => {
                vec![Entity::Channel(*channel), Entity::Recovering(*channel)]
            }
            Op::Reset {
                channel, members, ..
            } => [Entity::Channel(*channel), Entity::Recovering(*channel)]
                .into_iter()
                .chain(members.iter().map(|m| Entity::Member(*m)))
                .collect(),
            Op::Cooldown { member, .. } => vec![Entity::Member(*member)],
            Op::Credential { credential, .. } | Op::EnableCredential { credential, .. } => {
                vec![Entity::Credential(*credential)]
            }
            Op::Sticky { route, key, .. } => vec![Entity::Sticky(*route, key.clone())],
        }
    }
}

/// What the hot path and the background tasks share.
pub(crate) struct Shared {
    pub view: InMemoryStore,
    /// Limits: local allowances, replenished from the shared counters by the writer.
    pub limits: Limiter,
    /// Live proxies (this one included) at the last full resync: the share of a limit this
    /// proxy enforces while Redis is unreachable is the limit divided by it.
    pub live: AtomicU32,
    pub sync: Mutex<SyncState>,
    pub wake: Notify,
    /// Signalled when a write that must not linger is queued ([`Op::urgent`]): it ends a
    /// linger already begun.
    pub urgent: Notify,
    pub lease_dirty: Notify,
    pub counters: RedisCounters,
    pub config: RedisConfig,
    pub instance: String,
    /// Bumped after each successful full resync (tests wait on it).
    pub synced: watch::Sender<u64>,
    /// Set by the writer when it has stopped.
    pub closed: watch::Sender<bool>,
}

#[derive(Default)]
pub(crate) struct SyncState {
    pub versions: Versions,
    /// Each queued write with the wall-clock µs it was queued at (its propagation stamp).
    pub queue: VecDeque<(Op, u64)>,
    pub leases: RemoteLeases,
    /// The latest [`SyncReport`] of every other live proxy (pruned with the leases).
    pub reports: switchyard_engine::fxhash::FxHashMap<String, SyncReport>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SyncState> {
        self.sync.lock().unwrap_or_else(|e| e.into_inner())
    }
}
