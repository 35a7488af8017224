//! The bus between chatd nodes: a channel per user (frames for that user's devices) and a
//! channel per node (control messages such as a cancel for a turn that node runs).
//! Payloads are opaque bytes the caller sealed. Delivery is at most once, as Redis pub/sub
//! itself: nothing a client must not miss relies on the bus alone (the turn log does).
//!
//! Two implementations: [`memory`] (nodes inside one process: embedded mode and tests) and
//! [`redis`] (pub/sub on one Redis server; sharded pub/sub, `SSUBSCRIBE`/`SPUBLISH`, on a
//! Redis Cluster). One contract suite, `tests/it/bus_contract.rs`, runs against both.
//!
//! A node subscribes to a user's channel while it holds a device of that user. What
//! arrives goes to the `mpsc::Sender<Received>` the bus was built with, in publish order
//! per channel. A publication may come back to the node that sent it when that node is
//! subscribed too: the caller drops its own (the payload names its origin).

pub mod memory;
pub mod redis;

use futures_util::future::BoxFuture;

use crate::crypto::UserHash;
use crate::ids::NodeId;

/// What the bus hands to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// A publication on the channel of a user this node subscribed to.
    User { user: UserHash, payload: Vec<u8> },
    /// A publication on this node's own channel.
    Node { payload: Vec<u8> },
    /// The connection to the broker was lost (found at `down_since_ms`, unix ms) and is
    /// back with every subscription restored; publications in between may be lost
    /// (resume from the turn log).
    Reconnected { down_since_ms: i64 },
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum BusError {
    #[error("bus unavailable: {0}")]
    Unavailable(String),
    #[error("bus did not answer within {0:?}")]
    Timeout(std::time::Duration),
}

pub trait Bus: Send + Sync {
    /// Sends `payload` to every node subscribed to `user` (this one too, if subscribed).
    fn publish<'a>(
        &'a self,
        user: &'a UserHash,
        payload: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), BusError>>;

    /// Sends `payload` to one node's own channel.
    fn publish_node<'a>(
        &'a self,
        node: &'a NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), BusError>>;

    /// Starts receiving `user`'s channel; kept across reconnects until `unsubscribe`.
    fn subscribe<'a>(&'a self, user: &'a UserHash) -> BoxFuture<'a, Result<(), BusError>>;

    fn unsubscribe<'a>(&'a self, user: &'a UserHash) -> BoxFuture<'a, Result<(), BusError>>;

    /// Whether the subscriber connection is up (for `/readyz`).
    fn ping(&self) -> BoxFuture<'_, Result<(), BusError>>;
}
