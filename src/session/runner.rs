//! Runs a chat's turns on the app's turn tracker: prepare the history (or ask the client
//! for it), announce, stream the answer, seal it into the AI cache, emit the final frame,
//! then run the follow-up turn for messages that were queued meanwhile.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use chatd_protocol::{
    AiTaskInitiated, ChatId, ErrorCode, ErrorPayload, HistoryReason, PreprocessingStepKind,
    RejectionReason, Role, ServerMessage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::hub::{Audience, Hub};
use super::turns::TurnTicket;
use crate::app::AppState;
use crate::auth::UserId;
use crate::cache::ai::{CacheFault, CachedMessage};
use crate::config::PipelineConfig;
use crate::crypto::{KeyError, UserHash};
use crate::history::{self, Prepared};
use crate::links::AnswerLinks;
use crate::metrics::{Metrics, StageLabel};
use crate::metrics::{OutcomeLabel, ReasonLabel};
use crate::pipeline::answer::{AnswerStream, ParagraphHook};
use crate::pipeline::function_call::StageError;
use crate::pipeline::instructions::Instructions;
use crate::pipeline::models::Model;
use crate::pipeline::preprocess::{self, Preprocessed, step_data};
use crate::pipeline::tools::ToolRunner;
use crate::pipeline::{
    HistoryRole, Interruption, StepEvent, TurnContext, TurnEvent, TurnOutcome, TurnSink, Typing,
    context, postprocess, tokens,
};

pub fn spawn_turns(app: Arc<AppState>, user: UserId, chat: ChatId, ticket: TurnTicket) {
    let tracker = app.tasks.turns.clone();
    tracker.spawn(run_turns(app, user, chat, ticket));
}

async fn run_turns(app: Arc<AppState>, user: UserId, chat: ChatId, mut ticket: TurnTicket) {
    loop {
        run_one(&app, &user, &chat, &ticket).await;
        match app
            .turns
            .finish(&chat, &ticket.task_id, &app.tasks.turns_shutdown)
        {
            Some(next) => ticket = next,
            None => break,
        }
    }
}

#[tracing::instrument(skip_all, fields(chat_id = %chat, task_id = %ticket.task_id))]
async fn run_one(app: &AppState, user: &UserId, chat: &ChatId, ticket: &TurnTicket) {
    let started = Instant::now();
    let owner = UserHash::of(user);
    let prepared = tokio::select! {
        biased;
        _ = ticket.cancel.cancelled() => return,
        p = history::prepare(&app.ai_cache, &app.history_requests, &owner, chat, &ticket.inbound) => p,
    };
    let history = match prepared {
        Ok(Prepared::Ready(history)) => history,
        Ok(Prepared::NeedHistory(request)) => {
            app.metrics
                .history_requests
                .get_or_create(&ReasonLabel {
                    reason: reason_label(request.reason),
                })
                .inc();
            let msg = ServerMessage::RequestChatHistory(request);
            for conn in &ticket.requesters {
                app.hub.send(user, Audience::Only(*conn), &msg);
            }
            return;
        }
        Ok(Prepared::Invalid(reason)) => {
            return refuse(
                app,
                user,
                chat,
                ticket,
                ErrorCode::InvalidChatHistory,
                reason,
            );
        }
        Err(fault) => {
            tracing::warn!(error = %fault, "history unavailable; turn not started");
            let (code, text) = fault_message(&fault);
            return refuse(app, user, chat, ticket, code, text);
        }
    };

    let initiated = ServerMessage::AiTaskInitiated(AiTaskInitiated {
        chat_id: chat.clone(),
        user_message_id: ticket.user_message_id.clone(),
        ai_task_id: ticket.task_id.clone(),
        status: "processing_started".into(),
    });
    for conn in &ticket.requesters {
        app.hub.send(user, Audience::Only(*conn), &initiated);
    }
    let opts = ticket
        .inbound
        .last()
        .map(|i| i.options.clone())
        .unwrap_or_default();
    let has_title = ticket
        .inbound
        .iter()
        .any(|i| i.message.chat_has_title || i.message.current_chat_title.is_some());
    let new_messages = ticket.inbound.len();
    let first_message = !has_title
        && ticket
            .inbound
            .first()
            .is_some_and(|i| i.prior_messages == 0)
        && history.len() <= new_messages;

    let tools: &dyn ToolRunner = app.skills.as_ref();
    let pre = {
        let stage = preprocess::Stage {
            instructions: &app.instructions,
            models: &app.models,
            tools,
            config: &app.config.pipeline,
        };
        let input = preprocess::Input {
            history: &history,
            first_message,
            pinned_model: opts.pinned_model.as_deref(),
            connected_accounts: &opts.connected_accounts,
            settings_available: &opts.settings_available,
        };
        stage.run(&input, &ticket.cancel).await
    };
    if pre.degraded {
        app.metrics
            .stage_failures
            .get_or_create(&StageLabel {
                stage: "preprocessing",
            })
            .inc();
    }
    let ctx = TurnContext {
        user: user.clone(),
        chat_id: chat.clone(),
        task_id: ticket.task_id.clone(),
        user_message_id: ticket.user_message_id.clone(),
        model_name: pre.choice.model.spec.id.clone(),
        category: Some(pre.category.clone()),
    };
    let sink: &dyn TurnSink = app.hub.as_ref();
    for step in steps(&pre, first_message, has_title) {
        sink.emit(&ctx, TurnEvent::Step(step));
    }
    sink.emit(
        &ctx,
        TurnEvent::Typing(Typing {
            title: pre.title.clone(),
            icon_names: pre.icon_names.clone(),
        }),
    );
    let reason = || ticket.interruption();
    let links = app.links.as_ref().map(|c| c.answer());
    let mut outcome = if ticket.cancel.is_cancelled() {
        TurnOutcome {
            interrupted: Some(ticket.interruption()),
            ..TurnOutcome::default()
        }
    } else if let Some(rejection) = pre.rejection {
        reject(app, sink, &ctx, rejection)
    } else {
        let model = &pre.choice.model;
        let focus = opts
            .active_focus_id
            .as_deref()
            .or(pre.focus_modes.first().map(String::as_str));
        let defs = tools.definitions(&pre.skills);
        let system = context::system_prompt(
            &app.instructions,
            &context::PromptInput {
                focus_mode: focus,
                category: &pre.category,
                with_tools: !defs.is_empty(),
                language: &pre.language,
                datetime: &now_rfc3339(),
                injection_caution: pre.injection_chance
                    >= app.config.pipeline.injection_caution_threshold,
            },
        );
        let (request, dropped) = context::build_main_request(
            &model.spec.name,
            system,
            &history,
            defs,
            model.spec.context_window,
            app.config.pipeline.answer_reserve_tokens,
        );
        let mut outcome = AnswerStream {
            llm: model.client.as_ref(),
            sink,
            ctx: &ctx,
            cancel: &ticket.cancel,
            cancel_reason: &reason,
            tools: Some(tools),
            max_rounds: app.config.pipeline.max_tool_rounds,
            paragraphs: links.as_ref().map(|l| l as &dyn ParagraphHook),
        }
        .run(request)
        .await;
        outcome.trimmed_history = dropped;
        outcome
    };
    if let Some(links) = links {
        repair_links(app, sink, &ctx, &ticket.cancel, links, &mut outcome).await;
    }
    if !outcome.text.trim().is_empty() && !ticket.abandoned() {
        remember_answer(app, user, &owner, &ctx, &outcome.text).await;
    }
    let label = match (&outcome.interrupted, &outcome.error, &outcome.rejection) {
        (Some(Interruption::Cancelled), _, _) => "cancelled",
        (Some(Interruption::Shutdown), _, _) => "shutdown",
        (None, Some(_), _) => "error",
        (None, None, Some(_)) => "rejected",
        (None, None, None) => "completed",
    };
    if let Some(e) = &outcome.error {
        tracing::warn!(error = %e, "turn ended with an error");
    }
    let postprocess = label == "completed" && app.config.pipeline.postprocessing;
    let answer = outcome.text.clone();
    sink.emit(&ctx, TurnEvent::Finished(outcome));
    app.metrics
        .turns
        .get_or_create(&OutcomeLabel { outcome: label })
        .inc();
    app.metrics
        .turn_seconds
        .observe(started.elapsed().as_secs_f64());
    if postprocess {
        let user_message = history
            .iter()
            .rev()
            .find(|h| h.role == HistoryRole::User)
            .map(|h| h.content.clone())
            .unwrap_or_default();
        let mut tags = opts.chat_tags.clone();
        for t in &pre.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        let job = PostJob {
            ctx,
            user_message,
            answer,
            previous_summary: opts.chat_summary.clone(),
            tags,
            follow_ups_enabled: opts.follow_ups_enabled,
        };
        app.tasks.turns.spawn(run_postprocessing(
            app.instructions.clone(),
            app.models.postprocessing(),
            app.config.pipeline.clone(),
            app.hub.clone(),
            app.metrics.clone(),
            app.tasks.turns_shutdown.clone(),
            job,
        ));
    }
}

/// Replaces the answer's broken links once its checks are done: the corrected text goes
/// out as one more `ai_message_update` and becomes the outcome's text (so the final frame
/// and the AI cache carry it). Interrupted and refused answers are left as they are.
async fn repair_links(
    app: &AppState,
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
    sink.emit(
        ctx,
        TurnEvent::Chunk {
            text: text.clone(),
            sequence: outcome.sequence,
        },
    );
    outcome.sequence += 1;
    outcome.text = text;
    if app.config.links.report_replaced {
        outcome.replaced_links = repair.replaced;
    }
}

/// The `preprocessing_step` frames of a turn, in order.
fn steps(pre: &Preprocessed, first_message: bool, has_title: bool) -> Vec<StepEvent> {
    let title = match (&pre.title, first_message) {
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
    };
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
    vec![title, mate, model]
}

/// The polite refusal, streamed as the assistant's answer (no main model call).
fn reject(
    app: &AppState,
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
    sink.emit(
        ctx,
        TurnEvent::Chunk {
            text: text.clone(),
            sequence: 1,
        },
    );
    TurnOutcome {
        text,
        sequence: 2,
        rejection: Some(rejection),
        ..TurnOutcome::default()
    }
}

/// What postprocessing needs after the final frame went out.
struct PostJob {
    ctx: TurnContext,
    user_message: String,
    answer: Arc<str>,
    previous_summary: Option<String>,
    tags: Vec<String>,
    follow_ups_enabled: bool,
}

/// Runs postprocessing on the turn tracker (cancelled at shutdown); a failure is logged and
/// counted, never shown as an error: the answer is already delivered.
async fn run_postprocessing(
    instructions: Arc<Instructions>,
    model: Model,
    config: PipelineConfig,
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    job: PostJob,
) {
    let input = postprocess::Input {
        user_message: &job.user_message,
        answer: &job.answer,
        previous_summary: job.previous_summary.as_deref(),
        tags: &job.tags,
        follow_ups_enabled: job.follow_ups_enabled,
    };
    match postprocess::run(&instructions, &model, &config, &input, &shutdown).await {
        Ok(done) => hub.emit(&job.ctx, TurnEvent::PostProcessed(done)),
        Err(StageError::Cancelled) => {}
        Err(e) => {
            tracing::warn!(error = %e, "postprocessing failed; the answer stands");
            metrics
                .stage_failures
                .get_or_create(&StageLabel {
                    stage: "postprocessing",
                })
                .inc();
        }
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// Seals the answer (also a partial one) into the AI cache before the final frame, so the
/// next message in the chat is a cache hit.
async fn remember_answer(
    app: &AppState,
    user: &UserId,
    owner: &UserHash,
    ctx: &TurnContext,
    text: &str,
) {
    let message_id = ctx.assistant_message_id();
    let created_at = unix_now();
    // The owner wrote this chat's first message, so this cannot be refused.
    let _ = app
        .chats
        .record(user, &ctx.chat_id, &message_id, created_at);
    let entry = CachedMessage {
        message_id,
        role: Role::Assistant,
        content: text.to_string(),
        created_at,
        category: None,
        model_name: Some(ctx.model_name.clone()),
        token_count: tokens::count_one(text).await,
    };
    if let Err(e) = app.ai_cache.append(owner, &ctx.chat_id, &[entry]).await {
        // The answer reached the user; the next turn falls back to request_chat_history.
        tracing::warn!(error = %e, "could not cache the answer");
    }
}

/// Ends a turn that could not start: a typed error to the devices that asked.
fn refuse(
    app: &AppState,
    user: &UserId,
    chat: &ChatId,
    ticket: &TurnTicket,
    code: ErrorCode,
    message: String,
) {
    let mut payload = ErrorPayload::new(code, message);
    payload.chat_id = Some(chat.clone());
    payload.message_id = Some(ticket.user_message_id.clone());
    let msg = ServerMessage::Error(payload);
    for conn in &ticket.requesters {
        app.hub.send(user, Audience::Only(*conn), &msg);
    }
    app.metrics
        .turns
        .get_or_create(&OutcomeLabel { outcome: "refused" })
        .inc();
}

fn fault_message(fault: &CacheFault) -> (ErrorCode, String) {
    match fault {
        CacheFault::Keys(KeyError::MountMissing(mount)) => (
            ErrorCode::EncryptionUnavailable,
            format!(
                "the key service has no transit engine at `{mount}`; the operator must enable it"
            ),
        ),
        CacheFault::Keys(_) => (
            ErrorCode::EncryptionUnavailable,
            "the key service is unavailable; try again shortly".into(),
        ),
        CacheFault::Cache(_) => (
            ErrorCode::CacheUnavailable,
            "the cache is unavailable; try again shortly".into(),
        ),
    }
}

fn reason_label(reason: HistoryReason) -> &'static str {
    match reason {
        HistoryReason::CacheMiss => "cache_miss",
        HistoryReason::DecryptionFailed => "decryption_failed",
        HistoryReason::InsufficientCacheHistory => "insufficient_cache_history",
    }
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
