//! How a turn ends, on every device: the error (if any) to all, the final
//! `ai_message_update` to devices showing the chat, one `ai_background_response_completed`
//! to the others, then `ai_typing_ended` to all. A turn's own end and a lost turn's (its
//! node stopped; the node that took it over writes it) are the same frames.

use chatd_protocol::{
    AiBackgroundResponseCompleted, AiMessageUpdate, AiTypingEnded, ChatId, ErrorCode, ErrorPayload,
    MessageId, ReplacedLink, ServerMessage, TaskId,
};

use crate::delivery::hub::Audience;
use crate::pipeline::{Interruption, TurnContext, TurnError, TurnOutcome};

/// Which answer a frame belongs to.
pub struct Head {
    pub chat_id: ChatId,
    pub task_id: TaskId,
    /// The user message the answer is for.
    pub user_message_id: MessageId,
    pub model_name: Option<String>,
    pub category: Option<String>,
}

impl Head {
    pub fn of(ctx: &TurnContext) -> Self {
        Self {
            chat_id: ctx.chat_id.clone(),
            task_id: ctx.task_id.clone(),
            user_message_id: ctx.user_message_id.clone(),
            model_name: Some(ctx.model_name.clone()),
            category: ctx.category.clone(),
        }
    }

    fn assistant_message_id(&self) -> MessageId {
        MessageId::from(self.task_id.clone())
    }

    /// An `ai_message_update` of the answer.
    pub fn update(&self, text: String, sequence: u64, is_final_chunk: bool) -> AiMessageUpdate {
        let mut update = AiMessageUpdate::new(
            self.task_id.clone(),
            self.chat_id.clone(),
            self.user_message_id.clone(),
            text,
            sequence,
            is_final_chunk,
        );
        update.model_name = self.model_name.clone();
        update.category = self.category.clone();
        update
    }
}

/// A turn whose node was lost, as its log showed it: its answer so far and the model and
/// category its typing frame named.
pub struct LostTurn {
    pub head: Head,
    pub text: String,
}

/// A lost turn's ending (`error_code: node_lost`), its final frame numbered `sequence`.
pub fn node_lost(lost: LostTurn, sequence: u64) -> Vec<(Audience, ServerMessage)> {
    let outcome = TurnOutcome {
        text: lost.text.into(),
        error: Some(TurnError::NodeLost),
        ..TurnOutcome::default()
    };
    finished(&lost.head, outcome, sequence)
}

/// The frames of a turn's end; `sequence` numbers its final `ai_message_update`.
pub fn finished(
    head: &Head,
    mut outcome: TurnOutcome,
    sequence: u64,
) -> Vec<(Audience, ServerMessage)> {
    if outcome.interrupted == Some(Interruption::NodeLost) {
        outcome.interrupted = None;
        outcome.error = Some(TurnError::NodeLost);
    }
    let mut frames = Vec::with_capacity(4);
    let code = outcome.error.as_ref().map(error_code);
    if let Some(err) = &outcome.error {
        let mut payload = ErrorPayload::new(error_code(err), user_message(err));
        payload.chat_id = Some(head.chat_id.clone());
        payload.message_id = Some(head.assistant_message_id());
        frames.push((Audience::All, ServerMessage::Error(payload)));
    }
    let cancelled = outcome.interrupted == Some(Interruption::Cancelled);
    let mut last = head.update(outcome.text.to_string(), sequence, true);
    last.interrupted_by_revocation = cancelled;
    last.interrupted_by_shutdown = outcome.interrupted == Some(Interruption::Shutdown);
    last.error_code = code;
    last.rejection_reason = outcome.rejection;
    last.trimmed_history_messages = outcome.trimmed_history as u64;
    last.prompt_tokens = outcome.usage.map(|u| u.prompt_tokens);
    last.completion_tokens = outcome.usage.map(|u| u.completion_tokens);
    last.replaced_links = outcome
        .replaced_links
        .iter()
        .map(|(text, url)| ReplacedLink {
            text: text.clone(),
            url: url.clone(),
        })
        .collect();
    let rest = after_final(&last);
    let showing = Audience::Showing(head.chat_id.clone());
    frames.push((showing, ServerMessage::AiMessageUpdate(last)));
    frames.extend(rest);
    frames
}

/// The frames of a turn's end that follow its final update `last`:
/// `ai_background_response_completed` to the devices not showing the chat, then
/// `ai_typing_ended` to all.
pub fn after_final(last: &AiMessageUpdate) -> [(Audience, ServerMessage); 2] {
    let message_id = MessageId::from(last.task_id.clone());
    let background = ServerMessage::AiBackgroundResponseCompleted(AiBackgroundResponseCompleted {
        chat_id: last.chat_id.clone(),
        message_id: message_id.clone(),
        user_message_id: last.user_message_id.clone(),
        task_id: last.task_id.clone(),
        full_content: last.full_content_so_far.clone(),
        model_name: last.model_name.clone(),
        category: last.category.clone(),
        interrupted_by_revocation: last.interrupted_by_revocation,
        error_code: last.error_code,
        rejection_reason: last.rejection_reason,
    });
    let ended = ServerMessage::AiTypingEnded(AiTypingEnded {
        chat_id: last.chat_id.clone(),
        message_id,
        task_id: last.task_id.clone(),
    });
    [
        (Audience::NotShowing(last.chat_id.clone()), background),
        (Audience::All, ended),
    ]
}

fn error_code(e: &TurnError) -> ErrorCode {
    match e {
        TurnError::Llm(_) => ErrorCode::LlmUnavailable,
        TurnError::AnswerTooLong => ErrorCode::AnswerTooLong,
        TurnError::Deadline => ErrorCode::TurnDeadline,
        TurnError::NodeLost => ErrorCode::NodeLost,
    }
}

fn user_message(e: &TurnError) -> &'static str {
    match e {
        TurnError::Llm(_) => {
            "The language model failed while answering; the answer may be incomplete."
        }
        TurnError::AnswerTooLong => "The answer reached its length limit and ends here.",
        TurnError::Deadline => "The answer took longer than allowed and ends here.",
        TurnError::NodeLost => "The server answering this message stopped; the answer ends here.",
    }
}
