//! Deleting chats and messages (`delete_chat`, `delete_message`): removed from the
//! permanent store and from the caches that hold copies (the AI cache, the sync cache, a
//! deleted chat's embeds), then every device of the user is told. Ids are checked against
//! the owner like every persistence message (see `persist.rs`).

use chatd_protocol::{
    ChatDeleted, DeleteChat, DeleteMessage, ErrorCode, ErrorPayload, MessageDeleted, ServerMessage,
};

use super::Session;
use crate::delivery::Audience;
use crate::store::StoreError;

/// Most embeds one `delete_message` may remove.
const MAX_EMBEDS_TO_DELETE: usize = 1000;

impl Session {
    /// Removes the chat from the store, the AI cache (messages, embeds index, exclusive
    /// embeds, settings/memories) and the sync cache, then tells every device.
    pub(super) async fn delete_chat(&self, m: DeleteChat) {
        let user = &self.device.user;
        let chat = &m.chat_id;
        if self.claimed_by_another(chat).await {
            return self.store_failed(StoreError::Forbidden, Some(chat), None);
        }
        // A running answer (or one queued behind it) would write the chat back into the AI
        // cache: stop it, drop the queue, and tell the turn to write nothing.
        self.app.turns.abandon(user, chat).await;
        self.app.predictions.forget(&self.user_hash(), chat).await;
        self.app.owners.forget(chat);
        let removed = match self.app.store.delete_chat(user, chat).await {
            Ok(d) => d.embeds,
            // Never stored (only cached by a turn): the caches are still cleared.
            Err(StoreError::NotFound) => Vec::new(),
            Err(e) => return self.store_failed(e, Some(chat), None),
        };
        let hash = self.user_hash();
        let backend = self.app.ai_cache.backend();
        let mut failed = self
            .app
            .ai_cache
            .delete(&hash, chat)
            .await
            .err()
            .map(|e| e.to_string());
        for embed in &removed {
            if let Err(e) = backend
                .kv_delete(&crate::cache::backend::keys::embed(&hash, embed.as_str()))
                .await
            {
                failed = Some(e.to_string());
            }
        }
        if let Err(e) = backend.sync_clear(&hash).await {
            failed = Some(e.to_string());
        }
        if let Some(e) = failed {
            tracing::warn!(error = %e, "chat deleted from the store; cache cleanup failed");
            let mut p = ErrorPayload::new(
                ErrorCode::CacheUnavailable,
                "the chat was deleted from the store but the cache could not be cleared; retry",
            );
            p.chat_id = Some(chat.clone());
            return self.reply(ServerMessage::Error(p));
        }
        self.broadcast(
            Audience::All,
            &ServerMessage::ChatDeleted(ChatDeleted {
                chat_id: chat.clone(),
            }),
        );
    }

    /// Removes the message (and the embeds it names) from the store and drops the chat
    /// from the AI cache, then tells every device.
    pub(super) async fn delete_message(&self, m: DeleteMessage) {
        let user = &self.device.user;
        let chat = &m.chat_id;
        if m.embed_ids_to_delete.len() > MAX_EMBEDS_TO_DELETE {
            return self.invalid(
                format!("at most {MAX_EMBEDS_TO_DELETE} embedIdsToDelete"),
                Some(chat),
            );
        }
        if self.claimed_by_another(chat).await {
            return self.store_failed(StoreError::Forbidden, Some(chat), Some(&m.message_id));
        }
        match self
            .app
            .store
            .delete_message(user, chat, &m.message_id, &m.embed_ids_to_delete)
            .await
        {
            Ok(versions) => {
                // The AI cache would still hold the message: drop the chat so the next
                // turn asks the client for the history as it now is.
                if let Err(e) = self.app.ai_cache.delete(&self.user_hash(), chat).await {
                    tracing::warn!(error = %e, "cannot drop the chat from the AI cache");
                }
                self.broadcast(
                    Audience::All,
                    &ServerMessage::MessageDeleted(MessageDeleted {
                        chat_id: chat.clone(),
                        message_id: m.message_id,
                        versions,
                    }),
                );
            }
            Err(e) => self.store_failed(e, Some(chat), Some(&m.message_id)),
        }
    }
}
