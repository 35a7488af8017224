//! The client's embed messages: encrypted embeds and their wrapped keys go to the permanent
//! store unread (the sender gets an acknowledgement, the other devices the update), and an
//! embed is served back to its owner. A foreign id is `forbidden` with nothing changed; a
//! `content_hash` that is not the one of the content chatd made is refused.

use chatd_protocol::{
    EmbedKey, EmbedKeysStored, EmbedUpdate, ErrorCode, ErrorPayload, RequestEmbed, SendEmbedData,
    ServerMessage, StoreEmbed, StoreEmbedKeys,
};

use super::Session;
use crate::store::{StoreError, hash_id};

/// Most wrapped keys accepted in one `store_embed_keys`.
const MAX_EMBED_KEYS: usize = 1000;

impl Session {
    pub(super) async fn store_embed(&self, m: StoreEmbed) {
        let user = &self.device.user;
        if m.encrypted_content.as_deref().is_none_or(str::is_empty) {
            return self.invalid("encrypted_content is required", None);
        }
        if let Err(reason) = check_keys(&m.embed_keys) {
            return self.invalid(reason, None);
        }
        let hashed = hash_id(m.embed_id.as_str());
        if m.embed_keys.iter().any(|k| k.hashed_embed_id != hashed) {
            return self.invalid("embed_keys must be this embed's keys", None);
        }
        if !self.content_hash_matches(&m).await {
            let mut p = ErrorPayload::new(
                ErrorCode::ContentHashMismatch,
                "content_hash is not the hash of the content chatd made for this embed version",
            );
            p.details = Some(format!("embed {}", m.embed_id));
            return self.reply(ServerMessage::Error(p));
        }
        match self.app.store.put_embed(user, &m).await {
            Ok(()) => {
                let update = EmbedUpdate {
                    embed_id: m.embed_id,
                    chat_id: m.hashed_chat_id,
                    status: m.status,
                    child_embed_ids: m.embed_ids,
                    version_number: m.version_number,
                };
                self.reply(ServerMessage::EmbedStored(update.clone()));
                self.broadcast(self.others(), &ServerMessage::EmbedUpdate(update));
            }
            Err(e) => self.store_failed(e, None, None),
        }
    }

    /// The `content_hash` the client sends with an embed it stores must be the one of the
    /// content chatd made for that version (when chatd still has it; a version the client
    /// made itself, or one chatd no longer caches, cannot be checked here).
    async fn content_hash_matches(&self, m: &StoreEmbed) -> bool {
        let Some(sent) = &m.content_hash else {
            return true;
        };
        match self
            .app
            .ai_cache
            .get_embed(&self.user_hash(), &m.embed_id)
            .await
        {
            Ok(Some(made)) if !made.is_unavailable() && made.version_number == m.version_number => {
                made.content_hash() == *sent
            }
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "cannot check an embed's content_hash; storing it");
                true
            }
        }
    }

    pub(super) async fn store_embed_keys(&self, m: StoreEmbedKeys) {
        if m.keys.is_empty() {
            return self.invalid(
                format!("keys must hold 1 to {MAX_EMBED_KEYS} entries"),
                None,
            );
        }
        if let Err(reason) = check_keys(&m.keys) {
            return self.invalid(reason, None);
        }
        match self
            .app
            .store
            .put_embed_keys(&self.device.user, &m.keys)
            .await
        {
            Ok(count) => self.reply(ServerMessage::EmbedKeysStored(EmbedKeysStored { count })),
            Err(e) => self.store_failed(e, None, None),
        }
    }

    /// Serves an embed from the server cache (plaintext for the client to encrypt) or else
    /// the stored client-encrypted copy with its wrapped keys. Another user's embed is
    /// `not_found` (its existence is not revealed).
    pub(super) async fn request_embed(&self, m: RequestEmbed) {
        let user = &self.device.user;
        match self
            .app
            .ai_cache
            .get_embed(&self.user_hash(), &m.embed_id)
            .await
        {
            Ok(Some(cached)) => {
                return self.reply(ServerMessage::SendEmbedData(Box::new(SendEmbedData {
                    embed_type: Some(cached.embed_type),
                    content: Some(cached.content),
                    status: cached.status,
                    version_number: Some(cached.version_number),
                    encryption_mode: Some("client".into()),
                    ..SendEmbedData::new(m.embed_id)
                })));
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "embed cache unavailable; trying the store"),
        }
        let stored = match self.app.store.embed(user, &m.embed_id).await {
            Ok(Some(e)) => e,
            Ok(None) => return self.store_failed(StoreError::NotFound, None, None),
            Err(e) => return self.store_failed(e, None, None),
        };
        let keys = match self
            .app
            .store
            .embed_keys(user, &[hash_id(m.embed_id.as_str())])
            .await
        {
            Ok(k) => k,
            Err(e) => return self.store_failed(e, None, None),
        };
        self.reply(ServerMessage::SendEmbedData(Box::new(SendEmbedData {
            already_encrypted: true,
            status: stored.status.clone(),
            embed: Some(stored),
            embed_keys: keys,
            ..SendEmbedData::new(m.embed_id)
        })));
    }
}

/// Wrapped keys as the client sends them (alone or with their embed): at most
/// [`MAX_EMBED_KEYS`], each `master` or `chat`, with a hashed embed id and a key.
fn check_keys(keys: &[EmbedKey]) -> Result<(), String> {
    if keys.len() > MAX_EMBED_KEYS {
        return Err(format!("keys must hold 1 to {MAX_EMBED_KEYS} entries"));
    }
    for k in keys {
        if !matches!(k.key_type.as_str(), "master" | "chat") {
            return Err("key_type must be \"master\" or \"chat\"".into());
        }
        if k.hashed_embed_id.is_empty() || k.hashed_embed_id.len() > 128 {
            return Err("hashed_embed_id must be 1 to 128 characters".into());
        }
        if k.encrypted_embed_key.is_empty() {
            return Err("encrypted_embed_key must not be empty".into());
        }
    }
    Ok(())
}
