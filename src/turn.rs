//! A turn on any node: admission, its lease, the one writer of its frames, its log,
//! finishing and handing over to the messages queued behind it.

pub mod admission;
mod compress;
pub mod deps;
pub mod follow_up;
pub mod lease_clock;
pub mod log;
pub mod node;
mod post;
pub mod reaper;
pub mod rejoin;
mod report;
mod routine;
mod run;
mod stage;
pub mod store;
pub mod writer;

pub use crate::inbound::{Inbound, MessageOptions};
pub use admission::{Admission, CancelError, TurnTicket, Turns};
pub use deps::TurnDeps;
pub use run::spawn;
