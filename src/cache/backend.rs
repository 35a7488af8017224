//! The storage interface every cache backend implements, at the level of the operations
//! chatd needs (so compound ones, like writing a chat and evicting the least recently used,
//! are atomic in each backend). Values are opaque bytes: sealed or client-encrypted.

use std::time::Duration;

use chatd_protocol::{ChatId, EmbedId};
use futures_util::future::BoxFuture;

use crate::crypto::UserHash;

/// Pending answers kept per user.
pub const PENDING_MAX: usize = 16;

/// A pending answer: its id and sealed value.
pub type Pending = (String, Vec<u8>);

/// Sealed chat summaries as [`CacheBackend::ai_summaries`] reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SealedSummaries {
    /// The asked chat's own summary.
    pub own: Option<Vec<u8>>,
    /// Other chats the AI cache holds, with their summaries, most recently used first.
    pub others: Vec<(ChatId, Vec<u8>)>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheError {
    #[error("cache backend unavailable: {0}")]
    Unavailable(String),
    #[error("cache backend did not answer within {0:?}")]
    Timeout(Duration),
    #[error("cache backend answered something unexpected: {0}")]
    Protocol(String),
}

/// Bounds of the AI cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AiPolicy {
    /// Lifetime of a chat's messages, refreshed on every read and write.
    pub ttl: Duration,
    /// Messages kept per chat (the newest).
    pub max_messages: usize,
    /// Chats kept per user; writing another evicts the least recently used.
    pub max_chats: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Append,
    /// Drop what the chat had, then write (used after a history re-send).
    Replace,
}

pub trait CacheBackend: Send + Sync {
    /// Writes sealed messages to a chat's AI list (newest last), trims it to
    /// `max_messages`, refreshes its TTL, marks the chat most recently used, and evicts
    /// the least recently used chats beyond `max_chats` together with their embeds that no
    /// remaining chat references, their embed index and their settings/memories entries —
    /// all in one atomic step. Returns the evicted chats.
    fn ai_write<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        mode: WriteMode,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Vec<ChatId>, CacheError>>;

    /// A chat's AI list, oldest first (`None` if absent); refreshes its TTL and recency.
    fn ai_read<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        policy: AiPolicy,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>>;

    /// A turn's cache hit in one atomic step: returns the chat's AI list as it was before
    /// (oldest first), then appends `entries` exactly as [`ai_write`](Self::ai_write) with
    /// [`WriteMode::Append`] does (trim, TTL, recency, eviction with its cascade). A chat
    /// the cache does not hold is written only when `create` is set (a chat new to the
    /// cache), so a miss never makes a partial chat that evicts a whole one; either way
    /// its prior list is `None`.
    fn ai_read_append<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        entries: Vec<Vec<u8>>,
        policy: AiPolicy,
        create: bool,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>>;

    /// The summaries of a user's chats in one step: `chat`'s own (cached or not) and those
    /// of up to `others` other chats the AI cache holds (its LRU), the most recently used
    /// first. Refreshes no TTL or recency.
    fn ai_summaries<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        others: usize,
    ) -> BoxFuture<'a, Result<SealedSummaries, CacheError>>;

    /// Removes a chat from the AI cache with its embeds index, exclusive embeds,
    /// settings/memories entries and summary.
    fn ai_delete<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// Stores an embed of `user` and indexes it under the user's chat.
    fn embed_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        embed: &'a EmbedId,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// An embed of `user` (embed ids are per user in the cache).
    fn embed_get<'a>(
        &'a self,
        user: &'a UserHash,
        embed: &'a EmbedId,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>>;

    /// Stores one app settings/memories entry of a user's chat and indexes it.
    fn settings_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    fn settings_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        app_key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>>;

    /// Replaces a chat's sync-cache blobs (client-encrypted) and indexes the chat.
    fn sync_put<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
        blobs: Vec<Vec<u8>>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    fn sync_get<'a>(
        &'a self,
        user: &'a UserHash,
        chat: &'a ChatId,
    ) -> BoxFuture<'a, Result<Option<Vec<Vec<u8>>>, CacheError>>;

    /// Removes every sync-cache entry of the user.
    fn sync_clear<'a>(&'a self, user: &'a UserHash) -> BoxFuture<'a, Result<(), CacheError>>;

    /// Small values: wrapped data keys, flags, markers.
    fn kv_put<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;
    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, CacheError>>;
    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), CacheError>>;

    /// Sets `key` to `value` unless it is set, atomically; returns the value it holds
    /// afterwards (`value` when this call set it).
    fn kv_claim<'a>(
        &'a self,
        key: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>>;

    /// Markers kept as fields of one key (one per message of a chat, say), so deleting the
    /// key forgets them all. Sets `field` to `value` unless it is set, atomically, and
    /// returns what it holds afterwards (`value` when this call set it); refreshes the
    /// key's TTL. A key that reached `max_fields` is emptied first (the markers are a
    /// bounded best effort, never the only record of anything).
    fn field_claim<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
        max_fields: usize,
    ) -> BoxFuture<'a, Result<Vec<u8>, CacheError>>;

    /// Sets one field (and refreshes the key's TTL).
    fn field_put<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// Removes one field.
    fn field_delete<'a>(
        &'a self,
        key: &'a str,
        field: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// A counter, atomically: adds one when `key` exists (and refreshes its TTL), else sets
    /// it to `seed + 1` when a seed is given. Returns the new value, or `None` when the key
    /// is absent and no seed was given.
    fn counter_bump<'a>(
        &'a self,
        key: &'a str,
        seed: Option<u64>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Option<u64>, CacheError>>;

    /// A counter's value (`None` when absent).
    fn counter_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<u64>, CacheError>>;

    /// Keeps a sealed answer no device has stored yet, under its message id, in the
    /// user's pending set (whose TTL this write refreshes); the set keeps the newest
    /// [`PENDING_MAX`] (a client that never stores answers costs no more).
    fn pending_put<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
        value: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// The user's pending answers as (id, sealed value), in no particular order.
    fn pending_list<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<Vec<Pending>, CacheError>>;

    /// Drops one pending answer (a device stored it).
    fn pending_delete<'a>(
        &'a self,
        user: &'a UserHash,
        id: &'a str,
    ) -> BoxFuture<'a, Result<(), CacheError>>;

    /// Reachability for `/readyz`.
    fn ping(&self) -> BoxFuture<'_, Result<(), CacheError>>;
}

/// The keyring's wrapped data keys, kept in a cache backend's small values.
pub struct WrappedKeys(pub std::sync::Arc<dyn CacheBackend>);

impl crate::crypto::WrappedKeyStore for WrappedKeys {
    fn get_wrapped<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, crate::crypto::StoreUnavailable>> {
        Box::pin(async move {
            self.0
                .kv_get(name)
                .await
                .map_err(|e| crate::crypto::StoreUnavailable(e.to_string()))
        })
    }

    fn put_wrapped<'a>(
        &'a self,
        name: &'a str,
        wrapped: Vec<u8>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), crate::crypto::StoreUnavailable>> {
        Box::pin(async move {
            self.0
                .kv_put(name, wrapped, ttl)
                .await
                .map_err(|e| crate::crypto::StoreUnavailable(e.to_string()))
        })
    }
}

/// The key names, shared by every backend. Every key of one user's AI cache, embeds,
/// settings/memories and sync cache starts with the user's hash tag `{u:<user hash>}`, so on
/// a Redis Cluster they all live in one slot and one script may touch them together. The
/// Lua scripts in `redis/scripts.rs` build the same names from [`tag`].
pub mod keys {
    use super::*;

    /// `{u:<user hash>}`: the hash tag (and prefix) of every key of the user.
    pub fn tag(user: &UserHash) -> String {
        format!("{{u:{}}}", user.as_str())
    }
    pub fn ai_messages(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:messages:ai", tag(user))
    }
    pub fn ai_lru(user: &UserHash) -> String {
        format!("{}:ai_cache_lru", tag(user))
    }
    pub fn embed(user: &UserHash, embed: &str) -> String {
        format!("{}:embed:{embed}", tag(user))
    }
    pub fn embed_index(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:embed_ids", tag(user))
    }
    pub fn settings(user: &UserHash, chat: &str, app_key: &str) -> String {
        format!("{}:chat:{chat}:app_settings_memories:{app_key}", tag(user))
    }
    pub fn settings_index(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:app_settings_memories_keys", tag(user))
    }
    pub fn sync(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:messages:sync", tag(user))
    }
    /// A chat's `messages_v`: every user message and answer bumps it; seeded from the
    /// permanent store when absent.
    pub fn chat_versions(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:messages_v", tag(user))
    }
    /// The message ids sent in a chat and what became of them (one field each).
    pub fn messages_seen(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:seen", tag(user))
    }
    /// Who claimed a chat no client has stored yet (its first writer).
    pub fn chat_claim(chat: &str) -> String {
        format!("chat:{chat}:claimed_by")
    }
    /// Answers waiting for a device to store them.
    pub fn pending(user: &UserHash) -> String {
        format!("{}:pending_answers", tag(user))
    }
    /// The pending answers' ids by age.
    pub fn pending_order(user: &UserHash) -> String {
        format!("{}:pending_order", tag(user))
    }
    pub fn sync_index(user: &UserHash) -> String {
        format!("{}:sync_chats", tag(user))
    }
    /// A chat's focus-mode record (sealed): which focus mode is active, or that none is.
    pub fn chat_focus(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:focus", tag(user))
    }

    /// A chat's latest summary (sealed); dropped with the chat's messages.
    pub fn chat_summary(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:summary", tag(user))
    }

    /// A chat's pseudonym table (sealed); dropped with the chat's messages.
    pub fn chat_pseudonyms(user: &UserHash, chat: &str) -> String {
        format!("{}:chat:{chat}:pseudonyms", tag(user))
    }

    pub fn app_preferences(user: &UserHash) -> String {
        format!("{}:app_preferences", tag(user))
    }
}
