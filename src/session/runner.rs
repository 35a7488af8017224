//! Runs a chat's turns on the app's turn tracker: announce, build the request from the
//! history, stream the answer, record it, emit the final frame, then run the follow-up
//! turn for messages that were queued meanwhile.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use chatd_protocol::{AiTaskInitiated, ChatId, ServerMessage};

use super::hub::Audience;
use super::turns::TurnTicket;
use crate::app::AppState;
use crate::auth::UserId;
use crate::metrics::OutcomeLabel;
use crate::pipeline::answer::AnswerStream;
use crate::pipeline::{
    HistoryEntry, HistoryRole, Interruption, TurnContext, TurnEvent, TurnSink, context,
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

#[tracing::instrument(skip_all, fields(user_id = %user, chat_id = %chat, task_id = %ticket.task_id))]
async fn run_one(app: &AppState, user: &UserId, chat: &ChatId, ticket: &TurnTicket) {
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
    let started = Instant::now();
    let history = app.chats.history(user, chat);
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
        let entry = HistoryEntry {
            role: HistoryRole::Assistant,
            content: outcome.text.to_string(),
            created_at: unix_now(),
        };
        // The owner wrote this chat's first message, so this cannot be refused.
        let _ = app
            .chats
            .append(user, chat, &ctx.assistant_message_id(), entry);
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

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
