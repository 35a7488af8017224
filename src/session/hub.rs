//! The registry of live devices (one entry per socket) grouped by user, each with its
//! active chat, and delivery to "all devices", "other devices" or "devices showing a chat".
//! Single node for now; the Redis pub/sub fan-out for multi-node deployments plugs in here.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use chatd_protocol::{ChatId, ServerMessage};
use dashmap::DashMap;

use crate::auth::UserId;
use crate::ws::outbox::{EncodedFrame, Outbox};

pub type ConnectionId = u64;

/// One connected socket of a user (a browser tab, an app, a CLI).
pub struct Device {
    pub conn_id: ConnectionId,
    /// The client's `sessionId` (or a generated one).
    pub session_id: String,
    pub user: UserId,
    pub outbox: Outbox,
    /// The chat this device shows. A std Mutex: read or written in one step, never held
    /// across an await.
    active_chat: Mutex<Option<ChatId>>,
}

impl Device {
    pub fn new(conn_id: ConnectionId, session_id: String, user: UserId, outbox: Outbox) -> Self {
        Self {
            conn_id,
            session_id,
            user,
            outbox,
            active_chat: Mutex::new(None),
        }
    }

    pub fn set_active_chat(&self, chat: Option<ChatId>) {
        *self
            .active_chat
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = chat;
    }

    pub fn shows(&self, chat: &ChatId) -> bool {
        self.active_chat
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            == Some(chat)
    }

    pub fn send(&self, msg: &ServerMessage) -> bool {
        self.outbox.send(msg)
    }
}

/// Which of a user's devices a message goes to.
#[derive(Debug, Clone, Copy)]
pub enum Audience<'a> {
    All,
    AllExcept(ConnectionId),
    Showing(&'a ChatId),
    NotShowing(&'a ChatId),
    Only(ConnectionId),
}

#[derive(Default)]
pub struct Hub {
    /// user → their devices. DashMap shards the lock; guards are dropped before sending.
    users: DashMap<UserId, Vec<Arc<Device>>>,
    next_conn: AtomicU64,
}

impl Hub {
    pub fn next_connection_id(&self) -> ConnectionId {
        self.next_conn.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn register(&self, device: Arc<Device>) {
        self.users
            .entry(device.user.clone())
            .or_default()
            .push(device);
    }

    pub fn unregister(&self, user: &UserId, conn_id: ConnectionId) {
        self.users.remove_if_mut(user, |_, devices| {
            devices.retain(|d| d.conn_id != conn_id);
            devices.is_empty()
        });
    }

    /// A snapshot of the user's devices (the map guard is released on return).
    pub fn devices(&self, user: &UserId) -> Vec<Arc<Device>> {
        self.users.get(user).map(|d| d.clone()).unwrap_or_default()
    }

    pub fn device(&self, user: &UserId, conn_id: ConnectionId) -> Option<Arc<Device>> {
        self.users
            .get(user)
            .and_then(|d| d.iter().find(|d| d.conn_id == conn_id).cloned())
    }

    /// Sends to the chosen devices, encoding once; returns how many accepted it.
    pub fn send(&self, user: &UserId, audience: Audience<'_>, msg: &ServerMessage) -> usize {
        let devices = self.devices(user);
        let mut frame: Option<EncodedFrame> = None;
        let mut sent = 0;
        for device in devices.iter().filter(|d| audience.includes(d)) {
            let f = frame.get_or_insert_with(|| EncodedFrame::new(msg)).clone();
            if device.outbox.send_encoded(f, msg) {
                sent += 1;
            }
        }
        sent
    }
}

impl Audience<'_> {
    fn includes(&self, d: &Device) -> bool {
        match self {
            Audience::All => true,
            Audience::AllExcept(c) => d.conn_id != *c,
            Audience::Showing(chat) => d.shows(chat),
            Audience::NotShowing(chat) => !d.shows(chat),
            Audience::Only(c) => d.conn_id == *c,
        }
    }
}
