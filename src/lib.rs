//! chatd: a WebSocket realtime chat-processing server.
//!
//! Layout (see README.md for the one-line module map):
//! - [`app`] builds and runs the server; [`config`] loads typed configuration;
//! - [`http`] is the HTTP surface, [`ws`] the socket layer (upgrade, auth, read/write loop);
//! - [`session`] dispatches one connection's messages; [`turn`] runs a chat's turns on any
//!   node; [`delivery`] gets frames to the user's devices on this node and the others;
//! - [`pipeline`] turns a chat message into a streamed answer (internal types only);
//! - [`llm`] is the model boundary;
//! - [`skills`] are the tools the model calls (manifests, runner, embeds, injection check);
//! - [`http::web`] serves the demo page and the reference browser client;
//! - [`auth`] mints and checks session tokens; [`metrics`] exports Prometheus metrics.

pub mod app;
pub mod auth;
pub mod cache;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod delivery;
pub mod focus;
#[doc(hidden)]
pub mod fuzzing;
pub mod history;
pub mod http;
pub mod ids;
pub mod inbound;
pub mod links;
pub mod llm;
pub mod logging;
pub mod memories;
pub mod metrics;
pub mod net_guard;
pub mod pipeline;
pub mod privacy;
pub mod redis;
pub mod routines;
pub mod schema;
pub mod session;
pub mod skills;
pub mod state;
pub mod store;
pub mod turn;
pub mod ws;
