//! The one mapping of pipeline [`TurnEvent`]s to wire frames and their audiences:
//! preprocessing steps, typing, skill status, embeds and postprocessing results to every
//! device; stream chunks and the final frame to devices showing the chat, and one
//! `ai_background_response_completed` to the others, then `ai_typing_ended` to every
//! device. Pure: delivery is the caller's. How a turn ends is `ending.rs` (also a lost
//! turn's ending, written by the node that took it over); the turn's own frames (started,
//! asking for the history, refused) are `notice.rs`.

mod ending;
mod notice;

pub use ending::{Head, LostTurn, after_final, node_lost};
pub use notice::{Notice, notice};

use chatd_protocol::{
    AiTaskWaiting, AiTypingStarted, Correction, HistoryCompressed, PostProcessingCompleted,
    PreprocessingStep, SendEmbedData, ServerMessage, SkillExecutionStatus, ThinkingChunk,
    ThinkingComplete,
};

use super::hub::Audience;
use crate::pipeline::{
    EmbedEvent, MemoryProposal, PostProcessed, SkillEvent, StepEvent, TurnContext, TurnEvent,
    Typing,
};

/// The frames of one event; `sequence` numbers a chunk, the final frame or a reasoning
/// piece. A `FollowUp` and skill suggestions map to nothing (the turn delivers a follow-up
/// as a message of its own; postprocessing offers the suggestions).
pub fn map(ctx: &TurnContext, event: TurnEvent, sequence: u64) -> Vec<(Audience, ServerMessage)> {
    let showing = |msg| vec![(Audience::Showing(ctx.chat_id.clone()), msg)];
    let msg = match event {
        TurnEvent::Finished(outcome) => return ending::finished(&Head::of(ctx), outcome, sequence),
        TurnEvent::FollowUp { .. } | TurnEvent::SkillSuggestions(_) => return Vec::new(),
        TurnEvent::Chunk { text } => {
            let update = Head::of(ctx).update(text.to_string(), sequence, false);
            return showing(ServerMessage::AiMessageUpdate(update));
        }
        TurnEvent::Thinking { delta } => return showing(thinking(ctx, delta, sequence)),
        TurnEvent::ThinkingComplete => return showing(thinking_complete(ctx)),
        TurnEvent::Corrected { text } => {
            let mut update = Head::of(ctx).update(text.to_string(), sequence, true);
            update.correction = Some(Correction::HarmfulResponse);
            ServerMessage::AiMessageUpdate(update)
        }
        TurnEvent::Step(step) => step_frame(ctx, step),
        TurnEvent::Typing(typing) => typing_started(ctx, typing),
        TurnEvent::PostProcessed(p) => post_processed(ctx, p),
        TurnEvent::Compressed(c) => ServerMessage::HistoryCompressed(HistoryCompressed {
            chat_id: ctx.chat_id.clone(),
            message_id: c.message_id,
            content: c.content,
            created_at: c.created_at,
            replaces_through: c.replaces_through,
        }),
        TurnEvent::CompressionFailed => compression_failed(ctx),
        TurnEvent::Skill(e) => skill_status(ctx, e),
        TurnEvent::Embed(e) => embed(ctx, e),
        TurnEvent::Waiting { retry_after } => ServerMessage::AiTaskWaiting(AiTaskWaiting {
            chat_id: ctx.chat_id.clone(),
            task_id: ctx.task_id.clone(),
            reason: "rate_limited".into(),
            retry_after_ms: retry_after.as_millis() as u64,
        }),
        TurnEvent::Routine(e) => routine_frame(ctx, e),
        TurnEvent::FocusActivated { focus_id } => {
            ServerMessage::FocusModeActivated(chatd_protocol::FocusModeActivated {
                chat_id: ctx.chat_id.clone(),
                focus_id,
            })
        }
        TurnEvent::MemoryProposal(p) => memory_proposal(ctx, *p),
    };
    vec![(Audience::All, msg)]
}

fn compression_failed(ctx: &TurnContext) -> ServerMessage {
    let mut p = chatd_protocol::ErrorPayload::new(
        chatd_protocol::ErrorCode::HistoryCompressionFailed,
        "The chat's earlier messages could not be summarised; the oldest are left out of the \
         model's context as before.",
    );
    p.chat_id = Some(ctx.chat_id.clone());
    ServerMessage::Error(p)
}

fn step_frame(ctx: &TurnContext, step: StepEvent) -> ServerMessage {
    ServerMessage::PreprocessingStep(PreprocessingStep {
        chat_id: ctx.chat_id.clone(),
        task_id: ctx.task_id.clone(),
        step: step.step,
        skipped: step.skip_reason.is_some(),
        skip_reason: step.skip_reason,
        data: step.data,
    })
}

fn typing_started(ctx: &TurnContext, typing: Typing) -> ServerMessage {
    ServerMessage::AiTypingStarted(AiTypingStarted {
        chat_id: ctx.chat_id.clone(),
        message_id: ctx.assistant_message_id(),
        user_message_id: ctx.user_message_id.clone(),
        model_name: ctx.model_name.clone(),
        category: ctx.category.clone(),
        title: typing.title,
        icon_names: typing.icon_names,
        is_continuation: false,
        encrypted_chat_key: typing.encrypted_chat_key,
    })
}

fn post_processed(ctx: &TurnContext, p: PostProcessed) -> ServerMessage {
    ServerMessage::PostProcessingCompleted(PostProcessingCompleted {
        chat_id: ctx.chat_id.clone(),
        task_id: ctx.task_id.clone(),
        follow_up_request_suggestions: p.follow_up_request_suggestions,
        new_chat_request_suggestions: p.new_chat_request_suggestions,
        chat_summary: p.chat_summary,
        chat_tags: p.chat_tags,
        harmful_response: p.harmful_response,
        updated_chat_title: p.updated_chat_title,
        suggested_settings_memories: p.suggested_settings_memories,
    })
}

fn skill_status(ctx: &TurnContext, e: SkillEvent) -> ServerMessage {
    ServerMessage::SkillExecutionStatus(SkillExecutionStatus {
        chat_id: ctx.chat_id.clone(),
        message_id: ctx.assistant_message_id(),
        task_id: ctx.task_id.clone(),
        skill_task_id: e.skill_task_id,
        app_id: e.app_id,
        skill_id: e.skill_id,
        status: e.status,
        preview_data: e.preview,
        error: e.error,
    })
}

fn embed(ctx: &TurnContext, e: EmbedEvent) -> ServerMessage {
    ServerMessage::SendEmbedData(Box::new(SendEmbedData {
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
    }))
}

fn thinking(ctx: &TurnContext, delta: String, sequence: u64) -> ServerMessage {
    ServerMessage::ThinkingChunk(ThinkingChunk {
        chat_id: ctx.chat_id.clone(),
        task_id: ctx.task_id.clone(),
        message_id: ctx.assistant_message_id(),
        content: delta,
        sequence,
    })
}

fn thinking_complete(ctx: &TurnContext) -> ServerMessage {
    ServerMessage::ThinkingComplete(ThinkingComplete {
        chat_id: ctx.chat_id.clone(),
        task_id: ctx.task_id.clone(),
        message_id: ctx.assistant_message_id(),
    })
}

fn memory_proposal(ctx: &TurnContext, p: MemoryProposal) -> ServerMessage {
    ServerMessage::AppSettingsMemoriesProposal(Box::new(
        chatd_protocol::AppSettingsMemoriesProposal {
            proposal_id: p.proposal_id,
            chat_id: ctx.chat_id.clone(),
            app_id: p.app_id,
            category: p.category,
            action: p.action,
            entry: p.entry,
        },
    ))
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
