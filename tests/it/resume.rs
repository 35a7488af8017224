//! Resumable answers: `resume_ai_task` from every position of a running and of a finished
//! turn (table-driven), a log gone after the resume window, another user's task, and the
//! catch-up of `set_active_chat` while a turn runs. Every case checks that the
//! `ai_message_update` sequences after `ai_task_resumed` run on from the position with no
//! gap and no duplicate, and that the text is the answer's.

use std::time::Duration;

use chatd_protocol::{ClientMessage, ErrorCode, ResumeAiTask, ServerMessage, TaskId};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::ws_client::WsClient;

use crate::support::{TestApp, chat_id, error_code, ping, spawn_app, use_llm, user_message};

const CHAT: &str = "chat-resume";

fn resume(chat: &str, task: &TaskId, last_sequence: u64) -> ClientMessage {
    ClientMessage::ResumeAiTask(ResumeAiTask {
        chat_id: chat_id(chat),
        task_id: task.clone(),
        last_sequence,
    })
}

/// What a device saw after asking to resume: whether it was recovered, then each
/// `ai_message_update` as (sequence, text, final), up to a pong (sent after the resume)
/// or, with `until_final`, up to the final frame.
async fn resumed(
    ws: &mut WsClient,
    chat: &str,
    task: &TaskId,
    from: u64,
    until_final: bool,
) -> (bool, Vec<(u64, String, bool)>) {
    ws.send(&resume(chat, task, from)).await;
    if !until_final {
        ws.send(&ping()).await;
    }
    let recovered = ws
        .recv_until(|m| match m {
            ServerMessage::AiTaskResumed(r) => Some(r.recovered),
            _ => None,
        })
        .await;
    let mut updates = Vec::new();
    loop {
        match ws.recv().await {
            ServerMessage::Pong(_) if !until_final => return (recovered, updates),
            ServerMessage::AiMessageUpdate(u) => {
                updates.push((u.sequence, u.full_content_so_far.clone(), u.is_final_chunk));
                if until_final && u.is_final_chunk {
                    return (recovered, updates);
                }
            }
            _ => {}
        }
    }
}

fn sequences(updates: &[(u64, String, bool)]) -> Vec<u64> {
    updates.iter().map(|u| u.0).collect()
}

/// An app whose model streams two paragraphs, stops at a gate, then streams two more.
async fn stalled_turn(gate: &Gate) -> (FakeLlm, TestApp, WsClient, TaskId) {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(Reply::Stall {
        chunks: vec!["One.\n\n".into(), "Two.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["Three.\n\n".into(), "Four.".into()],
            delay: Duration::ZERO,
            usage: None,
        }),
    });
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", CHAT).await;
    ws.send(&user_message(CHAT, "m1", "count to four")).await;
    let task = ws
        .recv_until(|m| match m {
            ServerMessage::AiTaskInitiated(t) => Some(t.ai_task_id.clone()),
            _ => None,
        })
        .await;
    gate.reached().await;
    // The sender saw the two paragraphs before the gate.
    ws.recv_until(|m| match m {
        ServerMessage::AiMessageUpdate(u) if u.sequence == 2 => Some(()),
        _ => None,
    })
    .await;
    (fake, app, ws, task)
}

#[tokio::test]
async fn resume_table_while_running_and_after_the_end() {
    let gate = Gate::new();
    let (_fake, app, mut sender, task) = stalled_turn(&gate).await;

    // While the turn runs: (position, recovered, sequences replayed).
    let running: [(u64, bool, Vec<u64>); 4] = [
        (0, true, vec![1, 2]),
        (1, true, vec![2]),
        (2, true, vec![]),
        (7, false, vec![]),
    ];
    let mut devices = Vec::new();
    for (from, recovered, replayed) in running {
        let mut ws = app.connect("alice").await;
        let (got, updates) = resumed(&mut ws, CHAT, &task, from, false).await;
        assert_eq!(got, recovered, "from {from}");
        assert_eq!(sequences(&updates), replayed, "from {from}");
        if from == 0 {
            assert_eq!(updates[0].1, "One.\n\n");
            assert_eq!(updates[1].1, "One.\n\nTwo.\n\n");
        }
        if recovered {
            devices.push((from, ws));
        }
    }

    // The live frames follow each resumed device on from where its replay ended.
    gate.release();
    let final_text = "One.\n\nTwo.\n\nThree.\n\nFour.";
    for (from, ws) in &mut devices {
        let mut next = 3;
        loop {
            let u = ws
                .recv_until(|m| match m {
                    ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
                    _ => None,
                })
                .await;
            assert_eq!(
                u.sequence, next,
                "device resumed from {from}: no gap, no duplicate"
            );
            next += 1;
            if u.is_final_chunk {
                assert_eq!(u.full_content_so_far, final_text);
                break;
            }
        }
    }
    let last = crate::support::collect_answer(&mut sender).await.1;
    assert_eq!(last.full_content_so_far, final_text);

    // After the end, inside the resume window: the rest of the log, up to the final frame.
    for (from, expected) in [(0, vec![1, 2, 3, 4, 5]), (2, vec![3, 4, 5]), (4, vec![5])] {
        let mut ws = app.connect("alice").await;
        let (recovered, updates) = resumed(&mut ws, CHAT, &task, from, true).await;
        assert!(recovered, "finished turn from {from}");
        assert_eq!(sequences(&updates), expected, "finished turn from {from}");
        assert_eq!(updates.last().unwrap().1, final_text);
    }
    let mut ws = app.connect("alice").await;
    let (recovered, updates) = resumed(&mut ws, CHAT, &task, 5, false).await;
    assert!(
        recovered && updates.is_empty(),
        "from the final frame: nothing more"
    );

    // Another user's task: their chat is refused like any foreign id; under a chat of
    // one's own, the task does not exist.
    let mut bob = app.connect("bob").await;
    bob.send(&resume(CHAT, &task, 0)).await;
    assert_eq!(bob.recv_until(error_code).await, ErrorCode::Forbidden);
    let (recovered, updates) = resumed(&mut bob, "bobs-chat", &task, 0, false).await;
    assert!(!recovered && updates.is_empty());
}

#[tokio::test]
async fn a_log_past_the_resume_window_is_not_recovered() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.cluster.resume_window = Duration::from_millis(200);
    })
    .await;
    let mut ws = app.connect_showing("alice", CHAT).await;
    ws.send(&user_message(CHAT, "m1", "hello")).await;
    let (frames, _) = crate::support::collect_answer(&mut ws).await;
    let task = frames
        .iter()
        .find_map(|m| match m {
            ServerMessage::AiTaskInitiated(t) => Some(t.ai_task_id.clone()),
            _ => None,
        })
        .unwrap();
    // Recovered inside the window; asked again until the window has passed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut first = true;
    loop {
        let (recovered, _) = resumed(&mut ws, CHAT, &task, 0, false).await;
        if !recovered {
            assert!(!first, "the log was there right after the turn");
            break;
        }
        first = false;
        assert!(
            tokio::time::Instant::now() < deadline,
            "the log never expired"
        );
        // Polling an expiry (within the connection's rate limit), not synchronising.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_device_that_opens_a_running_chat_gets_the_answer_so_far_then_the_rest() {
    let gate = Gate::new();
    let (_fake, app, _sender, _task) = stalled_turn(&gate).await;
    let mut late = app.connect("alice").await;
    late.send(&crate::support::set_active_chat(Some(CHAT)))
        .await;
    late.send(&ping()).await;
    let mut kinds = Vec::new();
    let mut updates = Vec::new();
    loop {
        match late.recv().await {
            ServerMessage::Pong(_) => break,
            ServerMessage::AiMessageUpdate(u) => {
                kinds.push("ai_message_update");
                updates.push((u.sequence, u.full_content_so_far));
            }
            other => kinds.push(other.type_name()),
        }
    }
    assert_eq!(
        kinds,
        [
            "active_chat_set_ack",
            "ai_typing_started",
            "ai_message_update"
        ]
    );
    assert_eq!(updates, [(2, "One.\n\nTwo.\n\n".to_string())]);
    gate.release();
    let rest = crate::support::collect_answer(&mut late).await.0;
    let seqs: Vec<u64> = rest
        .iter()
        .filter_map(|m| match m {
            ServerMessage::AiMessageUpdate(u) => Some(u.sequence),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [3, 4, 5]);
}
