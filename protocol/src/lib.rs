//! `chatd-protocol`: the wire protocol of chatd.
//!
//! Every WebSocket text frame is an envelope `{"type": "...", "payload": {...}}`.
//! [`ClientMessage`] is what a device sends, [`ServerMessage`] what chatd sends back.
//! Type and field names follow the reference product for the flows chatd shares with it
//! (see `protocol/README.md` for the catalogue). This crate owns only data shapes and
//! parsing; it knows nothing of sockets, sessions or the pipeline.

mod answer;
mod apps;
mod client;
mod close;
mod error;
mod focus;
mod ids;
mod memories;
mod paging;
mod parse;
mod persist;
mod routines;
mod schema;
mod server;
mod skills;

pub use answer::*;
pub use apps::*;
pub use client::*;
pub use close::CloseCode;
pub use error::ErrorCode;
pub use focus::*;
pub use ids::{ChatId, EmbedId, IdError, MessageId, RunId, SkillTaskId, TaskId};
pub use memories::*;
pub use paging::*;
pub use parse::{ParseError, parse_client_message};
pub use persist::*;
pub use routines::*;
pub use schema::schemas;
pub use server::*;
pub use skills::*;

/// An empty payload object (`{}`), for messages that carry no fields.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Empty {}
