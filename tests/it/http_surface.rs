//! `/healthz`, `/readyz` and `/metrics`.

use chatd_protocol::ServerMessage;

use crate::support::{collect_answer, spawn_app, user_message};

#[tokio::test]
async fn health_readiness_and_metrics() {
    let app = spawn_app(|_| {}).await;
    let http = reqwest::Client::new();
    let health = http.get(app.http_url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let ready = http.get(app.http_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(body["down"], serde_json::json!([]));

    let mut ws = app.connect_showing("alice", "chat-m").await;
    ws.send_text("{oops").await;
    ws.recv_until(|m| matches!(m, ServerMessage::Error(_)).then_some(()))
        .await;
    ws.send(&user_message("chat-m", "m1", "count me")).await;
    collect_answer(&mut ws).await;

    let text = http
        .get(app.http_url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        "chatd_connections_open 1",
        "chatd_frames_in_total{type=\"chat_message_added\"} 1",
        "chatd_frames_out_total{type=\"ai_message_update\"}",
        "chatd_errors_total{code=\"malformed_json\"} 1",
        "chatd_turn_duration_seconds_count 1",
        "chatd_turn_first_chunk_seconds_count 1",
        "chatd_turns_total{outcome=\"completed\"} 1",
    ] {
        assert!(text.contains(needle), "metrics lack `{needle}`:\n{text}");
    }
}

/// `/readyz` asks the provider (`GET /models`): a refused key or a provider that is gone
/// make chatd unready, and say so.
#[tokio::test]
async fn readiness_probes_the_model_provider() {
    let fake = chatd_test_harness::fake_llm::FakeLlm::start()
        .await
        .unwrap();
    let base = fake.base_url();
    let app = spawn_app(|c| crate::support::use_llm(c, base)).await;
    let http = reqwest::Client::new();
    let ready = http.get(app.http_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);

    fake.set_models_status(401);
    let base = fake.base_url();
    let refused = spawn_app(|c| crate::support::use_llm(c, base)).await;
    let unready = http.get(refused.http_url("/readyz")).send().await.unwrap();
    assert_eq!(unready.status(), 503);
    let body: serde_json::Value = unready.json().await.unwrap();
    assert!(body["down"].to_string().contains("llm"), "{body}");
}
