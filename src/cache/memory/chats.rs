//! The memory backend's per-chat AI state: a chat's message list, the user's LRU of chats
//! (evicting the least recently used beyond `max_chats`, with their exclusive embeds and
//! settings entries), each operation one step under the backend's lock (what the AI
//! methods in `memory.rs` run).

use std::collections::{HashMap, HashSet};

use chatd_protocol::ChatId;

use super::super::backend::{AiPolicy, SealedSummaries, WriteMode, keys};
use super::MemoryBackend;
use super::entries::{Entry, Value};
use crate::crypto::UserHash;

impl MemoryBackend {
    /// Appends to or replaces a chat's list; returns the chats evicted.
    pub(super) fn ai_write_now(
        &self,
        user: &UserHash,
        chat: &ChatId,
        mode: WriteMode,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
    ) -> Vec<ChatId> {
        let _guard = self.lock();
        let mut list = match (mode, self.get(&keys::ai_messages(user, chat.as_str()))) {
            (WriteMode::Append, Some(Value::List(l))) => l,
            _ => Vec::new(),
        };
        list.extend(entries);
        self.store_chat(user, chat, list, policy)
    }

    /// The chat's list as it was, with `entries` appended to it (a missing chat is
    /// created only when `create` is set).
    pub(super) fn ai_read_append_now(
        &self,
        user: &UserHash,
        chat: &ChatId,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
        create: bool,
    ) -> Option<Vec<Vec<u8>>> {
        let _guard = self.lock();
        let prior = match self.get(&keys::ai_messages(user, chat.as_str())) {
            Some(Value::List(l)) => Some(l),
            _ => None,
        };
        if prior.is_none() && !create {
            return None;
        }
        let mut list = Vec::with_capacity(prior.as_ref().map_or(0, Vec::len) + entries.len());
        list.extend(prior.iter().flatten().cloned());
        list.extend(entries);
        self.store_chat(user, chat, list, policy);
        prior
    }

    /// The chat's list, its TTL and recency refreshed.
    pub(super) fn ai_read_now(
        &self,
        user: &UserHash,
        chat: &ChatId,
        policy: AiPolicy,
    ) -> Option<Vec<Vec<u8>>> {
        let _guard = self.lock();
        let key = keys::ai_messages(user, chat.as_str());
        let list = match self.get(&key) {
            Some(Value::List(l)) => l,
            _ => return None,
        };
        self.expire(&key, policy.ttl);
        let lru_key = keys::ai_lru(user);
        if let Some(Value::ZSet(mut lru)) = self.get(&lru_key)
            && lru.contains_key(chat.as_str())
        {
            lru.insert(chat.as_str().to_string(), self.tick());
            self.set(lru_key, Value::ZSet(lru), Some(policy.ttl));
        }
        Some(list)
    }

    /// Drops a chat from the LRU and evicts it.
    pub(super) fn ai_delete_now(&self, user: &UserHash, chat: &ChatId) {
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
    }

    /// `chat`'s summary and those of up to `others` other chats in the LRU, the most
    /// recently used first.
    pub(super) fn ai_summaries_now(
        &self,
        user: &UserHash,
        chat: &ChatId,
        others: usize,
    ) -> SealedSummaries {
        let _guard = self.lock();
        let summary = |c: &str| match self.get(&keys::chat_summary(user, c)) {
            Some(Value::Bytes(b)) => Some(b),
            _ => None,
        };
        let mut order: Vec<(u64, String)> = match self.get(&keys::ai_lru(user)) {
            Some(Value::ZSet(lru)) => lru.into_iter().map(|(c, s)| (s, c)).collect(),
            _ => Vec::new(),
        };
        order.sort_unstable_by(|a, b| b.cmp(a));
        let others = order
            .into_iter()
            .filter(|(_, c)| c != chat.as_str())
            .filter_map(|(_, c)| Some((ChatId::parse(c.clone()).ok()?, summary(&c)?)))
            .take(others)
            .collect();
        SealedSummaries {
            own: summary(chat.as_str()),
            others,
        }
    }

    /// Removes a chat's messages, exclusive embeds, embed index, settings and summary
    /// (lock held).
    fn evict_chat(&self, user: &UserHash, chat: &str, keep: &[String]) {
        self.del(&keys::ai_messages(user, chat));
        self.del(&keys::chat_summary(user, chat));
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
