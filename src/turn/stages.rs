//! The stages of a turn around the answer: the `preprocessing_step` events, the polite
//! refusal streamed instead of an answer, the link repair and the answer's sealing into the
//! AI cache before the final frame, postprocessing run after it, and what became of the
//! turn's message ids (answered, awaiting the history, or free to send again).

use std::sync::Arc;

use chatd_protocol::{ChatId, PreprocessingStepKind, RejectionReason};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::TurnTicket;
use super::correction::{Reprocess, replace_harmful_answer};
use super::deps::TurnDeps;
use super::writer::TurnWriter;
use crate::cache::ai::CachedMessage;
use crate::clock;
use crate::crypto::UserHash;
use crate::links::AnswerLinks;
use crate::metrics::StageLabel;
use crate::pipeline::function_call::StageError;
use crate::pipeline::preprocess::{Preprocessed, step_data};
use crate::pipeline::tokens;
use crate::pipeline::{StepEvent, TurnContext, TurnEvent, TurnOutcome, TurnSink, postprocess};
use chatd_protocol::Role;

/// The `preprocessing_step` frames of a turn, in order: the title (unless `title_late`: it
/// is still being written, see [`title_step`]), the mate, the model.
pub(super) fn steps(
    pre: &Preprocessed,
    first_message: bool,
    has_title: bool,
    title_late: bool,
) -> Vec<StepEvent> {
    let mate = StepEvent {
        step: PreprocessingStepKind::MateSelected,
        skip_reason: None,
        data: step_data(&[("category", json!(pre.category)), ("mate", json!(pre.mate))]),
    };
    let model = StepEvent {
        step: PreprocessingStepKind::ModelSelected,
        skip_reason: None,
        data: step_data(&[
            ("model_id", json!(pre.choice.model.spec.id)),
            ("model_name", json!(pre.choice.model.spec.name)),
            ("selection_reason", json!(pre.choice.reason)),
        ]),
    };
    match title_late {
        true => vec![mate, model],
        false => vec![title_step(pre, first_message, has_title), mate, model],
    }
}

/// The `title_generated` step: the title, icons and category, or why there is none.
pub(super) fn title_step(pre: &Preprocessed, first_message: bool, has_title: bool) -> StepEvent {
    match (&pre.title, first_message) {
        (Some(title), true) => StepEvent {
            step: PreprocessingStepKind::TitleGenerated,
            skip_reason: None,
            data: step_data(&[
                ("title", json!(title)),
                ("icon_names", json!(pre.icon_names)),
                ("category", json!(pre.category)),
            ]),
        },
        _ => StepEvent {
            step: PreprocessingStepKind::TitleGenerated,
            skip_reason: Some(
                if has_title {
                    "chat already has a title"
                } else if first_message {
                    "no title was generated"
                } else {
                    "not the first message"
                }
                .into(),
            ),
            data: json!({}),
        },
    }
}

/// The polite refusal, streamed as the assistant's answer (no main model call).
pub(super) fn reject(
    app: &TurnDeps,
    sink: &dyn TurnSink,
    ctx: &TurnContext,
    rejection: RejectionReason,
) -> TurnOutcome {
    let texts = &app.instructions.prompts.rejection;
    let text: Arc<str> = Arc::from(
        match rejection {
            RejectionReason::HarmfulOrIllegalDetected => &texts.harmful_or_illegal_detected,
            RejectionReason::MisuseDetected => &texts.misuse_detected,
        }
        .trim(),
    );
    sink.emit(ctx, TurnEvent::Chunk { text: text.clone() });
    TurnOutcome {
        text,
        rejection: Some(rejection),
        ..TurnOutcome::default()
    }
}

/// What postprocessing needs after the final frame went out.
pub(super) struct PostJob {
    pub(super) ctx: TurnContext,
    pub(super) user_message: String,
    pub(super) answer: Arc<str>,
    pub(super) previous_summary: Option<String>,
    pub(super) tags: Vec<String>,
    pub(super) follow_ups_enabled: bool,
    /// Follow-up suggestions the turn's skills returned (offered first).
    pub(super) skill_suggestions: Vec<String>,
    /// The answer's model and context, when a harmful answer may be generated again.
    pub(super) reprocess: Option<Reprocess>,
    /// Settings/memories categories worth suggesting a new entry for.
    pub(super) new_settings_memories: Vec<String>,
}

/// Runs postprocessing on the turn tracker (cancelled at shutdown); a failure is logged and
/// counted, never shown as an error: the answer is already delivered.
pub(super) async fn run_postprocessing(deps: Arc<TurnDeps>, writer: Arc<TurnWriter>, job: PostJob) {
    let input = postprocess::Input {
        user_message: &job.user_message,
        answer: &job.answer,
        previous_summary: job.previous_summary.as_deref(),
        tags: &job.tags,
        follow_ups_enabled: job.follow_ups_enabled,
        skill_suggestions: &job.skill_suggestions,
    };
    let model = deps.models.postprocessing();
    match postprocess::run(
        &deps.instructions,
        &model,
        &deps.pipeline,
        &input,
        &deps.shutdown,
    )
    .await
    {
        Ok(mut done) => {
            let threshold = deps.pipeline.harmful_response_threshold;
            if threshold > 0 && done.harmful_response >= threshold {
                // Judged harmful: generated again, and no follow-ups to the first answer.
                done.follow_up_request_suggestions.clear();
                if let Some(r) = job.reprocess {
                    replace_harmful_answer(&deps, &writer, &job.ctx, r).await;
                }
            } else {
                let exchange = crate::memories::suggest::Exchange {
                    user: &job.ctx.user,
                    chat: &job.ctx.chat_id,
                    user_message: &job.user_message,
                    answer: &job.answer,
                    candidates: &job.new_settings_memories,
                };
                done.suggested_settings_memories = crate::memories::suggest::run(
                    &deps.memories,
                    &model,
                    deps.pipeline.stage_timeout,
                    &exchange,
                    &deps.shutdown,
                )
                .await;
            }
            writer.emit(&job.ctx, TurnEvent::PostProcessed(done));
        }
        Err(StageError::Cancelled) => {}
        Err(e) => {
            tracing::warn!(error = %e, "postprocessing failed; the answer stands");
            deps.metrics
                .stage_failures
                .get_or_create(&StageLabel {
                    stage: "postprocessing",
                })
                .inc();
        }
    }
}

/// Replaces the answer's broken links once its checks are done: the corrected text goes
/// out as one more `ai_message_update` and becomes the outcome's text (so the final frame
/// and the AI cache carry it). Interrupted and refused answers are left as they are.
pub(super) async fn repair_links(
    app: &TurnDeps,
    sink: &dyn TurnSink,
    ctx: &TurnContext,
    cancel: &CancellationToken,
    links: AnswerLinks,
    outcome: &mut TurnOutcome,
) {
    if outcome.interrupted.is_some() || outcome.rejection.is_some() || cancel.is_cancelled() {
        return;
    }
    let Some(repair) = links.repair(&outcome.text, cancel).await else {
        return;
    };
    let text: Arc<str> = Arc::from(repair.text);
    sink.emit(ctx, TurnEvent::Chunk { text: text.clone() });
    outcome.text = text;
    if app.report_replaced_links {
        outcome.replaced_links = repair.replaced;
    }
}

/// Seals the answer (also a partial one) into the AI cache before the final frame, so the
/// next message in the chat is a cache hit, and, unless a device that asked for it is still
/// here to store it, keeps it as pending until a device does (`pending_ai_response` on
/// later connections: the user left meanwhile).
pub(super) async fn remember_answer(
    app: &TurnDeps,
    owner: &UserHash,
    ctx: &TurnContext,
    text: &str,
    requesters: &[crate::delivery::ConnectionId],
) {
    let message_id = ctx.assistant_message_id();
    let created_at = clock::unix_now();
    let pending = chatd_protocol::PendingAiResponse {
        chat_id: ctx.chat_id.clone(),
        task_id: ctx.task_id.clone(),
        message_id: message_id.clone(),
        user_message_id: ctx.user_message_id.clone(),
        content: text.to_string(),
        model_name: Some(ctx.model_name.clone()),
        category: ctx.category.clone(),
        created_at,
    };
    let requester_here = app
        .delivery
        .hub
        .devices(owner)
        .iter()
        .any(|d| requesters.contains(&d.conn_id) && !d.outbox.is_closed());
    if !requester_here {
        let plain = serde_json::to_vec(&pending).unwrap_or_default();
        if let Err(e) = app
            .ai_cache
            .keep_pending(owner, message_id.as_str(), &plain)
            .await
        {
            tracing::warn!(error = %e, "could not keep the answer for devices that left");
        }
    }
    let entry = CachedMessage {
        message_id,
        role: Role::Assistant,
        content: text.to_string(),
        created_at,
        category: None,
        model_name: Some(ctx.model_name.clone()),
        token_count: Some(tokens::count_one(text).await),
    };
    // The answer is one more message of the chat (counted only while the cache counts).
    if let Err(e) = app
        .ai_cache
        .bump_messages_v(owner, &ctx.chat_id, None)
        .await
    {
        tracing::warn!(error = %e, "could not count the answer");
    }
    if let Err(e) = app.ai_cache.append(owner, &ctx.chat_id, &[entry]).await {
        // The answer reached the user; the next turn falls back to request_chat_history.
        tracing::warn!(error = %e, "could not cache the answer");
    }
}

/// What became of a turn's messages.
pub(super) enum Settled {
    /// A copy sent again is a duplicate.
    Answered,
    /// The copy with the history is expected.
    AwaitingHistory,
    /// No answer: the user may send them again.
    Unanswered,
}

/// Records what became of the ticket's messages (see [`crate::cache::ai::MessageSeen`]).
pub(super) async fn settle_messages(
    app: &TurnDeps,
    owner: &UserHash,
    chat: &ChatId,
    ticket: &TurnTicket,
    settled: Settled,
) {
    let cache = &app.ai_cache;
    for i in ticket.inbound.iter() {
        let id = i.message_id();
        let settled = match settled {
            Settled::Answered => cache.message_answered(owner, chat, id).await,
            Settled::AwaitingHistory => cache.message_awaits_history(owner, chat, id).await,
            Settled::Unanswered => cache.release_message(owner, chat, id).await,
        };
        if let Err(e) = settled {
            tracing::warn!(error = %e, "cannot settle a message id");
        }
    }
}
