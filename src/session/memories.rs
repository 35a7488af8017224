//! The client's answers about app settings and memories: the entries the user allows for a
//! request (`app_settings_memories_confirmed`; checked against their category's schema,
//! sealed into the chat's cache, the request's dialog dismissed on every device) and the
//! decision on a model's proposal (`app_settings_memories_proposal_result`; an accepted
//! entry enters the chat's cache), and a rejected suggestion's hash, kept with the chat in
//! the permanent store (`reject_settings_memory_suggestion`). The records are the user's own (their keys carry the
//! user's hash and their values open only with the user's key), and the chat's owner is
//! checked, so nobody answers for a chat that is not theirs.

use std::collections::BTreeMap;

use chatd_protocol::{
    AppSettingsMemoriesConfirmed, AppSettingsMemoriesProposalResult, AppSettingsMemoryEntry,
    ChatId, DismissAppSettingsMemoriesDialog, ErrorCode, ErrorPayload,
    RejectSettingsMemorySuggestion, ServerMessage, SettingsMemorySuggestionRejected,
};
use serde_json::Value;

use super::Session;
use crate::cache::ai::CacheFault;
use crate::crypto::UserHash;
use crate::delivery::Audience;
use crate::memories::store::{PendingRequest, apply, valid_id};
use crate::memories::suggest::valid_hash;

impl Session {
    pub(super) async fn app_settings_memories_confirmed(&self, m: AppSettingsMemoriesConfirmed) {
        let chat = &m.chat_id;
        if !valid_id(&m.request_id) {
            return self.invalid(
                "request_id is not a settings/memories request id",
                Some(chat),
            );
        }
        if !self.stored_chat_allowed(chat, None).await {
            return;
        }
        let memories = &self.app.memories;
        let user = self.user_hash();
        let request = match memories.store.request(&user, &m.request_id).await {
            Ok(Some(r)) if r.chat_id == *chat => r,
            Ok(_) => {
                return self.memories_error(
                    ErrorCode::NotFound,
                    "no unanswered settings/memories request with this id in this chat",
                    None,
                    chat,
                );
            }
            Err(e) => return self.memories_fault(&e, chat),
        };
        let accepted = self.accepted_entries(m.app_settings_memories, &request, chat);
        if let Err(e) = self
            .store_answer(&user, &request, &m.request_id, &accepted)
            .await
        {
            return self.memories_fault(&e, chat);
        }
        let reason = if accepted.is_empty() {
            "declined"
        } else {
            "confirmed"
        };
        self.broadcast(
            Audience::All,
            &ServerMessage::DismissAppSettingsMemoriesDialog(DismissAppSettingsMemoriesDialog {
                chat_id: chat.clone(),
                request_id: m.request_id,
                reason: reason.into(),
            }),
        );
    }

    /// The entries the user allows, valid ones by key: each names a declared category
    /// the request asked for and matches its schema. Every problem is reported; the valid
    /// entries are kept.
    fn accepted_entries(
        &self,
        entries: Vec<AppSettingsMemoryEntry>,
        request: &PendingRequest,
        chat: &ChatId,
    ) -> BTreeMap<String, Vec<Value>> {
        let memories = &self.app.memories;
        let mut accepted: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for entry in entries {
            let Some(category) = memories.categories.by_parts(&entry.app_id, &entry.item_key)
            else {
                self.memories_error(
                    ErrorCode::UnknownSettingsCategory,
                    "no app declares this settings/memories category",
                    Some(format!("{}:{}", entry.app_id, entry.item_key)),
                    chat,
                );
                continue;
            };
            let key = category.key();
            if !request.keys.contains(&key) {
                self.memories_error(
                    ErrorCode::InvalidPayload,
                    "this category was not requested",
                    Some(key),
                    chat,
                );
                continue;
            }
            match crate::schema::validate(&category.spec.schema, &entry.content) {
                Ok(()) => accepted.entry(key).or_default().push(entry.content),
                Err(reason) => self.memories_error(
                    ErrorCode::InvalidSettingsMemoryEntry,
                    "the entry does not match its category's schema; not stored",
                    Some(format!("{key}: {reason}")),
                    chat,
                ),
            }
        }
        accepted
    }

    /// Seals the accepted entries into the chat's cache, marks each requested key answered
    /// (or declined when nothing of it was accepted) and forgets the request.
    async fn store_answer(
        &self,
        user: &UserHash,
        request: &PendingRequest,
        request_id: &str,
        accepted: &BTreeMap<String, Vec<Value>>,
    ) -> Result<(), CacheFault> {
        let store = &self.app.memories.store;
        let chat = &request.chat_id;
        for (key, entries) in accepted {
            store.put_entries(user, chat, key, entries).await?;
        }
        for key in &request.keys {
            if accepted.contains_key(key) {
                store.answered(user, chat, key).await?;
            } else {
                store.decline(user, chat, key).await?;
            }
        }
        store.forget_request(user, request_id).await?;
        Ok(())
    }

    pub(super) async fn app_settings_memories_proposal_result(
        &self,
        m: AppSettingsMemoriesProposalResult,
    ) {
        let memories = &self.app.memories;
        let user = self.user_hash();
        let not_found = || {
            self.error(
                ErrorCode::NotFound,
                "no pending settings/memories proposal with this id",
            )
        };
        if !valid_id(&m.proposal_id) {
            return not_found();
        }
        let proposal = match memories.store.take_proposal(&user, &m.proposal_id).await {
            Ok(Some(p)) => p,
            Ok(None) => return not_found(),
            Err(e) => return self.memories_fault_plain(&e),
        };
        if !m.accepted {
            return;
        }
        let chat = &proposal.chat_id;
        let Some(category) = memories
            .categories
            .by_parts(&proposal.app_id, &proposal.category)
        else {
            return self.memories_error(
                ErrorCode::UnknownSettingsCategory,
                "the proposal's category no longer exists",
                None,
                chat,
            );
        };
        let key = category.key();
        let result = async {
            let mut entries = memories
                .store
                .entries(&user, chat, &key)
                .await?
                .unwrap_or_default();
            apply(&mut entries, proposal.action, proposal.entry);
            memories
                .store
                .put_entries(&user, chat, &key, &entries)
                .await
        };
        if let Err(e) = result.await {
            self.memories_fault(&e, chat);
        }
    }

    /// Stores the rejected suggestion's hash with the chat (idempotent) and tells every
    /// device; postprocessing never suggests it again in this chat.
    pub(super) async fn reject_settings_memory_suggestion(
        &self,
        m: RejectSettingsMemorySuggestion,
    ) {
        let chat = &m.chat_id;
        if !valid_hash(&m.hash) {
            return self.invalid(
                "hash must be 64 lowercase hex characters (SHA-256 of app_id:item_type:title)",
                Some(chat),
            );
        }
        if !self.stored_chat_allowed(chat, None).await {
            return;
        }
        match self
            .app
            .store
            .reject_suggestion(&self.device.user, chat, &m.hash)
            .await
        {
            Ok(_) => self.broadcast(
                Audience::All,
                &ServerMessage::SettingsMemorySuggestionRejected(
                    SettingsMemorySuggestionRejected {
                        chat_id: m.chat_id.clone(),
                        hash: m.hash,
                    },
                ),
            ),
            Err(e) => self.store_failed(e, Some(chat), None),
        }
    }

    fn memories_error(&self, code: ErrorCode, text: &str, details: Option<String>, chat: &ChatId) {
        let mut p = ErrorPayload::new(code, text);
        p.details = details;
        p.chat_id = Some(chat.clone());
        self.reply(ServerMessage::Error(p));
    }

    fn memories_fault(&self, fault: &CacheFault, chat: &ChatId) {
        let (code, text) = fault_code(fault);
        self.memories_error(code, &text, None, chat);
    }

    fn memories_fault_plain(&self, fault: &CacheFault) {
        let (code, text) = fault_code(fault);
        self.error(code, &text);
    }
}

fn fault_code(fault: &CacheFault) -> (ErrorCode, String) {
    tracing::warn!(error = %fault, "settings/memories cache unavailable");
    fault.code()
}
