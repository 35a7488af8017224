//! Focus modes: a chat-level mode (an app's `app_id-focus_id`) that puts its instruction
//! first in the system prompt and offers its tools until it ends. The client starts one
//! with `chat_focus_mode_activate` and ends it with `chat_focus_mode_deactivate`; the
//! server answers every device with `focus_mode_activated` / `focus_mode_deactivated`
//! (also when the model starts one with a tool call).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ChatId;

/// Starts a focus mode in the chat; `focus_mode_activated` to every device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatFocusModeActivate {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    /// `app_id-focus_id`.
    #[serde(alias = "focusId")]
    pub focus_id: String,
}

/// Ends the chat's focus mode; `focus_mode_deactivated` to every device. With `focus_id`,
/// only when that focus mode is the active one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatFocusModeDeactivate {
    #[serde(alias = "chatId")]
    pub chat_id: ChatId,
    #[serde(alias = "focusId", default, skip_serializing_if = "Option::is_none")]
    pub focus_id: Option<String>,
}

/// A focus mode became active in the chat (started by the user or by the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FocusModeActivated {
    pub chat_id: ChatId,
    pub focus_id: String,
}

/// The chat's focus mode ended; `focus_id` is the one that was active (none: none was).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FocusModeDeactivated {
    pub chat_id: ChatId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus_id: Option<String>,
}
