//! The sync cache's life (issue 35, defect 3): client-encrypted copies of a user's chats,
//! `{u:<hash>}:chat:<id>:messages:sync` with the index `{u:<hash>}:sync_chats`, so a
//! login's phase 1 need not read the store. Each copy starts with a header holding the
//! chat's `messages_v`, so a stale copy is never served.
//!
//! - **Written** when a client stores a message (the chat's copy is appended to, or re-read
//!   from the store), so the next login finds the chats in use; and by a `phase1` request
//!   on its own, with what it read from the store, for the rest of a sync its client drives
//!   phase by phase.
//! - **Read** by phase 1 and by paging after the sync (`paging.rs`), which writes nothing.
//! - **Cleared** for the whole user when a device's sync finishes, `all` (phases 1 and 2,
//!   what the reference client sends) or `phase3`, before its `phased_sync_complete`; and
//!   when a chat is deleted. Otherwise a copy expires `cache.sync_ttl` (1 h) after its last
//!   write.
//!
//! Every step is best effort: a cache failure costs a store read, never a wrong answer.

use chatd_protocol::{ChatId, EncryptedMessage};
use serde::{Deserialize, Serialize};

use crate::session::Session;

/// How a read of chats' messages uses the sync cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum CacheUse {
    /// The store only (phase 3).
    Bypass,
    /// A current copy if there is one; nothing written (`all`, paging).
    Read,
    /// As `Read`, and the chats read from the store are written (`phase1` on its own).
    ReadAndWarm,
}

#[derive(Serialize, Deserialize)]
struct SyncHeader {
    messages_v: u64,
}

impl Session {
    /// The chat's messages from the sync cache, if its copy is at `messages_v`.
    pub(super) async fn cached(
        &self,
        chat: &ChatId,
        messages_v: u64,
    ) -> Option<Vec<EncryptedMessage>> {
        let backend = self.app.ai_cache.backend();
        match backend.sync_get(&self.user_hash(), chat).await {
            Ok(blobs) => decode_blobs(&blobs?, messages_v),
            Err(e) => {
                tracing::debug!(error = %e, "sync cache unavailable");
                None
            }
        }
    }

    /// Writes a chat's messages, read from the store at `messages_v`, to the sync cache.
    pub(super) async fn warm(&self, chat: &ChatId, messages: &[EncryptedMessage], messages_v: u64) {
        let Some(blobs) = encode_blobs(messages, messages_v) else {
            return;
        };
        let backend = self.app.ai_cache.backend();
        let ttl = self.app.config.cache.sync_ttl;
        if let Err(e) = backend.sync_put(&self.user_hash(), chat, blobs, ttl).await {
            tracing::debug!(error = %e, "cannot warm the sync cache");
        }
    }

    /// A device finished its sync: the user's copies are consumed.
    pub(super) async fn clear_sync_cache(&self) {
        let backend = self.app.ai_cache.backend();
        if let Err(e) = backend.sync_clear(&self.user_hash()).await {
            tracing::warn!(error = %e, "cannot clear the sync cache");
        }
    }

    /// Keeps a chat's sync-cache entry current after a message was stored, so the next
    /// login is served from the cache: appends when the cached copy is exactly one version
    /// behind, else re-reads the chat from the store. Best effort (a failure only costs the
    /// next sync a store read; the header check never lets a stale copy through).
    pub(in crate::session) async fn refresh_sync_cache(
        &self,
        chat: &ChatId,
        message: &EncryptedMessage,
        messages_v: u64,
    ) {
        let hash = self.user_hash();
        let backend = self.app.ai_cache.backend();
        let ttl = self.app.config.cache.sync_ttl;
        let blobs = match backend.sync_get(&hash, chat).await {
            Ok(b) => b,
            Err(e) => return tracing::debug!(error = %e, "sync cache unavailable"),
        };
        let appended = blobs.and_then(|mut blobs| {
            let head: SyncHeader = serde_json::from_slice(blobs.first()?).ok()?;
            if head.messages_v + 1 != messages_v {
                return None;
            }
            *blobs.first_mut()? = serde_json::to_vec(&SyncHeader { messages_v }).ok()?;
            blobs.push(serde_json::to_vec(message).ok()?);
            Some(blobs)
        });
        match appended {
            Some(blobs) => {
                if let Err(e) = backend.sync_put(&hash, chat, blobs, ttl).await {
                    tracing::debug!(error = %e, "cannot refresh the sync cache");
                }
            }
            None => self.reload_sync_cache(chat, messages_v).await,
        }
    }

    /// Re-reads a chat's messages from the store into the sync cache (best effort).
    pub(in crate::session) async fn reload_sync_cache(&self, chat: &ChatId, messages_v: u64) {
        let loaded = self
            .app
            .store
            .messages(&self.device.user, std::slice::from_ref(chat))
            .await;
        let Ok(loaded) = loaded else { return };
        let messages: Vec<EncryptedMessage> = loaded.into_iter().map(|(_, m)| m).collect();
        self.warm(chat, &messages, messages_v).await;
    }
}

fn encode_blobs(messages: &[EncryptedMessage], messages_v: u64) -> Option<Vec<Vec<u8>>> {
    let mut blobs = Vec::with_capacity(messages.len() + 1);
    blobs.push(serde_json::to_vec(&SyncHeader { messages_v }).ok()?);
    for m in messages {
        blobs.push(serde_json::to_vec(m).ok()?);
    }
    Some(blobs)
}

fn decode_blobs(blobs: &[Vec<u8>], messages_v: u64) -> Option<Vec<EncryptedMessage>> {
    let (head, rest) = blobs.split_first()?;
    let header: SyncHeader = serde_json::from_slice(head).ok()?;
    if header.messages_v != messages_v {
        return None;
    }
    rest.iter()
        .map(|b| serde_json::from_slice(b).ok())
        .collect()
}
