//! The Redis store's indexes and claims ([`crate::records`]): asked of Redis at once, on a
//! short-lived connection, within [`RECORD_TIMEOUT`]. An index is one hash (member →
//! `expiry:value`) whose key lives as long as its longest-lived entry; a claim is a key holding
//! its expiry, set only when no live claim holds it. Both under the fleet's hash tag, like every other key.

use std::future::Future;

use redis::Script;
use switchyard_engine::UnixMillis;

use super::conn::RedisTarget;
use crate::records::{IndexEntry, RecordError, RecordFuture, MAX_INDEX_ENTRIES, RECORD_TIMEOUT};

/// Adds or replaces one member; over the bound, drops the member that expires first; keeps the
/// hash alive until its latest expiry.
const PUT: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[5]) then
  local all = redis.call('HGETALL', KEYS[1])
  local first, first_expiry = nil, nil
  for i = 1, #all, 2 do
    local expiry = tonumber(string.match(all[i + 1], '^(%d+):')) or 0
    if all[i] ~= ARGV[1] and (first_expiry == nil or expiry < first_expiry) then
      first, first_expiry = all[i], expiry
    end
  end
  if first then redis.call('HDEL', KEYS[1], first) end
end
local want = tonumber(ARGV[3]) - tonumber(ARGV[4])
if want > 0 and redis.call('PTTL', KEYS[1]) < want then
  redis.call('PEXPIRE', KEYS[1], want)
end
return 1
";

/// Runs `run` on a fresh connection to `target` within [`RECORD_TIMEOUT`].
fn on_redis<T, F, Fut>(target: &RedisTarget, run: F) -> RecordFuture<T>
where
    T: Send + 'static,
    F: FnOnce(super::conn::Conn) -> Fut + Send + 'static,
    Fut: Future<Output = redis::RedisResult<T>> + Send,
{
    let target = target.clone();
    Box::pin(async move {
        let work = async {
            let conn = target.connect(RECORD_TIMEOUT).await?;
            run(conn).await
        };
        match tokio::time::timeout(RECORD_TIMEOUT, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(RecordError::Unavailable(e.to_string())),
            Err(_) => Err(RecordError::Unavailable(format!(
                "Redis did not answer within {} ms",
                RECORD_TIMEOUT.as_millis()
            ))),
        }
    })
}

pub(super) fn put(
    target: &RedisTarget,
    key: String,
    entry: IndexEntry,
    now: UnixMillis,
) -> RecordFuture<()> {
    on_redis(target, move |mut conn| async move {
        let stored = format!("{}:{}", entry.expires_at, entry.value);
        let _: i64 = Script::new(PUT)
            .key(key)
            .arg(entry.member)
            .arg(stored)
            .arg(entry.expires_at)
            .arg(now)
            .arg(MAX_INDEX_ENTRIES)
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    })
}

pub(super) fn list(
    target: &RedisTarget,
    key: String,
    now: UnixMillis,
) -> RecordFuture<Vec<IndexEntry>> {
    on_redis(target, move |mut conn| async move {
        let all: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        let mut live = Vec::with_capacity(all.len());
        let mut expired = Vec::new();
        for (member, stored) in all {
            let parsed = stored
                .split_once(':')
                .and_then(|(expiry, value)| Some((expiry.parse::<u64>().ok()?, value)));
            match parsed {
                Some((expires_at, value)) if expires_at > now => live.push(IndexEntry {
                    member,
                    value: value.to_owned(),
                    expires_at,
                }),
                _ => expired.push(member),
            }
        }
        if !expired.is_empty() {
            let _: i64 = redis::cmd("HDEL")
                .arg(&key)
                .arg(&expired)
                .query_async(&mut conn)
                .await?;
        }
        live.sort_by(|a, b| a.member.cmp(&b.member));
        Ok(live)
    })
}

pub(super) fn remove(target: &RedisTarget, key: String, member: String) -> RecordFuture<()> {
    on_redis(target, move |mut conn| async move {
        let _: i64 = redis::cmd("HDEL")
            .arg(key)
            .arg(member)
            .query_async(&mut conn)
            .await?;
        Ok(())
    })
}

/// Claims a key unless a claim on it lives past `now` (time is the caller's, as everywhere in
/// the store); the key itself expires once the claim has.
const CLAIM: &str = r"
local held = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if held > tonumber(ARGV[2]) then return 0 end
local ttl = tonumber(ARGV[1]) - tonumber(ARGV[2])
if ttl < 1 then ttl = 1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return 1
";

pub(super) fn claim(
    target: &RedisTarget,
    key: String,
    expires_at: UnixMillis,
    now: UnixMillis,
) -> RecordFuture<bool> {
    on_redis(target, move |mut conn| async move {
        let won: i64 = Script::new(CLAIM)
            .key(key)
            .arg(expires_at)
            .arg(now)
            .invoke_async(&mut conn)
            .await?;
        Ok(won == 1)
    })
}
