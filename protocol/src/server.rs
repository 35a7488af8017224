//! Messages chatd sends to devices (`ServerMessage`) and their payloads (those of an AI
//! answer's frames in `answer.rs`).
//! Every server frame uses the `{"type", "payload"}` envelope (no flat or `event` frames).

use crate::answer::*;
use crate::persist::*;
use crate::{ChatId, Empty, ErrorCode, MessageId, Role, TaskId};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Every message chatd may send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum ServerMessage {
    /// Answer to `ping`.
    Pong(Empty),
    /// Answer to `set_active_chat`.
    ActiveChatSetAck(ActiveChatSetAck),
    /// A user message was accepted; to every device of the user, the sender included.
    ChatMessageConfirmed(ChatMessageConfirmed),
    /// A user message written on another device (plaintext); to the user's other devices.
    NewChatMessage(NewChatMessage),
    /// An AI turn started for a user message; to the sender.
    AiTaskInitiated(AiTaskInitiated),
    /// A turn is already running in this chat; the message will be answered after it.
    MessageQueued(MessageQueued),
    /// The assistant starts answering; to every device.
    AiTypingStarted(AiTypingStarted),
    /// A chunk of the streamed answer (cumulative text); to devices with the chat active.
    AiMessageUpdate(AiMessageUpdate),
    /// The answer finished; to the user's devices where the chat is not active.
    AiBackgroundResponseCompleted(AiBackgroundResponseCompleted),
    /// Answer to `load_more_chats`.
    LoadMoreChatsResponse(Box<crate::LoadMoreChatsResponse>),
    /// Answer to `get_chat_messages`.
    ChatMessagesResponse(Box<crate::ChatMessagesResponse>),
    /// Answer to `request_chat_content_batch`.
    ChatContentBatchResponse(Box<crate::ChatContentBatchResponse>),
    /// The turn's last frame was sent (answered, refused, cancelled or failed); to every device.
    AiTypingEnded(AiTypingEnded),
    /// A piece of the model's reasoning (delta); to devices with the chat active.
    ThinkingChunk(ThinkingChunk),
    /// The model's reasoning ended; to devices with the chat active.
    ThinkingComplete(ThinkingComplete),
    /// Answer to `cancel_ai_task`.
    AiTaskCancelRequested(AiTaskCancelRequested),
    /// An answer that finished while no device could store it: sent on every connection
    /// until a device stores it (`ai_response_completed` for `message_id`).
    PendingAiResponse(Box<PendingAiResponse>),
    /// The answer waits: the model provider rate-limited it; it goes on by itself after
    /// `retry_after_ms` (within `pipeline.turn_deadline`).
    AiTaskWaiting(AiTaskWaiting),
    /// Answer to `refresh_token`: the socket now lives until `expires_at`.
    TokenRefreshed(TokenRefreshed),
    /// The server is stopping: to every device, before running answers end and the socket
    /// closes with 1012; reconnect (another node takes it) and resume what was running.
    ServerShuttingDown(ServerShuttingDown),
    /// The answer to `resume_ai_task`; with `recovered: true` the turn's frames after the
    /// position follow, with `false` the client syncs instead.
    AiTaskResumed(AiTaskResumed),
    /// The server cannot build the chat's history; the client must re-send it.
    RequestChatHistory(RequestChatHistory),
    /// The server's cache lacks embeds the chat refers to; the client re-sends the message
    /// with them.
    RequestChatEmbeds(RequestChatEmbeds),
    /// One preprocessing step finished (or was skipped); to every device.
    PreprocessingStep(PreprocessingStep),
    /// Suggestions, summary and tags computed after the answer; to every device.
    PostProcessingCompleted(PostProcessingCompleted),
    /// The chat's oldest messages were summarised into one compressed message, which the
    /// client stores and re-sends with the history; to every device.
    HistoryCompressed(HistoryCompressed),
    /// A skill invocation changed state; to every device.
    SkillExecutionStatus(crate::SkillExecutionStatus),
    /// Answer to `cancel_skill`.
    SkillCancelRequested(crate::SkillCancelRequested),
    /// Something went wrong; the connection stays usable.
    Error(ErrorPayload),
    /// `encrypted_chat_metadata` was stored; to the sender.
    EncryptedMetadataStored(EncryptedMetadataStored),
    /// Chat metadata (and the user message) stored by another device.
    EncryptedChatMetadata(Box<EncryptedChatMetadataUpdate>),
    /// `ai_response_completed` was stored (or was a duplicate); to the sender.
    AiResponseStorageConfirmed(AiResponseStorageConfirmed),
    /// An assistant message stored by another device.
    NewEncryptedMessage(Box<NewEncryptedMessage>),
    /// `update_post_processing_metadata` was stored; to the sender.
    PostProcessingMetadataStored(Box<ChatMetadataStored>),
    /// Post-processing metadata stored by another device.
    ChatMetadataUpdated(Box<ChatMetadataStored>),
    /// A chat's title changed; to every device.
    ChatTitleUpdated(ChatTitleUpdated),
    /// A chat was deleted; to every device.
    ChatDeleted(ChatDeleted),
    /// A message was deleted; to every device.
    MessageDeleted(MessageDeleted),
    /// `store_embed` was stored; to the sender.
    EmbedStored(EmbedUpdate),
    /// An embed stored by another device.
    EmbedUpdate(EmbedUpdate),
    /// `store_embed_keys` was stored; to the sender.
    EmbedKeysStored(EmbedKeysStored),
    /// An embed: a skill's (placeholder, parent or child result; to every device), or the
    /// answer to `request_embed`.
    SendEmbedData(Box<crate::SendEmbedData>),
    /// Sync phase 1a: the last opened chat's metadata.
    #[serde(rename = "phase_1_last_chat_ready")]
    Phase1LastChatReady(Box<Phase1LastChatReady>),
    /// Sync phase 1b: content of up to 10 recent chats.
    #[serde(rename = "phase_1b_chat_content_ready")]
    Phase1bChatContentReady(Box<Phase1bChatContentReady>),
    /// Sync phase 2: metadata of up to 100 chats.
    #[serde(rename = "phase_2_last_20_chats_ready")]
    Phase2ChatsReady(Box<Phase2ChatsReady>),
    /// Sync phase 3: one batch of the remaining chats' content.
    BackgroundMessageSync(Box<BackgroundMessageSync>),
    /// The requested sync phases are done.
    PhasedSyncComplete(PhasedSyncComplete),
    /// A focus mode became active in a chat; to every device.
    FocusModeActivated(crate::FocusModeActivated),
    /// The user's app preferences as chatd applies them; to every device.
    AppPreferencesSet(crate::AppPreferencesSet),
    /// The user's stored key check value; answer to `key_check`.
    KeyCheck(crate::KeyCheckStored),
    /// A chat's focus mode ended; to every device.
    FocusModeDeactivated(crate::FocusModeDeactivated),
    /// The turn needs app settings/memories the chat's cache lacks; to every device. The
    /// answer goes on without them; `app_settings_memories_confirmed` answers it.
    RequestAppSettingsMemories(crate::RequestAppSettingsMemories),
    /// A settings/memories request was answered; to every device (close its dialog).
    DismissAppSettingsMemoriesDialog(crate::DismissAppSettingsMemoriesDialog),
    /// The model proposes adding, changing or deleting an entry; to every device. The
    /// client answers `app_settings_memories_proposal_result`.
    AppSettingsMemoriesProposal(Box<crate::AppSettingsMemoriesProposal>),
    /// A settings/memory suggestion was rejected; to every device.
    SettingsMemorySuggestionRejected(crate::SettingsMemorySuggestionRejected),
    /// A routine run started; to every device.
    RoutineStarted(crate::RoutineStarted),
    /// What a routine is doing (`emit("status", ..)`); to every device.
    RoutineStatus(crate::RoutineText),
    /// A routine's chat message (`emit("message", ..)`), which the client stores.
    RoutineMessage(crate::RoutineMessage),
    /// A routine's information (`emit("information", ..)`), shown and not stored.
    RoutineInformation(crate::RoutineText),
    /// A routine's error (`emit("error", ..)`, or chatd ending the run with a code).
    RoutineError(crate::RoutineError),
    /// A routine asks the user; the user's next message in the chat is the answer.
    AwaitingUserInput(crate::AwaitingUserInput),
    /// A routine run ended (completed, error or cancelled).
    RoutineFinished(crate::RoutineFinished),
}

impl ServerMessage {
    /// The wire names of every server message type.
    pub const TYPES: &'static [&'static str] = &[
        "pong",
        "active_chat_set_ack",
        "chat_message_confirmed",
        "new_chat_message",
        "ai_task_initiated",
        "message_queued",
        "ai_typing_started",
        "ai_message_update",
        "ai_background_response_completed",
        "ai_typing_ended",
        "load_more_chats_response",
        "chat_messages_response",
        "chat_content_batch_response",
        "thinking_chunk",
        "thinking_complete",
        "ai_task_cancel_requested",
        "ai_task_resumed",
        "pending_ai_response",
        "server_shutting_down",
        "token_refreshed",
        "ai_task_waiting",
        "request_chat_history",
        "request_chat_embeds",
        "preprocessing_step",
        "post_processing_completed",
        "history_compressed",
        "skill_execution_status",
        "skill_cancel_requested",
        "error",
        "encrypted_metadata_stored",
        "encrypted_chat_metadata",
        "ai_response_storage_confirmed",
        "new_encrypted_message",
        "post_processing_metadata_stored",
        "chat_metadata_updated",
        "chat_title_updated",
        "chat_deleted",
        "message_deleted",
        "embed_stored",
        "embed_update",
        "embed_keys_stored",
        "send_embed_data",
        "phase_1_last_chat_ready",
        "phase_1b_chat_content_ready",
        "phase_2_last_20_chats_ready",
        "background_message_sync",
        "phased_sync_complete",
        "focus_mode_activated",
        "app_preferences_set",
        "focus_mode_deactivated",
        "request_app_settings_memories",
        "dismiss_app_settings_memories_dialog",
        "app_settings_memories_proposal",
        "settings_memory_suggestion_rejected",
        "routine_started",
        "routine_status",
        "routine_message",
        "routine_information",
        "routine_error",
        "awaiting_user_input",
        "routine_finished",
        "key_check",
    ];

    /// The wire name of this message's type (also the metrics label).
    pub fn type_name(&self) -> &'static str {
        match self {
            ServerMessage::Pong(_) => "pong",
            ServerMessage::ActiveChatSetAck(_) => "active_chat_set_ack",
            ServerMessage::ChatMessageConfirmed(_) => "chat_message_confirmed",
            ServerMessage::NewChatMessage(_) => "new_chat_message",
            ServerMessage::AiTaskInitiated(_) => "ai_task_initiated",
            ServerMessage::MessageQueued(_) => "message_queued",
            ServerMessage::AiTypingStarted(_) => "ai_typing_started",
            ServerMessage::AiMessageUpdate(_) => "ai_message_update",
            ServerMessage::AiBackgroundResponseCompleted(_) => "ai_background_response_completed",
            ServerMessage::AiTypingEnded(_) => "ai_typing_ended",
            ServerMessage::LoadMoreChatsResponse(_) => "load_more_chats_response",
            ServerMessage::ChatMessagesResponse(_) => "chat_messages_response",
            ServerMessage::ChatContentBatchResponse(_) => "chat_content_batch_response",
            ServerMessage::ThinkingChunk(_) => "thinking_chunk",
            ServerMessage::ThinkingComplete(_) => "thinking_complete",
            ServerMessage::AiTaskCancelRequested(_) => "ai_task_cancel_requested",
            ServerMessage::AiTaskResumed(_) => "ai_task_resumed",
            ServerMessage::PendingAiResponse(_) => "pending_ai_response",
            ServerMessage::ServerShuttingDown(_) => "server_shutting_down",
            ServerMessage::TokenRefreshed(_) => "token_refreshed",
            ServerMessage::AiTaskWaiting(_) => "ai_task_waiting",
            ServerMessage::RequestChatHistory(_) => "request_chat_history",
            ServerMessage::RequestChatEmbeds(_) => "request_chat_embeds",
            ServerMessage::PreprocessingStep(_) => "preprocessing_step",
            ServerMessage::PostProcessingCompleted(_) => "post_processing_completed",
            ServerMessage::HistoryCompressed(_) => "history_compressed",
            ServerMessage::SkillExecutionStatus(_) => "skill_execution_status",
            ServerMessage::SkillCancelRequested(_) => "skill_cancel_requested",
            ServerMessage::Error(_) => "error",
            ServerMessage::EncryptedMetadataStored(_) => "encrypted_metadata_stored",
            ServerMessage::EncryptedChatMetadata(_) => "encrypted_chat_metadata",
            ServerMessage::AiResponseStorageConfirmed(_) => "ai_response_storage_confirmed",
            ServerMessage::NewEncryptedMessage(_) => "new_encrypted_message",
            ServerMessage::PostProcessingMetadataStored(_) => "post_processing_metadata_stored",
            ServerMessage::ChatMetadataUpdated(_) => "chat_metadata_updated",
            ServerMessage::ChatTitleUpdated(_) => "chat_title_updated",
            ServerMessage::ChatDeleted(_) => "chat_deleted",
            ServerMessage::MessageDeleted(_) => "message_deleted",
            ServerMessage::EmbedStored(_) => "embed_stored",
            ServerMessage::EmbedUpdate(_) => "embed_update",
            ServerMessage::EmbedKeysStored(_) => "embed_keys_stored",
            ServerMessage::SendEmbedData(_) => "send_embed_data",
            ServerMessage::Phase1LastChatReady(_) => "phase_1_last_chat_ready",
            ServerMessage::Phase1bChatContentReady(_) => "phase_1b_chat_content_ready",
            ServerMessage::Phase2ChatsReady(_) => "phase_2_last_20_chats_ready",
            ServerMessage::BackgroundMessageSync(_) => "background_message_sync",
            ServerMessage::PhasedSyncComplete(_) => "phased_sync_complete",
            ServerMessage::FocusModeActivated(_) => "focus_mode_activated",
            ServerMessage::AppPreferencesSet(_) => "app_preferences_set",
            ServerMessage::KeyCheck(_) => "key_check",
            ServerMessage::FocusModeDeactivated(_) => "focus_mode_deactivated",
            ServerMessage::RequestAppSettingsMemories(_) => "request_app_settings_memories",
            ServerMessage::DismissAppSettingsMemoriesDialog(_) => {
                "dismiss_app_settings_memories_dialog"
            }
            ServerMessage::AppSettingsMemoriesProposal(_) => "app_settings_memories_proposal",
            ServerMessage::SettingsMemorySuggestionRejected(_) => {
                "settings_memory_suggestion_rejected"
            }
            ServerMessage::RoutineStarted(_) => "routine_started",
            ServerMessage::RoutineStatus(_) => "routine_status",
            ServerMessage::RoutineMessage(_) => "routine_message",
            ServerMessage::RoutineInformation(_) => "routine_information",
            ServerMessage::RoutineError(_) => "routine_error",
            ServerMessage::AwaitingUserInput(_) => "awaiting_user_input",
            ServerMessage::RoutineFinished(_) => "routine_finished",
        }
    }

    /// Serializes to the JSON text of a frame.
    pub fn to_json(&self) -> String {
        // Serializing these types cannot fail: no maps with non-string keys, no custom impls.
        serde_json::to_string(self).unwrap_or_else(|_| {
            r#"{"type":"error","payload":{"code":"internal_error","message":"serialization failed"}}"#
                .to_string()
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActiveChatSetAck {
    pub chat_id: Option<ChatId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessageConfirmed {
    pub chat_id: ChatId,
    pub message_id: MessageId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_id: Option<String>,
    /// Messages in the chat after this one was added.
    pub new_messages_v: u64,
    /// Unix seconds.
    pub new_last_edited_overall_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NewChatMessage {
    pub chat_id: ChatId,
    pub message_id: MessageId,
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_name: Option<String>,
    pub content: String,
    pub created_at: i64,
    pub messages_v: u64,
    pub last_edited_overall_timestamp: i64,
    /// The chat key the sending device gave with the message (wrapped by the client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiTaskInitiated {
    pub chat_id: ChatId,
    pub user_message_id: MessageId,
    pub ai_task_id: TaskId,
    /// Always `processing_started`.
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageQueued {
    pub chat_id: ChatId,
    pub user_message_id: MessageId,
    pub active_task_id: TaskId,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorPayload {
    pub code: ErrorCode,
    /// Human-readable, safe to show; never contains internal details.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<ChatId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
}

impl ErrorPayload {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
            chat_id: None,
            message_id: None,
        }
    }
}
