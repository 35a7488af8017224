//! The phased sync's payloads: `phased_sync_request` (which phase, and what the client
//! has), then phase 1 (the last opened chat, the content of 10 recent chats), phase 2 (the
//! metadata of up to 100 chats), phase 3 (`background_message_sync`, the rest in batches)
//! and `phased_sync_complete`.

use std::collections::BTreeMap;

use crate::{
    ChatDetails, ChatId, ChatVersions, ClientVersions, EmbedId, EmbedKey, EncryptedMessage,
    StoredEmbed,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
