//! Offline delivery: an answer that finishes after the user closed the tab reaches the
//! user's next connection as `pending_ai_response`, and every later one, until a device
//! stores it (`ai_response_completed`).

use std::time::Duration;

use chatd_protocol::{PendingAiResponse, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::ws_client::WsClient;

use crate::support::{TestApp, ping, spawn_app, use_llm, user_message};

/// What a new connection of `user` gets before its first answer: the pending answers.
async fn pending_on_connect(app: &TestApp, user: &str) -> (WsClient, Vec<PendingAiResponse>) {
    let mut ws = app.connect(user).await;
    ws.send(&ping()).await;
    let mut pending = Vec::new();
    loop {
        match ws.recv().await {
            ServerMessage::Pong(_) => return (ws, pending),
            ServerMessage::PendingAiResponse(p) => pending.push(*p),
            _ => {}
        }
    }
}

#[tokio::test]
async fn an_answer_finished_while_away_is_delivered_until_a_device_stores_it() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Started.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["Finished while you were away.".into()],
            delay: Duration::ZERO,
            usage: None,
        }),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-away").await;
    ws.send(&user_message("chat-away", "m1", "take your time"))
        .await;
    gate.reached().await;
    // The tab closes mid-answer; the answer finishes with no device connected.
    assert!(ws.close().await);
    let before = fake.requests().len();
    gate.release();

    // Poll new connections until the finished answer is waiting (the turn ends on its own
    // time; each poll is one connection).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (mut first, answer) = loop {
        let (ws, pending) = pending_on_connect(&app, "alice").await;
        if let Some(p) = pending.into_iter().next() {
            break (ws, p);
        }
        assert!(tokio::time::Instant::now() < deadline, "no pending answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answer.chat_id.as_str(), "chat-away");
    assert_eq!(answer.user_message_id.as_str(), "m1");
    assert_eq!(answer.content, "Started.\n\nFinished while you were away.");
    assert_eq!(fake.requests().len(), before, "no model call was repeated");

    // Every connection gets it until it is stored...
    let (_second, again) = pending_on_connect(&app, "alice").await;
    assert_eq!(again, vec![answer.clone()]);
    let (_bob, none) = pending_on_connect(&app, "bob").await;
    assert!(none.is_empty(), "never another user's");

    // ...then no more.
    first
        .send(&crate::store::completed(
            "chat-away",
            answer.message_id.as_str(),
            "enc-answer",
        ))
        .await;
    first
        .recv_until(|m| matches!(m, ServerMessage::AiResponseStorageConfirmed(_)).then_some(()))
        .await;
    let (_third, after) = pending_on_connect(&app, "alice").await;
    assert!(
        after.is_empty(),
        "stored answers are not pending: {after:?}"
    );
}
