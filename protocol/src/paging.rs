//! Paging a large user's chats after the login sync (which sends only the last opened chat,
//! the content of 10 recent chats and the metadata of 100): more chat metadata by offset,
//! one chat's messages, and the content of a few chats at once. Page sizes are bounded.

use crate::ChatId;
use crate::persist::{
    ChatContent, ChatDetails, ChatVersions, EmbedKey, EncryptedMessage, StoredEmbed,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most chats one `load_more_chats` page may ask for.
pub const MAX_CHAT_PAGE: u32 = 100;
/// Most chats one `request_chat_content_batch` may ask for.
pub const MAX_CONTENT_BATCH: usize = 20;

/// `load_more_chats`: chat metadata, most recently edited first, from `offset`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoadMoreChats {
    #[serde(default)]
    pub offset: u32,
    /// 1 to 100 (default 20).
    #[serde(default = "default_limit")]
    pub limit: u32,
}

fn default_limit() -> u32 {
    20
}

/// `get_chat_messages`: every stored message of one chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetChatMessages {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
}

/// `request_chat_content_batch`: the messages of up to 20 chats, with their embeds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestChatContentBatch {
    #[serde(alias = "chatIds")]
    pub chat_ids: Vec<ChatId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LoadMoreChatsResponse {
    pub chats: Vec<ChatDetails>,
    pub offset: u32,
    pub limit: u32,
    pub total_chat_count: u64,
    /// More chats follow this page.
    pub has_more: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessagesResponse {
    pub chat_id: ChatId,
    pub messages: Vec<EncryptedMessage>,
    pub versions: ChatVersions,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatContentBatchResponse {
    pub chats: Vec<ChatContent>,
    pub embeds: Vec<StoredEmbed>,
    pub embed_keys: Vec<EmbedKey>,
    /// Asked-for chats that are not the user's (another user's or unknown: not told apart).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<ChatId>,
}
