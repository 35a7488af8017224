//! The memory backend's small values: per-field markers, counters and pending answers,
//! each one step under the backend's locks (what the trait methods in `memory.rs` run).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::{MemoryBackend, PENDING_MAX, Value, counter_value};
use crate::cache::backend::keys;
use crate::crypto::UserHash;

impl MemoryBackend {
    pub(super) fn field_claim_now(
        &self,
        key: &str,
        field: &str,
        value: Vec<u8>,
        ttl: Duration,
        max_fields: usize,
    ) -> Vec<u8> {
        let now = Instant::now();
        // One step, the first write of the key included.
        let _one = self.lock();
        if let Some(mut e) = self.map.get_mut(key)
            && e.expires.is_none_or(|t| t > now)
            && let Value::Fields(fields) = &mut e.value
        {
            if let Some(held) = fields.get(field) {
                let held = held.clone();
                e.expires = Some(now + ttl);
                return held;
            }
            if fields.len() >= max_fields {
                fields.clear();
            }
            fields.insert(field.to_string(), value.clone());
            e.expires = Some(now + ttl);
            return value;
        }
        let fields = HashMap::from([(field.to_string(), value.clone())]);
        self.set(key.to_string(), Value::Fields(fields), Some(ttl));
        value
    }

    pub(super) fn field_put_now(&self, key: &str, field: &str, value: Vec<u8>, ttl: Duration) {
        let now = Instant::now();
        let _one = self.lock();
        if let Some(mut e) = self.map.get_mut(key)
            && e.expires.is_none_or(|t| t > now)
            && let Value::Fields(fields) = &mut e.value
        {
            fields.insert(field.to_string(), value);
            e.expires = Some(now + ttl);
            return;
        }
        let fields = HashMap::from([(field.to_string(), value)]);
        self.set(key.to_string(), Value::Fields(fields), Some(ttl));
    }

    pub(super) fn field_delete_now(&self, key: &str, field: &str) {
        if let Some(mut e) = self.map.get_mut(key)
            && let Value::Fields(fields) = &mut e.value
        {
            fields.remove(field);
        }
    }

    pub(super) fn counter_bump_now(
        &self,
        key: &str,
        seed: Option<u64>,
        ttl: Duration,
    ) -> Option<u64> {
        let now = Instant::now();
        // The shard guard makes the read and the write one step.
        if let Some(mut e) = self.map.get_mut(key)
            && e.expires.is_none_or(|t| t > now)
        {
            let expires = Some(now + ttl);
            if let Value::Bytes(b) = &mut e.value {
                let n = counter_value(b).map_or(1, |n| n + 1);
                *b = n.to_string().into_bytes();
                e.expires = expires;
                return Some(n);
            }
        }
        // Absent or expired: only a seed creates it.
        let value = seed.map(|seed| seed + 1);
        if let Some(n) = value {
            self.set(
                key.to_string(),
                Value::Bytes(n.to_string().into_bytes()),
                Some(ttl),
            );
        }
        value
    }

    pub(super) fn pending_put_now(&self, user: &UserHash, id: &str, value: Vec<u8>, ttl: Duration) {
        let key = keys::pending(user);
        let _one = self.lock();
        let now = Instant::now();
        if let Some(mut e) = self.map.get_mut(&key)
            && e.expires.is_none_or(|t| t > now)
            && let Value::Pending(list) = &mut e.value
        {
            list.retain(|(i, _)| i != id);
            list.push_back((id.to_string(), value));
            while list.len() > PENDING_MAX {
                list.pop_front();
            }
            e.expires = Some(now + ttl);
            return;
        }
        let list = std::collections::VecDeque::from([(id.to_string(), value)]);
        self.set(key, Value::Pending(list), Some(ttl));
    }

    pub(super) fn pending_delete_now(&self, user: &UserHash, id: &str) {
        let key = keys::pending(user);
        let _one = self.lock();
        if let Some(mut e) = self.map.get_mut(&key)
            && let Value::Pending(list) = &mut e.value
        {
            list.retain(|(i, _)| i != id);
        }
    }
}
