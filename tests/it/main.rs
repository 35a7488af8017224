//! chatd's integration tests: one binary, real sockets, real services started by the
//! harness on free ports, a fake LLM that is a real HTTP server.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::disallowed_methods
)]

mod support;

mod app_prefs;
mod browser;
mod browser_cluster;
mod browser_sign_in;
mod bus_contract;
mod bus_outage;
mod cache_contract;
mod cli;
mod client_flows;
mod cluster;
mod cluster_app_prefs;
mod cluster_harness;
mod cluster_routines;
mod cluster_speculation;
mod code_shape;
mod compression;
mod defence;
mod early_decision;
mod faults;
mod focus;
mod history;
mod http_surface;
mod links;
mod log_refill;
mod mcp;
mod mcp_everything;
mod mcp_shipped;
mod memories;
mod module_graph;
mod node_loss;
mod offline;
mod oidc;
mod paused_node;
mod pipeline;
mod privacy;
mod private_logs;
mod redis_cache;
mod redteam;
mod reprocess;
mod resume;
mod routine_store_contract;
mod routines;
mod shutdown;
mod skill_flows;
mod skills;
mod slow_consumers;
mod speculation;
mod speculation_contract;
mod store;
mod store_contract;
mod store_start;
mod summaries;
mod sync;
mod sync_paging;
mod turn_store_contract;
mod turns;
mod vault;
mod ws_basics;
