//! The fault suite (issue 18): the model provider cuts a stream in the middle of a tool
//! call's arguments, stalls past the idle timeout (twice: the retry too), sends a malformed
//! chunk, and answers 429 once; Redis is frozen (SIGSTOP) mid-turn. Each case ends typed;
//! afterwards no task and no file descriptor is left over (counted before and after, in this
//! process, which holds chatd and the fake provider), and every message chatd acknowledged
//! is still in the next turn's history. (Redis killed and restarted empty mid-turn:
//! `redis_cache.rs` and `cluster.rs`; Vault sealed, unreachable and rotated: `vault.rs`.)

use std::time::Duration;

use chatd_protocol::{ErrorCode, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::ws_client::WsClient;

use crate::skills::text;
use crate::support::{collect_answer, conversation, spawn_app, use_llm, user_message};

/// Open file descriptors and live tokio tasks of this process.
fn counts() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count);
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    (fds, tasks)
}

/// Waits (bounded) until the counts are back at or below `before`; returns the last seen.
async fn settled(before: (usize, usize)) -> (usize, usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = counts();
        if (now.0 <= before.0 && now.1 <= before.1) || tokio::time::Instant::now() > deadline {
            return now;
        }
        // Closing sockets and ending tasks is the runtime's work: let it run.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn turn(ws: &mut WsClient, id: &str, content: &str) -> Option<ErrorCode> {
    ws.send(&user_message("chat-faults", id, content)).await;
    let (_, last) = collect_answer(ws).await;
    ws.recv_until(|m| matches!(m, ServerMessage::AiTypingEnded(_)).then_some(()))
        .await;
    last.error_code
}

#[tokio::test]
async fn provider_faults_end_turns_typed_and_leak_nothing() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.idle_timeout = Duration::from_millis(300);
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut ws = app.connect_showing("zed", "chat-faults").await;
    fake.push(text("Warm."));
    assert_eq!(turn(&mut ws, "m0", "warm up").await, None);
    let before = counts();

    let never = Gate::new();
    let stall = || Reply::Stall {
        chunks: Vec::new(),
        gate: never.clone(),
        then: Box::new(text("never")),
    };
    let cases: Vec<(&str, Vec<Reply>, Option<ErrorCode>)> = vec![
        (
            "cut mid tool-call arguments",
            vec![Reply::CutInToolCall {
                name: "docs-search".into(),
                partial_arguments: "{\"requests\": [{\"query\": \"rea".into(),
            }],
            Some(ErrorCode::LlmUnavailable),
        ),
        (
            "stalled past the idle timeout, and again on the retry",
            vec![stall(), stall()],
            Some(ErrorCode::LlmUnavailable),
        ),
        (
            "a malformed chunk",
            vec![Reply::Raw {
                data: vec!["{\"choices\": [{\"delta\": {\"content\": ".into()],
            }],
            Some(ErrorCode::LlmUnavailable),
        ),
        (
            "429 once, then an answer",
            vec![
                Reply::RateLimited {
                    retry_after: Some(0),
                },
                text("After the wait."),
            ],
            None,
        ),
    ];
    for (i, (name, replies, want)) in cases.into_iter().enumerate() {
        for r in replies {
            fake.push(r);
        }
        let got = turn(
            &mut ws,
            &format!("m{}", i + 1),
            &format!("question {}", i + 1),
        )
        .await;
        assert_eq!(got, want, "{name}");
    }

    // Nothing acknowledged is lost: every message is in the next turn's history.
    fake.push(text("All good."));
    assert_eq!(turn(&mut ws, "m9", "and finally").await, None);
    let history = conversation(fake.requests().last().unwrap());
    for i in 0..=4 {
        let asked = if i == 0 {
            "warm up".to_string()
        } else {
            format!("question {i}")
        };
        assert!(
            history.iter().any(|(r, c)| r == "user" && *c == asked),
            "{asked} is in the history: {history:?}"
        );
    }

    let after = settled(before).await;
    assert!(
        after.0 <= before.0,
        "file descriptors: {} before, {} after",
        before.0,
        after.0
    );
    assert!(
        after.1 <= before.1,
        "tasks: {} before, {} after",
        before.1,
        after.1
    );
}

/// Redis frozen (SIGSTOP) in the middle of a turn: the answer still reaches the device, its
/// caching fails within the cache deadline (logged, not shown), a message sent while Redis
/// stays frozen gets a typed `cache_unavailable`, and once Redis thaws the chat goes on
/// (answered, or its history asked for: both typed). No task or descriptor is left over.
#[tokio::test]
async fn redis_frozen_mid_turn_ends_typed_and_recovers() {
    let redis = chatd_test_harness::redis::RedisServer::start()
        .await
        .unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        crate::redis_cache::use_redis(c, &redis);
        c.cache.timeout = Duration::from_millis(300);
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut ws = app.connect_showing("yan", "chat-faults").await;
    fake.push(text("Warm."));
    assert_eq!(turn(&mut ws, "m0", "warm up").await, None);
    let before = counts();

    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Before the freeze.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text("After it.")),
    });
    ws.send(&user_message("chat-faults", "m1", "a long one"))
        .await;
    gate.reached().await;
    redis.pause().await.unwrap();
    gate.release();
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Before the freeze.\n\nAfter it.");
    ws.recv_until(|m| matches!(m, ServerMessage::AiTypingEnded(_)).then_some(()))
        .await;

    ws.send(&user_message("chat-faults", "m2", "while frozen"))
        .await;
    let refused = ws.recv_until(crate::support::error_code).await;
    assert_eq!(refused, ErrorCode::CacheUnavailable);

    redis.resume().await.unwrap();
    fake.push(text("Back."));
    ws.send(&user_message("chat-faults", "m3", "after the thaw"))
        .await;
    match crate::support::outcome(&mut ws).await {
        crate::support::Outcome::Answer(a) => assert_eq!(a.error_code, None),
        crate::support::Outcome::NeedHistory(_) => {}
        other => panic!("a typed outcome after the thaw, got {other:?}"),
    }
    drop(ws);
    let after = settled(before).await;
    assert!(
        after.0 <= before.0,
        "file descriptors: {before:?} → {after:?}"
    );
    assert!(after.1 <= before.1, "tasks: {before:?} → {after:?}");
}
