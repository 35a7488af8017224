//! Runs a chat's turns on the turn tracker, one after the other while messages wait behind
//! them, keeping each turn's lease; one turn is the straight line of [`super::stage`]:
//! prepare → plan → answer → finish.

use std::sync::Arc;

use chatd_protocol::ChatId;

use super::TurnTicket;
use super::deps::TurnDeps;
use super::stage::{Ask, Start, Turn, TurnTools};
use crate::auth::UserId;
use crate::crypto::UserHash;

/// Runs the chat's turn and then those queued behind it, on the turn tracker.
pub fn spawn(deps: Arc<TurnDeps>, user: UserId, chat: ChatId, ticket: TurnTicket) {
    let tracker = deps.tasks.clone();
    tracker.spawn(run_turns(deps, user, chat, ticket));
}

async fn run_turns(deps: Arc<TurnDeps>, user: UserId, chat: ChatId, mut ticket: TurnTicket) {
    // While a turn of the user runs here, this node hears the user's channel (cancel_skill).
    let owner = UserHash::of(&user);
    deps.outlet.delivery.hold(&owner).await;
    loop {
        // The lease is renewed while the turn runs; a cancel requested on another node
        // arrives with a renewal.
        let ask = tokio::select! {
            ask = run_ticket(&deps, &user, &chat, &ticket) => ask,
            () = keep_lease(&deps, &ticket) => None,
        };
        // No more renewals: the turn's writer no longer waits for them.
        ticket.lease_clock.close();
        let next = deps.turns.finish(&ticket, &deps.shutdown).await;
        // The last word of a turn that ends unanswered (a request for the history, a typed
        // error) goes out once the chat is free: the client's re-send then starts a turn (or
        // waits behind the next), never meets this one still running.
        if let Some(ask) = ask {
            ask.send().await;
        }
        match next {
            Some(next) => ticket = next,
            None => break,
        }
    }
    deps.outlet.delivery.release(&owner).await;
}

/// The ticket's follow-up messages, then the answer to its messages (or the request for
/// what the answer needs first, to send once the chat is free).
async fn run_ticket(
    deps: &Arc<TurnDeps>,
    user: &UserId,
    chat: &ChatId,
    ticket: &TurnTicket,
) -> Option<Ask> {
    super::follow_up::deliver(deps, user, chat, ticket).await;
    if ticket.inbound.is_empty() {
        return None;
    }
    run_one(deps, user, chat, ticket).await
}

/// Renews the ticket's lease every third of its length until the turn ends (returns only
/// when the lease is lost and the turn was told to stop; the turn then ends on its own).
async fn keep_lease(deps: &TurnDeps, ticket: &TurnTicket) {
    let every = deps.turns.lease / 3;
    loop {
        tokio::time::sleep(every).await;
        if !deps.turns.renew(ticket).await {
            std::future::pending::<()>().await;
        }
    }
}

#[tracing::instrument(skip_all, fields(chat_id = %chat, task_id = %ticket.task_id))]
async fn run_one(
    deps: &Arc<TurnDeps>,
    user: &UserId,
    chat: &ChatId,
    ticket: &TurnTicket,
) -> Option<Ask> {
    let turn = Turn::new(deps, user, chat, ticket);
    // The chat's speculation record is read while the turn prepares.
    let record = turn.speculation_record();
    // So are the chat's summary and the user's other recent ones.
    let summaries = turn.read_summaries();
    let mut ready = match turn.prepare().await {
        Start::Ready(ready) => ready,
        Start::Ask(ask) => return Some(ask),
        Start::Ended => return None,
    };
    let recent = turn.carry_summaries(summaries, &mut ready).await;
    let tools = TurnTools::new(&turn, &ready).await;
    let tool_set = tools.set(&turn);
    let plan = turn.plan(&ready, &recent, &tools, &tool_set, record).await;
    let answered = turn.answer(&ready, plan, &tool_set).await;
    turn.finish(&ready, answered).await;
    None
}
