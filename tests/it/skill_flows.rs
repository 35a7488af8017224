//! Skills as the seeds describe them: each request of a multi-request call shows its
//! results as it finishes, rate limits wait however long (the user may cancel), a call
//! still running after `skills.long_wait` lets the answer finish and follows as a message,
//! and an embed's `content_hash` is checked when the client stores or re-sends it.

use std::time::Duration;

use chatd_protocol::{ErrorCode, ServerMessage, SkillStatus};
use chatd_test_harness::fake_llm::Gate;
use chatd_test_harness::fake_skill::SkillReply;
use serde_json::{Value, json};

use crate::skills::{
    call, calls, cancel_skill, offer, setup, setup_with, status, text, tool_result,
};
use crate::support::{collect_answer, user_message};

/// A rate limit is never a rejection, however long its reset (here 3 minutes, past the
/// old 120 s cap): the user sees `waiting` with the time, the answer goes on without the
/// results, and the user may cancel the waiting skill.
#[tokio::test]
async fn a_three_minute_rate_limit_waits_and_the_user_may_cancel_it() {
    let s = setup_with(|c| c.skills.long_wait = Duration::from_millis(100)).await;
    offer(&s.fake, &["demo-find"]);
    s.skill.respond(|_| SkillReply::Status {
        status: 429,
        retry_after: Some(180),
    });
    s.fake.push(calls(vec![call(
        "c1",
        "demo-find",
        json!([{"query": "busy"}]),
    )]));
    s.fake.push(text("The results will follow."));
    let mut ws = s.app.connect_showing("alice", "chat-3min").await;
    ws.send(&user_message("chat-3min", "m1", "find it")).await;
    let waiting = status(&mut ws, SkillStatus::Waiting).await;
    assert_eq!(waiting.preview_data["retry_after_seconds"], 180.0);
    assert!(waiting.preview_data["waiting_until"].as_i64().is_some());
    let (frames, _) = collect_answer(&mut ws).await;
    assert!(
        !frames.iter().any(|f| matches!(f,
            ServerMessage::SkillExecutionStatus(st) if st.status == SkillStatus::Error)),
        "never rejected"
    );
    assert_eq!(
        tool_result(&s.fake.requests()[1], "c1")["status"],
        "pending"
    );
    let ack = cancel_skill(&mut ws, &waiting.skill_task_id).await;
    assert_eq!(ack.status, "cancellation_requested");
    status(&mut ws, SkillStatus::Cancelled).await;
    assert_eq!(s.skill.seen().len(), 1, "not retried after the cancel");
}

/// Not only rate limits: a skill still working after `skills.long_wait` lets the answer
/// finish, and its results come as the automatic follow-up message.
#[tokio::test]
async fn a_slow_skill_lets_the_answer_finish_and_its_results_follow() {
    let s = setup_with(|c| c.skills.long_wait = Duration::from_millis(100)).await;
    offer(&s.fake, &["demo-find"]);
    let gate = Gate::new();
    let held = gate.clone();
    s.skill.respond(move |_| SkillReply::Hold {
        gate: held.clone(),
        then: Box::new(SkillReply::Json(json!({"results": [{"rank": 7}]}))),
    });
    s.fake.push(calls(vec![call(
        "c1",
        "demo-find",
        json!([{"query": "slow"}]),
    )]));
    s.fake
        .push(text("Still searching; the results will follow."));
    let mut ws = s.app.connect_showing("alice", "chat-slow").await;
    ws.send(&user_message("chat-slow", "m1", "find it")).await;
    let (_, answer) = collect_answer(&mut ws).await;
    assert!(
        answer
            .full_content_so_far
            .ends_with("the results will follow.")
    );
    let told = tool_result(&s.fake.requests()[1], "c1");
    assert_eq!(told["status"], "pending");
    assert!(
        told["message"].as_str().unwrap().contains("still working"),
        "{told}"
    );
    gate.release();
    let (_, follow_up) = collect_answer(&mut ws).await;
    assert_ne!(follow_up.task_id, answer.task_id);
    assert!(
        follow_up
            .full_content_so_far
            .starts_with("Done, here are the results of demo-find."),
        "{}",
        follow_up.full_content_so_far
    );
}

/// A three-request call shows each request's results as it finishes: the first request's
/// child embed arrives while the other two are still held at the provider, then the second,
/// then the third, and the parent embed collects them at the end.
#[tokio::test]
async fn a_three_request_skill_shows_each_requests_results_as_it_finishes() {
    let s = setup().await;
    offer(&s.fake, &["demo-find"]);
    let (second, third) = (Gate::new(), Gate::new());
    let (g2, g3) = (second.clone(), third.clone());
    s.skill.respond(move |seen| {
        let query = seen.body["query"].as_str().unwrap_or_default().to_string();
        let result = SkillReply::Json(json!({"results": [{"rank": 1, "title": query.clone()}]}));
        match query.as_str() {
            "two" => SkillReply::Hold {
                gate: g2.clone(),
                then: Box::new(result),
            },
            "three" => SkillReply::Hold {
                gate: g3.clone(),
                then: Box::new(result),
            },
            _ => result,
        }
    });
    s.fake.push(calls(vec![call(
        "c1",
        "demo-find",
        json!([{"id": 1, "query": "one"}, {"id": 2, "query": "two"}, {"id": 3, "query": "three"}]),
    )]));
    s.fake.push(text("Here they are."));
    let mut ws = s.app.connect_showing("alice", "chat-three").await;
    ws.send(&user_message("chat-three", "m1", "find three"))
        .await;
    let child = |m: &ServerMessage| match m {
        ServerMessage::SendEmbedData(e) if e.embed_type.as_deref() == Some("thing") => {
            let v: Value = toon_format::decode_default(e.content.as_deref()?).ok()?;
            v["title"].as_str().map(str::to_string)
        }
        _ => None,
    };
    // The first result is shown while two requests are still held.
    assert_eq!(ws.recv_until(child).await, "one");
    let progress = status(&mut ws, SkillStatus::Processing).await;
    assert_eq!(progress.preview_data["completed_requests"], 1);
    // The other two are held at the provider until released.
    s.skill
        .wait_until("two requests held", |k| k.in_flight() == 2)
        .await;
    second.release();
    assert_eq!(ws.recv_until(child).await, "two");
    third.release();
    assert_eq!(ws.recv_until(child).await, "three");
    let done = status(&mut ws, SkillStatus::Finished).await;
    assert_eq!(done.preview_data["result_count"], 3);
    let (_, answer) = collect_answer(&mut ws).await;
    assert!(answer.full_content_so_far.ends_with("Here they are."));
    let told = tool_result(&s.fake.requests()[1], "c1");
    let ids: Vec<i64> = told["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3], "grouped by request id, in request order");
}

/// An embed's `content_hash` is checked when the client stores it (against the content
/// chatd made for that version) and when it re-sends the plaintext (against the content).
#[tokio::test]
async fn an_embeds_content_hash_is_checked_when_stored_and_when_used() {
    let s = setup().await;
    offer(&s.fake, &["demo-vault"]);
    s.skill
        .respond(|_| SkillReply::Json(json!({"results": [{"note": "private"}]})));
    s.fake.push(calls(vec![call(
        "c1",
        "demo-vault",
        json!([{"query": "x"}]),
    )]));
    s.fake.push(text("Shown."));
    let mut ws = s.app.connect_showing("alice", "chat-hash").await;
    ws.send(&user_message("chat-hash", "m1", "show")).await;
    let (frames, _) = collect_answer(&mut ws).await;
    let parent = frames
        .iter()
        .rev()
        .find_map(|f| match f {
            ServerMessage::SendEmbedData(e) if e.status.as_deref() == Some("finished") => {
                Some(e.as_ref().clone())
            }
            _ => None,
        })
        .unwrap();
    let store = |hash: &str| {
        json!({"type": "store_embed", "payload": {
            "embed_id": parent.embed_id.as_str(), "encrypted_type": "enc-type",
            "encrypted_content": "enc-content", "status": "finished",
            "hashed_chat_id": chatd::store::hash_id("chat-hash"),
            "version_number": parent.version_number, "content_hash": hash,
        }})
    };
    ws.send_json(store("0000")).await;
    let refused = ws.recv_until(crate::support::error_code).await;
    assert_eq!(refused, ErrorCode::ContentHashMismatch);
    let made = parent.content_hash.clone().unwrap();
    ws.send_json(store(&made)).await;
    ws.recv_until(|m| matches!(m, ServerMessage::EmbedStored(_)).then_some(()))
        .await;
}
