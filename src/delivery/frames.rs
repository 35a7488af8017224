//! The one mapping of pipeline [`TurnEvent`]s to wire frames and their audiences:
//! preprocessing steps, typing, skill status, embeds and postprocessing results to every
//! device; stream chunks and the final frame to devices showing the chat, and one
//! `ai_background_response_completed` to the others, then `ai_typing_ended` to every
//! device. Pure: delivery is the caller's.

use chatd_protocol::{
    AiBackgroundResponseCompleted, AiMessageUpdate, AiTaskWaiting, AiTypingEnded, AiTypingStarted,
    Correction, ErrorCode, ErrorPayload, PostProcessingCompleted, PreprocessingStep, ReplacedLink,
    SendEmbedData, ServerMessage, SkillExecutionStatus, ThinkingChunk, ThinkingComplete,
};

use super::hub::Audience;
use crate::pipeline::{Interruption, TurnContext, TurnError, TurnEvent};

/// The frames of one event; `sequence` numbers a chunk or the final frame. A
/// `FollowUp` maps to nothing (the turn delivers it as a message of its own).
pub fn map(ctx: &TurnContext, event: TurnEvent, sequence: u64) -> Vec<(Audience, ServerMessage)> {
    let all = |msg| vec![(Audience::All, msg)];
    match event {
        TurnEvent::Step(step) => {
            let msg = ServerMessage::PreprocessingStep(PreprocessingStep {
                chat_id: ctx.chat_id.clone(),
                task_id: ctx.task_id.clone(),
                step: step.step,
                skipped: step.skip_reason.is_some(),
                skip_reason: step.skip_reason,
                data: step.data,
            });
            all(msg)
        }
        TurnEvent::Typing(typing) => {
            let msg = ServerMessage::AiTypingStarted(AiTypingStarted {
                chat_id: ctx.chat_id.clone(),
                message_id: ctx.assistant_message_id(),
                user_message_id: ctx.user_message_id.clone(),
                model_name: ctx.model_name.clone(),
                category: ctx.category.clone(),
                title: typing.title,
                icon_names: typing.icon_names,
                is_continuation: false,
                encrypted_chat_key: typing.encrypted_chat_key,
            });
            all(msg)
        }
        TurnEvent::PostProcessed(p) => {
            let msg = ServerMessage::PostProcessingCompleted(PostProcessingCompleted {
                chat_id: ctx.chat_id.clone(),
                task_id: ctx.task_id.clone(),
                follow_up_request_suggestions: p.follow_up_request_suggestions,
                new_chat_request_suggestions: p.new_chat_request_suggestions,
                chat_summary: p.chat_summary,
                chat_tags: p.chat_tags,
                harmful_response: p.harmful_response,
                updated_chat_title: p.updated_chat_title,
                suggested_settings_memories: p.suggested_settings_memories,
            });
            all(msg)
        }
        TurnEvent::Skill(e) => {
            let msg = ServerMessage::SkillExecutionStatus(SkillExecutionStatus {
                chat_id: ctx.chat_id.clone(),
                message_id: ctx.assistant_message_id(),
                task_id: ctx.task_id.clone(),
                skill_task_id: e.skill_task_id,
                app_id: e.app_id,
                skill_id: e.skill_id,
                status: e.status,
                preview_data: e.preview,
                error: e.error,
            });
            all(msg)
        }
        TurnEvent::Waiting { retry_after } => all(ServerMessage::AiTaskWaiting(AiTaskWaiting {
            chat_id: ctx.chat_id.clone(),
            task_id: ctx.task_id.clone(),
            reason: "rate_limited".into(),
            retry_after_ms: retry_after.as_millis() as u64,
        })),
        TurnEvent::Embed(e) => {
            let msg = ServerMessage::SendEmbedData(Box::new(SendEmbedData {
                embed_type: Some(e.embed_type),
                text_length_chars: Some(e.content.chars().count() as u64),
                content: Some(e.content),
                status: Some(e.status.as_str().to_string()),
                chat_id: Some(ctx.chat_id.clone()),
                message_id: Some(ctx.assistant_message_id()),
                task_id: Some(ctx.task_id.clone()),
                skill_task_id: e.skill_task_id,
                app_id: Some(e.app_id),
                skill_id: Some(e.skill_id),
                embed_ids: e.embed_ids,
                parent_embed_id: e.parent_embed_id,
                content_hash: Some(e.content_hash),
                version_number: Some(e.version_number),
                encryption_mode: Some("client".into()),
                injection_flagged: e.injection_flagged,
                ..SendEmbedData::new(e.embed_id)
            }));
            all(msg)
        }
        TurnEvent::Corrected { text } => {
            let mut msg = chunk(ctx, text.to_string(), sequence, true);
            msg.correction = Some(Correction::HarmfulResponse);
            vec![(Audience::All, ServerMessage::AiMessageUpdate(msg))]
        }
        TurnEvent::Thinking { delta } => {
            let msg = ServerMessage::ThinkingChunk(ThinkingChunk {
                chat_id: ctx.chat_id.clone(),
                task_id: ctx.task_id.clone(),
                message_id: ctx.assistant_message_id(),
                content: delta,
                sequence,
            });
            vec![(Audience::Showing(ctx.chat_id.clone()), msg)]
        }
        TurnEvent::ThinkingComplete => {
            let msg = ServerMessage::ThinkingComplete(ThinkingComplete {
                chat_id: ctx.chat_id.clone(),
                task_id: ctx.task_id.clone(),
                message_id: ctx.assistant_message_id(),
            });
            vec![(Audience::Showing(ctx.chat_id.clone()), msg)]
        }
        TurnEvent::Chunk { text } => {
            let msg = ServerMessage::AiMessageUpdate(chunk(ctx, text.to_string(), sequence, false));
            vec![(Audience::Showing(ctx.chat_id.clone()), msg)]
        }
        TurnEvent::Finished(outcome) => {
            let mut frames = Vec::with_capacity(3);
            let error_code = outcome.error.as_ref().map(error_code);
            if let Some(err) = &outcome.error {
                let mut payload = ErrorPayload::new(
                    error_code.unwrap_or(ErrorCode::InternalError),
                    user_message(err),
                );
                payload.chat_id = Some(ctx.chat_id.clone());
                payload.message_id = Some(ctx.assistant_message_id());
                frames.push((Audience::All, ServerMessage::Error(payload)));
            }
            let cancelled = outcome.interrupted == Some(Interruption::Cancelled);
            let shutdown = outcome.interrupted == Some(Interruption::Shutdown);
            let mut last = chunk(ctx, outcome.text.to_string(), sequence, true);
            last.interrupted_by_revocation = cancelled;
            last.interrupted_by_shutdown = shutdown;
            last.error_code = error_code;
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
            frames.push((
                Audience::Showing(ctx.chat_id.clone()),
                ServerMessage::AiMessageUpdate(last),
            ));
            let background =
                ServerMessage::AiBackgroundResponseCompleted(AiBackgroundResponseCompleted {
                    chat_id: ctx.chat_id.clone(),
                    message_id: ctx.assistant_message_id(),
                    user_message_id: ctx.user_message_id.clone(),
                    task_id: ctx.task_id.clone(),
                    full_content: outcome.text.to_string(),
                    model_name: Some(ctx.model_name.clone()),
                    category: ctx.category.clone(),
                    interrupted_by_revocation: cancelled,
                    error_code,
                    rejection_reason: outcome.rejection,
                });
            frames.push((Audience::NotShowing(ctx.chat_id.clone()), background));
            frames.push((Audience::All, typing_ended(ctx)));
            frames
        }
        TurnEvent::FollowUp { .. } | TurnEvent::SkillSuggestions(_) => Vec::new(),
        TurnEvent::Routine(e) => all(routine_frame(ctx, e)),
        TurnEvent::FocusActivated { focus_id } => all(ServerMessage::FocusModeActivated(
            chatd_protocol::FocusModeActivated {
                chat_id: ctx.chat_id.clone(),
                focus_id,
            },
        )),
        TurnEvent::MemoryProposal(p) => all(ServerMessage::AppSettingsMemoriesProposal(Box::new(
            chatd_protocol::AppSettingsMemoriesProposal {
                proposal_id: p.proposal_id,
                chat_id: ctx.chat_id.clone(),
                app_id: p.app_id,
                category: p.category,
                action: p.action,
                entry: p.entry,
            },
        ))),
    }
}

/// `ai_typing_ended`: after the final frame of every turn, to every device.
pub fn typing_ended(ctx: &TurnContext) -> ServerMessage {
    ServerMessage::AiTypingEnded(AiTypingEnded {
        chat_id: ctx.chat_id.clone(),
        message_id: ctx.assistant_message_id(),
        task_id: ctx.task_id.clone(),
    })
}

/// An `ai_message_update` of the turn.
pub fn chunk(
    ctx: &TurnContext,
    text: String,
    sequence: u64,
    is_final_chunk: bool,
) -> AiMessageUpdate {
    let mut update = AiMessageUpdate::new(
        ctx.task_id.clone(),
        ctx.chat_id.clone(),
        ctx.user_message_id.clone(),
        text,
        sequence,
        is_final_chunk,
    );
    update.model_name = Some(ctx.model_name.clone());
    update.category = ctx.category.clone();
    update
}

fn error_code(e: &TurnError) -> ErrorCode {
    match e {
        TurnError::Llm(_) => ErrorCode::LlmUnavailable,
        TurnError::AnswerTooLong => ErrorCode::AnswerTooLong,
        TurnError::Deadline => ErrorCode::TurnDeadline,
    }
}

fn user_message(e: &TurnError) -> &'static str {
    match e {
        TurnError::Llm(_) => {
            "The language model failed while answering; the answer may be incomplete."
        }
        TurnError::AnswerTooLong => "The answer reached its length limit and ends here.",
        TurnError::Deadline => "The answer took longer than allowed and ends here.",
    }
}

/// The `routine_*` frame of a routine event.
pub fn routine_frame(ctx: &TurnContext, e: crate::pipeline::RoutineEvent) -> ServerMessage {
    use crate::pipeline::RoutineEventKind as K;
    use chatd_protocol::{
        AwaitingUserInput, RoutineError, RoutineFinished, RoutineStarted, RoutineText,
    };
    let (chat_id, run_id) = (ctx.chat_id.clone(), e.run_id);
    let text = |text| RoutineText {
        chat_id: chat_id.clone(),
        run_id: run_id.clone(),
        text,
    };
    match e.kind {
        K::Started { routine } => ServerMessage::RoutineStarted(RoutineStarted {
            chat_id: chat_id.clone(),
            run_id: run_id.clone(),
            routine,
        }),
        K::Status(t) => ServerMessage::RoutineStatus(text(t)),
        K::Message { message_id, text } => {
            ServerMessage::RoutineMessage(chatd_protocol::RoutineMessage {
                chat_id: chat_id.clone(),
                run_id: run_id.clone(),
                message_id,
                text,
            })
        }
        K::Information(t) => ServerMessage::RoutineInformation(text(t)),
        K::Error { message, code } => ServerMessage::RoutineError(RoutineError {
            chat_id: chat_id.clone(),
            run_id: run_id.clone(),
            message,
            code,
        }),
        K::Awaiting { question } => ServerMessage::AwaitingUserInput(AwaitingUserInput {
            chat_id: chat_id.clone(),
            run_id: run_id.clone(),
            question,
        }),
        K::Finished(outcome) => ServerMessage::RoutineFinished(RoutineFinished {
            chat_id: chat_id.clone(),
            run_id: run_id.clone(),
            outcome,
        }),
    }
}
