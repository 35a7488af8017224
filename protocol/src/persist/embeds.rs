//! Embeds in the persistence flows: `store_embed` and `store_embed_keys` (an embed and its
//! wrapped keys, encrypted by the client), `request_embed`, and what chatd answers and
//! syncs (`embed_update`, `embed_keys_stored`, stored embeds and their keys).

use crate::EmbedId;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// The embed's wrapped keys, stored with it in one write. Then the first copy of a
    /// version wins: another device that encrypted the same result under its own key gets
    /// `embed_stored` and its copy is dropped, so a stored body always opens with the
    /// stored keys. Each key's `hashed_embed_id` must be this embed's. Never served back
    /// inside the embed (its keys come as `embed_keys`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embed_keys: Vec<EmbedKey>,
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

// ---------------------------------------------------------------------------------------
// Server → client

/// A stored embed as synced (ciphertexts as the client stored them).
pub type StoredEmbed = StoreEmbed;

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
