//! The Redis backend's per-chat keys: the AI message lists and their LRU set (each write a
//! Lua script), and the embeds, settings/memories entries and sync blobs of a chat (each
//! with its index, written in one atomic pipeline). What the `CacheBackend` methods in
//! `redis.rs` run.

use std::time::Duration;

use chatd_protocol::{ChatId, EmbedId};
use redis::{Script, ScriptInvocation, Value};

use super::super::backend::{AiPolicy, CacheError, SealedSummaries, WriteMode, keys};
use super::{RedisBackend, score, secs};
use crate::crypto::UserHash;

/// A script's list of values: `None` for nil (the chat is not cached).
fn bytes_list(v: Value) -> Result<Option<Vec<Vec<u8>>>, CacheError> {
    match v {
        Value::Nil => Ok(None),
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::BulkString(b) => Ok(b),
                other => Err(CacheError::Protocol(format!(
                    "expected bytes, got {other:?}"
                ))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(CacheError::Protocol(format!(
            "expected a list, got {other:?}"
        ))),
    }
}

/// The arguments of the AI write scripts (see [`super::scripts::AI_WRITE`]).
fn ai_write_invocation<'s>(
    script: &'s Script,
    mode: &str,
    user: &UserHash,
    chat: &ChatId,
    entries: &[Vec<u8>],
    policy: AiPolicy,
) -> ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    inv.key(keys::ai_messages(user, chat.as_str()))
        .key(keys::ai_lru(user))
        .arg(mode)
        .arg(secs(policy.ttl))
        .arg(policy.max_messages)
        .arg(policy.max_chats)
        .arg(score())
        .arg(keys::tag(user))
        .arg(chat.as_str());
    for e in entries {
        inv.arg(e.as_slice());
    }
    inv
}

/// Appends to or replaces a chat's AI list; returns the chats evicted beyond `max_chats`.
pub(super) async fn ai_write(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    mode: WriteMode,
    entries: Vec<Vec<u8>>,
    policy: AiPolicy,
) -> Result<Vec<ChatId>, CacheError> {
    let mode = match mode {
        WriteMode::Append => "append",
        WriteMode::Replace => "replace",
    };
    let inv = ai_write_invocation(&be.ai_write, mode, user, chat, &entries, policy);
    let evicted: Vec<String> = be.invoke(inv).await?;
    Ok(evicted
        .into_iter()
        .filter_map(|c| ChatId::parse(c).ok())
        .collect())
}

/// Reads a chat's AI list as it was and appends `entries` to it, in one script.
pub(super) async fn ai_read_append(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    entries: Vec<Vec<u8>>,
    policy: AiPolicy,
    create: bool,
) -> Result<Option<Vec<Vec<u8>>>, CacheError> {
    let mode = if create { "create" } else { "existing" };
    let inv = ai_write_invocation(&be.ai_read_append, mode, user, chat, &entries, policy);
    let v: Value = be.invoke(inv).await?;
    bytes_list(v)
}

/// Reads a chat's AI list, refreshing its TTL and recency.
pub(super) async fn ai_read(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    policy: AiPolicy,
) -> Result<Option<Vec<Vec<u8>>>, CacheError> {
    let mut inv = be.ai_read.prepare_invoke();
    inv.key(keys::ai_messages(user, chat.as_str()))
        .key(keys::ai_lru(user))
        .arg(secs(policy.ttl))
        .arg(score())
        .arg(chat.as_str());
    let v: Value = be.invoke(inv).await?;
    bytes_list(v)
}

/// Drops a chat from the AI cache (its exclusive embeds and settings entries with it).
pub(super) async fn ai_delete(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
) -> Result<(), CacheError> {
    let mut inv = be.ai_delete.prepare_invoke();
    inv.key(keys::ai_lru(user))
        .arg(keys::tag(user))
        .arg(chat.as_str());
    let _: i64 = be.invoke(inv).await?;
    Ok(())
}

/// A chat's summary and those of up to `others` other cached chats (one script).
pub(super) async fn ai_summaries(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    others: usize,
) -> Result<SealedSummaries, CacheError> {
    let mut inv = be.ai_summaries.prepare_invoke();
    inv.key(keys::ai_lru(user))
        .key(keys::chat_summary(user, chat.as_str()))
        .arg(keys::tag(user))
        .arg(chat.as_str())
        .arg(others);
    let v: Value = be.invoke(inv).await?;
    let unexpected = |v: &Value| CacheError::Protocol(format!("unexpected summaries: {v:?}"));
    let Value::Array(items) = v else {
        return Err(unexpected(&v));
    };
    let mut items = items.into_iter();
    let own = match items.next() {
        Some(Value::BulkString(b)) => Some(b),
        Some(Value::Nil) | None => None,
        Some(other) => return Err(unexpected(&other)),
    };
    let mut found = Vec::new();
    while let (Some(c), Some(s)) = (items.next(), items.next()) {
        match (c, s) {
            (Value::BulkString(c), Value::BulkString(s)) => {
                let id = String::from_utf8(c)
                    .ok()
                    .and_then(|c| ChatId::parse(c).ok());
                found.extend(id.map(|id| (id, s)));
            }
            (c, _) => return Err(unexpected(&c)),
        }
    }
    Ok(SealedSummaries { own, others: found })
}

/// Stores an embed and adds it to the chat's embed index.
pub(super) async fn embed_put(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    embed: &EmbedId,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<(), CacheError> {
    let key = keys::embed(user, embed.as_str());
    let index = keys::embed_index(user, chat.as_str());
    put_indexed(be, &key, value, &index, embed.as_str(), ttl).await
}

/// Stores a settings/memories entry and adds it to the chat's settings index.
pub(super) async fn settings_put(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    app_key: &str,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<(), CacheError> {
    let key = keys::settings(user, chat.as_str(), app_key);
    let index = keys::settings_index(user, chat.as_str());
    put_indexed(be, &key, value, &index, app_key, ttl).await
}

/// One transaction: `key` set to `value` and `member` added to the set `index`, both for `ttl`.
async fn put_indexed(
    be: &RedisBackend,
    key: &str,
    value: Vec<u8>,
    index: &str,
    member: &str,
    ttl: Duration,
) -> Result<(), CacheError> {
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("SET")
        .arg(key)
        .arg(value)
        .arg("EX")
        .arg(secs(ttl))
        .ignore()
        .cmd("SADD")
        .arg(index)
        .arg(member)
        .ignore()
        .cmd("EXPIRE")
        .arg(index)
        .arg(secs(ttl))
        .ignore();
    be.query_pipe(pipe).await
}

/// Replaces a chat's sync blobs and adds the chat to the user's sync index.
pub(super) async fn sync_put(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
    blobs: Vec<Vec<u8>>,
    ttl: Duration,
) -> Result<(), CacheError> {
    let key = keys::sync(user, chat.as_str());
    let index = keys::sync_index(user);
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DEL").arg(&key).ignore();
    if !blobs.is_empty() {
        pipe.cmd("RPUSH").arg(&key).arg(blobs).ignore();
        pipe.cmd("EXPIRE").arg(&key).arg(secs(ttl)).ignore();
    }
    pipe.cmd("SADD")
        .arg(&index)
        .arg(chat.as_str())
        .ignore()
        .cmd("EXPIRE")
        .arg(&index)
        .arg(secs(ttl))
        .ignore();
    be.query_pipe(pipe).await
}

/// A chat's sync blobs; `None` when the chat has none cached.
pub(super) async fn sync_get(
    be: &RedisBackend,
    user: &UserHash,
    chat: &ChatId,
) -> Result<Option<Vec<Vec<u8>>>, CacheError> {
    let key = keys::sync(user, chat.as_str());
    let mut pipe = redis::pipe();
    pipe.cmd("EXISTS")
        .arg(&key)
        .cmd("LRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1);
    let (exists, items): (bool, Vec<Vec<u8>>) = be.query_pipe(pipe).await?;
    Ok(exists.then_some(items))
}

/// Drops every sync blob of the user, with the index.
pub(super) async fn sync_clear(be: &RedisBackend, user: &UserHash) -> Result<(), CacheError> {
    let mut inv = be.sync_clear.prepare_invoke();
    inv.key(keys::sync_index(user)).arg(keys::tag(user));
    let _: i64 = be.invoke(inv).await?;
    Ok(())
}
