//! This node's side of the bus: frames from other nodes go to this node's devices, and
//! requests to act on what runs here (a cancel for a turn or a skill) reach it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chatd_protocol::{ChatId, TaskId};

use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::deps::TurnDeps;
use super::log;
use super::rejoin;
use super::store::patience::patiently;
use super::store::{CancelReason, NotedTurn};
use super::writer::AnsweredTurn;
use crate::crypto::UserHash;
use crate::delivery::bus::Received;
use crate::delivery::{Device, Inbound, NodeControl};

/// Turns noted this long before an outage began are caught up after it too (a turn is
/// noted when it begins; one that began before the outage may end during it).
const CATCH_UP_MARGIN: Duration = Duration::from_secs(60);
/// When a node back from a bus outage looks for the turns its devices missed again.
const CATCH_UP_AGAIN: Duration = Duration::from_secs(2);
/// A user's newest noted turns a device catches up on after an outage, at most.
const CATCH_UP_TURNS: usize = 4;
/// Users whose recent turns (and then turns whose logs) are read at once after an outage.
const CATCH_UP_READS: usize = 32;
/// Times a turn's log that is lost, or has no end while the turn no longer runs, is read
/// again after an outage, and the pause before each.
const LOST_LOG_READS: usize = 6;
const LOST_LOG_WAIT: Duration = Duration::from_millis(500);

/// Handles what the bus delivers until shutdown or until the bus is gone.
pub async fn run(deps: Arc<TurnDeps>, mut rx: mpsc::Receiver<Received>) {
    loop {
        let received = tokio::select! {
            () = deps.shutdown.cancelled() => return,
            r = rx.recv() => match r {
                Some(r) => r,
                None => return,
            },
        };
        match received {
            Received::User { user, payload } => {
                match deps.outlet.delivery.receive(&user, &payload).await {
                    Inbound::Done => {}
                    // Sealed with the user's key: the request is the user's own.
                    Inbound::CancelSkill(skill) => {
                        deps.skills.cancels().cancel_for(&user, &skill);
                    }
                    Inbound::Missed {
                        task,
                        chat,
                        devices,
                    } => {
                        let followed = devices.into_iter().map(|d| (d, task.clone(), chat.clone()));
                        replay_missed(&deps, followed.collect());
                    }
                }
            }
            Received::Node { payload } => match serde_json::from_slice(&payload) {
                Ok(NodeControl::CancelTask { task }) => {
                    deps.turns.cancel_local(&task, CancelReason::Revoked);
                }
                Err(e) => tracing::warn!(error = %e, "unreadable control message"),
            },
            Received::Reconnected { down_since_ms } => {
                // The store may have restarted and lost the logs of turns that ended here
                // (and the keys that open them).
                deps.outlet.log.store_may_have_restarted();
                let refill = deps.clone();
                deps.tasks.spawn(async move { refill_ended(&refill).await });
                catch_up(&deps, down_since_ms).await;
                // The store may have come back without its data: the nodes that wrote
                // the turns note them again (and write their logs back) once their own
                // bus is back, a moment later. A second look finds those.
                let again = deps.clone();
                deps.tasks.spawn(async move {
                    tokio::select! {
                        () = again.shutdown.cancelled() => {}
                        () = tokio::time::sleep(CATCH_UP_AGAIN) => {
                            catch_up(&again, down_since_ms).await;
                        }
                    }
                });
            }
        }
    }
}

/// Writes back the logs of turns that ended here and that the store lost, and the record
/// that those turns answered their messages (a copy of one then gets that answer, not a
/// second: chaos runs AE and AF, where the copy came after Redis forgot a `node_lost`).
async fn refill_ended(deps: &TurnDeps) {
    let settle = |t: AnsweredTurn| async move {
        let cache = &deps.ai_cache;
        let settled = cache.message_answered_unless_known(&t.owner, &t.chat, &t.message, &t.task);
        if let Err(e) = settled.await {
            tracing::warn!(error = %e, "cannot settle the message of a turn written back");
        }
    };
    deps.outlet.refill_ended(settle).await;
}

/// After a bus outage: every device here holds the live frames of the turns it may have
/// missed frames of and gets them from the turn's log, in order, then the held ones
/// (frames published while this node's subscription was down never arrive). Those turns
/// are the one it follows and its user's turns noted since shortly before the outage
/// (ones that began and ended meanwhile, which it had no frame of). The holds start
/// before the next publication is handled, so no live frame overtakes the replay.
async fn catch_up(deps: &Arc<TurnDeps>, down_since_ms: i64) {
    let devices = deps.outlet.delivery.hub.everyone();
    let users: HashSet<UserHash> = devices.iter().map(|d| d.user_hash.clone()).collect();
    let since = down_since_ms - CATCH_UP_MARGIN.as_millis() as i64;
    let store = deps.outlet.log.store();
    let recent: HashMap<UserHash, Vec<NotedTurn>> = futures_util::stream::iter(users)
        .map(|user| async move {
            // Read again while the store's connection comes back: the bus can be back first,
            // right after a Redis restart (one catch-up read none).
            let turns = match patiently(None, || store.recent_turns(&user, since)).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list a user's recent turns to catch up");
                    Vec::new()
                }
            };
            (user, turns)
        })
        .buffer_unordered(CATCH_UP_READS)
        .collect()
        .await;
    let mut followed = Vec::new();
    let noted_turns: usize = recent.values().map(Vec::len).sum();
    let device_count = devices.len();
    for device in devices {
        let mut turns: Vec<(TaskId, ChatId)> = device.followed_turn().into_iter().collect();
        // A device that connected since the outage began missed nothing on this node.
        let noted = match device.connected_ms < down_since_ms {
            true => recent.get(&device.user_hash).map(Vec::as_slice),
            false => None,
        };
        // A turn that began before the device connected is caught up only when the device
        // follows it (it had frames of it): a new connection does not get old turns again.
        let could_miss = |n: &&NotedTurn| n.at_ms >= device.connected_ms || device.follows(&n.task);
        let noted = noted.unwrap_or_default().iter().rev().filter(could_miss);
        for n in noted.take(CATCH_UP_TURNS) {
            if !turns.iter().any(|(t, _)| *t == n.task) {
                turns.push((n.task.clone(), n.chat.clone()));
            }
        }
        for (task, chat) in turns {
            if device.begin_catch_up(&task) {
                followed.push((device.clone(), task, chat));
            }
        }
    }
    tracing::info!(
        devices = device_count,
        noted_turns,
        catch_ups = followed.len(),
        "bus reconnected; devices here catch up from the turn logs"
    );
    replay_missed(deps, followed);
}

/// Devices that hold the live frames of a turn get what they missed of it from the turn's
/// log, in order, then the held frames. A frame from another node is published after its
/// log append, so the log read here holds every frame up to the newest one held. Each turn
/// is read once for all its devices, the turns at once.
fn replay_missed(deps: &Arc<TurnDeps>, followed: Vec<(Arc<Device>, TaskId, ChatId)>) {
    if followed.is_empty() {
        return;
    }
    let mut turns: HashMap<TaskId, (ChatId, Vec<Arc<Device>>)> = HashMap::new();
    for (device, task, chat) in followed {
        turns
            .entry(task)
            .or_insert_with(|| (chat, Vec::new()))
            .1
            .push(device);
    }
    let deps = deps.clone();
    deps.tasks.clone().spawn(async move {
        let caught_up: Vec<Option<usize>> = futures_util::stream::iter(turns)
            .map(|(task, (chat, devices))| catch_up_turn(&deps, task, chat, devices))
            .buffer_unordered(CATCH_UP_READS)
            .collect()
            .await;
        let replayed: usize = caught_up.iter().flatten().sum();
        let unread = caught_up.iter().filter(|r| r.is_none()).count();
        tracing::info!(replayed, unread, "caught up from the turn logs");
    });
}

/// One turn's catch-up for its devices here: the frames replayed to each (`None`: no log).
/// A log that is not there, or has no end while its turn no longer runs, is read again a
/// few times: the node that wrote it (or that ends it as lost) may not have put it back
/// yet after the store restarted. (Still none, nothing is said: a turn whose lease has
/// expired may yet be taken over and ended, and a device that resumes it is told.)
async fn catch_up_turn(
    deps: &TurnDeps,
    task: TaskId,
    chat: ChatId,
    devices: Vec<Arc<Device>>,
) -> Option<usize> {
    let first = devices.first()?;
    let (owner, user) = (first.user_hash.clone(), first.user.clone());
    let mut read = read_log(deps, &owner, &chat, &task).await;
    for _ in 0..LOST_LOG_READS {
        // A turn that runs (its lease is live) sends its live frames to the devices.
        let runs = || async { deps.turns.active_task(&user, &chat).await == Some(task.clone()) };
        if read.as_ref().is_some_and(|l| l.ended) || runs().await {
            break;
        }
        tokio::time::sleep(LOST_LOG_WAIT).await;
        read = read_log(deps, &owner, &chat, &task).await;
    }
    let frames = read.map(|l| rejoin::catch_up_frames(&l.entries));
    let per_device = devices.iter().map(|device| async {
        for (index, frame) in frames.iter().flatten() {
            device.replay(&task, *index, frame);
        }
        let again = || read_log(deps, &device.user_hash, &chat, &task);
        rejoin::release_when_whole(device, &task, again).await;
    });
    futures_util::future::join_all(per_device).await;
    frames.map(|f| f.len() * devices.len())
}

/// The turn's log (read again while the store's connection comes back after the outage).
async fn read_log(
    deps: &TurnDeps,
    owner: &UserHash,
    chat: &ChatId,
    task: &TaskId,
) -> Option<log::Logged> {
    match deps.outlet.log.read_patiently(owner, chat, task).await {
        Ok(read) => read,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a turn log to catch up");
            None
        }
    }
}
