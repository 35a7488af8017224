//! Graceful shutdown: every device is told first (`server_shutting_down`), no new message is
//! taken, running answers finish within `server.shutdown_grace` (the ones still running
//! near its end are cancelled and end with a final frame), sockets close with 1012, and the
//! server stops accepting.

use std::time::Duration;

use chatd_protocol::ServerMessage;
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::ws_client::WsClient;

use crate::support::{collect_answer, error_code, spawn_app, use_llm, user_message};

#[tokio::test]
async fn shutdown_cancels_turns_still_running_at_its_end_closes_sockets_and_stops_accepting() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Streaming when the server stops.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["never".into()],
            delay: Duration::ZERO,
            usage: None,
        }),
    });
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.server.shutdown_grace = Duration::from_secs(1);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-s").await;
    let mut idle = app.connect("bob").await;
    ws.send(&user_message("chat-s", "m1", "hello")).await;
    ws.recv_until(|m| matches!(m, ServerMessage::AiTaskInitiated(_)).then_some(()))
        .await;
    gate.reached().await;
    // The first paragraph has reached the client: the turn is mid-stream.
    ws.recv_until(|m| matches!(m, ServerMessage::AiMessageUpdate(_)).then_some(()))
        .await;

    let url = app.ws_url(&format!("token={}", app.token("carol")));
    app.start_shutdown();
    // Every device hears it, the one showing nothing as well, before anything ends.
    for device in [&mut ws, &mut idle] {
        let told = device
            .recv_until(|m| match m {
                ServerMessage::ServerShuttingDown(s) => Some(s.clone()),
                _ => None,
            })
            .await;
        assert!(told.grace_ms > 0);
    }
    let (_, last) = collect_answer(&mut ws).await;
    assert!(last.interrupted_by_shutdown);
    assert_eq!(
        last.full_content_so_far,
        "Streaming when the server stops.\n\n"
    );
    assert_eq!(ws.expect_close().await.0, 1012);
    assert_eq!(idle.expect_close().await.0, 1012);
    fake.wait_for_disconnect().await;
    app.shutdown().await.unwrap();
    assert!(
        WsClient::connect(&url).await.is_err(),
        "no new connections after shutdown"
    );
}

/// A restart lets a running answer finish (issue 35, defect 5: it was cancelled at once and
/// the client showed "Stopped."), while a new message is refused with a typed error.
#[tokio::test]
async fn a_running_answer_finishes_during_the_grace_and_new_messages_are_refused() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Half.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["Whole.".into()],
            delay: Duration::ZERO,
            usage: None,
        }),
    });
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.server.shutdown_grace = Duration::from_secs(30);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-g").await;
    let mut other = app.connect_showing("alice", "chat-h").await;
    ws.send(&user_message("chat-g", "m1", "hello")).await;
    gate.reached().await;
    ws.recv_until(|m| matches!(m, ServerMessage::AiMessageUpdate(_)).then_some(()))
        .await;
    app.start_shutdown();
    for device in [&mut ws, &mut other] {
        device
            .recv_until(|m| matches!(m, ServerMessage::ServerShuttingDown(_)).then_some(()))
            .await;
    }
    other.send(&user_message("chat-h", "m2", "too late")).await;
    let refused = other
        .recv_until(|m| match m {
            ServerMessage::Error(e) => Some(e.clone()),
            ServerMessage::ChatMessageConfirmed(_) | ServerMessage::AiTaskInitiated(_) => {
                panic!("a message was taken while stopping: {m:?}")
            }
            _ => None,
        })
        .await;
    assert_eq!(
        error_code(&ServerMessage::Error(refused.clone())),
        Some(chatd_protocol::ErrorCode::Overloaded)
    );
    assert_eq!(
        refused
            .message_id
            .map(|m| m.as_str().to_string())
            .as_deref(),
        Some("m2")
    );
    gate.release();
    let (_, last) = collect_answer(&mut ws).await;
    assert!(!last.interrupted_by_shutdown);
    assert_eq!(last.full_content_so_far, "Half.\n\nWhole.");
    assert_eq!(ws.expect_close().await.0, 1012);
    app.shutdown().await.unwrap();
}
