//! The WebSocket endpoint `GET /v1/ws`: origin check and authentication before the
//! upgrade (401/403 as plain HTTP; 503 while an identity provider's keys cannot be
//! fetched), the `chatd` subprotocol, socket limits, then the connection loop.

pub mod connection;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State, WebSocketUpgrade};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use crate::auth::source::{SUBPROTOCOL, offers_chatd};
use crate::auth::{AuthError, TokenSource, token_from_request};
use crate::delivery::outbox::StreamMode;
use crate::state::AppState;

pub async fn upgrade(
    State(app): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let auth = &app.config.auth;
    let token = token_from_request(
        query.get("token").map(String::as_str),
        &headers,
        &auth.cookie_name,
    );
    let cookie = token.is_some_and(|(_, source)| source == TokenSource::Cookie);
    if let Err(reason) = origin_allowed(&app.config, &headers, cookie) {
        tracing::info!(status = 403, reason, "handshake refused");
        return (StatusCode::FORBIDDEN, reason).into_response();
    }
    // A browser fails a handshake whose answer selects none of the offered subprotocols;
    // a token subprotocol alone would leave chatd nothing to select but the token itself.
    if token.is_some_and(|(_, source)| source == TokenSource::Subprotocol)
        && !offers_chatd(&headers)
    {
        let reason = "offer the `chatd` subprotocol beside `bearer.<token>`";
        tracing::info!(status = 400, reason, "handshake refused");
        return (StatusCode::BAD_REQUEST, reason).into_response();
    }
    let verified = match token {
        Some((t, _)) => app.auth.verify(t).await,
        None => Err(AuthError::Missing),
    };
    let (user, expires_at) = match verified {
        Ok(verified) => verified,
        Err(e) => {
            let status = match e {
                AuthError::KeysUnavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            };
            tracing::info!(status = status.as_u16(), reason = %e, "handshake refused");
            return (
                status,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                e.to_string(),
            )
                .into_response();
        }
    };
    let mode = match StreamMode::parse(query.get("stream").map(String::as_str)) {
        Ok(mode) => mode,
        Err(reason) => {
            tracing::info!(status = 400, reason, "handshake refused");
            return (StatusCode::BAD_REQUEST, reason).into_response();
        }
    };
    let session_id = query
        .get("sessionId")
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .cloned()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let server = &app.config.server;
    let tracker = app.tasks.connections.clone();
    // Selects `chatd` when the client offered it (it must, beside a token subprotocol).
    ws.protocols([SUBPROTOCOL])
        .read_buffer_size(server.read_buffer_bytes)
        // Frames are collected up to this size and written on the writer's flush (see
        // `connection/writer.rs`): one syscall per batch, not per frame. The writer hands the
        // library one batch at a time, and the outbox counts it until it is written.
        .write_buffer_size(WRITE_BUFFER_BYTES)
        .max_write_buffer_size(server.max_message_bytes.saturating_mul(2))
        .max_message_size(server.max_message_bytes)
        .max_frame_size(server.max_message_bytes)
        .on_upgrade(move |socket| {
            let span = tracing::info_span!("connection", user_id = %user);
            tracker.track_future(
                connection::run(app, socket, user, session_id, expires_at, mode).instrument(span),
            )
        })
}

/// Bytes of frames buffered before the socket is written (a flush writes sooner).
const WRITE_BUFFER_BYTES: usize = 16 * 1024;

/// The origin rule of `config` (see [`origin_rule`]): with the demo page on and no
/// `server.allowed_origins`, browsers are allowed from the server's own origin only.
pub fn origin_allowed(
    config: &crate::config::Config,
    headers: &HeaderMap,
    cookie: bool,
) -> Result<(), &'static str> {
    let allowed = &config.server.allowed_origins;
    origin_rule(
        allowed,
        allowed.is_empty() && config.demo_enabled(),
        headers,
        cookie,
    )
}

/// Cross-site WebSocket hijacking: a browser sends the session cookie with a
/// handshake any page starts, so a cookie sign-in is taken only from an origin in
/// `server.allowed_origins`, or, when that list is empty, from the server's own origin
/// (the `Host` the request was sent to). `own_only` (the demo page is served, no list)
/// applies that to every browser request, whatever carries the token. `Origin: null`
/// (sandboxed frames, `file:` pages) is always refused. With a configured list, every
/// browser origin must be in it; a request without `Origin` (not a browser) is not checked.
fn origin_rule(
    allowed: &[String],
    own_only: bool,
    headers: &HeaderMap,
    cookie: bool,
) -> Result<(), &'static str> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let Ok(origin) = origin.to_str() else {
        return Err("origin not allowed: not readable");
    };
    if origin.eq_ignore_ascii_case("null") {
        return Err("origin not allowed: null");
    }
    if !allowed.is_empty() {
        return match allowed.iter().any(|a| a.eq_ignore_ascii_case(origin)) {
            true => Ok(()),
            false => Err("origin not allowed"),
        };
    }
    if !cookie && !own_only {
        return Ok(());
    }
    let own = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|host| {
            let authority = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            authority.is_some_and(|a| a.eq_ignore_ascii_case(host))
        });
    match own {
        true => Ok(()),
        false if cookie => Err("origin not allowed for cookie sign-in: set server.allowed_origins"),
        false => Err("origin not allowed: the demo page is on; set server.allowed_origins"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_rules() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "chat.example".parse().unwrap());
        // No Origin: not a browser; nothing to check.
        assert!(origin_rule(&[], false, &h, true).is_ok());
        let allowed = vec!["https://app.example".to_string()];
        assert!(origin_rule(&allowed, false, &h, false).is_ok());
        h.insert(header::ORIGIN, "https://app.example".parse().unwrap());
        assert!(origin_rule(&allowed, false, &h, true).is_ok());
        h.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(origin_rule(&allowed, false, &h, false).is_err());
        // The default (no list): a cookie only from the server's own origin; a token in
        // the URL or a header is no ambient credential, so any origin may carry it.
        assert!(origin_rule(&[], false, &h, true).is_err());
        assert!(origin_rule(&[], false, &h, false).is_ok());
        h.insert(header::ORIGIN, "https://chat.example".parse().unwrap());
        assert!(origin_rule(&[], false, &h, true).is_ok());
        // The demo page on, no list: every browser from the server's own origin only.
        assert!(origin_rule(&[], true, &h, false).is_ok());
        h.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        assert!(origin_rule(&[], true, &h, false).is_err());
        assert!(origin_rule(&allowed, true, &h, false).is_err());
        h.insert(header::ORIGIN, "null".parse().unwrap());
        assert!(origin_rule(&[], false, &h, false).is_err());
        assert!(origin_rule(&allowed, false, &h, false).is_err());
    }
}
