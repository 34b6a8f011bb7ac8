//! Merging fleet state into the local view.
//!
//! Every entity (member, channel, health record, credential, sticky binding) carries the version
//! of the script run that last wrote it. The local view takes a remote value only when
//!  - no local write of that entity is still waiting for Redis (`pending`): the local value is
//!    newer than anything Redis has told us, and our own script result will bring the merged one;
//!  - and it is newer than what the view already holds (`known`, defaulting to the version of the
//!    last full resync).
//!
//! So a late notification can never roll a newer value back, and the periodic full resync (read
//! atomically at one version) repairs whatever a lost notification left behind.

use switchyard_engine::fxhash::{FxHashMap as HashMap, FxHashSet as HashSet};

use switchyard_engine::{
    ChannelId, CredentialId, HealthRecord, MemberId, Recovering, RouteId, StickyBinding, UnixMillis,
};

use crate::memory::{Breaker, Inner};

/// One piece of shared state, as addressed in Redis.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Entity {
    Member(MemberId),
    Channel(ChannelId),
    /// A channel's slow-start window (hash `recovering`).
    Recovering(ChannelId),
    Health(ChannelId, String),
    Credential(CredentialId),
    Sticky(RouteId, String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Member {
        cooldown_until: Option<UnixMillis>,
        failures: u32,
        canary_successes: u32,
        promoted: bool,
    },
    Channel(Breaker),
    Recovering(Recovering),
    Health(HealthRecord),
    Credential {
        at: UnixMillis,
        reason: String,
    },
    Sticky(StickyBinding),
}

/// A versioned value of one entity; `None` = deleted.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Update {
    pub entity: Entity,
    pub version: u64,
    pub value: Option<Value>,
}

impl Entity {
    pub fn parse(kind: &str, field: &str) -> Option<Entity> {
        let pair = || {
            let (a, b) = field.split_once(':')?;
            Some((a.parse().ok()?, b.to_owned()))
        };
        Some(match kind {
            "m" => Entity::Member(field.parse().ok()?),
            "c" => Entity::Channel(field.parse().ok()?),
            "r" => Entity::Recovering(field.parse().ok()?),
            "k" => Entity::Credential(field.parse().ok()?),
            "h" => {
                let (c, m) = pair()?;
                Entity::Health(c, m)
            }
            "s" => {
                let (r, k) = pair()?;
                Entity::Sticky(r, k)
            }
            _ => return None,
        })
    }
}

fn opt<T: std::str::FromStr>(s: &str) -> Result<Option<T>, ()> {
    if s.is_empty() {
        Ok(None)
    } else {
        s.parse().map(Some).map_err(|_| ())
    }
}

fn req<T: std::str::FromStr>(s: Option<&str>) -> Result<T, ()> {
    s.ok_or(())?.parse().map_err(|_| ())
}

/// Parses one stored value (`"<version>|<fields…>"`, `"<version>|-"` = deleted).
pub(crate) fn parse_update(kind: &str, field: &str, raw: &str) -> Option<Update> {
    let entity = Entity::parse(kind, field)?;
    let (version, rest) = raw.split_once('|')?;
    let version: u64 = version.parse().ok()?;
    if rest == "-" {
        return Some(Update {
            entity,
            version,
            value: None,
        });
    }
    let value = (|| -> Result<Value, ()> {
        Ok(match &entity {
            Entity::Member(_) => {
                let mut p = rest.split('|');
                Value::Member {
                    cooldown_until: opt(p.next().ok_or(())?)?,
                    failures: req(p.next())?,
                    canary_successes: req(p.next())?,
                    promoted: req::<u8>(p.next())? == 1,
                }
            }
            Entity::Channel(_) => {
                let mut p = rest.splitn(3, '|');
                let consecutive = req(p.next())?;
                let tripped_at = opt(p.next().ok_or(())?)?;
                let reason = p.next().unwrap_or("");
                Value::Channel(Breaker {
                    consecutive,
                    tripped_at,
                    reason: tripped_at.map(|_| reason.to_owned()),
                })
            }
            Entity::Recovering(_) => {
                let (since, until) = rest.split_once('|').ok_or(())?;
                Value::Recovering(Recovering {
                    since: since.parse().map_err(|_| ())?,
                    until: until.parse().map_err(|_| ())?,
                })
            }
            Entity::Health(..) => {
                let mut p = rest.split('|');
                Value::Health(HealthRecord {
                    latency_ms: opt(p.next().ok_or(())?)?,
                    error_propensity: req(p.next())?,
                })
            }
            Entity::Credential(_) => {
                let (at, reason) = rest.split_once('|').ok_or(())?;
                Value::Credential {
                    at: at.parse().map_err(|_| ())?,
                    reason: reason.to_owned(),
                }
            }
            Entity::Sticky(..) => {
                let (member, expires) = rest.split_once('|').ok_or(())?;
                Value::Sticky(StickyBinding {
                    member_id: member.parse().map_err(|_| ())?,
                    expires_at: expires.parse().map_err(|_| ())?,
                })
            }
        })
    })()
    .ok()?;
    Some(Update {
        entity,
        version,
        value: Some(value),
    })
}

/// Writes one entity's value into the view.
pub(crate) fn apply_value(inner: &mut Inner, entity: &Entity, value: Option<&Value>) {
    match (entity, value) {
        (
            Entity::Member(id),
            Some(Value::Member {
                cooldown_until,
                failures,
                canary_successes,
                promoted,
            }),
        ) => {
            set(&mut inner.cooldowns, *id, *cooldown_until);
            set(&mut inner.member_failures, *id, nonzero(*failures));
            set(&mut inner.canary_successes, *id, nonzero(*canary_successes));
            if *promoted {
                inner.canaries_promoted.insert(*id);
            } else {
                inner.canaries_promoted.remove(id);
            }
        }
        (Entity::Member(id), _) => {
            inner.cooldowns.remove(id);
            inner.member_failures.remove(id);
            inner.canary_successes.remove(id);
            inner.canaries_promoted.remove(id);
        }
        (Entity::Channel(id), Some(Value::Channel(b))) => {
            inner.breakers.insert(*id, b.clone());
        }
        (Entity::Channel(id), _) => {
            inner.breakers.remove(id);
        }
        (Entity::Recovering(id), Some(Value::Recovering(r))) => {
            inner.recovering.insert(*id, *r);
        }
        (Entity::Recovering(id), _) => {
            inner.recovering.remove(id);
        }
        (Entity::Health(channel, model), Some(Value::Health(r))) => {
            inner.set_health(*channel, model, *r);
        }
        (Entity::Health(channel, model), _) => {
            inner.remove_health(*channel, model);
        }
        (Entity::Credential(id), Some(Value::Credential { at, reason })) => {
            inner
                .credentials_disabled
                .insert(*id, (reason.clone(), *at));
        }
        (Entity::Credential(id), _) => {
            inner.credentials_disabled.remove(id);
        }
        (Entity::Sticky(route, key), Some(Value::Sticky(b))) => {
            // Only capacity evicts here: `now` 0 keeps the view's own expiry handling.
            inner.insert_sticky(*route, key, *b, 0);
        }
        (Entity::Sticky(route, key), _) => inner.remove_sticky(*route, key),
    }
}

fn nonzero(n: u32) -> Option<u32> {
    (n > 0).then_some(n)
}

fn set<V>(map: &mut HashMap<i64, V>, id: i64, value: Option<V>) {
    match value {
        Some(v) => {
            map.insert(id, v);
        }
        None => {
            map.remove(&id);
        }
    }
}

/// Versions and pending local writes per entity.
#[derive(Debug, Default)]
pub(crate) struct Versions {
    pending: HashMap<Entity, u32>,
    known: HashMap<Entity, u64>,
    /// Version of the last full resync: what every entity absent from `known` is at least.
    base: u64,
}

impl Versions {
    /// No local write is waiting for Redis.
    pub fn idle(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn add_pending(&mut self, entity: Entity) {
        *self.pending.entry(entity).or_insert(0) += 1;
    }

    pub fn done_pending(&mut self, entity: &Entity) {
        if let Some(n) = self.pending.get_mut(entity) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(entity);
            }
        }
    }

    fn known(&self, entity: &Entity) -> u64 {
        match entity {
            // Sticky bindings are not part of the periodic resync: no base for them.
            Entity::Sticky(..) => self.known.get(entity).copied().unwrap_or(0),
            _ => self.known.get(entity).copied().unwrap_or(self.base),
        }
    }

    /// A remote update (notification): applied if nothing local is pending and it is newer.
    pub fn merge(&mut self, inner: &mut Inner, u: &Update) -> bool {
        if self.pending.contains_key(&u.entity) || u.version <= self.known(&u.entity) {
            return false;
        }
        self.known.insert(u.entity.clone(), u.version);
        apply_value(inner, &u.entity, u.value.as_ref());
        true
    }

    /// The result of one of our own writes (its pending mark already cleared). Sticky bindings
    /// stay as written locally (the view's capacity eviction already ran on them).
    pub fn own_result(&mut self, inner: &mut Inner, u: &Update) {
        if matches!(u.entity, Entity::Sticky(..)) {
            if u.version > self.known(&u.entity) {
                self.known.insert(u.entity.clone(), u.version);
            }
            return;
        }
        self.merge(inner, u);
    }

    /// A full resync read atomically at `version`: replaces every non-sticky entity (and the
    /// sticky ones when `with_sticky`) that has no pending write and no newer known value.
    pub fn resync(
        &mut self,
        inner: &mut Inner,
        version: u64,
        updates: &[Update],
        with_sticky: bool,
    ) {
        let present: HashSet<&Entity> = updates.iter().map(|u| &u.entity).collect();
        let mut absent = held_entities(inner, with_sticky);
        absent.retain(|e| !present.contains(e));
        let fresh = |me: &Versions, e: &Entity| {
            !me.pending.contains_key(e) && me.known.get(e).is_none_or(|k| *k <= version)
        };
        for e in absent {
            if fresh(self, &e) {
                apply_value(inner, &e, None);
                self.known.remove(&e);
            }
        }
        for u in updates {
            // A binding the view does not hold is added only into room: the view may have
            // evicted it for a binding of its own whose write has not reached Redis yet, and
            // bringing it back would evict that newer one in its place.
            if let (Entity::Sticky(route, key), Some(_)) = (&u.entity, &u.value) {
                if !inner.sticky_fits(*route, key) {
                    continue;
                }
            }
            if fresh(self, &u.entity) {
                apply_value(inner, &u.entity, u.value.as_ref());
                self.known.remove(&u.entity);
                if matches!(u.entity, Entity::Sticky(..)) {
                    self.known.insert(u.entity.clone(), u.version);
                }
            }
        }
        if version > self.base {
            self.base = version;
        }
        let base = self.base;
        let live: HashSet<Entity> = inner
            .sticky_keys()
            .map(|(r, k)| Entity::Sticky(r, k.to_owned()))
            .collect();
        let pending = &self.pending;
        self.known.retain(|e, v| match e {
            Entity::Sticky(..) => live.contains(e) || pending.contains_key(e),
            _ => *v > base,
        });
    }
}

/// Every entity the view holds a value of (its sticky bindings only `with_sticky`): what a full
/// resync clears when Redis no longer has it.
fn held_entities(inner: &Inner, with_sticky: bool) -> HashSet<Entity> {
    // A set: the same member can be in several maps (cooldown, streak, canary count).
    let mut held: HashSet<Entity> = HashSet::default();
    held.extend(
        inner
            .cooldowns
            .keys()
            .chain(inner.member_failures.keys())
            .chain(inner.canary_successes.keys())
            .chain(inner.canaries_promoted.iter())
            .map(|id| Entity::Member(*id)),
    );
    held.extend(inner.breakers.keys().map(|id| Entity::Channel(*id)));
    held.extend(inner.recovering.keys().map(|id| Entity::Recovering(*id)));
    held.extend(
        inner
            .health
            .iter()
            .flat_map(|(c, models)| models.keys().map(move |m| Entity::Health(*c, m.clone()))),
    );
    held.extend(
        inner
            .credentials_disabled
            .keys()
            .map(|id| Entity::Credential(*id)),
    );
    if with_sticky {
        held.extend(
            inner
                .sticky_keys()
                .map(|(r, k)| Entity::Sticky(r, k.to_owned())),
        );
    }
    held
}

/// Encodes one proxy's in-flight counts for its lease: `"channel:n,channel:n"`.
pub(crate) fn encode_counts(counts: &HashMap<ChannelId, u32>) -> String {
    let mut parts: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| format!("{c}:{n}"))
        .collect();
    parts.sort();
    parts.join(",")
}

pub(crate) fn decode_counts(raw: &str) -> HashMap<ChannelId, u32> {
    raw.split(',')
        .filter_map(|part| {
            let (c, n) = part.split_once(':')?;
            Some((c.parse().ok()?, n.parse().ok()?))
        })
        .collect()
}

/// Other proxies' leases, summed into the view's `remote_in_flight`.
#[derive(Debug, Default)]
pub(crate) struct RemoteLeases {
    by_instance: HashMap<String, HashMap<ChannelId, u32>>,
}

impl RemoteLeases {
    pub fn set(&mut self, inner: &mut Inner, instance: &str, counts: HashMap<ChannelId, u32>) {
        self.by_instance.insert(instance.to_owned(), counts);
        self.sum_into(inner);
    }

    /// How many other proxies hold a lease.
    pub fn len(&self) -> usize {
        self.by_instance.len()
    }

    /// Whether `instance` holds a lease (as of the last resync or notification).
    pub fn contains(&self, instance: &str) -> bool {
        self.by_instance.contains_key(instance)
    }

    /// Replaces every lease (full resync): a proxy missing here has expired.
    pub fn replace(&mut self, inner: &mut Inner, all: HashMap<String, HashMap<ChannelId, u32>>) {
        self.by_instance = all;
        self.sum_into(inner);
    }

    fn sum_into(&self, inner: &mut Inner) {
        inner.remote_in_flight.clear();
        for counts in self.by_instance.values() {
            for (c, n) in counts {
                let total = inner.remote_in_flight.entry(*c).or_insert(0);
                *total = total.saturating_add(*n);
            }
        }
        inner.remote_in_flight.retain(|_, n| *n > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_deletions() {
        let m = parse_update("m", "5", "7|1000|2|0|1").unwrap();
        assert_eq!(m.entity, Entity::Member(5));
        assert_eq!(
            m.value,
            Some(Value::Member {
                cooldown_until: Some(1000),
                failures: 2,
                canary_successes: 0,
                promoted: true
            })
        );
        let c = parse_update("c", "3", "8|5|123|5 consecutive|odd").unwrap();
        assert_eq!(
            c.value,
            Some(Value::Channel(Breaker {
                consecutive: 5,
                tripped_at: Some(123),
                reason: Some("5 consecutive|odd".into())
            }))
        );
        let closed = parse_update("c", "3", "8|0||").unwrap();
        assert_eq!(closed.value, Some(Value::Channel(Breaker::default())));
        let h = parse_update("h", "3:gpt:4o", "9||0.5").unwrap();
        assert_eq!(h.entity, Entity::Health(3, "gpt:4o".into()));
        let s = parse_update("s", "1:sess:x", "10|4|99").unwrap();
        assert_eq!(s.entity, Entity::Sticky(1, "sess:x".into()));
        let gone = parse_update("m", "5", "11|-").unwrap();
        assert_eq!(gone.value, None);
        assert!(parse_update("m", "x", "1|-").is_none());
        assert!(parse_update("m", "1", "garbage").is_none());
    }

    #[test]
    fn parses_recovering_windows() {
        let r = parse_update("r", "3", "12|100|60100").unwrap();
        assert_eq!(r.entity, Entity::Recovering(3));
        assert_eq!(
            r.value,
            Some(Value::Recovering(Recovering {
                since: 100,
                until: 60_100
            }))
        );
        assert_eq!(
            parse_update("r", "3", "13|-").unwrap().value,
            None,
            "a deleted window"
        );
        assert!(parse_update("r", "3", "14|100").is_none());
    }

    #[test]
    fn a_health_record_deleted_in_redis_leaves_the_view() {
        use switchyard_engine::HealthView;
        let mut v = Versions::default();
        let mut inner = Inner::default();
        let set = parse_update("h", "3:gpt:4o", "5|400|0.25").unwrap();
        assert!(v.merge(&mut inner, &set));
        let merged = HealthRecord {
            latency_ms: Some(400.0),
            error_propensity: 0.25,
        };
        assert_eq!(inner.health(3, "gpt:4o"), merged);
        let gone = parse_update("h", "3:gpt:4o", "6|-").unwrap();
        assert!(v.merge(&mut inner, &gone));
        assert_eq!(inner.health(3, "gpt:4o"), HealthRecord::default());
    }

    #[test]
    fn late_notifications_never_roll_back() {
        let mut v = Versions::default();
        let mut inner = Inner::default();
        let new = parse_update("m", "1", "20|500|1|0|0").unwrap();
        let old = parse_update("m", "1", "10|900|1|0|0").unwrap();
        assert!(v.merge(&mut inner, &new));
        assert!(!v.merge(&mut inner, &old));
        assert_eq!(inner.cooldowns.get(&1), Some(&500));
        // A pending local write shields the entity.
        v.add_pending(Entity::Member(1));
        let newer = parse_update("m", "1", "30|-").unwrap();
        assert!(!v.merge(&mut inner, &newer));
        v.done_pending(&Entity::Member(1));
        assert!(v.merge(&mut inner, &newer));
        assert!(inner.cooldowns.is_empty());
    }

    #[test]
    fn counts_round_trip() {
        let counts: HashMap<ChannelId, u32> = [(1, 2), (30, 1), (4, 0)].into_iter().collect();
        let raw = encode_counts(&counts);
        assert_eq!(raw, "1:2,30:1");
        let back = decode_counts(&raw);
        assert_eq!(back.len(), 2);
        assert!(decode_counts("").is_empty());
    }

    #[test]
    fn a_full_resync_with_sticky_drops_bindings_redis_no_longer_has() {
        use switchyard_engine::HealthView;
        let mut v = Versions::default();
        let mut inner = Inner::default();
        let kept = parse_update("s", "1:kept", "5|7|99999").unwrap();
        let gone = parse_update("s", "1:gone", "6|8|99999").unwrap();
        assert!(v.merge(&mut inner, &kept));
        assert!(v.merge(&mut inner, &gone));
        v.resync(&mut inner, 10, std::slice::from_ref(&kept), true);
        let mut keys: Vec<(RouteId, String)> = inner
            .sticky_keys()
            .map(|(r, k)| (r, k.to_owned()))
            .collect();
        keys.sort();
        assert_eq!(keys, [(1, "kept".to_owned())]);
        // The binding's version is still known: a late, older notification cannot roll it back.
        let stale = parse_update("s", "1:kept", "3|9|99999").unwrap();
        assert!(!v.merge(&mut inner, &stale));
        assert_eq!(inner.sticky(1, "kept").map(|b| b.member_id), Some(7));
    }

    /// A full view bound a session of its own, evicting the earliest-expiring binding, and the
    /// write has not reached Redis: a resync read before it still has the evicted binding, and
    /// must not bring it back in the new one's place.
    #[test]
    fn a_resync_does_not_bring_back_a_binding_the_full_view_evicted() {
        use crate::types::MAX_STICKY_BINDINGS;
        use switchyard_engine::{HealthView, StickyBinding};
        let mut v = Versions::default();
        let mut inner = Inner::default();
        let binding = |expires_at| StickyBinding {
            member_id: 1,
            expires_at,
        };
        for i in 0..MAX_STICKY_BINDINGS {
            inner.insert_sticky(1, &format!("s{i}"), binding(600_000 + i as u64), 0);
        }
        inner.insert_sticky(1, "short", binding(1_000), 0);
        v.add_pending(Entity::Sticky(1, "short".to_owned()));
        assert_eq!(inner.sticky(1, "s0"), None);
        let evicted = parse_update("s", "1:s0", "5|1|600000").unwrap();
        let held = parse_update("s", "1:s1", "6|2|600001").unwrap();
        v.resync(&mut inner, 10, &[evicted, held], false);
        assert_eq!(inner.sticky(1, "s0"), None);
        assert_eq!(inner.sticky(1, "short").map(|b| b.expires_at), Some(1_000));
        // A binding the view holds is still updated from Redis.
        assert_eq!(inner.sticky(1, "s1").map(|b| b.member_id), Some(2));
        assert_eq!(inner.sticky_keys().count(), MAX_STICKY_BINDINGS);
    }

    #[test]
    fn an_entity_stays_pending_until_every_one_of_its_writes_is_done() {
        let mut v = Versions::default();
        assert!(v.idle());
        v.add_pending(Entity::Member(1));
        v.add_pending(Entity::Member(1));
        assert!(!v.idle());
        v.done_pending(&Entity::Member(1));
        assert!(
            !v.idle(),
            "one of two writes of the entity is still on its way"
        );
        let mut inner = Inner::default();
        let remote = parse_update("m", "1", "5|500|1|0|0").unwrap();
        assert!(
            !v.merge(&mut inner, &remote),
            "still shielded by the second write"
        );
        v.done_pending(&Entity::Member(1));
        assert!(v.idle());
        assert!(v.merge(&mut inner, &remote));
    }

    #[test]
    fn a_full_resync_raises_the_version_every_unlisted_entity_is_at() {
        let mut v = Versions::default();
        let mut inner = Inner::default();
        v.resync(&mut inner, 10, &[], false);
        // An entity the resync did not list is at version 10 at least: an older notification
        // about it is stale, a newer one applies.
        let older = parse_update("m", "1", "8|500|1|0|0").unwrap();
        assert!(!v.merge(&mut inner, &older));
        let newer = parse_update("m", "1", "11|500|1|0|0").unwrap();
        assert!(v.merge(&mut inner, &newer));
        // A resync at an older version (a slow read overtaken) never lowers it.
        v.resync(&mut inner, 4, &[], false);
        let between = parse_update("m", "2", "7|500|1|0|0").unwrap();
        assert!(!v.merge(&mut inner, &between));
    }

    #[test]
    fn sticky_bindings_take_no_version_from_the_resync() {
        use switchyard_engine::HealthView;
        // Bindings are not part of the periodic resync, so its version says nothing about them:
        // a binding's first notification applies whatever the resync's version was.
        let mut v = Versions::default();
        let mut inner = Inner::default();
        v.resync(&mut inner, 50, &[], false);
        let binding = parse_update("s", "1:sess", "20|7|99999").unwrap();
        assert!(v.merge(&mut inner, &binding));
        assert_eq!(inner.sticky(1, "sess").map(|b| b.member_id), Some(7));
    }

    #[test]
    fn our_own_results_are_merged_and_a_bindings_version_is_remembered() {
        use switchyard_engine::HealthView;
        let mut v = Versions::default();
        let mut inner = Inner::default();
        // A member written by this proxy: Redis's result is what the view keeps.
        let ours = parse_update("m", "1", "5|700|2|0|0").unwrap();
        v.own_result(&mut inner, &ours);
        assert_eq!(inner.cooldowns.get(&1), Some(&700));
        assert_eq!(inner.member_failures.get(&1), Some(&2));
        // A binding written by this proxy stays as written, but its version is known from
        // then on: a late notification of an older binding cannot replace it, a newer one can.
        let bound = parse_update("s", "1:sess", "5|7|99999").unwrap();
        assert!(v.merge(&mut inner, &bound));
        let rebound = parse_update("s", "1:sess", "9|8|99999").unwrap();
        v.own_result(&mut inner, &rebound);
        let late = parse_update("s", "1:sess", "8|3|99999").unwrap();
        assert!(!v.merge(&mut inner, &late), "older than our own result");
        let same = parse_update("s", "1:sess", "9|3|99999").unwrap();
        assert!(!v.merge(&mut inner, &same), "as old as our own result");
        let newer = parse_update("s", "1:sess", "10|4|99999").unwrap();
        assert!(v.merge(&mut inner, &newer));
        assert_eq!(inner.sticky(1, "sess").map(|b| b.member_id), Some(4));
        // An own result older than what is known leaves the known version alone.
        let stale_own = parse_update("s", "1:sess", "6|5|99999").unwrap();
        v.own_result(&mut inner, &stale_own);
        let after = parse_update("s", "1:sess", "10|6|99999").unwrap();
        assert!(!v.merge(&mut inner, &after), "still at version 10");
    }

    #[test]
    fn a_resync_older_than_a_known_version_keeps_that_version() {
        let mut v = Versions::default();
        let mut inner = Inner::default();
        let new = parse_update("m", "1", "20|500|1|0|0").unwrap();
        assert!(v.merge(&mut inner, &new));
        // Read at version 10 (before that write), the resync leaves the newer value alone and
        // must remember it is at 20: a notification at 15 is older than what the view shows.
        let stale = parse_update("m", "1", "10|900|3|0|0").unwrap();
        v.resync(&mut inner, 10, std::slice::from_ref(&stale), false);
        assert_eq!(inner.cooldowns.get(&1), Some(&500));
        let between = parse_update("m", "1", "15|800|2|0|0").unwrap();
        assert!(!v.merge(&mut inner, &between));
        assert_eq!(inner.cooldowns.get(&1), Some(&500));
    }

    #[test]
    fn remote_leases_sum_per_channel_and_a_proxys_new_counts_replace_its_old_ones() {
        let mut leases = RemoteLeases::default();
        let mut inner = Inner::default();
        leases.set(&mut inner, "a", [(1, 2)].into_iter().collect());
        leases.set(&mut inner, "b", [(1, 3), (2, 1)].into_iter().collect());
        let mut sums: Vec<(ChannelId, u32)> = inner
            .remote_in_flight
            .iter()
            .map(|(c, n)| (*c, *n))
            .collect();
        sums.sort();
        assert_eq!(sums, [(1, 5), (2, 1)]);
        leases.set(&mut inner, "a", HashMap::default());
        let mut sums: Vec<(ChannelId, u32)> = inner
            .remote_in_flight
            .iter()
            .map(|(c, n)| (*c, *n))
            .collect();
        sums.sort();
        assert_eq!(sums, [(1, 3), (2, 1)]);
        leases.replace(&mut inner, HashMap::default());
        assert!(inner.remote_in_flight.is_empty(), "every lease expired");
    }
}
