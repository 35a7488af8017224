//! The turn's own frames, besides its pipeline's events: it started, it needs the history
//! (or embeds, or settings/memories entries) from the client first, or it refuses the
//! message with a typed error. The turn's writer numbers and logs them like every frame.

use chatd_protocol::{
    AiTaskInitiated, ChatId, ErrorCode, ErrorPayload, MessageId, RequestAppSettingsMemories,
    RequestChatEmbeds, RequestChatHistory, ServerMessage, TaskId,
};

/// A frame of the turn itself.
#[derive(Debug)]
pub enum Notice {
    /// `ai_task_initiated`: the turn took the message.
    Started,
    /// `request_chat_history`: the history is needed first.
    NeedHistory(RequestChatHistory),
    /// `request_chat_embeds`: embeds the history names are needed first.
    NeedEmbeds(RequestChatEmbeds),
    /// `request_app_settings_memories`: entries the answer may use, asked for without waiting.
    NeedSettingsMemories(RequestAppSettingsMemories),
    /// `error`: the message is refused, with a stable code.
    Refused { code: ErrorCode, message: String },
}

/// The wire frame of `notice` for the turn `task` in `chat`, answering `user_message`.
pub fn notice(chat: &ChatId, task: &TaskId, user_message: &MessageId, n: Notice) -> ServerMessage {
    match n {
        Notice::Started => ServerMessage::AiTaskInitiated(AiTaskInitiated {
            chat_id: chat.clone(),
            user_message_id: user_message.clone(),
            ai_task_id: task.clone(),
            status: "processing_started".into(),
        }),
        Notice::NeedHistory(request) => ServerMessage::RequestChatHistory(request),
        Notice::NeedEmbeds(request) => ServerMessage::RequestChatEmbeds(request),
        Notice::NeedSettingsMemories(request) => ServerMessage::RequestAppSettingsMemories(request),
        Notice::Refused { code, message } => {
            let mut payload = ErrorPayload::new(code, message);
            payload.chat_id = Some(chat.clone());
            payload.message_id = Some(user_message.clone());
            ServerMessage::Error(payload)
        }
    }
}
