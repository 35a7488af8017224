//! The automatic follow-up: a skill's result that arrived after its turn's answer ended
//! becomes an assistant message of its own. It is not a hidden turn: the turn's writer
//! hands it to the outlet's hook ([`hook`]), which gives it to admission ([`super::Turns::admit_follow_up`]) like a user message, so it
//! waits behind a running turn of the chat (on any node), its queue entry is sealed, and
//! it is delivered by the turn that runs it, under its own task id, through a writer of
//! its own (typing, the text, the final frame), logged and cached like any answer.

use std::sync::{Arc, Weak};

use chatd_protocol::ChatId;

use super::deps::TurnDeps;
use super::writer::{FollowUps, TurnKey, TurnWriter};
use super::{Admission, TurnTicket};
use crate::auth::UserId;
use crate::crypto::UserHash;
use crate::inbound::FollowUp;
use crate::pipeline::{TurnContext, TurnEvent, TurnOutcome, TurnSink, Typing};

/// The outlet's follow-up hook: each late result is admitted on the turn tracker. Weak:
/// the outlet lives inside the deps it would otherwise keep alive.
pub fn hook(deps: Weak<TurnDeps>) -> FollowUps {
    Box::new(move |ctx, text| {
        if let Some(deps) = deps.upgrade() {
            let tasks = deps.tasks.clone();
            tasks.spawn(admit(deps, ctx.clone(), text));
        }
    })
}

/// Admits the follow-up for `ctx`'s chat: runs it now when the chat is free, else it
/// waits in the chat's queue for the running turn to finish.
pub async fn admit(deps: Arc<TurnDeps>, ctx: TurnContext, text: Arc<str>) {
    let follow_up = FollowUp::of(&ctx, &text);
    let admitted = deps
        .turns
        .admit_follow_up(&ctx.user, &ctx.chat_id, follow_up, &deps.shutdown)
        .await;
    match admitted {
        Ok(Admission::Start(ticket)) => super::spawn(deps, ctx.user, ctx.chat_id, *ticket),
        Ok(Admission::Queued { .. } | Admission::Running { .. }) => {}
        Ok(Admission::QueueFull | Admission::Foreign) => {
            tracing::warn!(chat_id = %ctx.chat_id, "no room for a skill's follow-up; it is dropped");
        }
        Err(e) => tracing::warn!(error = %e, "cannot admit a skill's follow-up"),
    }
}

/// Delivers the ticket's follow-ups, each a message of its own, oldest first.
pub(super) async fn deliver(
    deps: &Arc<TurnDeps>,
    user: &UserId,
    chat: &ChatId,
    ticket: &TurnTicket,
) {
    let owner = UserHash::of(user);
    for f in ticket.follow_ups.iter() {
        let ctx = TurnContext {
            user: user.clone(),
            chat_id: chat.clone(),
            task_id: f.task_id.clone(),
            user_message_id: f.user_message_id.clone(),
            model_name: f.model_name.clone(),
            category: f.category.clone(),
            connected_accounts: Vec::new(),
            privacy: None,
        };
        let key = TurnKey {
            owner: owner.clone(),
            chat: chat.clone(),
            task: f.task_id.clone(),
            message: f.user_message_id.clone(),
            generation: ticket.lease.generation,
            lease: None,
        };
        let writer = TurnWriter::new(deps.outlet.clone(), key);
        let text: Arc<str> = Arc::from(f.text.as_str());
        writer.emit(&ctx, TurnEvent::Typing(Typing::default()));
        writer.emit(&ctx, TurnEvent::Chunk { text: text.clone() });
        if !ticket.abandoned() {
            crate::history::remember(&deps.ai_cache, &owner, &ctx, &text, false).await;
        }
        writer.emit(
            &ctx,
            TurnEvent::Finished(TurnOutcome {
                text,
                ..TurnOutcome::default()
            }),
        );
    }
}
