//! The payloads of an AI answer's frames: typing, the streamed updates and the final one,
//! preprocessing steps, postprocessing, the background completion, a pending answer, the
//! answer waiting on a rate limit, resume, cancel, the history request and a compressed
//! history.

use crate::{ChatId, ErrorCode, MessageId, TaskId};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// The chat key the device that sent the message gave (wrapped by the client), so a
    /// second device can decrypt and store the answer without racing for the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_chat_key: Option<String>,
}

/// A piece of the model's reasoning (a delta; `sequence` counts these frames from 1 per
/// task, apart from the answer's). Shown to the user, never part of the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThinkingChunk {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    /// The assistant message id (= task id).
    pub message_id: MessageId,
    pub content: String,
    pub sequence: u64,
}

/// The model's reasoning ended; the answer's text follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThinkingComplete {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    /// The assistant message id (= task id).
    pub message_id: MessageId,
}

impl AiMessageUpdate {
    /// An update of task `task_id`'s answer (its message id is the task id), every outcome
    /// field unset: the caller sets what the frame says beyond text and position.
    pub fn new(
        task_id: TaskId,
        chat_id: ChatId,
        user_message_id: MessageId,
        full_content_so_far: String,
        sequence: u64,
        is_final_chunk: bool,
    ) -> Self {
        Self {
            message_id: MessageId::from(task_id.clone()),
            task_id,
            chat_id,
            user_message_id,
            full_content_so_far,
            sequence,
            is_final_chunk,
            delta: false,
            content_delta: None,
            model_name: None,
            category: None,
            interrupted_by_revocation: false,
            interrupted_by_shutdown: false,
            error_code: None,
            rejection_reason: None,
            prompt_tokens: None,
            completion_tokens: None,
            trimmed_history_messages: 0,
            replaced_links: Vec::new(),
            correction: None,
        }
    }
}

/// Why an answer was replaced after its final frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Correction {
    /// Postprocessing judged the answer harmful; it was generated again with a caution.
    HarmfulResponse,
}

/// After a turn's final frame, to every device: the assistant stopped typing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiTypingEnded {
    pub chat_id: ChatId,
    /// The assistant message id (= task id).
    pub message_id: MessageId,
    pub task_id: TaskId,
}

/// One frame of a streamed answer. `full_content_so_far` is cumulative; `sequence` is
/// strictly increasing per task (correction frames included); the last frame has
/// `is_final_chunk: true` and the turn's outcome fields. A socket opened with
/// `?stream=delta` gets non-final frames with `delta: true`: only the new text, in
/// `content_delta` (append it), and `full_content_so_far` empty; a frame without `delta`
/// carries the full text (replace), as the final frame always does.
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
    /// Delta streaming (`?stream=delta`): this frame carries only the text added since the
    /// device's previous frame of the task, in `content_delta`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delta: bool,
    /// With `delta: true`: the text to append.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_delta: Option<String>,
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
    /// The answer was generated again and this whole text replaces the one the final frame
    /// had (sent after it, to every device; store it in place of the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<Correction>,
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
    /// New settings/memory entries worth adding (at most 3; none the user rejected in
    /// this chat).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggested_settings_memories: Vec<crate::SuggestedSettingsMemoryEntry>,
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
pub struct PendingAiResponse {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    /// The assistant message to encrypt and store.
    pub message_id: MessageId,
    pub user_message_id: MessageId,
    /// The answer (plaintext, for the client to encrypt).
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiTaskWaiting {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    /// Why: `rate_limited`.
    pub reason: String,
    pub retry_after_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TokenRefreshed {
    /// The new token's `exp` (unix seconds).
    pub expires_at: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerShuttingDown {
    /// How long running answers may still take before the socket closes (ms).
    pub grace_ms: u64,
    /// Human-readable.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AiTaskResumed {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    /// False when the turn's log is gone or the position is unknown: sync instead.
    pub recovered: bool,
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

/// `request_chat_embeds`: the chat's messages refer to embeds the server's cache lacks; the
/// client re-sends `message_id` (as it sent it) with those embeds in `embeds`. Asked once per
/// message: what the re-send still lacks reaches the model as an "unavailable" marker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestChatEmbeds {
    pub chat_id: ChatId,
    /// The message to re-send, with the embeds it has in `embeds` (plaintext TOON).
    pub message_id: MessageId,
    /// Embeds the chat's messages refer to that the server's cache lacks.
    pub embed_ids: Vec<crate::EmbedId>,
    pub message: String,
}

/// `request_chat_history`: the client re-sends its latest message with `message_history`.
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

/// `history_compressed`: chatd summarised the chat's oldest messages into one compressed
/// message (after an answer). The client stores it like a `system` message of the chat
/// (`ai_response_completed` with `replaces_through`) and re-sends it with the history
/// (`replaces_through` set); the model then gets it, as quoted data, in place of the
/// messages up to `replaces_through`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryCompressed {
    pub chat_id: ChatId,
    pub message_id: MessageId,
    /// The summary (markdown): facts, decisions, open questions, the user's preferences.
    pub content: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The newest message it summarises; the messages after it stay verbatim.
    pub replaces_through: MessageId,
}
