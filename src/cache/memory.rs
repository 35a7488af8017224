//! The embedded cache backend: Redis-like values in a DashMap with per-entry expiry
//! (tokio time, so paused-time tests work), bounded in entry count. Compound operations
//! take one short std Mutex so they are atomic, as the Redis backend's Lua script is. The
//! entries and their expiry are in [`entries`], a chat's AI list and the LRU of chats in
//! [`chats`], the small values (markers, counters, pending answers) in [`values`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chatd_protocol::{ChatId, EmbedId};
use dashmap::DashMap;
use futures_util::future::BoxFuture;

use super::backend::{
    AiPolicy, CacheBackend, CacheError, PENDING_MAX, Pending, SealedSummaries, WriteMode, keys,
};
use crate::crypto::UserHash;

mod chats;
mod entries;
mod values;

use entries::{Entry, Value};

/// The cache inside this process.
pub struct MemoryBackend {
    map: DashMap<String, Entry>,
    /// Serializes compound operations; never held across an await (there are none here).
    compound: Mutex<()>,
    max_entries: usize,
    /// Monotonic recency counter for the LRU sets.
    clock: AtomicU64,
}

impl MemoryBackend {
    pub fn new(max_entries: usize) -> Self {
        Self {
            map: DashMap::new(),
            compound: Mutex::new(()),
            max_entries: max_entries.max(16),
            clock: AtomicU64::new(0),
        }
    }

    /// The lock of compound operations.
    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.compound.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next recency score.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }
}

fn ready<T: Send + 'static>(v: T) -> BoxFuture<'static, T> {
    Box::pin(std::future::ready(v))
}

impl CacheBackend for MemoryBackend {
    fn ai_write<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        mode: WriteMode,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Vec<ChatId>, CacheError>> {
        ready(Ok(self.ai_write_now(user, chat, mode, entries, policy)))
    }

    fn ai_read_append<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
        create: bool,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        ready(Ok(
            self.ai_read_append_now(user, chat, entries, policy, create)
        ))
    }

    fn ai_read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        ready(Ok(self.ai_read_now(user, chat, policy)))
    }

    fn ai_delete<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.ai_delete_now(user, chat);
        ready(Ok(()))
    }

    fn ai_summaries<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        others: usize,
    ) -> BoxFuture<'a, Result<SealedSummaries, CacheError>> {
        ready(Ok(self.ai_summaries_now(user, chat, others)))
    }

    fn embed_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        embed: &'a EmbedId,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        let _guard = self.lock();
        self.set(
            keys::embed(user, embed.as_str()),
            Value::Bytes(value),
            Some(ttl),
        );
        self.set_add(&keys::embed_index(user, chat.as_str()), embed.as_str(), ttl);
        ready(Ok(()))
    }

    fn embed_get<'a>(
        &'a self,
        user: &'a UserHash,
        embed: &'a EmbedId,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        ready(Ok(match self.get(&keys::embed(user, embed.as_str())) {
            Some(Value::Bytes(b)) => Some(b),
            _ => None,
        }))
    }

    fn settings_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        let _guard = self.lock();
        self.set(
            keys::settings(user, chat.as_str(), app_key),
            Value::Bytes(value),
            Some(ttl),
        );
        self.set_add(&keys::settings_index(user, chat.as_str()), app_key, ttl);
        ready(Ok(()))
    }

    fn settings_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        ready(Ok(
            match self.get(&keys::settings(user, chat.as_str(), app_key)) {
                Some(Value::Bytes(b)) => Some(b),
                _ => None,
            },
        ))
    }

    fn sync_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        blobs: Vec<Vec<u8>>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        let _guard = self.lock();
        self.set(
            keys::sync(user, chat.as_str()),
            Value::List(blobs),
            Some(ttl),
        );
        self.set_add(&keys::sync_index(user), chat.as_str(), ttl);
        ready(Ok(()))
    }

    fn sync_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        ready(Ok(match self.get(&keys::sync(user, chat.as_str())) {
            Some(Value::List(l)) => Some(l),
            _ => None,
        }))
    }

    fn sync_clear<'a>(&'a self, user: &'a UserHash) -> BoxFuture<'a, Result<(), CacheError>> {
        let _guard = self.lock();
        let index = keys::sync_index(user);
        for chat in self.set_members(&index) {
            self.del(&keys::sync(user, &chat));
        }
        self.del(&index);
        ready(Ok(()))
    }

    fn kv_put<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.set(key.to_string(), Value::Bytes(value), Some(ttl));
        ready(Ok(()))
    }

    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>> {
        ready(Ok(match self.get(key) {
            Some(Value::Bytes(b)) => Some(b),
            _ => None,
        }))
    }

    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), CacheError>> {
        self.del(key);
        ready(Ok(()))
    }

    fn kv_claim<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>> {
        let _one = self.lock();
        if let Some(Value::Bytes(held)) = self.get(key) {
            return ready(Ok(held));
        }
        self.set(key.to_string(), Value::Bytes(value.clone()), Some(ttl));
        ready(Ok(value))
    }

    fn field_claim<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
        max_fields: usize,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>> {
        ready(Ok(self.field_claim_now(key, field, value, ttl, max_fields)))
    }

    fn field_put<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.field_put_now(key, field, value, ttl);
        ready(Ok(()))
    }

    fn field_delete<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.field_delete_now(key, field);
        ready(Ok(()))
    }

    fn counter_bump<'a>(
        &'a self,
        key: &'a str,
        seed: Option<u64>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, CacheError>> {
        ready(Ok(self.counter_bump_now(key, seed, ttl)))
    }

    fn counter_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<u64>, CacheError>> {
        ready(Ok(match self.get(key) {
            Some(Value::Bytes(b)) => counter_value(&b),
            _ => None,
        }))
    }

    fn pending_put<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.pending_put_now(user, id, value, ttl);
        ready(Ok(()))
    }

    fn pending_list<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<Vec<Pending>, CacheError>> {
        ready(Ok(match self.get(&keys::pending(user)) {
            Some(Value::Pending(list)) => list.into_iter().collect(),
            _ => Vec::new(),
        }))
    }

    fn pending_delete<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.pending_delete_now(user, id);
        ready(Ok(()))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), CacheError>> {
        ready(Ok(()))
    }
}

fn counter_value(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}
