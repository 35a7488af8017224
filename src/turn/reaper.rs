//! Turns whose node was lost: every node looks, once a second, for leases whose node
//! stopped renewing them ([`TurnStore::take_over_expired`] gives each to exactly one node,
//! fencing the old node's writes). The taker ends the lost turn for every device with a
//! final `ai_message_update` holding the text logged so far and `error_code: node_lost`
//! (unless its log shows it had ended or holds the final answer), then runs the messages
//! queued behind it.

use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{AiMessageUpdate, ServerMessage};

use super::deps::TurnDeps;
use super::log::{self, Logged};
use super::store::Lease;
use super::writer::{TurnKey, TurnWriter};
use crate::delivery::frames::{Head, LostTurn};

/// Leases taken over in one look.
const BATCH: usize = 16;
/// How often a taker looks for a log its node puts back (see [`lost_log`]).
const PUT_BACK_LOOK: Duration = Duration::from_millis(250);

/// Looks for lost turns every `every` until shutdown.
pub async fn run(deps: Arc<TurnDeps>, every: Duration) {
    loop {
        tokio::select! {
            () = deps.shutdown.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let node = deps.turns.node().clone();
        let lost = deps
            .turns
            .store()
            .take_over_expired(&node, deps.turns.lease, BATCH)
            .await;
        match lost {
            Ok(leases) => {
                for lease in leases {
                    deps.tasks.spawn(end_lost(deps.clone(), lease));
                }
            }
            Err(e) => tracing::debug!(error = %e, "cannot look for lost turns"),
        }
    }
}

/// Ends one lost turn and hands its chat to the queue.
async fn end_lost(deps: Arc<TurnDeps>, lease: Lease) {
    tracing::warn!(chat_id = %lease.chat, task_id = %lease.task, node = %lease.node, "taking over a lost turn");
    deps.metrics.lost_turns.inc();
    let deps = &deps;
    let Some(logged) = lost_log(deps, &lease).await else {
        return;
    };
    // The message got its answer (the one logged, or `node_lost`): a copy sent after the
    // ending is a duplicate, not a message to answer again. Settled before the ending is
    // written, so no copy sent on seeing it starts a second turn.
    let cache = &deps.ai_cache;
    if let Err(e) = cache
        .message_answered(&lease.owner, &lease.chat, &lease.message, &lease.task)
        .await
    {
        tracing::warn!(error = %e, "cannot settle a lost turn's message");
    }
    // A log that ended tells every device how the turn ended. One that holds the final
    // update (Redis came back from a snapshot taken before the turn let its lease go, or
    // its node lost the lease right after that frame) gets the rest of that ending, for
    // the devices not showing the chat; any other, `node_lost`.
    if !logged.ended {
        match final_update(&logged) {
            Some((index, last)) => write_rest_of_ending(deps, &lease, &logged, (index, last)),
            None => write_node_lost(deps, &lease, &logged),
        }
    }
    if let Some((user, ticket)) = deps.turns.finish_lost(&lease, &deps.shutdown).await {
        super::spawn(deps.clone(), user, lease.chat.clone(), ticket);
    }
}

/// The lost turn's log (empty when there is none). `None` when it cannot be read: ending
/// the turn from an empty log would number the ending before frames the devices had (they
/// would drop it), so the lease taken is not renewed and, once it expires, the turn is
/// taken over again.
///
/// A store that holds no log may have lost it: Redis came back from a snapshot that held
/// the lease but not the log, which the node that ended the turn puts back once its bus
/// reconnects (chaos run AG: a taker that ended such a turn with `node_lost` at sequence 1
/// fenced that write-back off, and devices that had missed the answer got `node_lost`
/// instead). So the taker holds the lease and looks again, for up to a lease's length,
/// until the log is back and ended. A turn logs its first frame once it has read its
/// history, so a turn lost before that is rare; it ends after the wait.
async fn lost_log(deps: &TurnDeps, lease: &Lease) -> Option<Logged> {
    let read = || {
        let log = &deps.outlet.log;
        log.read_patiently(&lease.owner, &lease.chat, &lease.task)
    };
    let mut logged = read().await;
    if matches!(logged, Ok(None)) {
        let store = deps.turns.store();
        let waited = tokio::time::Instant::now();
        while waited.elapsed() < deps.turns.lease && !matches!(&logged, Ok(Some(l)) if l.ended) {
            tokio::select! {
                () = deps.shutdown.cancelled() => return None,
                () = tokio::time::sleep(PUT_BACK_LOOK) => {}
            }
            if let Err(e) = store.renew(lease, deps.turns.lease).await {
                tracing::debug!(error = %e, "cannot hold a lost turn while its log may come back");
            }
            logged = read().await;
        }
    }
    match logged {
        Ok(logged) => Some(logged.unwrap_or_default()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a lost turn's log; it is taken over again later");
            None
        }
    }
}

/// The answer's final `ai_message_update` and its index, when the log holds it.
fn final_update(logged: &Logged) -> Option<(u64, AiMessageUpdate)> {
    logged
        .entries
        .iter()
        .find_map(|(index, entry)| match entry {
            log::LogEntry::Frame {
                frame: ServerMessage::AiMessageUpdate(u),
                ..
            } if u.is_final_chunk => Some((*index, u.clone())),
            _ => None,
        })
}

/// The frames that follow the final update in a turn's ending, those the log lacks after it
/// (chaos run AH: a node cut off from Redis logged a cancelled turn's final update, then
/// lost its lease; devices not showing the chat never heard that the turn had ended).
fn write_rest_of_ending(
    deps: &Arc<TurnDeps>,
    lease: &Lease,
    logged: &Logged,
    (index, last): (u64, AiMessageUpdate),
) {
    let last_index = logged.entries.last().map_or(index, |(i, _)| *i);
    let after: Vec<&ServerMessage> = (logged.entries.iter())
        .filter(|(i, _)| *i > index)
        .filter_map(|(_, entry)| match entry {
            log::LogEntry::Frame { frame, .. } => Some(frame),
            _ => None,
        })
        .collect();
    let missing = |msg: &ServerMessage| {
        let kind = std::mem::discriminant(msg);
        !after.iter().any(|had| std::mem::discriminant(*had) == kind)
    };
    tracing::info!(
        last_index,
        "ending a lost turn after its logged final update"
    );
    let sequence = last.sequence;
    let (outlet, key) = (deps.outlet.clone(), key_of(lease));
    let writer = TurnWriter::continuing(outlet, key, (last_index, sequence), &logged.entries);
    writer.end_after_final(&last, missing);
}

/// The key a taker writes a lost turn's ending under.
fn key_of(lease: &Lease) -> TurnKey {
    TurnKey {
        owner: lease.owner.clone(),
        chat: lease.chat.clone(),
        task: lease.task.clone(),
        message: lease.message.clone(),
        generation: lease.generation,
        lease: None,
    }
}

/// The lost turn's last frames, continuing its log under the taken-over generation.
fn write_node_lost(deps: &Arc<TurnDeps>, lease: &Lease, logged: &Logged) {
    let (latest, last_index) = log::latest(logged);
    let mut typing = None;
    let mut update = None;
    for (_, frame) in latest {
        match frame {
            ServerMessage::AiTypingStarted(t) => typing = Some(t),
            ServerMessage::AiMessageUpdate(u) => update = Some(u),
            _ => {}
        }
    }
    let sequence = update.as_ref().map_or(0, |u| u.sequence);
    // Where the ending goes: a device that had frames past these drops it (chaos: turns a
    // device never saw end; the next look at them starts here).
    let entries = logged.entries.len();
    tracing::info!(
        entries,
        last_index,
        sequence,
        "ending a lost turn after its logged frames"
    );
    let (outlet, key) = (deps.outlet.clone(), key_of(lease));
    let writer = TurnWriter::continuing(outlet, key, (last_index, sequence), &logged.entries);
    writer.end_lost(LostTurn {
        head: Head {
            chat_id: lease.chat.clone(),
            task_id: lease.task.clone(),
            user_message_id: lease.message.clone(),
            model_name: typing.as_ref().map(|t| t.model_name.clone()),
            category: typing.and_then(|t| t.category),
        },
        text: update.map(|u| u.full_content_so_far).unwrap_or_default(),
    });
}
