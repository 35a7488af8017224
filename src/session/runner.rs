//! Runs a chat's turns on the app's turn tracker: prepare the history (or ask the client
//! for it), preprocess (steps, title, model; or refuse) while the likely main call is opened
//! alongside ([`crate::pipeline::speculation`]), stream the answer with its tool loop, repair broken links, seal it into the AI cache, emit the final frame, start
//! postprocessing ([`super::stages`]), then run the follow-up turn for messages queued meanwhile.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use chatd_protocol::{
    AiTaskInitiated, ChatId, ErrorCode, ErrorPayload, HistoryReason, ServerMessage,
};

use super::hub::Audience;
use super::stages::{
    PostJob, now_rfc3339, reject, remember_answer, repair_links, run_postprocessing, steps,
};
use super::turns::TurnTicket;
use crate::app::AppState;
use crate::auth::UserId;
use crate::cache::ai::CacheFault;
use crate::crypto::{KeyError, UserHash};
use crate::history::{self, Prepared};
use crate::metrics::StageLabel;
use crate::metrics::{OutcomeLabel, ReasonLabel};
use crate::pipeline::answer::{AnswerStream, ParagraphHook};
use crate::pipeline::context::MainPlan;
use crate::pipeline::preprocess::{self};
use crate::pipeline::speculation;
use crate::pipeline::tools::ToolRunner;
use crate::pipeline::{
    HistoryRole, Interruption, TurnContext, TurnEvent, TurnOutcome, TurnSink, Typing, context,
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
    let active_focus = opts.active_focus_id.as_deref();
    let caution = app.config.pipeline.injection_caution_threshold;
    let datetime = now_rfc3339();
    let (history, datetime) = (&history, &datetime);
    let main_request = |plan: MainPlan| async move {
        context::main_request(
            &app.instructions,
            tools,
            &plan,
            history,
            datetime,
            app.config.pipeline.answer_reserve_tokens,
        )
        .await
    };
    // The likely main call goes out while preprocessing runs (see `pipeline::speculation`).
    let guess = if app.config.pipeline.speculative_main_call {
        let pinned = opts
            .pinned_model
            .as_deref()
            .and_then(|id| app.models.get(id));
        let plan = app.predictions.guess(chat, pinned, active_focus, || {
            MainPlan::new(&stage.unremarkable(&input), active_focus, caution)
        });
        let (request, dropped) = main_request(plan.clone()).await;
        Some((plan, request, dropped))
    } else {
        None
    };
    let guess_client = guess.as_ref().map(|(plan, ..)| plan.model.client.clone());
    let side = guess_client
        .as_ref()
        .zip(guess.as_ref())
        .map(|(client, (_, request, _))| client.stream(request.clone()));
    let (pre, early) = speculation::alongside(stage.run(&input, &ticket.cancel), side).await;
    if pre.degraded {
        app.metrics
            .stage_failures
            .get_or_create(&StageLabel {
                stage: "preprocessing",
            })
            .inc();
    }
    let plan = MainPlan::new(&pre, active_focus, caution);
    if !pre.degraded && pre.rejection.is_none() {
        app.predictions.remember(chat, plan.clone());
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
    let proceed = !ticket.cancel.is_cancelled() && pre.rejection.is_none();
    // The early call is kept only for the very request preprocessing decided.
    let (main, early) = match guess {
        Some((guessed, request, dropped)) if proceed && guessed == plan => {
            speculation_outcome(app, "used");
            (Some((request, dropped)), early)
        }
        other => {
            if other.is_some() {
                speculation_outcome(app, "discarded");
            }
            drop(early);
            let main = if proceed {
                Some(main_request(plan.clone()).await)
            } else {
                None
            };
            (main, None)
        }
    };
    let mut outcome = match main {
        Some((request, dropped)) if !ticket.cancel.is_cancelled() => {
            let mut outcome = AnswerStream {
                llm: plan.model.client.as_ref(),
                sink,
                ctx: &ctx,
                cancel: &ticket.cancel,
                cancel_reason: &reason,
                tools: Some(tools),
                max_rounds: app.config.pipeline.max_tool_rounds,
                paragraphs: links.as_ref().map(|l| l as &dyn ParagraphHook),
            }
            .run(request, early)
            .await;
            outcome.trimmed_history = dropped;
            outcome
        }
        _ => match pre.rejection {
            Some(rejection) if !ticket.cancel.is_cancelled() => reject(app, sink, &ctx, rejection),
            _ => TurnOutcome {
                interrupted: Some(ticket.interruption()),
                ..TurnOutcome::default()
            },
        },
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

fn speculation_outcome(app: &AppState, outcome: &'static str) {
    app.metrics
        .speculative_main_calls
        .get_or_create(&OutcomeLabel { outcome })
        .inc();
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
