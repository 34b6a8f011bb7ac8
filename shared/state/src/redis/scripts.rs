//! The server-side Lua scripts: every read-modify-write of shared state is one of these, run
//! atomically by Redis (EVALSHA). Names carry a version (`switchyard_*_v1`): a changed script gets
//! a new name (and so a new SHA), so old and new proxies can run side by side in a rolling deploy.
//!
//! Layout (all keys share the hash tag `{sy:PREFIX}`, so every script's keys live in one Cluster
//! slot): `ver` (global version counter), hashes `member`, `channel`, `recovering`, `health`,
//! `cred`, `sticky` (+ zset `sticky_exp`), zset `leases` and one `lease:<instance>` string per
//! live proxy. `recovering` is a hash of its own (not more fields in `channel`), so proxies of
//! the previous release, which do not know it, read and write `channel` values unchanged.
//! Every stored value is `"<version>|<fields…>"`; the version orders updates across proxies.
//! Limits keep plain integers outside that scheme (no proxy merges them; each learns the
//! counter from its own claims): one counter string `limit:<limit>:<window start>` per window,
//! and one hash `conc:<limit>` per concurrency limit (a field per proxy, its reservation).
//!
//! Each write script returns `[flag, kind, field, value, kind, field, value, …]`: an effect flag
//! (tripped / promoted) and the new value of every entity it touched (`"<version>|-"` = deleted),
//! which the writer applies locally and publishes to the other proxies.
//!
//! The scripts look alike (bump the version, load, change, save, return the effects) and a
//! duplicate-code report pairs them; each is its own atomic step on the server, sharing the
//! `load_*`/`save_*` helpers, so the likeness stays.

use redis::Script;

/// Shared Lua helpers, prepended to every script.
const PRELUDE: &str = r#"
local ALPHA = 0.2
local function split(s, n)
  local out, start = {}, 1
  for i = 1, n - 1 do
    local j = string.find(s, '|', start, true)
    if not j then
      out[i] = string.sub(s, start)
      for k = i + 1, n do out[k] = '' end
      return out
    end
    out[i] = string.sub(s, start, j - 1)
    start = j + 1
  end
  out[n] = string.sub(s, start)
  return out
end
local function num(s)
  if s == nil or s == '' then return nil end
  return tonumber(s)
end
local function fmt(x) return string.format('%.17g', x) end
local function int(x) return string.format('%d', x) end
local function clamp_unit(x)
  if x ~= x then return 0 end
  if x < 0 then return 0 end
  if x > 1 then return 1 end
  return x
end
-- Versions are max(previous + 1, server microseconds): monotonic even if the counter key expires.
local function bump(verkey, ttl)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local v = tonumber(redis.call('GET', verkey) or '0')
  if v + 1 > now_us then now_us = v + 1 end
  redis.call('SET', verkey, int(now_us), 'PX', ttl)
  return int(now_us)
end
local out = {0}
local function emit(kind, field, value)
  out[#out + 1] = kind
  out[#out + 1] = field
  out[#out + 1] = value
end
local function touch(key, ttl) redis.call('PEXPIRE', key, ttl) end
-- member: version|cooldown_until|failures|canary_successes|promoted|last_failure_at
local function load_member(h, id)
  local raw = redis.call('HGET', h, id)
  if not raw then return {cd = nil, f = 0, c = 0, p = 0, at = nil} end
  local p = split(raw, 6)
  return {cd = num(p[2]), f = num(p[3]) or 0, c = num(p[4]) or 0, p = num(p[5]) or 0,
    at = num(p[6])}
end
local function save_member(h, id, m, v, ttl)
  local value
  if m.cd == nil and m.f == 0 and m.c == 0 and m.p == 0 then
    redis.call('HDEL', h, id)
    value = v .. '|-'
  else
    local cd = ''
    if m.cd ~= nil then cd = int(m.cd) end
    local at = ''
    if m.at ~= nil then at = int(m.at) end
    value = v .. '|' .. cd .. '|' .. int(m.f) .. '|' .. int(m.c) .. '|' .. int(m.p) .. '|' .. at
    redis.call('HSET', h, id, value)
    touch(h, ttl)
  end
  emit('m', id, value)
end
-- channel: version|consecutive|tripped_at|reason
local function load_channel(h, id)
  local raw = redis.call('HGET', h, id)
  if not raw then return {n = 0, at = nil, reason = ''} end
  local p = split(raw, 4)
  return {n = num(p[2]) or 0, at = num(p[3]), reason = p[4]}
end
local function save_channel(h, id, b, v, ttl)
  local at = ''
  if b.at ~= nil then at = int(b.at) end
  local value = v .. '|' .. int(b.n) .. '|' .. at .. '|' .. b.reason
  redis.call('HSET', h, id, value)
  touch(h, ttl)
  emit('c', id, value)
end
-- recovering: version|since|until (a channel's slow-start window)
local function load_recovering(h, id)
  local raw = redis.call('HGET', h, id)
  if not raw then return nil end
  local p = split(raw, 3)
  local since, until_ms = num(p[2]), num(p[3])
  if since == nil or until_ms == nil then return nil end
  return {since = since, until_ms = until_ms}
end
local function drop_recovering(h, id, v)
  if redis.call('HDEL', h, id) == 1 then emit('r', id, v .. '|-') end
end
-- health: version|latency_ms|error_propensity (latency empty = no sample)
local function load_health(h, field)
  local raw = redis.call('HGET', h, field)
  if not raw then return {lat = nil, prop = 0} end
  local p = split(raw, 3)
  return {lat = num(p[2]), prop = num(p[3]) or 0}
end
local function save_health(h, field, r, v, ttl)
  local lat = ''
  if r.lat ~= nil then lat = fmt(r.lat) end
  local value = v .. '|' .. lat .. '|' .. fmt(r.prop)
  redis.call('HSET', h, field, value)
  touch(h, ttl)
  emit('h', field, value)
end
"#;

/// record_failure. KEYS: ver, member, health.
/// ARGV: ttl, member, health field, kind, retry_after_ms, fault_protection, cooldown_ms, now.
const FAILURE: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
local kind = ARGV[4]
if kind ~= 'rejected' then
  local r = load_health(KEYS[3], ARGV[3])
  r.prop = clamp_unit(0.5 + 0.5 * clamp_unit(r.prop))
  save_health(KEYS[3], ARGV[3], r, v, ttl)
end
local m = load_member(KEYS[2], ARGV[2])
m.c = 0
m.f = m.f + 1
local now = tonumber(ARGV[8])
if m.at == nil or m.at < now then m.at = now end
if ARGV[6] == '1' and (kind ~= 'transport' or m.f >= 2) then
  local base = now + tonumber(ARGV[7])
  local asked = now + tonumber(ARGV[5])
  local until_ms = math.max(base, asked)
  if m.cd == nil or m.cd < until_ms then m.cd = until_ms end
end
save_member(KEYS[2], ARGV[2], m, v, ttl)
return out
"#;

/// record_success, for a run of one member's successes on one (channel, model) that the writer
/// coalesced from its queue (one write or many; no other write touching the member or the
/// health record lies between them). KEYS: ver, member, channel, health.
/// ARGV: ttl, member, channel, health field, canary, promote_after, now (the latest of the run),
/// latency_ms… (one per success, in queue order: the EWMA and the propensity step run once per
/// sample, exactly as the same successes one by one would).
/// A success older than the member's last failure (a write replayed after a Redis outage)
/// leaves that failure's streak and cooldown alone; one by one, the first success at or after
/// that failure clears it and the rest find it clear, so the latest `now` of the run decides.
const SUCCESS: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
local m = load_member(KEYS[2], ARGV[2])
if m.at == nil or tonumber(ARGV[7]) >= m.at then
  m.f = 0
  m.cd = nil
  m.at = nil
end
if ARGV[5] == '1' then
  local after = tonumber(ARGV[6])
  for _ = 8, #ARGV do
    if m.p == 0 then
      m.c = m.c + 1
      if after > 0 and m.c >= after then
        m.p = 1
        out[1] = 1
      end
    end
  end
end
save_member(KEYS[2], ARGV[2], m, v, ttl)
if redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then
  local b = load_channel(KEYS[3], ARGV[3])
  b.n = 0
  save_channel(KEYS[3], ARGV[3], b, v, ttl)
end
local r = load_health(KEYS[4], ARGV[4])
for i = 8, #ARGV do
  local l = tonumber(ARGV[i])
  if r.lat ~= nil then
    r.lat = ALPHA * l + (1.0 - ALPHA) * r.lat
  else
    r.lat = l
  end
  r.prop = clamp_unit(0.5 * r.prop)
end
save_health(KEYS[4], ARGV[4], r, v, ttl)
return out
"#;

/// record_channel_failure: trips at the threshold, or at once while the channel is recovering
/// (the window ends with a trip or with the first failure after it).
/// KEYS: ver, channel, recovering. ARGV: ttl, channel, fault_protection, threshold, now.
const CHANNEL_FAILURE: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
local b = load_channel(KEYS[2], ARGV[2])
local now = tonumber(ARGV[5])
local w = load_recovering(KEYS[3], ARGV[2])
local recovering = b.at == nil and w ~= nil and now < w.until_ms
b.n = b.n + 1
local threshold = tonumber(ARGV[4])
if ARGV[3] == '1' and b.at == nil and (recovering or (threshold > 0 and b.n >= threshold)) then
  b.at = now
  if recovering then
    b.reason = 'failed while recovering (slow start)'
  else
    b.reason = string.format('%d consecutive failed attempts', b.n)
  end
  out[1] = 1
end
save_channel(KEYS[2], ARGV[2], b, v, ttl)
if w ~= nil and (b.at ~= nil or now >= w.until_ms) then
  drop_recovering(KEYS[3], ARGV[2], v)
end
return out
"#;

/// trip_breaker (also ends a recovering window). KEYS: ver, channel, recovering.
/// ARGV: ttl, channel, reason, now.
const TRIP: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
local b = load_channel(KEYS[2], ARGV[2])
if b.at == nil then
  b.at = tonumber(ARGV[4])
  b.reason = ARGV[3]
  out[1] = 1
end
save_channel(KEYS[2], ARGV[2], b, v, ttl)
drop_recovering(KEYS[3], ARGV[2], v)
return out
"#;

/// reset_channel, and begin_recovery when `until` > `since` (a slow-start window is written).
/// KEYS: ver, channel, member, recovering. ARGV: ttl, channel, since, until, member ids…
const RESET: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
redis.call('HDEL', KEYS[2], ARGV[2])
emit('c', ARGV[2], v .. '|-')
local since, until_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
if until_ms > since then
  local value = v .. '|' .. int(since) .. '|' .. int(until_ms)
  redis.call('HSET', KEYS[4], ARGV[2], value)
  touch(KEYS[4], ttl)
  emit('r', ARGV[2], value)
else
  drop_recovering(KEYS[4], ARGV[2], v)
end
for i = 5, #ARGV do
  local m = load_member(KEYS[3], ARGV[i])
  m.f = 0
  m.cd = nil
  save_member(KEYS[3], ARGV[i], m, v, ttl)
end
return out
"#;

/// extend_cooldown (extend-only). KEYS: ver, member. ARGV: ttl, member, until.
const COOLDOWN: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
local m = load_member(KEYS[2], ARGV[2])
local until_ms = tonumber(ARGV[3])
if m.cd == nil or m.cd < until_ms then m.cd = until_ms end
save_member(KEYS[2], ARGV[2], m, v, ttl)
return out
"#;

/// disable_credential (first reason wins). KEYS: ver, cred. ARGV: ttl, credential, reason, now.
const CREDENTIAL: &str = r#"
local ttl = tonumber(ARGV[1])
local raw = redis.call('HGET', KEYS[2], ARGV[2])
if raw then
  emit('k', ARGV[2], raw)
  return out
end
local v = bump(KEYS[1], ttl)
local value = v .. '|' .. ARGV[4] .. '|' .. ARGV[3]
redis.call('HSET', KEYS[2], ARGV[2], value)
touch(KEYS[2], ttl)
emit('k', ARGV[2], value)
return out
"#;

/// enable_credential: clears a runtime disable unless it was set after `now` (a newer failure
/// than the probe that passed). KEYS: ver, cred. ARGV: ttl, credential, now.
const ENABLE_CREDENTIAL: &str = r#"
local ttl = tonumber(ARGV[1])
local raw = redis.call('HGET', KEYS[2], ARGV[2])
if raw then
  local p = split(raw, 3)
  local at = num(p[2])
  if at ~= nil and at > tonumber(ARGV[3]) then
    emit('k', ARGV[2], raw)
    return out
  end
  redis.call('HDEL', KEYS[2], ARGV[2])
end
local v = bump(KEYS[1], ttl)
emit('k', ARGV[2], v .. '|-')
return out
"#;

/// bind_sticky (bind or renew; expired bindings pruned; a new binding past the capacity first
/// removes the earliest-expiring ones, as a proxy's own view does, so Redis never holds more
/// bindings than a view and a resync brings back none a view evicted). KEYS: ver, sticky,
/// sticky_exp. ARGV: ttl, field (route:session), member, expires_at, now, capacity.
const STICKY: &str = r#"
local ttl = tonumber(ARGV[1])
local v = bump(KEYS[1], ttl)
local now = tonumber(ARGV[5])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 64)
for _, f in ipairs(expired) do
  redis.call('HDEL', KEYS[2], f)
  redis.call('ZREM', KEYS[3], f)
end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then
  local capacity = tonumber(ARGV[6])
  while redis.call('HLEN', KEYS[2]) >= capacity do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)
    if #first == 0 then break end
    redis.call('HDEL', KEYS[2], first[1])
    redis.call('ZREM', KEYS[3], first[1])
  end
end
local value = v .. '|' .. ARGV[3] .. '|' .. ARGV[4]
redis.call('HSET', KEYS[2], ARGV[2], value)
redis.call('ZADD', KEYS[3], tonumber(ARGV[4]), ARGV[2])
touch(KEYS[2], ttl)
touch(KEYS[3], ttl)
emit('s', ARGV[2], value)
return out
"#;

/// One proxy's in-flight lease. KEYS: leases, lease:<instance>.
/// ARGV: instance, counts ("channel:n,…"), lease_ms, state ttl. Uses the server clock, so
/// proxies' clock skew cannot expire each other's leases early.
const LEASE: &str = r#"
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PX', lease)
redis.call('ZADD', KEYS[1], now_ms + lease, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
"#;

/// Everything, read atomically at one version (read-only: runs with EVALSHA_RO semantics).
/// KEYS: ver, member, channel, health, cred, sticky, leases, recovering.
/// ARGV: with_sticky, lease key prefix.
/// Returns [version, members, channels, health, creds, sticky, leases, recovering] (flat
/// field/value lists).
const SNAPSHOT: &str = r#"
local ver = redis.call('GET', KEYS[1]) or '0'
local sticky = {}
if ARGV[1] == '1' then sticky = redis.call('HGETALL', KEYS[6]) end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local leases = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], now_ms, '+inf')) do
  local counts = redis.call('GET', ARGV[2] .. id)
  if counts then
    leases[#leases + 1] = id
    leases[#leases + 1] = counts
  end
end
return {ver, redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[3]),
  redis.call('HGETALL', KEYS[4]), redis.call('HGETALL', KEYS[5]), sticky, leases,
  redis.call('HGETALL', KEYS[8])}
"#;

/// A limit's shared counter for one window: what the fleet's proxies have claimed (allowance
/// handed out, plus consumption beyond it). KEYS: counter, then a rolling window's earlier day
/// counters (read only). ARGV: debt (signed: consumption beyond the proxy's earlier claims,
/// charged whatever the room; negative = unused allowance given back), want (more allowance,
/// granted up to the room), limit value, ttl_ms. Returns {granted, counter after, the earlier
/// days' sum}. A grant never takes the counter past the limit less the earlier days.
const LIMIT_CLAIM: &str = r#"
local c = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1])
if c < 0 then c = 0 end
local before = 0
for i = 2, #KEYS do
  before = before + tonumber(redis.call('GET', KEYS[i]) or '0')
end
local g = tonumber(ARGV[3]) - before - c
if g > tonumber(ARGV[2]) then g = tonumber(ARGV[2]) end
if g < 0 then g = 0 end
c = c + g
redis.call('SET', KEYS[1], string.format('%d', c), 'PX', tonumber(ARGV[4]))
return {g, c, before}
"#;

/// A concurrency limit: one hash field per proxy holding its reservation (the slots it holds).
/// A proxy whose lease expired is gone, and so are its slots (deleted here). KEYS: hash, leases.
/// ARGV: instance, held (0 = release every slot), ttl_ms. Returns {held, fleet total}.
const LIMIT_CONCURRENT: &str = r#"
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local total = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[1] then
    local exp = redis.call('ZSCORE', KEYS[2], all[i])
    if exp and tonumber(exp) > now_ms then
      total = total + tonumber(all[i + 1])
    else
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
end
local held = tonumber(ARGV[2])
if held > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', held))
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return {held, total + held}
"#;

/// The loaded scripts, by operation.
pub(crate) struct Scripts {
    pub failure: Script,
    pub success: Script,
    pub channel_failure: Script,
    pub trip: Script,
    pub reset: Script,
    pub cooldown: Script,
    pub credential: Script,
    pub enable_credential: Script,
    pub sticky: Script,
    pub lease: Script,
    pub snapshot: Script,
    pub limit_claim: Script,
    pub limit_concurrent: Script,
}

/// A script body with its versioned name as a leading comment: the name is part of the SHA.
fn script(name: &str, body: &str, prelude: bool) -> Script {
    let prelude = if prelude { PRELUDE } else { "" };
    Script::new(&format!("-- {name}\n{prelude}{body}"))
}

impl Scripts {
    pub fn new() -> Scripts {
        Scripts {
            failure: script("switchyard_failure_v1", FAILURE, true),
            success: script("switchyard_success_v2", SUCCESS, true),
            channel_failure: script("switchyard_channel_failure_v2", CHANNEL_FAILURE, true),
            trip: script("switchyard_trip_breaker_v2", TRIP, true),
            reset: script("switchyard_reset_channel_v2", RESET, true),
            cooldown: script("switchyard_cooldown_v1", COOLDOWN, true),
            credential: script("switchyard_disable_credential_v1", CREDENTIAL, true),
            enable_credential: script("switchyard_enable_credential_v1", ENABLE_CREDENTIAL, true),
            sticky: script("switchyard_sticky_v2", STICKY, true),
            lease: script("switchyard_lease_v1", LEASE, false),
            snapshot: script("switchyard_snapshot_v2", SNAPSHOT, false),
            limit_claim: script("switchyard_limit_claim_v2", LIMIT_CLAIM, false),
            limit_concurrent: script("switchyard_limit_concurrent_v1", LIMIT_CONCURRENT, false),
        }
    }

    pub fn all(&self) -> [&Script; 13] {
        [
            &self.failure,
            &self.success,
            &self.channel_failure,
            &self.trip,
            &self.reset,
            &self.cooldown,
            &self.credential,
            &self.enable_credential,
            &self.sticky,
            &self.lease,
            &self.snapshot,
            &self.limit_claim,
            &self.limit_concurrent,
        ]
    }
}
