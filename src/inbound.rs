//! What waits to be answered: a user message as the device sent it, with what the client
//! said about the turn besides the message itself, or a skill's late result as a follow-up
//! message of its own. The turn's input; the history is built from it (a floor below both).

use chatd_protocol::{ClientEmbed, MessageId, TaskId, UserMessage};

use crate::delivery::ConnectionId;
use crate::pipeline::TurnContext;

/// A user message waiting to be answered, as the device sent it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Inbound {
    pub message: UserMessage,
    pub embeds: Vec<ClientEmbed>,
    pub conn: ConnectionId,
    /// Messages the chat had before this one (what the AI cache should hold).
    pub prior_messages: u64,
    /// The server asked the client for this message's history or embeds already (the
    /// chat's shared record of message ids says so, on any node): it is not asked again.
    #[serde(default)]
    pub history_requested: bool,
    pub options: MessageOptions,
}

/// What the client said about the turn besides the message itself.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MessageOptions {
    pub pinned_model: Option<String>,
    pub active_focus_id: Option<String>,
    pub chat_summary: Option<String>,
    pub chat_tags: Vec<String>,
    /// The user's saved settings/memories (`app_id-item_key`), when the client says.
    #[serde(default)]
    pub settings_available: Option<Vec<String>>,
    pub connected_accounts: Vec<String>,
    /// Names the user marked private (see `ChatMessageAdded::private_names`).
    #[serde(default)]
    pub private_names: Vec<String>,
    pub follow_ups_enabled: bool,
    /// The chat key the sending device gave (wrapped by the client; relayed unread).
    #[serde(default)]
    pub encrypted_chat_key: Option<String>,
}

impl Default for MessageOptions {
    fn default() -> Self {
        Self {
            pinned_model: None,
            active_focus_id: None,
            chat_summary: None,
            chat_tags: Vec::new(),
            settings_available: None,
            connected_accounts: Vec::new(),
            private_names: Vec::new(),
            follow_ups_enabled: true,
            encrypted_chat_key: None,
        }
    }
}

impl MessageOptions {
    pub fn from_message(m: &chatd_protocol::ChatMessageAdded) -> Self {
        Self {
            pinned_model: m.pinned_model.clone(),
            active_focus_id: m.active_focus_id.clone(),
            chat_summary: m.chat_summary.clone(),
            chat_tags: m.chat_tags.clone(),
            settings_available: m.app_settings_memories_metadata.clone(),
            connected_accounts: m.connected_accounts.clone(),
            private_names: crate::privacy::marked_names(&m.private_names),
            follow_ups_enabled: m
                .user_preferences
                .as_ref()
                .is_none_or(|p| p.follow_up_suggestions_enabled),
            encrypted_chat_key: m.encrypted_chat_key.clone(),
        }
    }
}

impl Inbound {
    pub fn message_id(&self) -> &MessageId {
        &self.message.message_id
    }
}

/// A follow-up message waiting for its chat.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FollowUp {
    /// Its own task (its assistant message id is derived from it).
    pub task_id: TaskId,
    /// The user message whose turn the skill belonged to.
    pub user_message_id: MessageId,
    pub model_name: String,
    pub category: Option<String>,
    pub text: String,
}

impl FollowUp {
    /// The follow-up of the turn `ctx` describes, carrying `text`.
    pub fn of(ctx: &TurnContext, text: &str) -> Self {
        Self {
            task_id: TaskId::random(),
            user_message_id: ctx.user_message_id.clone(),
            model_name: ctx.model_name.clone(),
            category: ctx.category.clone(),
            text: text.to_string(),
        }
    }

    /// The id admission and the queue know it by.
    pub fn message_id(&self) -> MessageId {
        MessageId::from(self.task_id.clone())
    }
}
