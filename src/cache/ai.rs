//! The AI inference cache as the pipeline sees it: a chat's messages (what the model needs,
//! with token counts when known) and its embeds, each sealed with the owner's data key, stored through
//! the [`CacheBackend`]. Every value is bound to its owner, its chat (or embed) and its
//! purpose, so a value copied to another user's or chat's key does not open. This file owns
//! the messages; the embeds are in [`embeds`], the rest of a chat's state in `chat_state`,
//! `focus` and `summary`, the user's app preferences in `app_prefs`.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{ChatId, ErrorCode, MessageId, Role};
use serde::{Deserialize, Serialize};

use super::backend::{AiPolicy, CacheBackend, CacheError, WriteMode, keys};

mod app_prefs;
mod chat_state;
mod embeds;
mod focus;
mod pseudonyms;
mod sealed;
mod summary;
use crate::crypto::{KeyError, Keyring, OpenError, Purpose, SealError, UserHash};
pub use chat_state::MessageSeen;
pub use embeds::{CachedEmbed, EmbedWrite, content_hash};
pub use focus::FocusRecord;
pub use summary::ChatSummaries;

/// One message of a chat as cached for the model (plaintext only inside the sealed value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedMessage {
    pub message_id: MessageId,
    pub role: Role,
    /// Exactly as received, embed reference blocks intact.
    pub content: String,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// Tokens of `content`, counted once when it was cached; `None` when it was cached
    /// uncounted (a large re-sent history: counting it would delay the turn, and its byte
    /// length bounds it until a budget decision needs the exact number).
    #[serde(default)]
    pub token_count: Option<u32>,
    /// Set on a compressed message (role `system`): the newest message it summarises
    /// (see `crate::history::compressed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces_through: Option<MessageId>,
}

/// A chat's cached messages as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Loaded {
    /// The chat is not in the cache.
    Missing,
    /// `messages` opened, oldest first; `failed` entries did not (rotated or deleted key,
    /// tampered bytes, a value from another binding).
    Present {
        messages: Vec<CachedMessage>,
        failed: usize,
    },
}

/// A dependency of the cache is down; the turn cannot be served now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CacheFault {
    #[error(transparent)]
    Keys(#[from] KeyError),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

impl CacheFault {
    /// The client-visible code and message of the failure (the one mapping, for turns and
    /// for the session's own replies alike).
    pub fn code(&self) -> (ErrorCode, String) {
        match self {
            CacheFault::Keys(KeyError::MountMissing(mount)) => (
                ErrorCode::EncryptionUnavailable,
                format!(
                    "the key service has no transit engine at `{mount}`; the operator must enable it"
                ),
            ),
            CacheFault::Keys(_) => (
                ErrorCode::EncryptionUnavailable,
                "the key service is unavailable; try again shortly".into(),
            ),
            CacheFault::Cache(_) => (
                ErrorCode::CacheUnavailable,
                "the cache is unavailable; try again shortly".into(),
            ),
        }
    }
}

impl From<SealError> for CacheFault {
    fn from(e: SealError) -> Self {
        match e {
            SealError::Key(k) => CacheFault::Keys(k),
            SealError::Store(e) => CacheFault::Cache(CacheError::Unavailable(e.0)),
        }
    }
}

/// The AI cache: the backend, the keys that seal its values, and its limits.
#[derive(Clone)]
pub struct AiCache {
    backend: Arc<dyn CacheBackend>,
    keyring: Arc<Keyring>,
    policy: AiPolicy,
}

impl AiCache {
    pub fn new(backend: Arc<dyn CacheBackend>, keyring: Arc<Keyring>, policy: AiPolicy) -> Self {
        Self {
            backend,
            keyring,
            policy,
        }
    }

    pub fn policy(&self) -> AiPolicy {
        self.policy
    }

    pub fn keyring(&self) -> &Arc<Keyring> {
        &self.keyring
    }

    pub fn backend(&self) -> &Arc<dyn CacheBackend> {
        &self.backend
    }

    /// Reads and opens a chat's messages (refreshing its TTL and recency).
    pub async fn load(&self, user: &UserHash, chat: &ChatId) -> Result<Loaded, CacheFault> {
        let sealed = self.backend.ai_read(user, chat, self.policy).await?;
        self.open_all(user, chat, sealed).await
    }

    /// A turn's cache hit in one backend round trip: reads and opens the chat's messages as
    /// they were, and appends `messages` to it like [`AiCache::append`]. A chat the cache
    /// does not hold is created only when `create` is set; otherwise nothing is written.
    pub async fn load_append(
        &self,
        user: &UserHash,
        chat: &ChatId,
        messages: &[CachedMessage],
        create: bool,
    ) -> Result<Loaded, CacheFault> {
        let sealed = self.seal_all(user, chat, messages).await?;
        let prior = self
            .backend
            .ai_read_append(user, chat, sealed, self.policy, create)
            .await?;
        self.open_all(user, chat, prior).await
    }

    async fn open_all(
        &self,
        user: &UserHash,
        chat: &ChatId,
        sealed: Option<Vec<Vec<u8>>>,
    ) -> Result<Loaded, CacheFault> {
        let Some(sealed) = sealed else {
            return Ok(Loaded::Missing);
        };
        let mut messages = Vec::with_capacity(sealed.len());
        let mut failed = 0;
        for value in &sealed {
            match self
                .keyring
                .open(user, chat.as_str(), Purpose::AiMessage, value)
                .await
            {
                Ok(plain) => match serde_json::from_slice::<CachedMessage>(&plain) {
                    Ok(m) => messages.push(m),
                    Err(_) => failed += 1,
                },
                Err(OpenError::Failed) => failed += 1,
                Err(OpenError::Unavailable(e)) => return Err(e.into()),
            }
        }
        Ok(Loaded::Present { messages, failed })
    }

    /// Appends messages to a chat (evicting the least recently used chat beyond the limit).
    pub async fn append(
        &self,
        user: &UserHash,
        chat: &ChatId,
        messages: &[CachedMessage],
    ) -> Result<Vec<ChatId>, CacheFault> {
        self.write(user, chat, WriteMode::Append, messages).await
    }

    /// Replaces everything cached for a chat (after the client re-sent its history).
    pub async fn replace(
        &self,
        user: &UserHash,
        chat: &ChatId,
        messages: &[CachedMessage],
    ) -> Result<Vec<ChatId>, CacheFault> {
        self.write(user, chat, WriteMode::Replace, messages).await
    }

    async fn write(
        &self,
        user: &UserHash,
        chat: &ChatId,
        mode: WriteMode,
        messages: &[CachedMessage],
    ) -> Result<Vec<ChatId>, CacheFault> {
        let sealed = self.seal_all(user, chat, messages).await?;
        Ok(self
            .backend
            .ai_write(user, chat, mode, sealed, self.policy)
            .await?)
    }

    /// Seals the newest `max_messages` of `messages` (the rest would be trimmed anyway).
    async fn seal_all(
        &self,
        user: &UserHash,
        chat: &ChatId,
        messages: &[CachedMessage],
    ) -> Result<Vec<Vec<u8>>, CacheFault> {
        let keep = messages.len().saturating_sub(self.policy.max_messages);
        let mut sealed = Vec::with_capacity(messages.len() - keep);
        for m in &messages[keep..] {
            let plain = zeroize::Zeroizing::new(
                serde_json::to_vec(m).map_err(|e| CacheError::Protocol(e.to_string()))?,
            );
            sealed.push(
                self.keyring
                    .seal(user, chat.as_str(), Purpose::AiMessage, &plain)
                    .await?,
            );
        }
        Ok(sealed)
    }

    /// Drops a chat from the AI cache (with its exclusive embeds and settings entries).
    pub async fn delete(&self, user: &UserHash, chat: &ChatId) -> Result<(), CacheFault> {
        self.backend.ai_delete(user, chat).await?;
        let versions = keys::chat_versions(user, chat.as_str());
        self.backend.kv_delete(&versions).await?;
        let seen = keys::messages_seen(user, chat.as_str());
        self.backend.kv_delete(&seen).await?;
        self.backend
            .kv_delete(&keys::chat_focus(user, chat.as_str()))
            .await?;
        self.backend
            .kv_delete(&keys::chat_pseudonyms(user, chat.as_str()))
            .await?;
        Ok(self
            .backend
            .kv_delete(&keys::chat_claim(chat.as_str()))
            .await?)
    }

    /// The TTL of the AI cache (embeds cached from clients share it).
    pub fn ttl(&self) -> Duration {
        self.policy.ttl
    }
}

#[cfg(test)]
impl AiCache {
    /// A cache on the memory backend with local keys (3 chats per user), for unit tests.
    pub(crate) fn in_memory(max_messages: usize) -> AiCache {
        let backend: Arc<dyn CacheBackend> =
            Arc::new(crate::cache::memory::MemoryBackend::new(1000));
        let provider = Arc::new(crate::crypto::LocalKeyProvider::new(
            zeroize::Zeroizing::new([7u8; 32]),
        ));
        let keyring = Arc::new(Keyring::new(
            provider,
            Arc::new(super::backend::WrappedKeys(backend.clone())),
            Duration::from_secs(60),
        ));
        AiCache::new(
            backend,
            keyring,
            AiPolicy {
                ttl: Duration::from_secs(3600),
                max_messages,
                max_chats: 3,
            },
        )
    }
}

#[cfg(test)]
mod tests;
