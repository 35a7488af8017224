//! Messages a device sends to chatd (`ClientMessage`) and their payloads.
//! Unknown fields are ignored (clients evolve); a missing required field is an error.
//! camelCase aliases the reference client sends (`chatId`, ...) are accepted.

use crate::persist::*;
use crate::{ChatId, EmbedId, Empty, MessageId, TaskId};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Every message a client may send. The envelope is `{"type": <snake_case name>, "payload": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum ClientMessage {
    /// Keep-alive; answered with `pong`.
    Ping(Empty),
    /// Names the chat this device shows (null: none); answered with `active_chat_set_ack`.
    SetActiveChat(SetActiveChat),
    /// A new user message (plaintext); starts or queues an AI turn.
    ChatMessageAdded(Box<ChatMessageAdded>),
    /// Stops a running AI task; answered with `ai_task_cancel_requested`.
    CancelAiTask(CancelAiTask),
    /// Stops one running skill; answered with `skill_cancel_requested`.
    CancelSkill(crate::CancelSkill),
    /// The encrypted user message and chat metadata; answered with `chat_message_confirmed`
    /// and `encrypted_metadata_stored`, relayed to the other devices.
    EncryptedChatMetadata(Box<EncryptedChatMetadata>),
    /// The encrypted assistant message; answered with `ai_response_storage_confirmed`.
    AiResponseCompleted(Box<AiResponseCompleted>),
    /// Encrypted suggestions, summary and tags; answered with `post_processing_metadata_stored`.
    UpdatePostProcessingMetadata(Box<UpdatePostProcessingMetadata>),
    /// A new encrypted title; `chat_title_updated` to every device.
    UpdateTitle(UpdateTitle),
    /// Removes a chat everywhere; `chat_deleted` to every device.
    DeleteChat(DeleteChat),
    /// Removes one message; `message_deleted` to every device.
    DeleteMessage(DeleteMessage),
    /// Stores an encrypted embed; `embed_stored` (sender), `embed_update` (others).
    StoreEmbed(Box<StoreEmbed>),
    /// Stores wrapped embed keys; answered with `embed_keys_stored`.
    StoreEmbedKeys(StoreEmbedKeys),
    /// Asks for an embed; answered with `send_embed_data`.
    RequestEmbed(RequestEmbed),
    /// This device's key check value (stored if the user has none); answered with
    /// `key_check`, the stored one.
    KeyCheck(KeyCheck),
    /// Starts a phased sync of the user's stored chats.
    PhasedSyncRequest(Box<PhasedSyncRequest>),
    /// Continues an answer after a reconnect: `ai_task_resumed`, then every frame of the
    /// turn after `last_sequence`, then the live ones.
    ResumeAiTask(ResumeAiTask),
    /// A fresh session token for this socket (same user), before the current one expires
    /// (the socket closes with 4002 at its `exp`); answered with `token_refreshed`.
    RefreshToken(RefreshToken),
    /// More chat metadata after the login sync; answered with `load_more_chats_response`.
    LoadMoreChats(crate::LoadMoreChats),
    /// One chat's stored messages; answered with `chat_messages_response`.
    GetChatMessages(crate::GetChatMessages),
    /// Several chats' messages and embeds; answered with `chat_content_batch_response`.
    RequestChatContentBatch(crate::RequestChatContentBatch),
    /// Starts a focus mode in the chat; `focus_mode_activated` to every device.
    ChatFocusModeActivate(crate::ChatFocusModeActivate),
    /// Ends the chat's focus mode; `focus_mode_deactivated` to every device.
    ChatFocusModeDeactivate(crate::ChatFocusModeDeactivate),
    /// The entries the user allows for a `request_app_settings_memories` (empty: "no");
    /// `dismiss_app_settings_memories_dialog` to every device.
    AppSettingsMemoriesConfirmed(Box<crate::AppSettingsMemoriesConfirmed>),
    /// The user's decision on an `app_settings_memories_proposal`.
    AppSettingsMemoriesProposalResult(crate::AppSettingsMemoriesProposalResult),
    /// Never suggest this settings/memory entry again in the chat;
    /// `settings_memory_suggestion_rejected` to every device.
    RejectSettingsMemorySuggestion(crate::RejectSettingsMemorySuggestion),
    /// Stops a routine run; `routine_finished` (`cancelled`) to every device.
    CancelRoutine(crate::CancelRoutine),
    /// Replaces the user's app preferences (apps and skills switched off);
    /// `app_preferences_set` to every device.
    SetAppPreferences(crate::SetAppPreferences),
}

impl ClientMessage {
    /// The wire names of every client message type.
    pub const TYPES: &'static [&'static str] = &[
        "ping",
        "set_active_chat",
        "chat_message_added",
        "cancel_ai_task",
        "cancel_skill",
        "encrypted_chat_metadata",
        "ai_response_completed",
        "update_post_processing_metadata",
        "update_title",
        "delete_chat",
        "delete_message",
        "store_embed",
        "store_embed_keys",
        "request_embed",
        "phased_sync_request",
        "resume_ai_task",
        "refresh_token",
        "load_more_chats",
        "get_chat_messages",
        "request_chat_content_batch",
        "chat_focus_mode_activate",
        "chat_focus_mode_deactivate",
        "app_settings_memories_confirmed",
        "app_settings_memories_proposal_result",
        "reject_settings_memory_suggestion",
        "cancel_routine",
        "set_app_preferences",
        "key_check",
    ];

    /// The wire name of this message's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            ClientMessage::Ping(_) => "ping",
            ClientMessage::SetActiveChat(_) => "set_active_chat",
            ClientMessage::ChatMessageAdded(_) => "chat_message_added",
            ClientMessage::CancelAiTask(_) => "cancel_ai_task",
            ClientMessage::CancelSkill(_) => "cancel_skill",
            ClientMessage::EncryptedChatMetadata(_) => "encrypted_chat_metadata",
            ClientMessage::AiResponseCompleted(_) => "ai_response_completed",
            ClientMessage::UpdatePostProcessingMetadata(_) => "update_post_processing_metadata",
            ClientMessage::UpdateTitle(_) => "update_title",
            ClientMessage::DeleteChat(_) => "delete_chat",
            ClientMessage::DeleteMessage(_) => "delete_message",
            ClientMessage::StoreEmbed(_) => "store_embed",
            ClientMessage::StoreEmbedKeys(_) => "store_embed_keys",
            ClientMessage::RequestEmbed(_) => "request_embed",
            ClientMessage::PhasedSyncRequest(_) => "phased_sync_request",
            ClientMessage::ResumeAiTask(_) => "resume_ai_task",
            ClientMessage::RefreshToken(_) => "refresh_token",
            ClientMessage::LoadMoreChats(_) => "load_more_chats",
            ClientMessage::GetChatMessages(_) => "get_chat_messages",
            ClientMessage::RequestChatContentBatch(_) => "request_chat_content_batch",
            ClientMessage::ChatFocusModeActivate(_) => "chat_focus_mode_activate",
            ClientMessage::SetAppPreferences(_) => "set_app_preferences",
            ClientMessage::KeyCheck(_) => "key_check",
            ClientMessage::ChatFocusModeDeactivate(_) => "chat_focus_mode_deactivate",
            ClientMessage::AppSettingsMemoriesConfirmed(_) => "app_settings_memories_confirmed",
            ClientMessage::AppSettingsMemoriesProposalResult(_) => {
                "app_settings_memories_proposal_result"
            }
            ClientMessage::RejectSettingsMemorySuggestion(_) => "reject_settings_memory_suggestion",
            ClientMessage::CancelRoutine(_) => "cancel_routine",
        }
    }
}

#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RefreshToken {
    pub token: String,
}

/// Never prints the token.
impl std::fmt::Debug for RefreshToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RefreshToken { .. }")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetActiveChat {
    #[serde(alias = "chatId", default)]
    pub chat_id: Option<ChatId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessageAdded {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    pub message: UserMessage,
    /// Embeds the client re-sends with a history answer (plaintext TOON content).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embeds: Vec<ClientEmbed>,
    /// A model id the user pinned for this message; wins over automatic selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_model: Option<String>,
    /// The focus mode active in this chat (`app_id-focus_id`), decrypted by the client.
    /// Seeds the server's record only when the server has none for the chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_focus_id: Option<String>,
    /// The chat's current summary (decrypted by the client); postprocessing extends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_summary: Option<String>,
    /// The chat's current tags (decrypted by the client).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chat_tags: Vec<String>,
    /// App settings and memories the user has saved (`app_id-item_key`, the item key being
    /// the category); the client is the source of truth. Preprocessing asks only for these
    /// categories' entries. Absent: the client does not say, every category may be asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_settings_memories_metadata: Option<Vec<String>>,
    /// Apps for which the user has a connected account (skills that need one are offered only then).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connected_accounts: Vec<String>,
    /// Names (people, companies) the user marked private in this chat: while the server
    /// pseudonymises (`privacy.pseudonymize` not empty), each is replaced by `[NAME_n]`
    /// before any model request, in this turn and the chat's later ones, and restored in the
    /// answer. The first 50 non-empty names of at most 100 bytes are taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub private_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_preferences: Option<UserPreferences>,
    /// The chat's earlier messages at the top level, as duplicated and incognito chats send
    /// them; counts like `message.message_history` (which wins when both are sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_history: Option<Vec<HistoryMessage>>,
    /// The chat key (wrapped by the client) this device uses; relayed with
    /// `new_chat_message` and `ai_typing_started` so other devices can decrypt and store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
}

impl ChatMessageAdded {
    /// The re-sent history wherever the client put it: `message.message_history`, else the
    /// top-level `message_history`. Moves the top-level one into the message.
    pub fn take_history_into_message(&mut self) {
        if self.message.message_history.is_none() {
            self.message.message_history = self.message_history.take();
        } else {
            self.message_history = None;
        }
    }

    /// A plain user message: no history, embeds, options or title.
    pub fn user(chat_id: ChatId, message_id: MessageId, content: String, created_at: i64) -> Self {
        Self {
            chat_id,
            message: UserMessage {
                message_id,
                role: Role::User,
                content,
                created_at,
                sender_name: None,
                temp_id: None,
                chat_has_title: false,
                current_chat_title: None,
                message_history: None,
            },
            embeds: Vec::new(),
            pinned_model: None,
            active_focus_id: None,
            chat_summary: None,
            chat_tags: Vec::new(),
            app_settings_memories_metadata: None,
            connected_accounts: Vec::new(),
            private_names: Vec::new(),
            user_preferences: None,
            message_history: None,
            encrypted_chat_key: None,
        }
    }
}

/// Per-user switches the client sends with a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserPreferences {
    /// `false` turns follow-up suggestions off (postprocessing still runs).
    #[serde(default = "yes")]
    pub follow_up_suggestions_enabled: bool,
}

fn yes() -> bool {
    true
}

/// The user's message as sent by the client (plaintext markdown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserMessage {
    #[serde(alias = "messageId")]
    pub message_id: MessageId,
    #[serde(default = "default_user_role")]
    pub role: Role,
    pub content: String,
    /// Unix seconds.
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_name: Option<String>,
    /// Echoed back in `chat_message_confirmed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_id: Option<String>,
    #[serde(default)]
    pub chat_has_title: bool,
    /// The chat's title, when it has one (decrypted by the client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_chat_title: Option<String>,
    /// All earlier messages of the chat, oldest first: sent only in answer to `request_chat_history`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_history: Option<Vec<HistoryMessage>>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

fn default_user_role() -> Role {
    Role::User
}

/// Author role of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
}

/// One earlier message re-sent by the client (plaintext). The client re-sends every
/// message it stores: system messages (refusals, settings requests) stay in the model's
/// context as system messages; an empty one (`""` or `null`) is skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryMessage {
    #[serde(alias = "messageId")]
    pub message_id: MessageId,
    pub role: Role,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    pub created_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// Set on a compressed message (`history_compressed`, role `system`): the newest
    /// message it summarises. chatd gives the model the newest compressed message and the
    /// messages after this one, not the older ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces_through: Option<MessageId>,
}

/// An embed the client re-sends in plaintext (TOON content) so the server can cache it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClientEmbed {
    pub embed_id: EmbedId,
    #[serde(rename = "type")]
    pub embed_type: String,
    /// TOON text.
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default)]
    pub version_number: u64,
    /// SHA-256 hex of the type, a zero byte and the content, as chatd sent it in
    /// `send_embed_data`; when given, an embed whose content does not match is not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResumeAiTask {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    #[serde(alias = "taskId")]
    pub task_id: TaskId,
    /// The `sequence` of the last `ai_message_update` this device has (0: none).
    #[serde(alias = "lastSequence", default)]
    pub last_sequence: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CancelAiTask {
    #[serde(alias = "taskId")]
    pub task_id: TaskId,
    #[serde(alias = "chatId", default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<ChatId>,
}
