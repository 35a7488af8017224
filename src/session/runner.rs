//! Runs a chat's turns on the app's turn tracker: prepare the history (or ask the client
//! for it), announce, stream the answer, seal it into the AI cache, emit the final frame,
//! then run the follow-up turn for messages that were queued meanwhile.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use chatd_protocol::{
    AiTaskInitiated, ChatId, ErrorCode, ErrorPayload, HistoryReason, Role, ServerMessage,
};

use super::hub::Audience;
use super::turns::TurnTicket;
use crate::app::AppState;
use crate::auth::UserId;
use crate::cache::ai::{CacheFault, CachedMessage};
use crate::crypto::{KeyError, UserHash};
use crate::history::{self, Prepared};
use crate::metrics::{OutcomeLabel, ReasonLabel};
use crate::pipeline::answer::AnswerStream;
use crate::pipeline::{Interruption, TurnContext, TurnEvent, TurnSink, context, tokens};

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
    let ctx = TurnContext {
        user: user.clone(),
        chat_id: chat.clone(),
        task_id: ticket.task_id.clone(),
        user_message_id: ticket.user_message_id.clone(),
        model_name: app.model_name.clone(),
    };
    let request = context::build_request(&app.config.llm.model, &history);
    let sink: &dyn TurnSink = app.hub.as_ref();
    sink.emit(&ctx, TurnEvent::Typing);
    let reason = || ticket.interruption();
    let outcome = AnswerStream {
        llm: app.llm.as_ref(),
        sink,
        ctx: &ctx,
        cancel: &ticket.cancel,
        cancel_reason: &reason,
    }
    .run(request)
    .await;
    if !outcome.text.trim().is_empty() {
        remember_answer(app, user, &owner, &ctx, &outcome.text).await;
    }
    let label = match (&outcome.interrupted, &outcome.error) {
        (Some(Interruption::Cancelled), _) => "cancelled",
        (Some(Interruption::Shutdown), _) => "shutdown",
        (None, Some(_)) => "error",
        (None, None) => "completed",
    };
    if let Some(e) = &outcome.error {
        tracing::warn!(error = %e, "turn ended with an error");
    }
    sink.emit(&ctx, TurnEvent::Finished(outcome));
    app.metrics
        .turns
        .get_or_create(&OutcomeLabel { outcome: label })
        .inc();
    app.metrics
        .turn_seconds
        .observe(started.elapsed().as_secs_f64());
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
        token_count: tokens::count(text),
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
