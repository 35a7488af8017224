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

/// `send_embed_data`, in two forms. A server-made embed (a skill's placeholder, parent or
/// child; or a cached copy answering `request_embed`) carries plaintext `type` and TOON
/// `content`, which the client encrypts and stores. A stored copy answering `request_embed`
/// has `already_encrypted: true`, the client-encrypted `embed` and its wrapped `embed_keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SendEmbedData {
    pub embed_id: EmbedId,
    #[serde(default)]
    pub already_encrypted: bool,
    /// `app_skill_use` for a skill's own embed; the result type (e.g. `website`) for children.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub embed_type: Option<String>,
    /// Plaintext TOON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// `processing`, `waiting`, `finished`, `error` or `cancelled` for skill embeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id: Option<ChatId>,
    /// The assistant message the embed belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<MessageId>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_length_chars: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_number: Option<u64>,
    /// `client` on server-made embeds: the client encrypts what it stores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_mode: Option<String>,
    /// Text in this embed looked like a prompt injection (score 5-7): shown for review.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub injection_flagged: bool,
    /// The stored client-encrypted copy (`already_encrypted: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed: Option<crate::StoredEmbed>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub embed_keys: Vec<crate::EmbedKey>,
}

impl SendEmbedData {
    /// An embed frame with only its id set (fill the rest with struct update syntax).
    pub fn new(embed_id: EmbedId) -> Self {
        SendEmbedData {
            embed_id,
            already_encrypted: false,
            embed_type: None,
            content: None,
            status: None,
            chat_id: None,
            message_id: None,
            task_id: None,
            skill_task_id: None,
            app_id: None,
            skill_id: None,
            embed_ids: Vec::new(),
            parent_embed_id: None,
            content_hash: None,
            text_length_chars: None,
            version_number: None,
            encryption_mode: None,
            injection_flagged: false,
            embed: None,
            embed_keys: Vec::new(),
        }
    }
}
