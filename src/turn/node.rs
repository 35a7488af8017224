//! This node's side of the bus: frames from other nodes go to this node's devices, and
//! requests to act on what runs here (a cancel for a turn or a skill) reach it.

use std::collections::HashMap;
use std::sync::Arc;

use chatd_protocol::{ChatId, TaskId};

use tokio::sync::mpsc;

use super::deps::TurnDeps;
use super::log::{self, Replay};
use super::store::CancelReason;
use crate::crypto::UserHash;
use crate::delivery::bus::Received;
use crate::delivery::{Device, Inbound, NodeControl};

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
            Received::Reconnected => {
                tracing::info!("bus reconnected; devices here catch up from the turn logs");
                catch_up(&deps);
            }
        }
    }
}

/// After a bus outage: every device here holds the live frames of the turn it follows and
/// gets what it missed of it from the turn's log (frames published while this node's
/// subscription was down never arrive), in order, then the held ones. The holds start
/// before the next publication is handled, so no live frame overtakes the replay.
fn catch_up(deps: &Arc<TurnDeps>) {
    let followed: Vec<_> = (deps.outlet.delivery.hub.everyone().into_iter())
        .filter_map(|device| {
            let (task, chat) = device.followed_turn()?;
            device.begin_catch_up(&task);
            Some((device, task, chat))
        })
        .collect();
    replay_missed(deps, followed);
}

/// Devices that hold the live frames of a turn get what they missed of it from the turn's
/// log, in order, then the held frames. A frame from another node is published after its
/// log append, so the log read here holds every frame up to the newest one held.
fn replay_missed(deps: &Arc<TurnDeps>, followed: Vec<(Arc<Device>, TaskId, ChatId)>) {
    if followed.is_empty() {
        return;
    }
    let deps = deps.clone();
    deps.tasks.clone().spawn(async move {
        let mut read: HashMap<TaskId, Option<Replay>> = HashMap::new();
        for (device, task, chat) in followed {
            if !read.contains_key(&task) {
                let log = read_log(&deps, &device.user_hash, &chat, &task).await;
                read.insert(task.clone(), log.and_then(|l| log::replay(&l, 0)));
            }
            if let Some(Some(replay)) = read.get(&task) {
                for (index, frame) in &replay.frames {
                    device.replay(&task, *index, frame);
                }
            }
            device.end_resume(&task);
        }
    });
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
