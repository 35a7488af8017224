//! One turn as four stages over one context, in order: [`prepare`] (the history, or ask the
//! client for it, refuse it, or let a waiting routine take the message), [`plan`] (the
//! turn's tools, preprocessing beside the speculative main call, settings/memories recall,
//! the steps and typing frames), [`answer`] (the streamed answer or the refusal, the rest of
//! preprocessing beside it, link repair) and [`finish`] (the answer sealed into the AI
//! cache, the final frame, the metrics, postprocessing). Every frame goes through the
//! turn's writer.

mod answer;
mod finish;
mod plan;
mod prepare;
mod privacy;
mod speculate;
mod steps;
mod summaries;
mod tools;

use std::sync::Arc;
use std::time::Instant;

use chatd_protocol::ChatId;

use super::TurnTicket;
use super::deps::TurnDeps;
use super::writer::{TurnKey, TurnWriter};
use crate::auth::UserId;
use crate::crypto::UserHash;
use crate::delivery::Audience;

pub(super) use prepare::{Ask, Start};
pub(super) use tools::TurnTools;

/// One turn's context: who, where, which ticket, its writer, when it started.
pub(super) struct Turn<'a> {
    pub(super) deps: &'a Arc<TurnDeps>,
    pub(super) user: &'a UserId,
    pub(super) owner: UserHash,
    pub(super) chat: &'a ChatId,
    pub(super) ticket: &'a TurnTicket,
    pub(super) writer: Arc<TurnWriter>,
    pub(super) started: Instant,
}

impl<'a> Turn<'a> {
    pub(super) fn new(
        deps: &'a Arc<TurnDeps>,
        user: &'a UserId,
        chat: &'a ChatId,
        ticket: &'a TurnTicket,
    ) -> Self {
        let started = Instant::now();
        let owner = UserHash::of(user);
        let key = TurnKey {
            owner: owner.clone(),
            chat: chat.clone(),
            task: ticket.task_id.clone(),
            message: ticket.user_message_id.clone(),
            generation: ticket.lease.generation,
            lease: Some(ticket.lease_clock.clone()),
        };
        let writer = TurnWriter::new(deps.outlet.clone(), key);
        writer.time_first_chunk(started);
        Self {
            deps,
            user,
            owner,
            chat,
            ticket,
            writer,
            started,
        }
    }

    /// The devices that sent the turn's messages.
    fn requesters(&self) -> Audience {
        Audience::Only(self.ticket.requesters.clone())
    }

    /// Records what became of the ticket's messages (see [`crate::cache::ai::MessageSeen`]).
    pub(super) async fn settle(&self, settled: Settled) {
        let cache = &self.deps.ai_cache;
        let (owner, chat, task) = (&self.owner, self.chat, &self.ticket.task_id);
        for i in self.ticket.inbound.iter() {
            let id = i.message_id();
            let settled = match settled {
                Settled::Answered => cache.message_answered(owner, chat, id, task).await,
                Settled::AwaitingHistory => cache.message_awaits_history(owner, chat, id).await,
                Settled::Unanswered => cache.release_message(owner, chat, id).await,
            };
            if let Err(e) = settled {
                tracing::warn!(error = %e, "cannot settle a message id");
            }
        }
    }
}

/// What became of a turn's messages.
#[derive(Clone, Copy)]
pub(super) enum Settled {
    /// A copy sent again is a duplicate.
    Answered,
    /// The copy with the history is expected.
    AwaitingHistory,
    /// No answer: the user may send them again.
    Unanswered,
}
