//! The client's persistence messages for chats and messages: ciphertexts go to the
//! permanent store unread, the sender gets an acknowledgement, the user's other devices
//! learn of the change. Every id is checked against the owner (in the store's queries, and
//! for a chat no client stored yet, against its first writer's claim); a foreign id is
//! `forbidden` with nothing changed (see `ownership.rs`). Embeds are in `embeds.rs`,
//! deletions in `delete.rs`.

use chatd_protocol::{
    AiResponseCompleted, AiResponseStorageConfirmed, ChatDetails, ChatId, ChatMessageConfirmed,
    ChatMetadataStored, ChatTitleUpdated, EncryptedChatMetadata, EncryptedChatMetadataUpdate,
    EncryptedMessage, EncryptedMetadataStored, ErrorCode, ErrorPayload, NewEncryptedMessage, Role,
    ServerMessage, UpdatePostProcessingMetadata, UpdateTitle,
};

use super::Session;
use crate::clock::unix_now;
use crate::delivery::Audience;
use crate::store::{ChatPatch, StoreError};

impl Session {
    /// `encrypted_chat_metadata`: the chat's metadata stored, then the user message that
    /// came with it (confirmed to the sender); the sender hears `encrypted_metadata_stored`,
    /// the other devices the update, and a first title without its icon and category is
    /// reported (what came is stored all the same).
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
        let missing = match self.missing_first_title_fields(&m).await {
            Ok(missing) => missing,
            Err(e) => return self.store_failed(e, Some(chat), m.message_id.as_ref()),
        };
        let created_at = m.created_at.unwrap_or_else(unix_now);
        // The metadata first: a key mismatch must leave the message unstored too.
        let patch = metadata_patch(&m, created_at);
        let mut details = match self.app.store.update_chat(user, chat, &patch).await {
            Ok(d) => d,
            Err(e) => return self.store_failed(e, Some(chat), m.message_id.as_ref()),
        };
        let stored_message = match self.metadata_message(&m, created_at, &mut details).await {
            Ok(stored) => stored,
            Err(e) => return self.store_failed(e, Some(chat), m.message_id.as_ref()),
        };
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

    /// A chat's first title comes with its icon and category (later titles alone): the
    /// fields a first title came without.
    async fn missing_first_title_fields(
        &self,
        m: &EncryptedChatMetadata,
    ) -> Result<Vec<&'static str>, StoreError> {
        let mut missing = Vec::new();
        if m.encrypted_title.is_some()
            && (m.encrypted_icon.is_none() || m.encrypted_chat_category.is_none())
        {
            match self.app.store.chat(&self.device.user, &m.chat_id).await? {
                Some(stored) if stored.encrypted_title.is_some() => {}
                _ => {
                    if m.encrypted_icon.is_none() {
                        missing.push("encrypted_icon");
                    }
                    if m.encrypted_chat_category.is_none() {
                        missing.push("encrypted_chat_category");
                    }
                }
            }
        }
        Ok(missing)
    }

    /// The user message that came with the metadata, if any: stored (the chat's versions
    /// in `details` follow) and confirmed to the sender. `Some` when it was new.
    async fn metadata_message(
        &self,
        m: &EncryptedChatMetadata,
        created_at: i64,
        details: &mut ChatDetails,
    ) -> Result<Option<EncryptedMessage>, StoreError> {
        let (Some(message_id), Some(content)) = (&m.message_id, &m.encrypted_content) else {
            return Ok(None);
        };
        let chat = &m.chat_id;
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
            replaces_through: None,
        };
        let added = self
            .app
            .store
            .add_message(&self.device.user, chat, &message)
            .await?;
        details.versions = added.versions;
        let mut stored = None;
        if added.is_new {
            self.refresh_sync_cache(chat, &message, added.versions.messages_v)
                .await;
            stored = Some(message);
        }
        self.reply(ServerMessage::ChatMessageConfirmed(ChatMessageConfirmed {
            chat_id: chat.clone(),
            message_id: message_id.clone(),
            temp_id: None,
            new_messages_v: details.versions.messages_v,
            new_last_edited_overall_timestamp: details.versions.last_edited_overall_timestamp,
        }));
        Ok(stored)
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
}

/// The chat's fields an `encrypted_chat_metadata` sets (its last edit: the client's, else
/// `created_at`).
fn metadata_patch(m: &EncryptedChatMetadata, created_at: i64) -> ChatPatch {
    ChatPatch {
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
    }
}
