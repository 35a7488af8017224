//! The bus between nodes inside one process (tests of several nodes, and a single node
//! that wants the same seam): a shared network of nodes, each with its channel and the
//! users it listens to.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::{BoxFuture, ready};
use tokio::sync::mpsc;

use super::{Bus, BusError, Received};
use crate::crypto::UserHash;
use crate::ids::NodeId;

struct Member {
    sender: mpsc::Sender<Received>,
    users: HashSet<UserHash>,
}

/// The nodes of one process. A std Mutex: each call is a few set operations and
/// non-blocking sends, never an await.
#[derive(Default, Clone)]
pub struct MemoryBusNetwork {
    nodes: Arc<Mutex<HashMap<NodeId, Member>>>,
}

/// One node's side of a [`MemoryBusNetwork`].
pub struct MemoryBus {
    network: MemoryBusNetwork,
    node: NodeId,
}

impl MemoryBus {
    pub fn join(network: &MemoryBusNetwork, node: NodeId, sender: mpsc::Sender<Received>) -> Self {
        network.lock().insert(
            node.clone(),
            Member {
                sender,
                users: HashSet::new(),
            },
        );
        Self {
            network: network.clone(),
            node,
        }
    }
}

impl MemoryBusNetwork {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Member>> {
        self.nodes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for MemoryBus {
    fn drop(&mut self) {
        self.network.lock().remove(&self.node);
    }
}

type Res<'a> = BoxFuture<'a, Result<(), BusError>>;

impl Bus for MemoryBus {
    fn publish<'a>(&'a self, user: &'a UserHash, payload: Vec<u8>) -> Res<'a> {
        for member in self.network.lock().values() {
            if member.users.contains(user) {
                // At most once, like pub/sub: a node that is behind loses the frame.
                let _ = member.sender.try_send(Received::User {
                    user: user.clone(),
                    payload: payload.clone(),
                });
            }
        }
        Box::pin(ready(Ok(())))
    }

    fn publish_node<'a>(&'a self, node: &'a NodeId, payload: Vec<u8>) -> Res<'a> {
        if let Some(member) = self.network.lock().get(node) {
            let _ = member.sender.try_send(Received::Node { payload });
        }
        Box::pin(ready(Ok(())))
    }

    fn subscribe<'a>(&'a self, user: &'a UserHash) -> Res<'a> {
        if let Some(member) = self.network.lock().get_mut(&self.node) {
            member.users.insert(user.clone());
        }
        Box::pin(ready(Ok(())))
    }

    fn unsubscribe<'a>(&'a self, user: &'a UserHash) -> Res<'a> {
        if let Some(member) = self.network.lock().get_mut(&self.node) {
            member.users.remove(user);
        }
        Box::pin(ready(Ok(())))
    }

    fn ping(&self) -> Res<'_> {
        Box::pin(ready(Ok(())))
    }
}
