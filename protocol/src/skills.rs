//! Skills and the embeds they make: `cancel_skill` from the client; `send_embed_data`,
//! `skill_execution_status` and `skill_cancel_requested` from the server.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ChatId, EmbedId, MessageId, SkillTaskId, TaskId};

/// Stops one running skill invocation; answered with `skill_cancel_requested`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CancelSkill {
    #[serde(alias = "skillTaskId")]
    pub skill_task_id: SkillTaskId,
    /// For logging only.
    #[serde(alias = "embedId", default, skip_serializing_if = "Option::is_none")]
    pub embed_id: Option<EmbedId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillCancelRequested {
    pub skill_task_id: SkillTaskId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed_id: Option<EmbedId>,
    /// Always `cancellation_requested`.
    pub status: String,
}

/// Where a skill invocation (and its embed) is. `finished`, `error` and `cancelled` are final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkillStatus {
    Processing,
    /// Rate-limited by the provider; retried when the limit resets (`preview_data.retry_after_seconds`).
    Waiting,
    Finished,
    Error,
    Cancelled,
}

impl SkillStatus {
    pub fn is_final(self) -> bool {
        matches!(
            self,
            SkillStatus::Finished | SkillStatus::Error | SkillStatus::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SkillStatus::Processing => "processing",
            SkillStatus::Waiting => "waiting",
            SkillStatus::Finished => "finished",
            SkillStatus::Error => "error",
            SkillStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillExecutionStatus {
    pub chat_id: ChatId,
    /// The assistant message (= `task_id`).
    pub message_id: MessageId,
    pub task_id: TaskId,
    pub skill_task_id: SkillTaskId,
    pub app_id: String,
    pub skill_id: String,
    pub status: SkillStatus,
    /// e.g. `{embed_id, request_count}`, `{retry_after_seconds}`, `{cancelled_by_user: true}`.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub preview_data: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An embed made by the server (plaintext TOON): the client encrypts it and stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendEmbedData {
    pub embed_id: EmbedId,
    /// `app_skill_use` for a skill's own embed; the result type (e.g. `website`) for children.
    #[serde(rename = "type")]
    pub embed_type: String,
    /// TOON text.
    pub content: String,
    pub status: SkillStatus,
    pub chat_id: ChatId,
    pub message_id: MessageId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_task_id: Option<SkillTaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_id: Option<String>,
    /// Children of a composite result (on the parent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embed_ids: Vec<EmbedId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_embed_id: Option<EmbedId>,
    /// SHA-256 (hex) over the embed's type and content as the server made them.
    pub content_hash: String,
    pub text_length_chars: u64,
    pub version_number: u64,
    /// Always `client`: the client encrypts what it stores.
    pub encryption_mode: String,
    /// Text in this embed looked like a prompt injection (score 5-7): shown for review.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub injection_flagged: bool,
}
