//! The socket layer: authentication, origin, ping, bad input, size limits, rate limits.

use std::time::Duration;

use chatd_protocol::{ErrorCode, ServerMessage};
use chatd_test_harness::ws_client::{Refused, WsClient};
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{error_code, spawn_app};

async fn expect_pong(ws: &mut WsClient) {
    ws.send_json(json!({"type": "ping"})).await;
    assert!(matches!(ws.recv().await, ServerMessage::Pong(_)));
}

#[tokio::test]
async fn auth_accepts_query_cookie_and_bearer() {
    let app = spawn_app(|_| {}).await;
    let token = app.token("alice");

    let mut ws = WsClient::connect(&app.ws_url(&format!("token={token}&sessionId=tab-1")))
        .await
        .unwrap();
    expect_pong(&mut ws).await;

    let mut req = app.ws_url("").into_client_request().unwrap();
    req.headers_mut().insert(
        "cookie",
        format!("theme=dark; chatd_token={token}").parse().unwrap(),
    );
    let mut ws = WsClient::connect_request(req).await.unwrap();
    expect_pong(&mut ws).await;

    let mut req = app.ws_url("").into_client_request().unwrap();
    req.headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let mut ws = WsClient::connect_request(req).await.unwrap();
    expect_pong(&mut ws).await;
}

#[tokio::test]
async fn auth_refuses_missing_invalid_and_expired_tokens() {
    let app = spawn_app(|_| {}).await;
    let refused = |url: String| async move {
        match WsClient::connect_request(url.into_client_request().unwrap()).await {
            Err(Refused::Http(status)) => status,
            Err(other) => panic!("expected an HTTP refusal, got {other:?}"),
            Ok(_) => panic!("upgrade must be refused"),
        }
    };
    assert_eq!(refused(app.ws_url("")).await, 401);
    assert_eq!(refused(app.ws_url("token=not-a-jwt")).await, 401);
    let foreign = chatd::auth::TokenKeys::from_secret(b"another secret")
        .mint(
            &chatd::auth::UserId::parse("alice").unwrap(),
            Duration::from_secs(60),
        )
        .unwrap();
    assert_eq!(refused(app.ws_url(&format!("token={foreign}"))).await, 401);
    let expired = expired_token();
    assert_eq!(refused(app.ws_url(&format!("token={expired}"))).await, 401);
}

/// A token signed with the test secret whose `exp` lies in the past.
fn expired_token() -> String {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let claims = json!({"sub": "alice", "iat": 1_600_000_000u64, "exp": 1_600_000_060u64});
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(crate::support::SECRET.as_bytes()),
    )
    .unwrap()
}

#[tokio::test]
async fn origin_allowlist_is_enforced_on_upgrade() {
    let app = spawn_app(|c| c.server.allowed_origins = vec!["https://chat.example".into()]).await;
    let url = app.ws_url(&format!("token={}", app.token("alice")));

    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    assert!(matches!(
        WsClient::connect_request(req).await,
        Err(Refused::Http(403))
    ));

    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut()
        .insert("origin", "https://chat.example".parse().unwrap());
    let mut ws = WsClient::connect_request(req).await.unwrap();
    expect_pong(&mut ws).await;
}

/// Cross-site WebSocket hijacking: by default a cookie sign-in is taken only from the
/// server's own origin, `Origin: null` never; a token in the URL is no ambient
/// credential, so another origin may carry it, unless the demo page is on (then every
/// browser must come from the server's own origin).
#[tokio::test]
async fn a_cookie_from_another_origin_is_refused_by_default() {
    for demo in [false, true] {
        cookie_and_origin_rules(demo).await;
    }
}

async fn cookie_and_origin_rules(demo: bool) {
    let app = spawn_app(|c| {
        c.web.demo = match demo {
            true => chatd::config::Toggle::On,
            false => chatd::config::Toggle::Off,
        }
    })
    .await;
    let token = app.token("alice");
    let with = |origin: &str, cookie: bool| {
        let query = if cookie {
            String::new()
        } else {
            format!("token={token}")
        };
        let mut req = app.ws_url(&query).into_client_request().unwrap();
        if cookie {
            req.headers_mut()
                .insert("cookie", format!("chatd_token={token}").parse().unwrap());
        }
        req.headers_mut().insert("origin", origin.parse().unwrap());
        req
    };
    let own = format!("http://{}", app.addr);
    for (origin, cookie, allowed) in [
        ("https://evil.example", true, false),
        ("null", true, false),
        ("null", false, false),
        (own.as_str(), true, true),
        ("https://evil.example", false, !demo),
        (own.as_str(), false, true),
    ] {
        match WsClient::connect_request(with(origin, cookie)).await {
            Ok(mut ws) if allowed => expect_pong(&mut ws).await,
            Err(Refused::Http(403)) if !allowed => {}
            Ok(_) => panic!("{origin} (cookie: {cookie}) must be refused"),
            Err(e) => panic!("{origin} (cookie: {cookie}) must be allowed: {e:?}"),
        }
    }
}

#[tokio::test]
async fn bad_frames_get_typed_errors_and_the_socket_survives() {
    let app = spawn_app(|_| {}).await;
    let mut ws = app.connect("alice").await;
    let cases = [
        ("{not json", ErrorCode::MalformedJson),
        ("[1,2,3]", ErrorCode::MalformedJson),
        (r#"{"payload":{}}"#, ErrorCode::MalformedJson),
        (
            r#"{"type":"teleport","payload":{}}"#,
            ErrorCode::UnknownType,
        ),
        (
            r#"{"type":"cancel_ai_task","payload":{}}"#,
            ErrorCode::InvalidPayload,
        ),
        (
            r#"{"type":"cancel_ai_task","payload":{"task_id":42}}"#,
            ErrorCode::InvalidPayload,
        ),
        (
            r#"{"type":"set_active_chat","payload":{"chat_id":"has spaces"}}"#,
            ErrorCode::InvalidPayload,
        ),
        (
            r#"{"type":"chat_message_added","payload":{"chat_id":"c1","message":{"message_id":"m1"}}}"#,
            ErrorCode::InvalidPayload,
        ),
        (
            r#"{"type":"chat_message_added","payload":{"chat_id":"c1","message":{"message_id":"m1","content":"  ","created_at":1}}}"#,
            ErrorCode::InvalidPayload,
        ),
        (
            r#"{"type":"cancel_ai_task","payload":{"task_id":"no-such-task"}}"#,
            ErrorCode::NotFound,
        ),
    ];
    for (text, code) in cases {
        ws.send_text(text).await;
        let msg = ws.recv().await;
        assert_eq!(error_code(&msg), Some(code), "for {text}: got {msg:?}");
    }
    ws.send_raw(tokio_tungstenite::tungstenite::Message::binary(vec![
        1, 2, 3,
    ]))
    .await;
    assert_eq!(error_code(&ws.recv().await), Some(ErrorCode::MalformedJson));
    expect_pong(&mut ws).await;
    // Unknown fields are tolerated.
    ws.send_json(json!({"type": "ping", "payload": {"extra": true}, "also": 1}))
        .await;
    assert!(matches!(ws.recv().await, ServerMessage::Pong(_)));
}

#[tokio::test]
async fn oversized_frame_gets_an_error_and_an_oversized_message_closes_1009() {
    let app = spawn_app(|c| {
        c.server.max_frame_bytes = 4096;
        c.server.max_message_bytes = 64 * 1024;
    })
    .await;
    let mut ws = app.connect("alice").await;
    let big = json!({"type": "ping", "payload": {"pad": "x".repeat(10_000)}});
    ws.send_json(big).await;
    assert_eq!(
        error_code(&ws.recv().await),
        Some(ErrorCode::PayloadTooLarge)
    );
    expect_pong(&mut ws).await;

    let huge = json!({"type": "ping", "payload": {"pad": "x".repeat(100_000)}});
    ws.send_json(huge).await;
    let (code, _) = ws.expect_close().await;
    assert_eq!(code, 1009);
}

#[tokio::test]
async fn invalid_utf8_closes_1007() {
    let app = spawn_app(|_| {}).await;
    let mut ws = app.connect("alice").await;
    ws.send_invalid_utf8().await;
    let (code, _) = ws.expect_close().await;
    assert_eq!(code, 1007);
}

#[tokio::test]
async fn client_close_completes_the_handshake() {
    let app = spawn_app(|_| {}).await;
    let mut ws = app.connect("alice").await;
    expect_pong(&mut ws).await;
    assert!(
        ws.close().await,
        "the server must answer the close frame and end the stream"
    );
}

#[tokio::test]
async fn rate_limits_are_per_connection_and_user_and_others_are_unaffected() {
    let app = spawn_app(|c| {
        c.limits.connection_rate = 1;
        c.limits.connection_burst = 3;
    })
    .await;
    let mut alice = app.connect("alice").await;
    let mut bob = app.connect("bob").await;
    for _ in 0..3 {
        alice.send_json(json!({"type": "ping"})).await;
    }
    alice.send_json(json!({"type": "ping"})).await;
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(error_code(&alice.recv().await));
    }
    assert_eq!(codes, vec![None, None, None, Some(ErrorCode::RateLimited)]);
    expect_pong(&mut bob).await;
}

/// A socket lives as long as its token: at `exp` it closes with 4002, unless the client
/// sent a fresh token of the same user (`refresh_token`) before.
#[tokio::test]
async fn a_socket_closes_when_its_token_expires_unless_refreshed() {
    let app = spawn_app(|_| {}).await;
    let short = app.token_for("alice", Duration::from_secs(2));
    let url = app.ws_url(&format!("token={short}"));
    let mut refreshed = WsClient::connect(&url).await.unwrap();
    let mut expiring = WsClient::connect(&url).await.unwrap();

    // Another user's token and a forged one are refused, and change nothing.
    let bob = app.token("bob");
    for token in [bob.as_str(), "not.a.token"] {
        refreshed
            .send_json(serde_json::json!({"type": "refresh_token", "payload": {"token": token}}))
            .await;
        let e = refreshed
            .recv_until(|m| match m {
                ServerMessage::Error(e) => Some(e.clone()),
                _ => None,
            })
            .await;
        assert_eq!(e.code, ErrorCode::InvalidToken);
        assert!(!e.message.contains(token), "the token is never echoed");
    }
    let fresh = app.token("alice");
    refreshed
        .send_json(serde_json::json!({"type": "refresh_token", "payload": {"token": fresh}}))
        .await;
    let ok = refreshed
        .recv_until(|m| match m {
            ServerMessage::TokenRefreshed(t) => Some(t.clone()),
            _ => None,
        })
        .await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        ok.expires_at > now + 500,
        "the new token's exp: {}",
        ok.expires_at
    );

    let (code, reason) = expiring.expect_close().await;
    assert_eq!(code, 4002);
    assert!(reason.contains("token expired"), "{reason}");
    // The refreshed socket outlived the first token (both had the same `exp`).
    expect_pong(&mut refreshed).await;
}
