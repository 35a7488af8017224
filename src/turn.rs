//! A turn on any node: admission, its lease, the one writer of its frames, its log,
//! finishing and handing over to the messages queued behind it.

pub mod store;
