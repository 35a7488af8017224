//! App settings and memories: the server asks for the entries a chat needs
//! (`request_app_settings_memories`), the client answers with the ones the user allows
//! (`app_settings_memories_confirmed`), and the model's proposed changes go to the client
//! to decide (`app_settings_memories_proposal` / `app_settings_memories_proposal_result`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ChatId, MessageId};

/// The client's answer to `request_app_settings_memories`: the entries the user allows in
/// this chat (plaintext; the server seals them into the chat's cache). An empty list means
/// "no".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppSettingsMemoriesConfirmed {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    pub request_id: String,
    #[serde(default)]
    pub app_settings_memories: Vec<AppSettingsMemoryEntry>,
}

/// One entry of one category (`item_key`) of an app.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppSettingsMemoryEntry {
    pub app_id: String,
    pub item_key: String,
    /// One entry, valid against the category's schema.
    pub content: Value,
}

/// Never prints the content.
impl std::fmt::Debug for AppSettingsMemoryEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppSettingsMemoryEntry")
            .field("app_id", &self.app_id)
            .field("item_key", &self.item_key)
            .finish_non_exhaustive()
    }
}

/// The user's decision on a proposed change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppSettingsMemoriesProposalResult {
    pub proposal_id: String,
    pub accepted: bool,
}

/// Asks every device of the user for the entries of these categories (`app_id:category`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestAppSettingsMemories {
    pub request_id: String,
    pub chat_id: ChatId,
    /// The user message whose turn asked.
    pub message_id: MessageId,
    pub requested_keys: Vec<String>,
    /// The request as a system message of the chat, for the client to encrypt and store
    /// like every message (it names the categories, never an entry).
    pub system_message: SystemMessage,
    /// Each requested category's JSON Schema of one entry, by key, as the app declares it
    /// (a client builds its form from it).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub schemas: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A system message chatd adds to a chat (the client stores it encrypted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SystemMessage {
    pub message_id: MessageId,
    /// Always `system`.
    pub role: crate::Role,
    pub content: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A request was answered (on some device): close its dialog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DismissAppSettingsMemoriesDialog {
    pub chat_id: ChatId,
    pub request_id: String,
    /// `confirmed` or `declined`.
    pub reason: String,
}

/// What a proposal would do to the user's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProposalAction {
    Add,
    Update,
    Delete,
}

/// A change the model proposes; the client shows it and answers
/// `app_settings_memories_proposal_result`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppSettingsMemoriesProposal {
    pub proposal_id: String,
    pub chat_id: ChatId,
    pub app_id: String,
    pub category: String,
    pub action: ProposalAction,
    /// The entry (valid against the category's schema).
    pub entry: Value,
}

/// Never prints the entry.
impl std::fmt::Debug for AppSettingsMemoriesProposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppSettingsMemoriesProposal")
            .field("proposal_id", &self.proposal_id)
            .field("app_id", &self.app_id)
            .field("category", &self.category)
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

/// A new settings/memory entry postprocessing suggests (the user may add or reject it).
/// Its hash, computed by the client, is SHA-256 hex of `app_id:item_type:` followed by the
/// lower-cased `suggested_title`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SuggestedSettingsMemoryEntry {
    pub app_id: String,
    /// The category id.
    pub item_type: String,
    pub suggested_title: String,
    /// The entry, valid against the category's schema.
    pub item_value: Value,
}

/// Never prints the suggestion's content.
impl std::fmt::Debug for SuggestedSettingsMemoryEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SuggestedSettingsMemoryEntry")
            .field("app_id", &self.app_id)
            .field("item_type", &self.item_type)
            .finish_non_exhaustive()
    }
}

/// The user rejected a suggestion: it is never suggested again in this chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RejectSettingsMemorySuggestion {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    /// 64 lowercase hex characters (see [`SuggestedSettingsMemoryEntry`]).
    pub hash: String,
}

/// A suggestion was rejected (on some device); to every device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SettingsMemorySuggestionRejected {
    pub chat_id: ChatId,
    pub hash: String,
}
