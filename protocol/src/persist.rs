//! Payloads of the zero-knowledge persistence and sync flows: the client encrypts, chatd
//! stores the ciphertexts as opaque strings and hands them back byte-for-byte on sync.
//! Every `encrypted_*` field is client ciphertext chatd never reads. This file owns chats,
//! messages and their versions; embeds are in `persist/embeds.rs`, the phased sync in
//! `persist/sync.rs` (all exported at the crate's root).

mod embeds;
mod key_check;
mod sync;

use crate::{ChatId, EmbedId, MessageId, Role};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use embeds::*;
pub use key_check::*;
pub use sync::*;

/// A chat's version counters as the client sends them (all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClientVersions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_v: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_v: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_edited_overall_timestamp: Option<i64>,
}

/// A chat's version counters as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatVersions {
    pub messages_v: u64,
    pub title_v: u64,
    pub last_edited_overall_timestamp: i64,
}

/// `encrypted_chat_metadata`: the encrypted user message and the chat's encrypted metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EncryptedChatMetadata {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    /// The user message this metadata belongs to (absent: metadata only).
    #[serde(alias = "messageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_sender_name: Option<String>,
    /// The message's category (the mate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_pii_mappings: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_icon: Option<String>,
    /// The chat's category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_tags: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
    /// Replace a stored chat key that differs (otherwise `chat_key_mismatch`).
    #[serde(default)]
    pub allow_chat_key_rotation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
    #[serde(default)]
    pub versions: ClientVersions,
}

/// A message as the client encrypted it: stored and synced as is. A plaintext `content`
/// sent by mistake is not a field, so it is dropped when parsed and never stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EncryptedMessage {
    #[serde(alias = "messageId")]
    pub message_id: MessageId,
    pub role: Role,
    pub encrypted_content: String,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_sender_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_thinking_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_thinking_signature: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_pii_mappings: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_thinking: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_token_count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_message_id: Option<MessageId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// A compressed message's `replaces_through` (see `history_compressed`), kept with it
    /// so a synced copy is known as one and re-sent with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces_through: Option<MessageId>,
}

/// `ai_response_completed`: the encrypted assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiResponseCompleted {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    pub message: EncryptedMessage,
    #[serde(default)]
    pub versions: ClientVersions,
    /// Replaces the stored assistant message with this id (an answer the server corrected
    /// after its final frame: `ai_message_update` with `correction`); raises `messages_v`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
}

/// `update_post_processing_metadata`: encrypted suggestions, summary and tags.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UpdatePostProcessingMetadata {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_follow_up_suggestions: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encrypted_new_chat_suggestions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_tags: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_top_recommended_apps_for_chat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_quick_tip_slugs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_share_cta_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title_v: Option<u64>,
}

impl UpdatePostProcessingMetadata {
    /// A payload for `chat_id` with no field set.
    pub fn new(chat_id: ChatId) -> Self {
        Self {
            chat_id,
            encrypted_follow_up_suggestions: None,
            encrypted_new_chat_suggestions: Vec::new(),
            encrypted_chat_summary: None,
            encrypted_chat_tags: None,
            encrypted_top_recommended_apps_for_chat: None,
            encrypted_quick_tip_slugs: None,
            encrypted_title: None,
            encrypted_share_cta_text: None,
            encrypted_chat_key: None,
            title_v: None,
        }
    }
}

/// `update_title`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UpdateTitle {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    pub encrypted_title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
}

/// `delete_chat` (the reference client sends camelCase `chatId`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteChat {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
}

/// `delete_message` (the reference client sends camelCase keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteMessage {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    #[serde(alias = "messageId")]
    pub message_id: MessageId,
    #[serde(
        alias = "embedIdsToDelete",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub embed_ids_to_delete: Vec<EmbedId>,
}

// ---------------------------------------------------------------------------------------
// Server → client

/// A chat's stored metadata (ciphertexts and versions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatDetails {
    pub chat_id: ChatId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_icon: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_tags: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_follow_up_suggestions: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub encrypted_new_chat_suggestions: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_top_recommended_apps_for_chat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_quick_tip_slugs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_share_cta_text: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_suggestion_hashes: Vec<String>,
    pub versions: ChatVersions,
}

/// `chat_message_confirmed` after `encrypted_chat_metadata` is the shared
/// [`crate::ChatMessageConfirmed`]; this is `encrypted_metadata_stored`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EncryptedMetadataStored {
    pub chat_id: ChatId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
    pub status: String,
    pub versions: ChatVersions,
}

/// `encrypted_chat_metadata` relayed to the user's other devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EncryptedChatMetadataUpdate {
    pub chat_id: ChatId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<EncryptedMessage>,
    pub chat: ChatDetails,
}

/// `ai_response_storage_confirmed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiResponseStorageConfirmed {
    pub chat_id: ChatId,
    pub message_id: MessageId,
    /// False when the message id was already stored (a duplicate; nothing was written).
    pub stored: bool,
    pub versions: ChatVersions,
}

/// `new_encrypted_message`: a stored assistant message relayed to other devices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NewEncryptedMessage {
    pub chat_id: ChatId,
    pub message: EncryptedMessage,
    pub versions: ChatVersions,
}

/// `post_processing_metadata_stored` (sender) and `chat_metadata_updated` (others).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMetadataStored {
    pub chat_id: ChatId,
    pub chat: ChatDetails,
}

/// `chat_title_updated`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatTitleUpdated {
    pub chat_id: ChatId,
    pub encrypted_title: String,
    pub versions: ChatVersions,
}

/// `chat_deleted`: to every device of the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatDeleted {
    pub chat_id: ChatId,
}

/// `message_deleted`: to every device of the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageDeleted {
    pub chat_id: ChatId,
    pub message_id: MessageId,
    pub versions: ChatVersions,
}
