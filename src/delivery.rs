//! Who gets a frame: the devices on this node ([`hub`], through each socket's bounded
//! [`outbox`]) and, through the [`bus`], the other nodes. [`frames`] is the one mapping of
//! turn events to wire frames.

pub mod bus;
pub mod frames;
pub mod hub;
pub mod outbox;

pub use hub::{Audience, ConnectionId, Device, Hub};
