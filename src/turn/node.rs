//! This node's side of the bus: frames from other nodes go to this node's devices, and
//! requests to act on what runs here (a cancel for a turn or a skill) reach it.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::deps::TurnDeps;
use super::store::CancelReason;
use crate::delivery::bus::Received;
use crate::delivery::{Envelope, NodeControl};

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
                if let Some(Envelope::CancelSkill { skill_task_id, .. }) =
                    deps.outlet.delivery.receive(&user, &payload).await
                {
                    // Sealed with the user's key: the request is the user's own.
                    deps.skills.cancels().cancel_for(&user, &skill_task_id);
                }
            }
            Received::Node { payload } => match serde_json::from_slice(&payload) {
                Ok(NodeControl::CancelTask { task }) => {
                    deps.turns.cancel_local(&task, CancelReason::Revoked);
                }
                Err(e) => tracing::warn!(error = %e, "unreadable control message"),
            },
            Received::Reconnected => {
                tracing::info!(
                    "bus reconnected; devices that missed frames resume from the turn logs"
                );
            }
        }
    }
}
