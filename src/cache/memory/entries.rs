//! The memory backend's entries: Redis-like values with an optional expiry (tokio time),
//! read, written and expired one key at a time, and the bound on their count (the entries
//! closest to expiry go first).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::MemoryBackend;

/// One stored value, shaped like the Redis type that holds it there.
#[derive(Clone)]
pub(super) enum Value {
    Bytes(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(HashSet<String>),
    /// member → score
    ZSet(HashMap<String, u64>),
    /// (id, value), oldest first.
    Pending(VecDeque<(String, Vec<u8>)>),
    /// field → value
    Fields(HashMap<String, Vec<u8>>),
}

/// A value and when it expires (`None`: never).
pub(super) struct Entry {
    pub(super) value: Value,
    pub(super) expires: Option<Instant>,
}

impl MemoryBackend {
    /// The live value under `key` (an expired one is dropped).
    pub(super) fn get(&self, key: &str) -> Option<Value> {
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

    /// Stores `value` under `key`, shrinking the map when it passes its bound.
    pub(super) fn set(&self, key: String, value: Value, ttl: Option<Duration>) {
        let expires = ttl.map(|t| Instant::now() + t);
        self.map.insert(key, Entry { value, expires });
        if self.map.len() > self.max_entries {
            self.shrink();
        }
    }

    pub(super) fn expire(&self, key: &str, ttl: Duration) {
        if let Some(mut e) = self.map.get_mut(key) {
            e.expires = Some(Instant::now() + ttl);
        }
    }

    pub(super) fn del(&self, key: &str) {
        self.map.remove(key);
    }

    /// The members of the set under `key` (empty when there is none).
    pub(super) fn set_members(&self, key: &str) -> HashSet<String> {
        match self.get(key) {
            Some(Value::Set(s)) => s,
            _ => HashSet::new(),
        }
    }

    /// Adds `member` to the set under `key` and refreshes its TTL.
    pub(super) fn set_add(&self, key: &str, member: &str, ttl: Duration) {
        let mut members = self.set_members(key);
        members.insert(member.to_string());
        self.set(key.to_string(), Value::Set(members), Some(ttl));
    }

    /// When the entry under `key` expires, expired or not.
    pub(super) fn map_expiry(&self, key: &str) -> Option<Instant> {
        self.map.get(key).and_then(|e| e.expires)
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
}
