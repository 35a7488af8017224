//! Focus modes: a chat-level mode an app declares (`focus_modes` in its manifest: id,
//! title, instruction, tools) that the model starts with a tool call or the user with
//! `chat_focus_mode_activate`. While one is active its instruction comes first in the
//! system prompt and its tools are offered; `chat_focus_mode_deactivate` ends it.
//!
//! The server owns a chat's active focus mode: it is a sealed record in the chat's AI
//! cache state ([`crate::cache::ai::FocusRecord`]), so it survives restarts and reaches
//! every node. The client's `active_focus_id` only seeds the record when the cache has
//! none for the chat (a new node's empty cache, an expired record); once the user ends a
//! focus mode the record says "none", and a client still sending the old id is ignored.
//!
//! - [`manifest`]: the manifest section and its lint (`chatd lint-skills`);
//! - [`catalog`]: every app's focus modes by `app_id-focus_id`;
//! - [`turn`]: the chat's focus mode for a turn, and the turn's focus tools (one tool per
//!   focus mode, named like it, that starts it).

pub mod catalog;
pub mod manifest;
pub mod turn;

pub use catalog::{FocusCatalog, FocusMode};
pub use manifest::FocusModeManifest;
pub use turn::{FocusTools, active_for_turn};
