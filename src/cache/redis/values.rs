//! The Redis backend's small values: plain key/value entries, per-field claims, counters
//! and the user's pending answers (what the `CacheBackend` methods in `redis.rs` run).

use std::time::Duration;

use super::super::backend::{CacheError, PENDING_MAX, Pending, keys};
use super::{RedisBackend, score, secs};
use crate::crypto::UserHash;

/// Sets `key` to `value` for `ttl`.
pub(super) async fn kv_put(
    be: &RedisBackend,
    key: &str,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<(), CacheError> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value).arg("EX").arg(secs(ttl));
    be.query(cmd).await
}

/// The value under `key`, if any.
pub(super) async fn kv_get(be: &RedisBackend, key: String) -> Result<Option<Vec<u8>>, CacheError> {
    let mut cmd = redis::cmd("GET");
    cmd.arg(key);
    be.query(cmd).await
}

/// Sets `key` unless it is held; returns the value that holds it.
pub(super) async fn kv_claim(
    be: &RedisBackend,
    key: &str,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<Vec<u8>, CacheError> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(&value)
        .arg("NX")
        .arg("GET")
        .arg("PX")
        .arg(ttl.as_millis() as u64);
    let held: Option<Vec<u8>> = be.query(cmd).await?;
    Ok(held.unwrap_or(value))
}

/// Drops `key`.
pub(super) async fn kv_delete(be: &RedisBackend, key: &str) -> Result<(), CacheError> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(key);
    be.query(cmd).await
}

/// Sets a field of the hash `key` unless it is held (see [`super::scripts::FIELD_CLAIM`]);
/// returns the value that holds it.
pub(super) async fn field_claim(
    be: &RedisBackend,
    key: &str,
    field: &str,
    value: Vec<u8>,
    ttl: Duration,
    max_fields: usize,
) -> Result<Vec<u8>, CacheError> {
    let mut inv = be.field_claim.prepare_invoke();
    inv.key(key)
        .arg(field)
        .arg(value)
        .arg(ttl.as_millis() as u64)
        .arg(max_fields);
    be.invoke(inv).await
}

/// Sets a field of the hash `key` and refreshes the hash's TTL.
pub(super) async fn field_put(
    be: &RedisBackend,
    key: &str,
    field: &str,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<(), CacheError> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("HSET")
        .arg(key)
        .arg(field)
        .arg(value)
        .ignore()
        .cmd("PEXPIRE")
        .arg(key)
        .arg(ttl.as_millis() as u64)
        .ignore();
    be.query_pipe::<()>(pipe).await
}

/// Drops a field of the hash `key`.
pub(super) async fn field_delete(
    be: &RedisBackend,
    key: &str,
    field: &str,
) -> Result<(), CacheError> {
    let mut cmd = redis::cmd("HDEL");
    cmd.arg(key).arg(field);
    be.query::<()>(cmd).await
}

/// Bumps the counter `key` (see [`super::scripts::COUNTER_BUMP`]).
pub(super) async fn counter_bump(
    be: &RedisBackend,
    key: &str,
    seed: Option<u64>,
    ttl: Duration,
) -> Result<Option<u64>, CacheError> {
    let mut call = be.counter_bump.key(key);
    call.arg(seed.map_or(-1, |s| s as i64))
        .arg(ttl.as_millis() as u64);
    let n: Option<u64> = be.invoke(call).await?;
    Ok(n)
}

/// The counter `key`, if set.
pub(super) async fn counter_get(be: &RedisBackend, key: &str) -> Result<Option<u64>, CacheError> {
    let mut cmd = redis::cmd("GET");
    cmd.arg(key);
    let v: Option<u64> = be.query(cmd).await?;
    Ok(v)
}

/// Keeps a pending answer of the user (at most [`PENDING_MAX`], the oldest dropped).
pub(super) async fn pending_put(
    be: &RedisBackend,
    user: &UserHash,
    id: &str,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<(), CacheError> {
    let mut call = be.pending_put.key(keys::pending(user));
    call.key(keys::pending_order(user))
        .arg(id)
        .arg(value)
        .arg(score())
        .arg(PENDING_MAX)
        .arg(ttl.as_millis() as u64);
    be.invoke::<()>(call).await
}

/// The user's pending answers.
pub(super) async fn pending_list(
    be: &RedisBackend,
    user: &UserHash,
) -> Result<Vec<Pending>, CacheError> {
    let mut cmd = redis::cmd("HGETALL");
    cmd.arg(keys::pending(user));
    let all: Vec<Pending> = be.query(cmd).await?;
    Ok(all)
}

/// Drops one pending answer of the user.
pub(super) async fn pending_delete(
    be: &RedisBackend,
    user: &UserHash,
    id: &str,
) -> Result<(), CacheError> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .hdel(keys::pending(user), id)
        .ignore()
        .zrem(keys::pending_order(user), id)
        .ignore();
    be.query_pipe::<()>(pipe).await
}
