//! Stopping: every device is told first (`server_shutting_down`), no new message is taken,
//! running answers may finish within `server.shutdown_grace`, what still runs near its end
//! is cancelled (its final frame still goes out), then sockets close with 1012.

use chatd_protocol::{ServerMessage, ServerShuttingDown};
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// Drains the app once `shutdown` fires.
pub(super) async fn drain(state: &AppState, shutdown: CancellationToken) {
    shutdown.cancelled().await;
    let deadline = tokio::time::Instant::now() + state.config.server.shutdown_grace;
    let tasks = &state.tasks;
    // Every device hears it first, wherever it looks, so clients reconnect at once.
    let told = state
        .delivery
        .hub
        .send_everyone(&ServerMessage::ServerShuttingDown(ServerShuttingDown {
            grace_ms: state.config.server.shutdown_grace.as_millis() as u64,
            message: "This server is stopping; reconnect to continue.".into(),
        }));
    tracing::info!(devices = told, "shutting down");
    tasks.draining.cancel();
    tasks.turns.close();
    // Running answers may finish; what still runs near the end is cancelled, with
    // time left for its final frame.
    let grace = state.config.server.shutdown_grace;
    let cut = deadline - (grace / 4).min(std::time::Duration::from_secs(2));
    if tokio::time::timeout_at(cut, tasks.turns.wait())
        .await
        .is_err()
    {
        tracing::info!("cancelling the turns still running");
        tasks.turns_shutdown.cancel();
        if tokio::time::timeout_at(deadline, tasks.turns.wait())
            .await
            .is_err()
        {
            tracing::warn!("turns still running after the grace period");
        }
    }
    tasks.turns_shutdown.cancel();
    tasks.connections_shutdown.cancel();
    // After the token: a socket registered later sees the token cancelled (`connection::run`).
    state
        .delivery
        .hub
        .close_everyone(chatd_protocol::CloseCode::ServiceRestart);
    tasks.connections.close();
    if tokio::time::timeout_at(deadline, tasks.connections.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the grace period");
    }
}
