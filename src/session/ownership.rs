//! Who may touch a chat, and how a store failure reads to the client: the owner check
//! against the permanent store (and, for a chat no client stored yet, its first writer's
//! claim in the cache), the typed error frames for store failures and bad payloads.

use chatd_protocol::{ChatId, ErrorCode, ErrorPayload, MessageId, ServerMessage};

use super::Session;
use crate::crypto::UserHash;
use crate::delivery::Audience;
use crate::store::StoreError;

impl Session {
    pub(super) fn user_hash(&self) -> UserHash {
        UserHash::of(&self.device.user)
    }

    /// Answers a cache or key-service failure with its typed error frame.
    pub(super) fn cache_fault(&self, e: &crate::cache::ai::CacheFault, chat: Option<&ChatId>) {
        let (code, text) = e.code();
        let mut p = ErrorPayload::new(code, text);
        p.chat_id = chat.cloned();
        self.reply(ServerMessage::Error(p));
    }

    pub(super) fn invalid(&self, reason: impl Into<String>, chat: Option<&ChatId>) {
        let mut p = ErrorPayload::new(ErrorCode::InvalidPayload, reason);
        p.chat_id = chat.cloned();
        self.reply(ServerMessage::Error(p));
    }

    /// Answers a store failure with its typed error frame.
    pub(super) fn store_failed(
        &self,
        e: StoreError,
        chat: Option<&ChatId>,
        message: Option<&MessageId>,
    ) {
        let (code, text) = match &e {
            StoreError::Forbidden => (ErrorCode::Forbidden, "this id belongs to another user"),
            StoreError::NotFound => (ErrorCode::NotFound, "no such chat, message or embed"),
            StoreError::ChatKeyMismatch => (
                ErrorCode::ChatKeyMismatch,
                "encrypted_chat_key differs from the chat's stored key; set allow_chat_key_rotation to replace it",
            ),
            StoreError::StaleVersion { .. } => (
                ErrorCode::StaleVersion,
                "version_number is lower than the stored embed's",
            ),
            StoreError::Unavailable(_) => {
                tracing::warn!(error = %e, "store unavailable");
                (
                    ErrorCode::StoreUnavailable,
                    "the store is unavailable; retry later",
                )
            }
            StoreError::Corrupt(_) => {
                tracing::error!(error = %e, "store data unreadable");
                (ErrorCode::InternalError, "internal error")
            }
        };
        let mut p = ErrorPayload::new(code, text);
        if let StoreError::StaleVersion { sent, stored } = e {
            p.details = Some(format!("sent {sent}, stored {stored}"));
        }
        p.chat_id = chat.cloned();
        p.message_id = message.cloned();
        self.reply(ServerMessage::Error(p));
    }

    /// Checks with the permanent store (the one record of who owns a chat) that the user
    /// may use `chat`. Answers the error frame itself and fails closed when the store is
    /// down.
    pub(super) async fn stored_chat_allowed(
        &self,
        chat: &ChatId,
        message: Option<&MessageId>,
    ) -> bool {
        if self.app.owners.known(&self.device.user, chat) {
            return true;
        }
        match self.app.store.authorize(&self.device.user, chat).await {
            // Not stored by anyone: the first writer's claim decides.
            Ok(()) => match self
                .app
                .ai_cache
                .claimed_by_another(&self.device.user_hash, chat)
                .await
            {
                Ok(false) => true,
                Ok(true) => {
                    self.store_failed(StoreError::Forbidden, Some(chat), message);
                    false
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read a chat's claim");
                    self.store_failed(StoreError::Unavailable(e.to_string()), Some(chat), message);
                    false
                }
            },
            Err(e) => {
                self.store_failed(e, Some(chat), message);
                false
            }
        }
    }

    /// True when another user claimed this chat before any client stored it (its first
    /// writer owns it). With the cache down the store alone decides (a stored chat's owner
    /// is checked there), so the user's ciphertext is not refused for an outage.
    pub(super) async fn claimed_by_another(&self, chat: &ChatId) -> bool {
        match self
            .app
            .ai_cache
            .claimed_by_another(&self.device.user_hash, chat)
            .await
        {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a chat's claim; the store decides");
                false
            }
        }
    }

    pub(super) fn others(&self) -> Audience {
        Audience::AllExcept(self.device.conn_id)
    }
}
