//! The log filter every chatd process uses (the binary, and `chatd-load`'s chatd children):
//! `CHATD_LOG`, else `RUST_LOG`, else `info`, with the libraries that log whole frames,
//! headers or bodies capped at `info` whatever the filter asks (privacy: no message text,
//! token or key in a log at any level).

use tracing_subscriber::EnvFilter;

/// Libraries whose debug and trace output holds whole frames, headers or bodies (message
/// text, session tokens, API keys): capped at `info` whatever the filter asks.
const PRIVATE_TARGETS: &[&str] = &[
    "tungstenite",
    "tokio_tungstenite",
    "axum::extract::ws",
    "hyper",
    "hyper_util",
    "h2",
    "reqwest",
    "eventsource_stream",
    "vaultrs",
    "rustify",
];

/// `CHATD_LOG`, else `RUST_LOG`, else `info`; the private targets capped in every case.
pub fn filter() -> EnvFilter {
    let mut filter = EnvFilter::try_from_env("CHATD_LOG")
        .or_else(|_| EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    for target in PRIVATE_TARGETS {
        if let Ok(directive) = format!("{target}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}
