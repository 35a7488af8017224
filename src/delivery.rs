//! Who gets a frame: the devices on this node ([`hub`], through each socket's bounded
//! [`outbox`]) and, in cluster mode, the other nodes through the [`bus`]. [`frames`] is
//! the one mapping of turn events to wire frames.
//!
//! A frame for a user goes to this node's devices at once and, sealed with the user's
//! server key, to the user's channel on the bus; every node holding a device of the user
//! delivers it to its own devices (the sender drops its own copy). A node listens to a
//! user's channel while it holds a device of that user. Turn frames carry their log index,
//! so a device never gets one twice; the bus is at most once, and what a device must not
//! miss it gets from the turn's log (`resume_ai_task`).

pub mod bus;
pub mod frames;
pub mod hub;
pub mod outbox;

use std::collections::HashMap;
use std::sync::Arc;

use chatd_protocol::{ChatId, ServerMessage, SkillTaskId, TaskId};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

pub use hub::{Audience, ConnectionId, Device, Hub};

use crate::crypto::{Keyring, Purpose, UserHash};
use crate::ids::NodeId;
use bus::{Bus, BusError};

/// What travels on a user's channel.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Envelope {
    /// A frame for the user's devices; `turn` is `(task, log index)` for a turn's frames.
    Frame {
        origin: NodeId,
        audience: Audience,
        turn: Option<(TaskId, u64)>,
        frame: Box<ServerMessage>,
        /// A turn frame its node appended again to a log the store lost (for devices that
        /// follow the turn only).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        again: bool,
    },
    /// `cancel_skill` from a device on `origin`, for the node that runs the skill.
    CancelSkill {
        origin: NodeId,
        skill_task_id: SkillTaskId,
    },
}

/// What a publication from another node asks of the caller.
pub enum Inbound {
    /// Nothing (delivered here, or not for this node).
    Done,
    /// A `cancel_skill` for the skill named, from one of the user's devices.
    CancelSkill(SkillTaskId),
    /// Devices here that missed frames of `task` (in `chat`) before this one: they hold
    /// the turn's frames until a catch-up from the turn's log ends with
    /// [`Device::end_resume`].
    Missed {
        task: TaskId,
        chat: ChatId,
        devices: Vec<Arc<Device>>,
    },
}

/// What travels on a node's own channel (ids only, nothing to seal).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum NodeControl {
    /// Stop this turn (its owner was checked by the sender).
    CancelTask { task: TaskId },
}

/// Publications waiting for the publisher task; beyond this, frames for other nodes are
/// dropped (at most once, like the bus itself) and counted in the log.
const PUBLISH_QUEUE: usize = 4096;

/// This node's link to the others.
struct Link {
    bus: Arc<dyn Bus>,
    node: NodeId,
    keyring: Arc<Keyring>,
    queue: mpsc::Sender<(UserHash, Envelope)>,
}

pub struct Delivery {
    pub hub: Arc<Hub>,
    link: Option<Link>,
    /// Why this node listens to each user's channel: devices here plus turns running
    /// here. A tokio Mutex, held across the (un)subscribe call, so a subscription and an
    /// unsubscription of one user never overtake each other.
    interest: tokio::sync::Mutex<HashMap<UserHash, usize>>,
}

impl Delivery {
    /// Delivery to this node's devices only (embedded mode).
    pub fn local(hub: Arc<Hub>) -> Self {
        Self {
            hub,
            link: None,
            interest: Default::default(),
        }
    }

    /// Delivery over `bus` too. Returns the publisher loop, which the caller runs on an
    /// owned task (it ends when the `Delivery` is dropped).
    pub fn clustered(
        hub: Arc<Hub>,
        bus: Arc<dyn Bus>,
        node: NodeId,
        keyring: Arc<Keyring>,
        stop: tokio_util::sync::CancellationToken,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (queue, rx) = mpsc::channel(PUBLISH_QUEUE);
        let publisher = publish_loop(bus.clone(), keyring.clone(), rx, stop);
        let link = Link {
            bus,
            node,
            keyring,
            queue,
        };
        (
            Self {
                hub,
                link: Some(link),
                interest: Default::default(),
            },
            publisher,
        )
    }

    /// Whether other nodes get frames (cluster mode).
    pub fn has_peers(&self) -> bool {
        self.link.is_some()
    }

    pub fn bus(&self) -> Option<&Arc<dyn Bus>> {
        self.link.as_ref().map(|l| &l.bus)
    }

    /// Sends a frame to the user's devices on every node.
    pub fn send(&self, user: &UserHash, audience: Audience, msg: &ServerMessage) {
        self.hub.send(user, &audience, msg);
        if let Some(link) = &self.link {
            link.enqueue(
                user,
                Envelope::Frame {
                    origin: link.node.clone(),
                    audience,
                    turn: None,
                    frame: Box::new(msg.clone()),
                    again: false,
                },
            );
        }
    }

    /// Publishes a turn's frame to the other nodes (after it is in the turn's log);
    /// `again` when it was appended again to a log the store lost after the turn ended.
    pub async fn publish_turn(
        &self,
        user: &UserHash,
        audience: Audience,
        (task, index): (&TaskId, u64),
        msg: ServerMessage,
        again: bool,
    ) {
        let Some(link) = &self.link else {
            return;
        };
        let envelope = Envelope::Frame {
            origin: link.node.clone(),
            audience,
            turn: Some((task.clone(), index)),
            frame: Box::new(msg),
            again,
        };
        if let Err(e) = publish(&link.bus, &link.keyring, user, &envelope).await {
            tracing::debug!(error = %e, "a turn frame did not reach the bus");
        }
    }

    /// Asks the node that runs `skill` (some node holding a turn of the user) to stop it.
    pub fn cancel_skill_elsewhere(&self, user: &UserHash, skill: &SkillTaskId) {
        if let Some(link) = &self.link {
            link.enqueue(
                user,
                Envelope::CancelSkill {
                    origin: link.node.clone(),
                    skill_task_id: skill.clone(),
                },
            );
        }
    }

    /// Sends a control message to one node.
    pub async fn control(&self, node: &NodeId, msg: &NodeControl) -> Result<(), BusError> {
        let Some(link) = &self.link else {
            return Ok(());
        };
        let payload = serde_json::to_vec(msg).unwrap_or_default();
        link.bus.publish_node(node, payload).await
    }

    /// Registers a device (this node then listens to its user's channel).
    pub async fn register(&self, device: Arc<Device>) {
        let user = device.user_hash.clone();
        self.hub.register(device);
        self.hold(&user).await;
    }

    pub async fn unregister(&self, user: &UserHash, conn: ConnectionId) {
        self.hub.unregister(user, conn);
        self.release(user).await;
    }

    /// One more reason to listen to the user's channel (a device, or a turn of the user
    /// running here that must hear `cancel_skill`); the first subscribes.
    pub async fn hold(&self, user: &UserHash) {
        let Some(link) = &self.link else {
            return;
        };
        let mut interest = self.interest.lock().await;
        let count = interest.entry(user.clone()).or_default();
        *count += 1;
        if *count == 1
            && let Err(e) = link.bus.subscribe(user).await
        {
            tracing::warn!(error = %e, "cannot subscribe to a user's channel");
        }
    }

    /// One reason less; the last unsubscribes.
    pub async fn release(&self, user: &UserHash) {
        let Some(link) = &self.link else {
            return;
        };
        let mut interest = self.interest.lock().await;
        let Some(count) = interest.get_mut(user) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            interest.remove(user);
            if let Err(e) = link.bus.unsubscribe(user).await {
                tracing::debug!(error = %e, "cannot unsubscribe from a user's channel");
            }
        }
    }

    /// A publication from the user's channel: frames go to this node's devices; what the
    /// caller must do comes back. This node's own are dropped.
    pub async fn receive(&self, user: &UserHash, payload: &[u8]) -> Inbound {
        self.open(user, payload).await.unwrap_or(Inbound::Done)
    }

    async fn open(&self, user: &UserHash, payload: &[u8]) -> Option<Inbound> {
        let link = self.link.as_ref()?;
        let plain = match link
            .keyring
            .open(user, "bus", Purpose::BusFrame, payload)
            .await
        {
            Ok(plain) => plain,
            Err(e) => {
                tracing::warn!(error = %e, "a frame from another node does not open; dropped");
                return None;
            }
        };
        let envelope: Envelope = serde_json::from_slice(&plain).ok()?;
        match &envelope {
            Envelope::Frame { origin, .. } | Envelope::CancelSkill { origin, .. }
                if origin == &link.node =>
            {
                None
            }
            Envelope::Frame {
                audience,
                turn: Some((task, index)),
                frame,
                again,
                ..
            } => {
                let encoded = outbox::EncodedFrame::new(frame);
                let turn = (task, *index);
                let devices = (self.hub).send_turn_minding_gaps(
                    user,
                    audience,
                    turn,
                    (encoded, frame),
                    *again,
                );
                let chat = match &**frame {
                    ServerMessage::AiMessageUpdate(u) if !devices.is_empty() => u.chat_id.clone(),
                    _ => return None,
                };
                Some(Inbound::Missed {
                    task: task.clone(),
                    chat,
                    devices,
                })
            }
            Envelope::Frame {
                audience,
                turn: None,
                frame,
                ..
            } => {
                self.hub.send(user, audience, frame);
                None
            }
            Envelope::CancelSkill { skill_task_id, .. } => {
                Some(Inbound::CancelSkill(skill_task_id.clone()))
            }
        }
    }
}

impl Link {
    fn enqueue(&self, user: &UserHash, envelope: Envelope) {
        if self.queue.try_send((user.clone(), envelope)).is_err() {
            tracing::warn!("the bus publisher is behind; a frame for other nodes was dropped");
        }
    }
}

async fn publish(
    bus: &Arc<dyn Bus>,
    keyring: &Keyring,
    user: &UserHash,
    envelope: &Envelope,
) -> Result<(), BusError> {
    let plain = serde_json::to_vec(envelope).unwrap_or_default();
    let sealed = keyring
        .seal_portable(user, "bus", Purpose::BusFrame, &plain)
        .await
        .map_err(|e| BusError::Unavailable(e.to_string()))?;
    bus.publish(user, sealed).await
}

/// How long a publication waits for the bus to take it again (a Redis restart, a cut
/// connection of a moment), tried every [`PUBLISH_RETRY`]; later ones wait behind it, so
/// the order holds. A copy that went through twice is dropped by the devices (by index).
const PUBLISH_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);
const PUBLISH_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Publishes queued envelopes in order until `stop` (or until the queue's senders are gone).
async fn publish_loop(
    bus: Arc<dyn Bus>,
    keyring: Arc<Keyring>,
    mut rx: mpsc::Receiver<(UserHash, Envelope)>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let next = tokio::select! {
            () = stop.cancelled() => return,
            next = rx.recv() => next,
        };
        let Some((user, envelope)) = next else {
            return;
        };
        let deadline = tokio::time::Instant::now() + PUBLISH_PATIENCE;
        while let Err(e) = publish(&bus, &keyring, &user, &envelope).await {
            if tokio::time::Instant::now() >= deadline || stop.is_cancelled() {
                tracing::debug!(error = %e, "a frame did not reach the bus");
                break;
            }
            tokio::time::sleep(PUBLISH_RETRY).await;
        }
    }
}
