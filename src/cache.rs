//! The server caches over one storage interface with two backends (`memory`, `redis`):
//! the AI cache (sealed messages, last N chats per user), embeds, settings/memories,
//! the sync cache (client-encrypted blobs) and small key/value entries (wrapped data keys).
//! Key layout (user ids only ever appear hashed; every key of a user carries the hash tag
//! `{u:<hash>}`, so on a Redis Cluster one user's keys share a slot):
//! - `{u:<hash>}:chat:<c>:messages:ai` list of sealed messages, `{u:<hash>}:ai_cache_lru` zset
//! - `{u:<hash>}:embed:<e>` and the index `{u:<hash>}:chat:<c>:embed_ids`
//! - `{u:<hash>}:chat:<c>:app_settings_memories:<app>:<key>` and the index
//!   `{u:<hash>}:chat:<c>:app_settings_memories_keys`
//! - `{u:<hash>}:chat:<c>:messages:sync` and the index `{u:<hash>}:sync_chats`
//! - small key/value entries (wrapped data keys, ...) under names of their owners' choosing

pub mod ai;
pub mod backend;
pub mod memory;
pub mod redis;

pub use backend::{AiPolicy, CacheBackend, CacheError, WrappedKeys, WriteMode};
