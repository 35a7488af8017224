//! Messages chatd sends to devices (`ServerMessage`) and their payloads.
//! Every server frame uses the `{"type", "payload"}` envelope (no flat or `event` frames).

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
    /// Answer to `cancel_ai_task`.
    AiTaskCancelRequested(AiTaskCancelRequested),
    /// The server cannot build the chat's history; the client must re-send it.
    RequestChatHistory(RequestChatHistory),
    /// One preprocessing step finished (or was skipped); to every device.
    PreprocessingStep(PreprocessingStep),
    /// Suggestions, summary and tags computed after the answer; to every device.
    PostProcessingCompleted(PostProcessingCompleted),
    /// Something went wrong; the connection stays usable.
    Error(ErrorPayload),
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
        "ai_task_cancel_requested",
        "request_chat_history",
        "preprocessing_step",
        "post_processing_completed",
        "error",
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
            ServerMessage::AiTaskCancelRequested(_) => "ai_task_cancel_requested",
            ServerMessage::RequestChatHistory(_) => "request_chat_history",
            ServerMessage::PreprocessingStep(_) => "preprocessing_step",
            ServerMessage::PostProcessingCompleted(_) => "post_processing_completed",
            ServerMessage::Error(_) => "error",
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
pub struct AiTypingStarted {
    pub chat_id: ChatId,
    /// The assistant message id (= task id).
    pub message_id: MessageId,
    pub user_message_id: MessageId,
    pub model_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icon_names: Vec<String>,
    #[serde(default)]
    pub is_continuation: bool,
}

/// One frame of a streamed answer. `full_content_so_far` is cumulative; `sequence` is
/// strictly increasing per task (correction frames included); the last frame has
/// `is_final_chunk: true` and the turn's outcome fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiMessageUpdate {
    pub task_id: TaskId,
    pub chat_id: ChatId,
    /// The assistant message id (= task id).
    pub message_id: MessageId,
    pub user_message_id: MessageId,
    pub full_content_so_far: String,
    pub sequence: u64,
    pub is_final_chunk: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Final frame only: the user cancelled the task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted_by_revocation: bool,
    /// Final frame only: the server shut down while answering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted_by_shutdown: bool,
    /// Final frame only: the turn ended early because of this error (also sent as an `error` frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    /// The message was not answered by the model; the text is a polite refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection_reason: Option<RejectionReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Final frame only: the oldest history messages left out to fit the model's context window.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trimmed_history_messages: u64,
    /// Final frame only, when the server is configured to report them: the broken links
    /// that link repair replaced by search links on their own text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced_links: Vec<ReplacedLink>,
}

/// A broken link of an answer, replaced by a search link on its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReplacedLink {
    /// The link text (kept in the answer).
    pub text: String,
    /// The original URL, as the model wrote it.
    pub url: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why preprocessing refused to run the main model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RejectionReason {
    HarmfulOrIllegalDetected,
    MisuseDetected,
}

/// The preprocessing steps a client can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PreprocessingStepKind {
    TitleGenerated,
    MateSelected,
    ModelSelected,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PreprocessingStep {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    pub step: PreprocessingStepKind,
    pub skipped: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_reason: Option<String>,
    /// Step-specific: `{title, icon_names, category}`, `{category, mate}` or
    /// `{model_id, model_name, selection_reason}`.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PostProcessingCompleted {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    pub follow_up_request_suggestions: Vec<String>,
    pub new_chat_request_suggestions: Vec<String>,
    pub chat_summary: String,
    pub chat_tags: Vec<String>,
    /// 0-10: how harmful the delivered answer looks.
    pub harmful_response: u8,
    /// Only on a clear topic shift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_chat_title: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiBackgroundResponseCompleted {
    pub chat_id: ChatId,
    pub message_id: MessageId,
    pub user_message_id: MessageId,
    pub task_id: TaskId,
    pub full_content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default)]
    pub interrupted_by_revocation: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejection_reason: Option<RejectionReason>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiTaskCancelRequested {
    pub task_id: TaskId,
    /// Always `revocation_sent`.
    pub status: String,
}

/// Why the server asks for the chat's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HistoryReason {
    CacheMiss,
    DecryptionFailed,
    InsufficientCacheHistory,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestChatHistory {
    pub chat_id: ChatId,
    pub reason: HistoryReason,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_messages: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_messages: Option<u64>,
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
