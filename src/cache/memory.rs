//! The embedded cache backend: Redis-like values in a DashMap with per-entry expiry
//! (tokio time, so paused-time tests work), bounded in entry count. Compound operations
//! take one short std Mutex so they are atomic, as the Redis backend's Lua script is. The
//! small values (markers, counters, pending answers) are in [`values`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chatd_protocol::{ChatId, EmbedId};
use dashmap::DashMap;
use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::backend::{AiPolicy, CacheBackend, CacheError, PENDING_MAX, Pending, WriteMode, keys};
use crate::crypto::UserHash;

mod values;

#[derive(Clone)]
enum Value {
    Bytes(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(HashSet<String>),
    /// member → score
    ZSet(HashMap<String, u64>),
    /// (id, value), oldest first.
    Pending(std::collections::VecDeque<(String, Vec<u8>)>),
    /// field → value
    Fields(HashMap<String, Vec<u8>>),
}

struct Entry {
    value: Value,
    expires: Option<Instant>,
}

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

    fn get(&self, key: &str) -> Option<Value> {
        let now = Instant::now();
        let expired = match self.map.get(key) {
            None => return None,
            Some(e) if e.expires.is_some_and(|t| t <= now) => true,
            Some(e) => return Some(e.value.clone()),
        };
        if expired {
            self.map
                .remove_if(key, |_, e| e.expires.is_some_and(|t| t <= now));
        }
        None
    }

    fn set(&self, key: String, value: Value, ttl: Option<Duration>) {
        let expires = ttl.map(|t| Instant::now() + t);
        self.map.insert(key, Entry { value, expires });
        if self.map.len() > self.max_entries {
            self.shrink();
        }
    }

    fn expire(&self, key: &str, ttl: Duration) {
        if let Some(mut e) = self.map.get_mut(key) {
            e.expires = Some(Instant::now() + ttl);
        }
    }

    fn del(&self, key: &str) {
        self.map.remove(key);
    }

    fn set_members(&self, key: &str) -> HashSet<String> {
        match self.get(key) {
            Some(Value::Set(s)) => s,
            _ => HashSet::new(),
        }
    }

    fn set_add(&self, key: &str, member: &str, ttl: Duration) {
        let mut members = self.set_members(key);
        members.insert(member.to_string());
        self.set(key.to_string(), Value::Set(members), Some(ttl));
    }

    /// Drops expired entries; if still over the bound, the entries closest to expiry, down
    /// to nine tenths of the bound (so a full cache sorts once per tenth of its size, not
    /// on every insert).
    fn shrink(&self) {
        let now = Instant::now();
        self.map.retain(|_, e| e.expires.is_none_or(|t| t > now));
        if self.map.len() <= self.max_entries {
            return;
        }
        let target = self.max_entries - self.max_entries / 10;
        let excess = self.map.len().saturating_sub(target);
        if excess == 0 {
            return;
        }
        let mut by_expiry: Vec<(Instant, String)> = self
            .map
            .iter()
            .map(|e| {
                (
                    e.expires
                        .unwrap_or(now + Duration::from_secs(u32::MAX as u64)),
                    e.key().clone(),
                )
            })
            .collect();
        by_expiry.sort();
        for (_, key) in by_expiry.into_iter().take(excess) {
            self.map.remove(&key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.compound.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Removes a chat's messages, exclusive embeds, embed index and settings (lock held).
    fn evict_chat(&self, user: &UserHash, chat: &str, keep: &[String]) {
        self.del(&keys::ai_messages(user, chat));
        let index = keys::embed_index(user, chat);
        let kept: Vec<HashSet<String>> = keep
            .iter()
            .map(|k| self.set_members(&keys::embed_index(user, k)))
            .collect();
        for embed in self.set_members(&index) {
            if !kept.iter().any(|s| s.contains(&embed)) {
                self.del(&keys::embed(user, &embed));
            }
        }
        self.del(&index);
        let settings_index = keys::settings_index(user, chat);
        for app_key in self.set_members(&settings_index) {
            self.del(&keys::settings(user, chat, &app_key));
        }
        self.del(&settings_index);
    }

    /// Writes a chat's whole AI list (lock held): keeps the newest `max_messages`, refreshes
    /// its TTL, marks it most recently used and evicts beyond `max_chats`. Returns the evicted.
    fn store_chat(
        &self,
        user: &UserHash,
        chat: &ChatId,
        mut list: Vec<Vec<u8>>,
        policy: AiPolicy,
    ) -> Vec<ChatId> {
        if list.len() > policy.max_messages {
            list.drain(..list.len() - policy.max_messages);
        }
        self.set(
            keys::ai_messages(user, chat.as_str()),
            Value::List(list),
            Some(policy.ttl),
        );
        let lru_key = keys::ai_lru(user);
        let mut lru = match self.get(&lru_key) {
            Some(Value::ZSet(z)) => z,
            _ => HashMap::new(),
        };
        lru.insert(chat.as_str().to_string(), self.tick());
        let mut order: Vec<(u64, String)> = lru.iter().map(|(c, s)| (*s, c.clone())).collect();
        order.sort();
        let excess = order.len().saturating_sub(policy.max_chats);
        let keep: Vec<String> = order[excess..].iter().map(|(_, c)| c.clone()).collect();
        let mut evicted = Vec::new();
        for (_, old) in &order[..excess] {
            self.evict_chat(user, old, &keep);
            lru.remove(old);
            if let Ok(id) = ChatId::parse(old.clone()) {
                evicted.push(id);
            }
        }
        self.set(lru_key, Value::ZSet(lru), Some(policy.ttl));
        evicted
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
        let _guard = self.lock();
        let mut list = match (mode, self.get(&keys::ai_messages(user, chat.as_str()))) {
            (WriteMode::Append, Some(Value::List(l))) => l,
            _ => Vec::new(),
        };
        list.extend(entries);
        ready(Ok(self.store_chat(user, chat, list, policy)))
    }

    fn ai_read_append<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
        create: bool,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        let _guard = self.lock();
        let prior = match self.get(&keys::ai_messages(user, chat.as_str())) {
            Some(Value::List(l)) => Some(l),
            _ => None,
        };
        if prior.is_none() && !create {
            return ready(Ok(None));
        }
        let mut list = Vec::with_capacity(prior.as_ref().map_or(0, Vec::len) + entries.len());
        list.extend(prior.iter().flatten().cloned());
        list.extend(entries);
        self.store_chat(user, chat, list, policy);
        ready(Ok(prior))
    }

    fn ai_read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>> {
        let _guard = self.lock();
        let key = keys::ai_messages(user, chat.as_str());
        let list = match self.get(&key) {
            Some(Value::List(l)) => l,
            _ => return ready(Ok(None)),
        };
        self.expire(&key, policy.ttl);
        let lru_key = keys::ai_lru(user);
        if let Some(Value::ZSet(mut lru)) = self.get(&lru_key)
            && lru.contains_key(chat.as_str())
        {
            lru.insert(chat.as_str().to_string(), self.tick());
            self.set(lru_key, Value::ZSet(lru), Some(policy.ttl));
        }
        ready(Ok(Some(list)))
    }

    fn ai_delete<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        let _guard = self.lock();
        let lru_key = keys::ai_lru(user);
        let mut keep = Vec::new();
        if let Some(Value::ZSet(mut lru)) = self.get(&lru_key) {
            lru.remove(chat.as_str());
            keep = lru.keys().cloned().collect();
            self.map.insert(
                lru_key,
                Entry {
                    value: Value::ZSet(lru),
                    expires: self.map_expiry(&keys::ai_lru(user)),
                },
            );
        }
        self.evict_chat(user, chat.as_str(), &keep);
        ready(Ok(()))
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

impl MemoryBackend {
    fn map_expiry(&self, key: &str) -> Option<Instant> {
        self.map.get(key).and_then(|e| e.expires)
    }
}
