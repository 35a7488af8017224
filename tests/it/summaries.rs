//! Summaries carried forward (`pipeline.carry_summary`, issue 34 item 2): the summary
//! postprocessing writes after a chat's answer joins that chat's next main request, quoted
//! as data in its per-turn system message after the history (the speculative call's
//! request included; the messages before it are the previous request's, byte for byte), and preprocessing in another
//! chat of the same user gets it, never another user's. Assertions are on the requests the
//! fake LLM received; every step waits for `post_processing_completed`, after which the
//! summary is kept.

use chatd::pipeline::summary::{CHAT_HEADER, RECENT_HEADER};
use chatd_protocol::{PostProcessingCompleted, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, function_reply};
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::support::{
    TestApp, collect_answer, extends_prefix, spawn_app, turn_context, use_llm, user_message,
    user_message_with,
};

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The next postprocessing call answers with `summary`.
fn summarise(fake: &FakeLlm, summary: &str) {
    fake.push_stage(
        "postprocess",
        function_reply(
            "postprocess",
            json!({"follow_up_request_suggestions": [], "new_chat_request_suggestions": [],
                "chat_summary": summary, "harmful_response": 0}),
        ),
    );
}

async fn post_processed(ws: &mut WsClient) -> PostProcessingCompleted {
    ws.recv_until(|m| match m {
        ServerMessage::PostProcessingCompleted(p) => Some(p.clone()),
        _ => None,
    })
    .await
}

/// One answered and postprocessed turn whose summary is `summary`.
async fn turn(app: &TestApp, fake: &FakeLlm, user: &str, chat: &str, id: &str, summary: &str) {
    summarise(fake, summary);
    let mut ws = app.connect_showing(user, chat).await;
    ws.send(&user_message(chat, id, "Let us plan something"))
        .await;
    collect_answer(&mut ws).await;
    assert_eq!(post_processed(&mut ws).await.chat_summary, summary);
}

#[tokio::test]
async fn a_chats_summary_joins_its_next_main_prompt_as_quoted_data() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        // The early call is kept only if it is the very request the turn decides: the
        // summary must be in it.
        c.pipeline.speculative_main_call = chatd::config::Speculation::On;
    })
    .await;
    turn(
        &app,
        &fake,
        "alice",
        "chat-a",
        "m1",
        "Alice plans a trip to Lisbon",
    )
    .await;
    assert!(!turn_context(&fake.requests()[0]).contains(CHAT_HEADER));

    // The client sends its (older) copy back; the server's own is newer and wins.
    summarise(&fake, "Alice plans a trip to Lisbon in May");
    let mut ws = app.connect_showing("alice", "chat-a").await;
    let next = user_message_with("chat-a", "m2", "And the hotels?", |m| {
        m.chat_summary = Some("an older client copy".into());
    });
    ws.send(&next).await;
    collect_answer(&mut ws).await;
    post_processed(&mut ws).await;
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "each turn kept its early call");
    let metrics = app.state.metrics.render();
    assert!(
        metrics.contains("chatd_speculative_main_calls_total{outcome=\"used\"} 2"),
        "{metrics}"
    );
    let prompt = turn_context(&requests[1]);
    let quoted = format!("{CHAT_HEADER}\n> Alice plans a trip to Lisbon");
    assert!(prompt.contains(&quoted), "{prompt}");
    assert!(
        prompt.ends_with("> Alice plans a trip to Lisbon"),
        "the last part"
    );
    assert!(!prompt.contains("an older client copy"));
    assert!(
        !system_prompt(&requests[1]).contains("Lisbon"),
        "not in the prefix"
    );
    // The summary changed the per-turn message only: the second request repeats the
    // first's messages before it, byte for byte (the provider's cached prefix).
    assert!(extends_prefix(&requests[0], &requests[1]), "{requests:#?}");
    // Postprocessing extended the same summary.
    let post = &fake.stage_requests("postprocess")[1];
    assert!(system_prompt(post).contains("Alice plans a trip to Lisbon"));
}

#[tokio::test]
async fn a_new_chats_preprocessing_gets_the_users_other_recent_summaries_only() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    turn(
        &app,
        &fake,
        "alice",
        "chat-a",
        "m1",
        "Alice compared two laptops",
    )
    .await;
    turn(
        &app,
        &fake,
        "bob",
        "chat-b",
        "m1",
        "Bob asked about tax returns",
    )
    .await;
    turn(
        &app,
        &fake,
        "alice",
        "chat-c",
        "m1",
        "Alice started learning Go",
    )
    .await;

    let preprocess = fake.stage_requests("preprocess");
    assert_eq!(preprocess.len(), 3);
    // Alice's first chat saw no other chat; her new one sees the first, not Bob's.
    assert!(!system_prompt(&preprocess[0]).contains(RECENT_HEADER));
    let prompt = system_prompt(&preprocess[2]);
    let quoted = format!("{RECENT_HEADER}\n> - Alice compared two laptops");
    assert!(prompt.contains(&quoted), "{prompt}");
    assert!(!prompt.contains("Bob asked"), "{prompt}");
    assert!(!prompt.contains("Alice started learning Go"), "not its own");
    assert!(
        !system_prompt(&preprocess[1]).contains("Alice"),
        "nor Bob Alice's"
    );
}

#[tokio::test]
async fn with_carrying_switched_off_no_summary_joins_a_prompt() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.pipeline.carry_summary = false;
    })
    .await;
    turn(
        &app,
        &fake,
        "alice",
        "chat-a",
        "m1",
        "Alice plans a trip to Lisbon",
    )
    .await;
    summarise(&fake, "s");
    let mut ws = app.connect_showing("alice", "chat-a").await;
    let next = user_message_with("chat-a", "m2", "And the hotels?", |m| {
        m.chat_summary = Some("the client's copy".into());
    });
    ws.send(&next).await;
    collect_answer(&mut ws).await;
    post_processed(&mut ws).await;
    turn(&app, &fake, "alice", "chat-c", "m1", "s").await;

    for request in fake.requests() {
        let prompt = format!("{}\n{}", system_prompt(&request), turn_context(&request));
        assert!(!prompt.contains(CHAT_HEADER), "{prompt}");
        assert!(!prompt.contains("Lisbon") && !prompt.contains("client's copy"));
    }
    for request in fake.stage_requests("preprocess") {
        let prompt = system_prompt(&request);
        assert!(!prompt.contains(RECENT_HEADER) && !prompt.contains("Lisbon"));
    }
    // Postprocessing still reads the client's copy, as before.
    let post = &fake.stage_requests("postprocess")[1];
    assert!(system_prompt(post).contains("the client's copy"));
}
