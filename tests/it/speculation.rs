//! The speculative main call (`pipeline.speculative_main_call`): the likely main request is
//! sent while preprocessing runs, kept when preprocessing decides the same request, and
//! dropped unread (the provider sees the hang-up) when it decides another one or refuses.
//! Preprocessing is held at a gate in each test until the early request has arrived, so
//! what is asserted does not depend on which call finishes first.

use std::time::Duration;

use chatd_protocol::{RejectionReason, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply, function_reply};
use serde_json::{Value, json};

use crate::support::{TestApp, collect_answer, spawn_app, turn_context, use_llm, user_message};

fn text(chunks: &[&str]) -> Reply {
    Reply::Text {
        chunks: chunks.iter().map(|c| c.to_string()).collect(),
        delay: Duration::ZERO,
        usage: None,
    }
}

/// Preprocessing's reply waits at `gate`, then calls `preprocess` with `arguments`.
fn held_preprocessing(fake: &FakeLlm, gate: &Gate, arguments: Value) {
    fake.push_stage(
        "preprocess",
        Reply::Stall {
            chunks: Vec::new(),
            gate: gate.clone(),
            then: Box::new(function_reply("preprocess", arguments)),
        },
    );
}

async fn speculating_app(fake: &FakeLlm) -> TestApp {
    spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.pipeline.speculative_main_call = chatd::config::Speculation::On;
        c.pipeline.postprocessing = false;
    })
    .await
}

fn speculation_count(app: &TestApp, outcome: &str) -> bool {
    app.state.metrics.render().contains(&format!(
        "chatd_speculative_main_calls_total{{outcome=\"{outcome}\"}} 1"
    ))
}

#[tokio::test]
async fn the_main_call_starts_during_preprocessing_and_streams_once_it_accepts() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held_preprocessing(&fake, &gate, json!({}));
    fake.push(text(&["Early ", "answer."]));
    let app = speculating_app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-s").await;
    ws.send(&user_message("chat-s", "m1", "hello")).await;

    // Preprocessing is held, yet the main request has arrived: it went out alongside.
    gate.reached().await;
    fake.wait_for_requests(1).await;
    gate.release();

    let (frames, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Early answer.");
    // Nothing of the answer reached the client before preprocessing's decision.
    let typing = frames
        .iter()
        .position(|f| matches!(f, ServerMessage::AiTypingStarted(_)))
        .expect("ai_typing_started");
    let first_update = frames
        .iter()
        .position(|f| matches!(f, ServerMessage::AiMessageUpdate(_)))
        .expect("an answer frame");
    assert!(typing < first_update, "{frames:?}");
    assert_eq!(fake.requests().len(), 1, "the early call was the main call");
    assert_eq!(fake.disconnects(), 0);
    assert!(speculation_count(&app, "used"));
}

#[tokio::test]
async fn a_different_decision_drops_the_early_call_and_sends_the_decided_one() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held_preprocessing(&fake, &gate, json!({"language": "fr"}));
    // The guess (English) gets an answer that never finishes; the decided request (French)
    // a normal one.
    let early_gate = Gate::new();
    let held = early_gate.clone();
    fake.set_responder(move |body| {
        Some(if turn_context(body).contains("`fr`") {
            text(&["Bonjour."])
        } else {
            Reply::Stall {
                chunks: vec!["GUESSED ".into()],
                gate: held.clone(),
                then: Box::new(text(&["never"])),
            }
        })
    });
    let app = speculating_app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-d").await;
    ws.send(&user_message("chat-d", "m1", "bonjour")).await;

    gate.reached().await;
    fake.wait_for_requests(1).await;
    gate.release();

    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Bonjour.");
    // The early call was hung up unread.
    fake.wait_for_disconnect().await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(!turn_context(&requests[0]).contains("`fr`"));
    assert!(turn_context(&requests[1]).contains("`fr`"));
    assert!(speculation_count(&app, "wasted"));
    early_gate.release();
}

#[tokio::test]
async fn a_refusal_drops_the_early_call_and_nothing_of_it_reaches_the_client() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held_preprocessing(
        &fake,
        &gate,
        json!({"harmful_or_illegal_score": 9, "misuse_risk_score": 0}),
    );
    let early_gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["HARMFUL DETAILS ".into()],
        gate: early_gate.clone(),
        then: Box::new(text(&["more"])),
    });
    let app = speculating_app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-r").await;
    ws.send(&user_message("chat-r", "m1", "something harmful"))
        .await;

    gate.reached().await;
    fake.wait_for_requests(1).await;
    gate.release();

    let (frames, last) = collect_answer(&mut ws).await;
    assert_eq!(
        last.rejection_reason,
        Some(RejectionReason::HarmfulOrIllegalDetected)
    );
    for f in &frames {
        if let ServerMessage::AiMessageUpdate(u) = f {
            assert!(!u.full_content_so_far.contains("HARMFUL"), "{u:?}");
        }
    }
    fake.wait_for_disconnect().await;
    assert_eq!(fake.requests().len(), 1, "no main call after the refusal");
    assert!(speculation_count(&app, "wasted"));
    early_gate.release();
}

#[tokio::test]
async fn the_next_message_is_guessed_from_the_chats_previous_plan() {
    let fake = FakeLlm::start().await.unwrap();
    // Every preprocessing answers French; the first turn's guess (English) is discarded, the
    // second turn's guess is the first turn's plan and is used.
    fake.set_stage_responder(|name, _| {
        (name == "preprocess").then(|| function_reply("preprocess", json!({"language": "fr"})))
    });
    fake.set_default(text(&["D'accord."]));
    let app = speculating_app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-p").await;
    ws.send(&user_message("chat-p", "m1", "un")).await;
    collect_answer(&mut ws).await;
    ws.send(&user_message("chat-p", "m2", "deux")).await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "D'accord.");
    assert!(
        speculation_count(&app, "used"),
        "{}",
        app.state.metrics.render()
    );
    let last_request = fake.requests().last().cloned().unwrap_or_default();
    assert!(turn_context(&last_request).contains("`fr`"));
}

/// The default, `auto`, speculates for a model that costs nothing per request: here the
/// fake provider on loopback (a local endpoint, like Ollama or vLLM next to chatd). For a
/// metered provider it speculates by expected cost (see the next test; the URL rules of
/// `is_metered` are unit-tested in `llm::openai`).
#[tokio::test]
async fn auto_speculates_for_a_local_endpoint() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held_preprocessing(&fake, &gate, json!({}));
    fake.push(text(&["Local answer."]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.pipeline.speculative_main_call = chatd::config::Speculation::Auto;
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-auto").await;
    ws.send(&user_message("chat-auto", "m1", "hello")).await;
    gate.reached().await;
    fake.wait_for_requests(1).await;
    gate.release();
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Local answer.");
    assert!(speculation_count(&app, "used"));
}

/// `auto` with a metered provider: a chat whose guesses miss stops speculating (its expected
/// waste is over `speculation_budget`), and what the wasted call cost is counted. Every
/// main request carries the chat's prompt-cache key, which names neither user nor chat.
#[tokio::test]
async fn auto_with_a_metered_model_stops_speculating_where_guesses_miss() {
    let fake = FakeLlm::start().await.unwrap();
    // Preprocessing decides a new language every turn: every guess misses.
    let turn = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = turn.clone();
    fake.set_stage_responder(move |name, _| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let language = ["fr", "de", "it"][n % 3];
        (name == "preprocess").then(|| function_reply("preprocess", json!({"language": language})))
    });
    fake.set_default(text(&["Ok."]));
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.metered = Some(true);
        c.pipeline.speculative_main_call = chatd::config::Speculation::Auto;
        c.pipeline.speculation_budget = 0.1;
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-m").await;
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        ws.send(&user_message("chat-m", &format!("m{i}"), text))
            .await;
        collect_answer(&mut ws).await;
    }
    let metrics = app.state.metrics.render();
    // Only the first turn (nothing known yet) speculated; its guess was wasted.
    assert!(speculation_count(&app, "started"), "{metrics}");
    assert!(speculation_count(&app, "wasted"), "{metrics}");
    assert!(!metrics.contains("outcome=\"used\""), "{metrics}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4, "one wasted call and three decided ones");
    let wasted = metric_value(&metrics, "chatd_speculative_wasted_input_tokens_total");
    let all = metric_value(&metrics, "chatd_main_call_input_tokens_total");
    assert!(wasted > 0.0 && all > 2.0 * wasted, "{wasted} of {all}");
    assert!(metrics.contains("chatd_turn_first_token_seconds_count{speculation=\"off\"} 2"));
    assert!(metrics.contains("chatd_main_call_decision_seconds_count 3"));
    let keys: Vec<&str> = requests
        .iter()
        .map(|r| r["prompt_cache_key"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(keys[0].len(), 32);
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one key per chat: {keys:?}"
    );
    assert!(!keys[0].contains("chat") && !keys[0].contains("alice"));
}

fn metric_value(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `llm.send_user`: off by default (no `user` field); on, every main request carries the
/// provider `user` field, a hash that is the same for all of a user's chats, differs
/// between users, and is neither the user id nor the prompt-cache key.
#[tokio::test]
async fn the_provider_user_field_is_an_opt_in_hash_of_the_user() {
    let fake = FakeLlm::start().await.unwrap();
    fake.set_default(text(&["Ok."]));
    let off = speculating_app(&fake).await;
    let mut ws = off.connect_showing("alice", "chat-u0").await;
    ws.send(&user_message("chat-u0", "m1", "hello")).await;
    collect_answer(&mut ws).await;
    assert!(fake.requests().iter().all(|r| r.get("user").is_none()));

    let fake = FakeLlm::start().await.unwrap();
    fake.set_default(text(&["Ok."]));
    let on = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.send_user = true;
        c.pipeline.postprocessing = false;
    })
    .await;
    for (user, chat) in [
        ("alice", "chat-u1"),
        ("alice", "chat-u2"),
        ("bob", "chat-u3"),
    ] {
        let mut ws = on.connect_showing(user, chat).await;
        ws.send(&user_message(chat, "m1", "hello")).await;
        collect_answer(&mut ws).await;
    }
    let requests = fake.requests();
    let field = |r: &Value, name: &str| r[name].as_str().unwrap_or_default().to_string();
    let users: Vec<String> = requests.iter().map(|r| field(r, "user")).collect();
    let alice = users[0].clone();
    assert_eq!(alice.len(), 32, "{users:?}");
    let bob = users.last().cloned().unwrap_or_default();
    assert_ne!(alice, bob);
    assert!(users.iter().all(|u| *u == alice || *u == bob), "{users:?}");
    assert!(
        users.iter().filter(|u| **u == alice).count() >= 2,
        "{users:?}"
    );
    let owner = chatd::crypto::UserHash::of(&chatd::auth::UserId::parse("alice").unwrap());
    assert!(!alice.contains("alice") && alice != owner.as_str());
    assert!(
        requests
            .iter()
            .all(|r| field(r, "prompt_cache_key") != field(r, "user"))
    );
}
