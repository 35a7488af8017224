//! The early decision (issue 31): preprocessing's arguments stream, and the main call goes
//! out as soon as the fields it depends on are complete, while the model is still writing
//! the title and the rest. Preprocessing's reply is held at a gate after its first fields in
//! each test, so what happens before the rest arrives is observed, not raced. Speculation is
//! off: the only main call is the decided one.

use chatd_protocol::{PreprocessingStepKind, RejectionReason, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use serde_json::{Value, json};

use crate::support::{TestApp, collect_answer, spawn_app, turn_context, use_llm, user_message};

/// The decision fields, as a model following the schema writes them first.
fn decision(language: &str) -> Value {
    json!({
        "harmful_or_illegal_score": 0,
        "misuse_risk_score": 0,
        "prompt_injection_chance": 0.0,
        "language": language,
        "category": "software_development",
        "complexity": "simple",
        "needs_vision": false,
        "needs_reasoning": false,
        "relevant_app_skills": [],
        "relevant_focus_modes": [],
        "relevant_app_settings_and_memories": [],
    })
}

/// `{` and the members of `fields`, each followed by a comma (the object still open).
fn open_object(fields: &Value) -> String {
    let members: Vec<String> = fields
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{}: {v},", json!(k)))
        .collect();
    format!("{{{}", members.join(" "))
}

fn held(fake: &FakeLlm, gate: &Gate, before: String, after: &str) {
    fake.push_stage(
        "preprocess",
        Reply::ToolCallHeld {
            name: "preprocess".into(),
            before,
            gate: gate.clone(),
            after: after.into(),
        },
    );
}

async fn app(fake: &FakeLlm) -> TestApp {
    spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.pipeline.speculative_main_call = chatd::config::Speculation::Off;
        c.pipeline.postprocessing = false;
    })
    .await
}

fn system_prompt(request: &Value) -> &str {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
}

fn title_step(frame: &ServerMessage) -> Option<&chatd_protocol::PreprocessingStep> {
    match frame {
        ServerMessage::PreprocessingStep(s) if s.step == PreprocessingStepKind::TitleGenerated => {
            Some(s)
        }
        _ => None,
    }
}

#[tokio::test]
async fn the_answer_starts_once_the_decision_fields_are_in_and_the_title_follows() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held(
        &fake,
        &gate,
        open_object(&decision("de")),
        r#" "title": "Rust strings reversed", "icon_names": ["code"], "chat_tags": ["rust"]}"#,
    );
    fake.push(Reply::Text {
        chunks: vec!["Early answer.\n\n".into(), "More.".into()],
        delay: std::time::Duration::ZERO,
        usage: None,
    });
    let app = app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-e").await;
    ws.send(&user_message(
        "chat-e",
        "m1",
        "how do I reverse a string in rust",
    ))
    .await;

    // The title is still being written, yet the decided main call has gone out.
    gate.reached().await;
    fake.wait_for_requests(1).await;
    assert!(turn_context(&fake.requests()[0]).contains("`de`"));
    assert!(system_prompt(&fake.requests()[0]).contains("You are Max"));
    // ... and its first paragraph reaches the client before the title exists.
    let mut before_title = Vec::new();
    let first = ws
        .recv_until(|f| {
            before_title.push(f.clone());
            match f {
                ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
                _ => None,
            }
        })
        .await;
    assert!(first.full_content_so_far.starts_with("Early answer."));
    assert!(before_title.iter().all(|f| title_step(f).is_none()));
    let typing = before_title.iter().find_map(|f| match f {
        ServerMessage::AiTypingStarted(t) => Some(t.clone()),
        _ => None,
    });
    assert_eq!(typing.expect("ai_typing_started").title, None);
    let steps: Vec<PreprocessingStepKind> = before_title
        .iter()
        .filter_map(|f| match f {
            ServerMessage::PreprocessingStep(s) => Some(s.step),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        [
            PreprocessingStepKind::MateSelected,
            PreprocessingStepKind::ModelSelected
        ]
    );

    // The rest arrives: the title follows, before the final frame.
    gate.release();
    let (frames, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Early answer.\n\nMore.");
    let title = frames.iter().find_map(title_step).expect("title_generated");
    assert!(!title.skipped);
    assert_eq!(title.data["title"], "Rust strings reversed");
    assert_eq!(title.data["icon_names"], json!(["code"]));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_refusal_in_the_first_field_ends_the_turn_without_a_main_call() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held(
        &fake,
        &gate,
        r#"{"harmful_or_illegal_score": 9,"#.into(),
        r#" "misuse_risk_score": 0}"#,
    );
    let app = app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-r").await;
    ws.send(&user_message("chat-r", "m1", "something harmful"))
        .await;

    // Refused while the model is still writing: the rest of the reply is hung up on.
    let (_, last) = collect_answer(&mut ws).await;
    assert!(last.full_content_so_far.contains("can't help"));
    assert_eq!(
        last.rejection_reason,
        Some(RejectionReason::HarmfulOrIllegalDetected)
    );
    fake.wait_for_disconnect().await;
    assert!(fake.requests().is_empty(), "no main call");
    gate.release();
}

#[tokio::test]
async fn fields_in_another_order_wait_for_the_one_still_missing() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    // The title first, and the language only after the gate: the decision needs it.
    let mut first = json!({"title": "Reordered fields here"});
    for (k, v) in decision("fr").as_object().unwrap() {
        if k != "language" {
            first[k] = v.clone();
        }
    }
    held(&fake, &gate, open_object(&first), r#" "language": "fr"}"#);
    let app = app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-o").await;
    ws.send(&user_message("chat-o", "m1", "bonjour")).await;

    gate.reached().await;
    gate.release();
    let (frames, _) = collect_answer(&mut ws).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        turn_context(&requests[0]).contains("`fr`"),
        "the main call waited for the language"
    );
    // Decided with the whole reply: the title came with the first steps, as before.
    let title = frames.iter().find_map(title_step).expect("title_generated");
    assert_eq!(title.data["title"], "Reordered fields here");
}

#[tokio::test]
async fn a_reply_that_breaks_after_the_decision_still_answers() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    held(
        &fake,
        &gate,
        open_object(&decision("en")),
        r#" "title": oops not json"#,
    );
    let app = app(&fake).await;
    let mut ws = app.connect_showing("alice", "chat-b").await;
    ws.send(&user_message("chat-b", "m1", "hello")).await;
    gate.reached().await;
    fake.wait_for_requests(1).await;
    gate.release();
    let (frames, last) = collect_answer(&mut ws).await;
    assert!(!last.full_content_so_far.is_empty());
    // The decision stands; the title that never parsed is reported as missing.
    let title = frames.iter().find_map(title_step).expect("title_generated");
    assert_eq!(title.skip_reason.as_deref(), Some("no title was generated"));
    assert_eq!(fake.requests().len(), 1);
}
