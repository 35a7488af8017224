//! One chat turn end to end: devices, ownership, queueing, cancellation, and the
//! OpenAI-compatible client against the fake LLM over real HTTP.

use std::time::Duration;

use chatd_protocol::{ClientMessage, ErrorCode, ServerMessage, TaskId};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};

use crate::support::{collect_answer, error_code, spawn_app, use_llm, user_message};

fn text(chunks: &[&str]) -> Reply {
    Reply::Text {
        chunks: chunks.iter().map(|c| c.to_string()).collect(),
        delay: Duration::ZERO,
        usage: None,
    }
}

fn task_of(msg: &ServerMessage) -> Option<TaskId> {
    match msg {
        ServerMessage::AiTaskInitiated(t) => Some(t.ai_task_id.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn a_turn_reaches_both_devices_active_and_background() {
    let app = spawn_app(|_| {}).await;
    let mut active = app.connect_showing("alice", "chat-1").await;
    let mut other = app.connect("alice").await;

    active
        .send(&user_message("chat-1", "m1", "Hello there"))
        .await;
    let (frames, last) = collect_answer(&mut active).await;
    let kinds: Vec<&str> = frames.iter().map(ServerMessage::type_name).collect();
    assert_eq!(
        kinds[..6],
        [
            "chat_message_confirmed",
            "ai_task_initiated",
            "preprocessing_step",
            "preprocessing_step",
            "preprocessing_step",
            "ai_typing_started"
        ]
    );
    let chunks = kinds.iter().filter(|k| **k == "ai_message_update").count();
    assert!(
        chunks >= 4,
        "a multi-paragraph answer streams several chunks: {kinds:?}"
    );
    assert!(last.full_content_so_far.contains("Hello there"));
    assert!(last.full_content_so_far.contains("](https://"));
    assert!(!last.interrupted_by_revocation);
    assert_eq!(last.error_code, None);

    // The other device: confirmation, the plaintext message, typing, one completion; no chunks.
    let mut seen = Vec::new();
    let done = loop {
        let msg = other.recv().await;
        if let ServerMessage::AiBackgroundResponseCompleted(done) = &msg {
            break done.clone();
        }
        seen.push(msg);
    };
    let kinds: Vec<&str> = seen.iter().map(ServerMessage::type_name).collect();
    assert_eq!(
        kinds,
        [
            "chat_message_confirmed",
            "new_chat_message",
            "preprocessing_step",
            "preprocessing_step",
            "preprocessing_step",
            "ai_typing_started"
        ]
    );
    match &seen[1] {
        ServerMessage::NewChatMessage(m) => assert_eq!(m.content, "Hello there"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(done.full_content, last.full_content_so_far);
    assert_eq!(done.task_id, last.task_id);
}

#[tokio::test]
async fn another_user_cannot_write_show_or_cancel_a_foreign_chat() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Working on it.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text(&["Done."])),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut alice = app.connect_showing("alice", "chat-a").await;
    let mut bob = app.connect("bob").await;

    alice.send(&user_message("chat-a", "m1", "mine")).await;
    let task = alice.recv_until(task_of).await;
    gate.reached().await;

    bob.send(&user_message("chat-a", "m2", "let me in")).await;
    assert_eq!(error_code(&bob.recv().await), Some(ErrorCode::Forbidden));
    bob.send(&crate::support::set_active_chat(Some("chat-a")))
        .await;
    assert_eq!(error_code(&bob.recv().await), Some(ErrorCode::Forbidden));
    bob.send(&ClientMessage::CancelAiTask(chatd_protocol::CancelAiTask {
        task_id: task.clone(),
        chat_id: None,
    }))
    .await;
    assert_eq!(error_code(&bob.recv().await), Some(ErrorCode::Forbidden));

    gate.release();
    let (_, last) = collect_answer(&mut alice).await;
    assert_eq!(last.full_content_so_far, "Working on it.\n\nDone.");
    assert!(!last.interrupted_by_revocation);
    // Bob saw nothing of Alice's chat.
    bob.send_json(serde_json::json!({"type": "ping"})).await;
    assert!(matches!(bob.recv().await, ServerMessage::Pong(_)));
}

#[tokio::test]
async fn a_second_message_is_queued_and_answered_after_the_first() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["First answer.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text(&["End one."])),
    });
    fake.push(text(&["Second answer."]));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-q").await;

    ws.send(&user_message("chat-q", "m1", "one")).await;
    let first = ws.recv_until(task_of).await;
    gate.reached().await;
    ws.send(&user_message("chat-q", "m2", "two")).await;
    let queued = ws
        .recv_until(|m| match m {
            ServerMessage::MessageQueued(q) => Some(q.clone()),
            _ => None,
        })
        .await;
    assert_eq!(queued.active_task_id, first);
    assert_eq!(queued.user_message_id.as_str(), "m2");

    gate.release();
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.task_id, first);
    let second = ws.recv_until(task_of).await;
    assert_ne!(second, first);
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.task_id, second);
    assert_eq!(last.user_message_id.as_str(), "m2");
    assert_eq!(last.full_content_so_far, "Second answer.");

    // The second request carried the whole conversation, first answer included.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1]["messages"].as_array().unwrap();
    let contents: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"one") && contents.contains(&"two"),
        "{contents:?}"
    );
    assert!(
        contents.iter().any(|c| c.starts_with("First answer.")),
        "{contents:?}"
    );
}

#[tokio::test]
async fn cancel_stops_the_stream_and_closes_the_provider_connection() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Partial paragraph.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text(&["never"])),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-c").await;

    ws.send(&user_message("chat-c", "m1", "tell me a long story"))
        .await;
    let task = ws.recv_until(task_of).await;
    gate.reached().await;
    // The first paragraph has reached the client before we cancel.
    let first = ws
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
            _ => None,
        })
        .await;
    assert_eq!(first.full_content_so_far, "Partial paragraph.\n\n");
    ws.send(&ClientMessage::CancelAiTask(chatd_protocol::CancelAiTask {
        task_id: task.clone(),
        chat_id: None,
    }))
    .await;
    let (frames, last) = collect_answer(&mut ws).await;
    assert!(
        frames
            .iter()
            .any(|m| matches!(m, ServerMessage::AiTaskCancelRequested(c) if c.task_id == task))
    );
    assert!(last.interrupted_by_revocation);
    assert_eq!(last.full_content_so_far, "Partial paragraph.\n\n");
    fake.wait_for_disconnect().await;
    assert_eq!(fake.disconnects(), 1);
    // The chat is free again: a new message starts a new turn.
    fake.push(text(&["Fresh."]));
    ws.send(&user_message("chat-c", "m2", "again")).await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Fresh.");
}

#[tokio::test]
async fn a_turn_through_the_fake_llm_over_http() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::Text {
        chunks: vec![
            "Para".into(),
            "graph one.\n\nPara".into(),
            "graph two.".into(),
        ],
        delay: Duration::ZERO,
        usage: Some(chatd_test_harness::fake_llm::Usage {
            prompt_tokens: 11,
            completion_tokens: 7,
        }),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-h").await;
    ws.send(&user_message("chat-h", "m1", "Hi model")).await;
    let (frames, last) = collect_answer(&mut ws).await;
    let updates: Vec<_> = frames
        .iter()
        .filter_map(|m| match m {
            ServerMessage::AiMessageUpdate(u) => Some((u.sequence, u.full_content_so_far.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        updates,
        vec![
            (1, "Paragraph one.\n\n".to_string()),
            (2, "Paragraph one.\n\nParagraph two.".to_string()),
            (3, "Paragraph one.\n\nParagraph two.".to_string()),
        ]
    );
    assert_eq!(last.prompt_tokens, Some(11));
    assert_eq!(last.completion_tokens, Some(7));
    assert_eq!(last.model_name.as_deref(), Some("fake-model"));

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0];
    assert_eq!(body["model"], "fake-model");
    assert_eq!(body["stream"], true);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    // The user's message, then the turn's own context (date, language) after it.
    let [.., user, turn] = messages.as_slice() else {
        panic!("{messages:?}")
    };
    assert_eq!(user["role"], "user");
    assert_eq!(user["content"], "Hi model");
    assert_eq!(turn["role"], "system");
}

#[tokio::test]
async fn a_provider_failure_mid_stream_ends_the_turn_with_llm_unavailable() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::CutAfter {
        chunks: vec!["Before the cut.\n\n".into(), "half a sent".into()],
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-f").await;
    ws.send(&user_message("chat-f", "m1", "go")).await;
    let (frames, last) = collect_answer(&mut ws).await;
    let error = frames.iter().find_map(|m| match m {
        ServerMessage::Error(e) => Some(e.clone()),
        _ => None,
    });
    let error =
        error.unwrap_or_else(|| panic!("an error frame before the final frame: {frames:?}"));
    assert_eq!(error.code, ErrorCode::LlmUnavailable);
    assert_eq!(error.chat_id.as_ref().map(|c| c.as_str()), Some("chat-f"));
    assert_eq!(last.error_code, Some(ErrorCode::LlmUnavailable));
    assert_eq!(last.full_content_so_far, "Before the cut.\n\nhalf a sent");
    // No retry after tokens were streamed.
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn an_unreachable_provider_is_retried_once_then_reported() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::HttpError {
        status: 503,
        body: String::new(),
    });
    fake.push(Reply::HttpError {
        status: 502,
        body: String::new(),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-u").await;
    ws.send(&user_message("chat-u", "m1", "anyone?")).await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.error_code, Some(ErrorCode::LlmUnavailable));
    assert_eq!(fake.requests().len(), 2, "one retry before the first token");

    fake.push(Reply::HttpError {
        status: 503,
        body: String::new(),
    });
    fake.push(text(&["Recovered."]));
    ws.send(&user_message("chat-u", "m2", "now?")).await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.error_code, None);
    assert_eq!(last.full_content_so_far, "Recovered.");
}

/// A message id the user sent before is never answered twice: while its turn runs, a
/// copy (plain or with the history) is acknowledged and learns the running task; once
/// answered, a copy is acknowledged and dropped.
#[tokio::test]
async fn a_message_id_sent_again_is_never_answered_twice() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Held.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text(&["Done."])),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-dup").await;
    ws.send(&user_message("chat-dup", "m1", "one")).await;
    let task = ws.recv_until(task_of).await;
    gate.reached().await;
    let confirmed = |m: &ServerMessage| match m {
        ServerMessage::ChatMessageConfirmed(c) => Some(c.clone()),
        _ => None,
    };
    let running = |m: &ServerMessage| match m {
        ServerMessage::AiTaskInitiated(t) => Some(t.clone()),
        _ => None,
    };
    ws.send(&user_message("chat-dup", "m1", "one")).await;
    let again = ws.recv_until(confirmed).await;
    assert_eq!(again.message_id.as_str(), "m1");
    assert_eq!(again.new_messages_v, 1, "a copy is not counted again");
    let plain = ws.recv_until(running).await;
    assert_eq!(
        (plain.ai_task_id, plain.status.as_str()),
        (task.clone(), "already_processing")
    );
    let with_history = crate::support::user_message_with("chat-dup", "m1", "one", |m| {
        m.message.message_history = Some(vec![crate::support::history_entry(
            "m1",
            chatd_protocol::Role::User,
            "one",
            1,
        )]);
    });
    ws.send(&with_history).await;
    let running = ws.recv_until(running).await;
    assert_eq!(running.ai_task_id, task);
    assert_eq!(running.status, "already_processing");
    gate.release();
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.task_id, task);
    ws.recv_until(|m| matches!(m, ServerMessage::AiTypingEnded(_)).then_some(()))
        .await;
    // Answered: a plain copy and a copy with history are both acknowledged and dropped.
    ws.send(&user_message("chat-dup", "m1", "one")).await;
    ws.send(&with_history).await;
    ws.send_json(serde_json::json!({"type": "ping"})).await;
    loop {
        match ws.recv().await {
            ServerMessage::Pong(_) => break,
            ServerMessage::ChatMessageConfirmed(c) => assert_eq!(c.message_id.as_str(), "m1"),
            other => panic!("a duplicate started something: {other:?}"),
        }
    }
    assert_eq!(fake.requests().len(), 1, "one model call for m1, ever");

    // The same id with other content is not a copy: a typed error, nothing stored or
    // answered, and the connection goes on (issue 35, defect 6: it was confirmed, then
    // silence).
    ws.send(&user_message("chat-dup", "m1", "something else entirely"))
        .await;
    let error = ws
        .recv_until(|m| match m {
            ServerMessage::Error(e) => Some(e.clone()),
            ServerMessage::ChatMessageConfirmed(c) => panic!("confirmed as a copy: {c:?}"),
            _ => None,
        })
        .await;
    assert_eq!(error.code, ErrorCode::MessageIdReused);
    assert_eq!(error.message_id.as_ref().map(|m| m.as_str()), Some("m1"));
    fake.push(text(&["Second."]));
    ws.send(&user_message("chat-dup", "m2", "something else entirely"))
        .await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Second.");
}

/// An answer ends at `llm.max_output_tokens` even when the provider ignores `max_tokens`
/// (sent with the request): the connection is closed, the turn ends with
/// `answer_too_long` and the text so far.
#[tokio::test]
async fn an_endless_answer_is_cut_at_max_output_tokens() {
    let fake = FakeLlm::start().await.unwrap();
    // 10 tokens allowed: cut past 80 bytes. The provider would send 4,000, paced, so
    // that it is still sending when chatd hangs up.
    fake.push(Reply::Text {
        chunks: vec!["twenty bytes each.. ".to_string(); 200],
        delay: Duration::from_millis(5),
        usage: None,
    });
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.max_output_tokens = 10;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-long").await;
    ws.send(&user_message("chat-long", "m1", "never stop"))
        .await;
    let (frames, last) = collect_answer(&mut ws).await;
    assert_eq!(last.error_code, Some(ErrorCode::AnswerTooLong));
    assert!(
        frames
            .iter()
            .any(|m| error_code(m) == Some(ErrorCode::AnswerTooLong)),
        "an error frame too"
    );
    let len = last.full_content_so_far.len();
    assert!((81..=100).contains(&len), "cut right after 80 bytes: {len}");
    assert_eq!(fake.requests()[0]["max_tokens"], 10);
    fake.wait_for_disconnect().await;
}

/// A turn ends at `pipeline.turn_deadline` whatever the provider does (here it stalls
/// after its first paragraph): `turn_deadline` and the text so far.
#[tokio::test]
async fn a_stalled_answer_ends_at_the_turn_deadline() {
    let fake = FakeLlm::start().await.unwrap();
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Started.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text(&["never sent"])),
    });
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.pipeline.turn_deadline = Duration::from_millis(1500);
        c.llm.idle_timeout = Duration::from_secs(60);
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-slow").await;
    ws.send(&user_message("chat-slow", "m1", "take your time"))
        .await;
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.error_code, Some(ErrorCode::TurnDeadline));
    assert_eq!(last.full_content_so_far, "Started.\n\n");
    fake.wait_for_disconnect().await;
}

/// A provider 429 is waited out as its `Retry-After` says: the devices are told the answer
/// waits, then it streams as usual, no error.
#[tokio::test]
async fn a_rate_limited_answer_waits_as_told_then_goes_on() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::RateLimited {
        retry_after: Some(1),
    });
    fake.push(text(&["After the wait."]));
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-429").await;
    ws.send(&user_message("chat-429", "m1", "hello")).await;
    let waiting = ws
        .recv_until(|m| match m {
            ServerMessage::AiTaskWaiting(w) => Some(w.clone()),
            _ => None,
        })
        .await;
    assert_eq!(waiting.reason, "rate_limited");
    assert_eq!(waiting.retry_after_ms, 1000);
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.error_code, None);
    assert_eq!(last.full_content_so_far, "After the wait.");
    assert_eq!(fake.requests().len(), 2);
}
