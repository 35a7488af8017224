//! The client's persistence messages for chats and messages: ciphertexts go to the
//! permanent store unread, the sender gets an acknowledgement, the user's other devices
//! learn of the change. Every id is checked against the owner (in the store's queries, and
//! for a chat no client stored yet, against its first writer's claim); a foreign id is
//! `forbidden` with nothing changed (see `ownership.rs`). Embeds are in `embeds.rs`.

use chatd_protocol::{
    AiResponseCompleted, AiResponseStorageConfirmed, ChatDeleted, ChatId, ChatMessageConfirmed,
    ChatMetadataStored, ChatTitleUpdated, DeleteChat, DeleteMessage, EncryptedChatMetadata,
    EncryptedChatMetadataUpdate, EncryptedMessage, EncryptedMetadataStored, ErrorCode,
    ErrorPayload, MessageDeleted, NewEncryptedMessage, Role, ServerMessage,
    UpdatePostProcessingMetadata, UpdateTitle,
};

use super::Session;
use crate::clock::unix_now;
use crate::delivery::Audience;
use crate::store::{ChatPatch, StoreError};

/// Most embeds one `delete_message` may remove.
const MAX_EMBEDS_TO_DELETE: usize = 1000;

impl Session {
    pub(super) async fn encrypted_chat_metadata(&self, m: EncryptedChatMetadata) {
        let user = &self.device.user;
        let chat = &m.chat_id;
        if m.message_id.is_some() != m.encrypted_content.is_some() {
            return self.invalid(
                "message_id and encrypted_content must be sent together",
                Some(chat),
            );
        }
        if self.claimed_by_another(chat).await {
            return self.store_failed(StoreError::Forbidden, Some(chat), m.message_id.as_ref());
        }
        // A chat's first title comes with its icon and category (later titles alone). What
        // came is stored all the same; only what is missing is reported.
        let mut missing = Vec::new();
        if m.encrypted_title.is_some()
            && (m.encrypted_icon.is_none() || m.encrypted_chat_category.is_none())
        {
            match self.app.store.chat(user, chat).await {
                Ok(Some(stored)) if stored.encrypted_title.is_some() => {}
                Ok(_) => {
                    if m.encrypted_icon.is_none() {
                        missing.push("encrypted_icon");
                    }
                    if m.encrypted_chat_category.is_none() {
                        missing.push("encrypted_chat_category");
                    }
                }
                Err(e) => return self.store_failed(e, Some(chat), m.message_id.as_ref()),
            }
        }
        let created_at = m.created_at.unwrap_or_else(unix_now);
        let patch = ChatPatch {
            encrypted_title: m.encrypted_title.clone(),
            encrypted_icon: m.encrypted_icon.clone(),
            encrypted_category: m.encrypted_chat_category.clone(),
            encrypted_chat_key: m.encrypted_chat_key.clone(),
            encrypted_chat_tags: m.encrypted_chat_tags.clone(),
            allow_key_rotation: m.allow_chat_key_rotation,
            title_v: m.versions.title_v,
            last_edited: Some(
                m.versions
                    .last_edited_overall_timestamp
                    .unwrap_or(created_at),
            ),
            ..ChatPatch::default()
        };
        // The metadata first: a key mismatch must leave the message unstored too.
        let mut details = match self.app.store.update_chat(user, chat, &patch).await {
            Ok(d) => d,
            Err(e) => return self.store_failed(e, Some(chat), m.message_id.as_ref()),
        };
        let mut stored_message = None;
        if let (Some(message_id), Some(content)) = (&m.message_id, &m.encrypted_content) {
            let message = EncryptedMessage {
                message_id: message_id.clone(),
                role: Role::User,
                encrypted_content: content.clone(),
                created_at,
                encrypted_sender_name: m.encrypted_sender_name.clone(),
                encrypted_category: m.encrypted_category.clone(),
                encrypted_model_name: None,
                encrypted_thinking_content: None,
                encrypted_thinking_signature: None,
                encrypted_pii_mappings: m.encrypted_pii_mappings.clone(),
                has_thinking: None,
                thinking_token_count: None,
                user_message_id: None,
                status: Some("synced".into()),
            };
            match self.app.store.add_message(user, chat, &message).await {
                Ok(added) => {
                    details.versions = added.versions;
                    if added.is_new {
                        self.refresh_sync_cache(chat, &message, added.versions.messages_v)
                            .await;
                        stored_message = Some(message);
                    }
                }
                Err(e) => return self.store_failed(e, Some(chat), Some(message_id)),
            }
            self.reply(ServerMessage::ChatMessageConfirmed(ChatMessageConfirmed {
                chat_id: chat.clone(),
                message_id: message_id.clone(),
                temp_id: None,
                new_messages_v: details.versions.messages_v,
                new_last_edited_overall_timestamp: details.versions.last_edited_overall_timestamp,
            }));
        }
        self.reply(ServerMessage::EncryptedMetadataStored(
            EncryptedMetadataStored {
                chat_id: chat.clone(),
                message_id: m.message_id.clone(),
                status: "stored".into(),
                versions: details.versions,
            },
        ));
        let update = ServerMessage::EncryptedChatMetadata(Box::new(EncryptedChatMetadataUpdate {
            chat_id: chat.clone(),
            message: stored_message,
            chat: details,
        }));
        self.broadcast(self.others(), &update);
        if !missing.is_empty() {
            let mut p = ErrorPayload::new(
                ErrorCode::IncompleteChatMetadata,
                "a chat's first encrypted_title needs encrypted_icon and encrypted_chat_category; \
                 the rest was stored",
            );
            p.details = Some(format!("missing: {}", missing.join(", ")));
            p.chat_id = Some(chat.clone());
            p.message_id = m.message_id.clone();
            self.reply(ServerMessage::Error(p));
        }
    }

    pub(super) async fn ai_response_completed(&self, m: AiResponseCompleted) {
        let user = &self.device.user;
        let chat = &m.chat_id;
        let message = m.message;
        if message.role == Role::User {
            return self.invalid(
                "message.role must be \"assistant\" or \"system\"",
                Some(chat),
            );
        }
        if message.encrypted_content.is_empty() {
            return self.invalid("message.encrypted_content must not be empty", Some(chat));
        }
        if self.claimed_by_another(chat).await {
            return self.store_failed(StoreError::Forbidden, Some(chat), Some(&message.message_id));
        }
        // A corrected answer (`replace`) takes the stored one's place; otherwise a message
        // id already stored is acknowledged without writing.
        let stored = if m.replace {
            self.app
                .store
                .replace_message(user, chat, &message)
                .await
                .map(|versions| (true, versions))
        } else {
            self.app
                .store
                .add_message(user, chat, &message)
                .await
                .map(|added| (added.is_new, added.versions))
        };
        let (written, versions) = match stored {
            Ok(s) => s,
            Err(e) => return self.store_failed(e, Some(chat), Some(&message.message_id)),
        };
        // The cache is current before the sender hears "stored".
        match (written, m.replace) {
            (true, false) => {
                self.refresh_sync_cache(chat, &message, versions.messages_v)
                    .await
            }
            (true, true) => self.reload_sync_cache(chat, versions.messages_v).await,
            (false, _) => {}
        }
        // Stored: no longer pending for the user's next connections.
        if let Err(e) = self
            .app
            .turn
            .ai_cache
            .drop_pending(&self.device.user_hash, message.message_id.as_str())
            .await
        {
            tracing::warn!(error = %e, "cannot clear a pending answer");
        }
        self.reply(ServerMessage::AiResponseStorageConfirmed(
            AiResponseStorageConfirmed {
                chat_id: chat.clone(),
                message_id: message.message_id.clone(),
                stored: written,
                versions,
            },
        ));
        if written {
            let new = ServerMessage::NewEncryptedMessage(Box::new(NewEncryptedMessage {
                chat_id: chat.clone(),
                message,
                versions,
            }));
            self.broadcast(self.others(), &new);
        }
    }

    pub(super) async fn update_post_processing_metadata(&self, m: UpdatePostProcessingMetadata) {
        let user = &self.device.user;
        let chat = &m.chat_id;
        if self.claimed_by_another(chat).await {
            return self.store_failed(StoreError::Forbidden, Some(chat), None);
        }
        let patch = ChatPatch {
            encrypted_title: m.encrypted_title,
            encrypted_chat_key: m.encrypted_chat_key,
            encrypted_chat_summary: m.encrypted_chat_summary,
            encrypted_chat_tags: m.encrypted_chat_tags,
            encrypted_follow_up_suggestions: m.encrypted_follow_up_suggestions,
            encrypted_new_chat_suggestions: (!m.encrypted_new_chat_suggestions.is_empty())
                .then_some(m.encrypted_new_chat_suggestions),
            encrypted_top_recommended_apps_for_chat: m.encrypted_top_recommended_apps_for_chat,
            encrypted_quick_tip_slugs: m.encrypted_quick_tip_slugs,
            encrypted_share_cta_text: m.encrypted_share_cta_text,
            title_v: m.title_v,
            ..ChatPatch::default()
        };
        if patch.is_empty() {
            return self.invalid("no encrypted field to store", Some(chat));
        }
        match self.existing_chat(chat).await {
            Ok(()) => {}
            Err(e) => return self.store_failed(e, Some(chat), None),
        }
        match self.app.store.update_chat(user, chat, &patch).await {
            Ok(details) => {
                let stored = ChatMetadataStored {
                    chat_id: chat.clone(),
                    chat: details,
                };
                self.reply(ServerMessage::PostProcessingMetadataStored(Box::new(
                    stored.clone(),
                )));
                self.broadcast(
                    self.others(),
                    &ServerMessage::ChatMetadataUpdated(Box::new(stored)),
                );
            }
            Err(e) => self.store_failed(e, Some(chat), None),
        }
    }

    /// `Ok` if the owner has the chat in the store; `NotFound` or `Forbidden` otherwise.
    async fn existing_chat(&self, chat: &ChatId) -> Result<(), StoreError> {
        let user = &self.device.user;
        match self.app.store.chat(user, chat).await? {
            Some(_) => Ok(()),
            None => {
                self.app.store.authorize(user, chat).await?;
                Err(StoreError::NotFound)
            }
        }
    }

    pub(super) async fn update_title(&self, m: UpdateTitle) {
        let user = &self.device.user;
        let chat = &m.chat_id;
        if m.encrypted_title.is_empty() {
            return self.invalid("encrypted_title must not be empty", Some(chat));
        }
        if self.claimed_by_another(chat).await {
            return self.store_failed(StoreError::Forbidden, Some(chat), None);
        }
        if let Err(e) = self.existing_chat(chat).await {
            return self.store_failed(e, Some(chat), None);
        }
        let patch = ChatPatch {
            encrypted_title: Some(m.encrypted_title.clone()),
            encrypted_chat_key: m.encrypted_chat_key,
            ..ChatPatch::default()
        };
        match self.app.store.update_chat(user, chat, &patch).await {
            Ok(details) => {
                let updated = ServerMessage::ChatTitleUpdated(ChatTitleUpdated {
                    chat_id: chat.clone(),
                    encrypted_title: m.encrypted_title,
                    versions: details.versions,
                });
                self.broadcast(Audience::All, &updated);
            }
            Err(e) => self.store_failed(e, Some(chat), None),
        }
    }

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
        self.app.turn.turns.abandon(user, chat).await;
        self.app.turn.predictions.forget(chat);
        self.app.owners.forget(chat);
        let removed = match self.app.store.delete_chat(user, chat).await {
            Ok(d) => d.embeds,
            // Never stored (only cached by a turn): the caches are still cleared.
            Err(StoreError::NotFound) => Vec::new(),
            Err(e) => return self.store_failed(e, Some(chat), None),
        };
        let hash = self.user_hash();
        let backend = self.app.turn.ai_cache.backend();
        let mut failed = self
            .app
            .turn
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
                if let Err(e) = self.app.turn.ai_cache.delete(&self.user_hash(), chat).await {
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
