//! The server caches over one storage interface with two backends (`memory`, `redis`):
//! the AI cache (sealed messages, last N chats per user), embeds, settings/memories,
//! the sync cache (client-encrypted blobs) and small key/value entries (wrapped data keys).
//! Key layout (user ids only ever appear hashed):
//! - `user:{u}:chat:{c}:messages:ai` list of sealed messages, `user:{u}:ai_cache_lru` zset
//! - `embed:{e}` and the index `chat:{c}:embed_ids`
//! - `chat:{c}:app_settings_memories:{app}:{key}` and the index `chat:{c}:app_settings_memories_keys`
//! - `user:{u}:chat:{c}:messages:sync` and the index `user:{u}:sync_chats`

pub mod ai;
pub mod backend;
pub mod memory;
pub mod redis;

pub use backend::{AiPolicy, CacheBackend, CacheError, WrappedKeys, WriteMode};
