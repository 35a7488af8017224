//! The WebSocket endpoint `GET /v1/ws`: origin check and authentication before the
//! upgrade (401/403 as plain HTTP), socket limits, then the connection loop.

pub mod connection;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::{AuthError, token_from_request};
use crate::state::AppState;

pub async fn upgrade(
    State(app): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if !origin_allowed(&app.config.server.allowed_origins, &headers) {
        return (StatusCode::FORBIDDEN, "origin not allowed").into_response();
    }
    let token = token_from_request(query.get("token").map(String::as_str), &headers);
    let user = match token
        .ok_or(AuthError::Missing)
        .and_then(|t| app.keys.verify(t))
    {
        Ok(user) => user,
        Err(e) => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                e.to_string(),
            )
                .into_response();
        }
    };
    let session_id = query
        .get("sessionId")
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .cloned()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let server = &app.config.server;
    let tracker = app.tasks.connections.clone();
    ws.read_buffer_size(server.read_buffer_bytes)
        // Frames are collected up to this size and written on the writer's flush (see
        // `connection::write_loop`): one syscall per batch, not per frame.
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_write_buffer_size(server.max_message_bytes.saturating_mul(2))
        .max_message_size(server.max_message_bytes)
        .max_frame_size(server.max_message_bytes)
        .on_upgrade(move |socket| {
            tracker.track_future(connection::run(app, socket, user, session_id))
        })
}

/// Bytes of frames buffered before the socket is written (a flush writes sooner).
const WRITE_BUFFER_BYTES: usize = 16 * 1024;

/// Browsers send `Origin`; when an allowlist is configured, it must match. Requests
/// without `Origin` (non-browser clients) are allowed.
fn origin_allowed(allowed: &[String], headers: &HeaderMap) -> bool {
    if allowed.is_empty() {
        return true;
    }
    match headers.get(header::ORIGIN).map(|o| o.to_str()) {
        None => true,
        Some(Ok(origin)) => allowed.iter().any(|a| a.eq_ignore_ascii_case(origin)),
        Some(Err(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_rules() {
        let mut h = HeaderMap::new();
        assert!(origin_allowed(&[], &h));
        let allowed = vec!["https://app.example".to_string()];
        assert!(origin_allowed(&allowed, &h));
        h.insert(header::ORIGIN, "https://app.example".parse().unwrap());
        assert!(origin_allowed(&allowed, &h));
        h.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(!origin_allowed(&allowed, &h));
    }
}
