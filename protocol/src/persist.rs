//! Payloads of the zero-knowledge persistence and sync flows: the client encrypts, chatd
//! stores the ciphertexts as opaque strings and hands them back byte-for-byte on sync.
//! Every `encrypted_*` field is client ciphertext chatd never reads.

use std::collections::BTreeMap;

use crate::{ChatId, EmbedId, MessageId, Role};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// `store_embed`: an embed encrypted with its own key; created or updated by `embed_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoreEmbed {
    pub embed_id: EmbedId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_text_preview: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// SHA-256 (hex) of the chat id, as the reference client computes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashed_chat_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashed_message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashed_task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embed_ids: Vec<EmbedId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_embed_id: Option<EmbedId>,
    #[serde(default)]
    pub version_number: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_length_chars: Option<u64>,
    #[serde(default)]
    pub is_private: bool,
    #[serde(default)]
    pub is_shared: bool,
}

/// One wrapped embed key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbedKey {
    pub hashed_embed_id: String,
    /// `master` or `chat`.
    pub key_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hashed_chat_id: Option<String>,
    pub encrypted_embed_key: String,
    #[serde(default)]
    pub created_at: i64,
}

/// `store_embed_keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoreEmbedKeys {
    pub keys: Vec<EmbedKey>,
}

/// `request_embed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestEmbed {
    pub embed_id: EmbedId,
}

/// Which part of a phased sync the client asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SyncPhase {
    Phase1,
    Phase2,
    Phase3,
    All,
}

/// `phased_sync_request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PhasedSyncRequest {
    #[serde(default = "default_phase")]
    pub phase: SyncPhase,
    /// What the client has: chat id → its versions.
    #[serde(default)]
    pub client_chat_versions: BTreeMap<ChatId, ClientVersions>,
    #[serde(default)]
    pub client_chat_ids: Vec<ChatId>,
    #[serde(default)]
    pub client_embed_ids: Vec<EmbedId>,
}

fn default_phase() -> SyncPhase {
    SyncPhase::All
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

/// A stored embed as synced (ciphertexts as the client stored them).
pub type StoredEmbed = StoreEmbed;

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

/// `embed_stored` (sender) and `embed_update` (other devices).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbedUpdate {
    pub embed_id: EmbedId,
    /// The hashed chat id the embed was stored with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub child_embed_ids: Vec<EmbedId>,
    pub version_number: u64,
}

/// `embed_keys_stored`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EmbedKeysStored {
    pub count: u64,
}

/// One chat's content in a sync frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatContent {
    pub chat_id: ChatId,
    pub messages: Vec<EncryptedMessage>,
    pub server_message_count: u64,
    pub versions: ChatVersions,
}

/// `phase_1_last_chat_ready`: metadata of the last opened chat (`chat_id` null: none).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Phase1LastChatReady {
    pub chat_id: Option<ChatId>,
    pub chat_details: Option<ChatDetails>,
    pub phase: String,
    pub already_synced: bool,
}

/// `phase_1b_chat_content_ready`: content of up to 10 recent chats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Phase1bChatContentReady {
    pub chats: Vec<ChatContent>,
    pub embeds: Vec<StoredEmbed>,
    pub embed_keys: Vec<EmbedKey>,
}

/// `phase_2_last_20_chats_ready` (legacy name): metadata of up to 100 chats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Phase2ChatsReady {
    pub chats: Vec<ChatDetails>,
    pub chat_count: u64,
    pub total_chat_count: u64,
    pub phase: String,
}

/// `background_message_sync`: the remaining chats' content, 10 chats per batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackgroundMessageSync {
    pub chats: Vec<ChatContent>,
    pub batch_number: u64,
    pub is_last_batch: bool,
    pub embeds: Vec<StoredEmbed>,
    pub embed_keys: Vec<EmbedKey>,
}

/// `phased_sync_complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PhasedSyncComplete {
    pub phase: SyncPhase,
    pub timestamp: i64,
}
