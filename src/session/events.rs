//! The one place where pipeline [`TurnEvent`]s become wire frames and are routed:
//! typing to every device, stream chunks to devices showing the chat, the final frame to
//! those too, and one `ai_background_response_completed` to the others.

use chatd_protocol::{
    AiBackgroundResponseCompleted, AiMessageUpdate, AiTypingStarted, ErrorCode, ErrorPayload,
    ServerMessage,
};

use super::hub::{Audience, Hub};
use crate::pipeline::{Interruption, TurnContext, TurnError, TurnEvent, TurnSink};

impl TurnSink for Hub {
    fn emit(&self, ctx: &TurnContext, event: TurnEvent) {
        match event {
            TurnEvent::Typing => {
                let msg = ServerMessage::AiTypingStarted(AiTypingStarted {
                    chat_id: ctx.chat_id.clone(),
                    message_id: ctx.assistant_message_id(),
                    user_message_id: ctx.user_message_id.clone(),
                    model_name: ctx.model_name.clone(),
                    category: None,
                    title: None,
                    icon_names: Vec::new(),
                    is_continuation: false,
                });
                self.send(&ctx.user, Audience::All, &msg);
            }
            TurnEvent::Chunk { text, sequence } => {
                let msg =
                    ServerMessage::AiMessageUpdate(update(ctx, text.to_string(), sequence, false));
                self.send(&ctx.user, Audience::Showing(&ctx.chat_id), &msg);
            }
            TurnEvent::Finished(outcome) => {
                let error_code = outcome.error.as_ref().map(error_code);
                if let Some(err) = &outcome.error {
                    let mut payload = ErrorPayload::new(
                        error_code.unwrap_or(ErrorCode::InternalError),
                        user_message(err),
                    );
                    payload.chat_id = Some(ctx.chat_id.clone());
                    payload.message_id = Some(ctx.assistant_message_id());
                    self.send(&ctx.user, Audience::All, &ServerMessage::Error(payload));
                }
                let cancelled = outcome.interrupted == Some(Interruption::Cancelled);
                let shutdown = outcome.interrupted == Some(Interruption::Shutdown);
                let mut last = update(ctx, outcome.text.to_string(), outcome.sequence, true);
                last.interrupted_by_revocation = cancelled;
                last.interrupted_by_shutdown = shutdown;
                last.error_code = error_code;
                last.prompt_tokens = outcome.usage.map(|u| u.prompt_tokens);
                last.completion_tokens = outcome.usage.map(|u| u.completion_tokens);
                self.send(
                    &ctx.user,
                    Audience::Showing(&ctx.chat_id),
                    &ServerMessage::AiMessageUpdate(last),
                );
                let background =
                    ServerMessage::AiBackgroundResponseCompleted(AiBackgroundResponseCompleted {
                        chat_id: ctx.chat_id.clone(),
                        message_id: ctx.assistant_message_id(),
                        user_message_id: ctx.user_message_id.clone(),
                        task_id: ctx.task_id.clone(),
                        full_content: outcome.text.to_string(),
                        model_name: Some(ctx.model_name.clone()),
                        category: None,
                        interrupted_by_revocation: cancelled,
                        error_code,
                    });
                self.send(&ctx.user, Audience::NotShowing(&ctx.chat_id), &background);
            }
        }
    }
}

fn update(ctx: &TurnContext, text: String, sequence: u64, is_final_chunk: bool) -> AiMessageUpdate {
    AiMessageUpdate {
        task_id: ctx.task_id.clone(),
        chat_id: ctx.chat_id.clone(),
        message_id: ctx.assistant_message_id(),
        user_message_id: ctx.user_message_id.clone(),
        full_content_so_far: text,
        sequence,
        is_final_chunk,
        model_name: Some(ctx.model_name.clone()),
        category: None,
        interrupted_by_revocation: false,
        interrupted_by_shutdown: false,
        error_code: None,
        prompt_tokens: None,
        completion_tokens: None,
    }
}

fn error_code(e: &TurnError) -> ErrorCode {
    match e {
        TurnError::Llm(_) => ErrorCode::LlmUnavailable,
    }
}

fn user_message(e: &TurnError) -> &'static str {
    match e {
        TurnError::Llm(_) => {
            "The language model failed while answering; the answer may be incomplete."
        }
    }
}
