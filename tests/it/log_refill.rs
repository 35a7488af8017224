//! Redis comes back from a snapshot older than a running turn's newest frames (killed and
//! started again from its last `SAVE`): the log has lost them. The writer finds the log
//! behind its next frame and appends the lost ones again before it, so a device that
//! resumes the turn on another node gets every update in order and the whole text
//! (issue 37: the gaps left after a Redis restart).

use chatd_protocol::{AiMessageUpdate, ServerMessage};
use chatd_test_harness::fake_llm::{Gate, Reply};
use chatd_test_harness::redis::RedisServer;

use chatd_test_harness::process::wait_until;

use crate::cluster::{Cluster, HALF_WRITTEN, Shared, half_written, task_of, updates_until_final};
use crate::support::{answer_task, collect_answer, ping, replayed_from_start, user_message};

const WHOLE: &str = "First part.\n\nSecond part.\n\nThird part.\n\nThe end.";

fn text(chunks: &[&str]) -> Vec<String> {
    chunks.iter().map(|c| c.to_string()).collect()
}

#[tokio::test]
async fn frames_a_restarted_redis_lost_are_logged_again_in_their_place() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let mut c = Cluster::start_outlasting_restarts(2, redis).await;
    let chat = "chat-log-refill";
    let (first, second) = (Gate::new(), Gate::new());
    c.fake.push(Reply::Stall {
        chunks: text(&["First part.\n\n"]),
        gate: first.clone(),
        then: Box::new(Reply::Stall {
            chunks: text(&["Second part.\n\n"]),
            gate: second.clone(),
            then: Box::new(Reply::Text {
                chunks: text(&["Third part.\n\n", "The end."]),
                delay: std::time::Duration::ZERO,
                usage: None,
            }),
        }),
    });
    let mut here = c.connect_showing(0, "bob", chat).await;
    let mut there = c.connect_showing(1, "bob", chat).await;
    here.send(&user_message(chat, "m1", "go on")).await;
    first.reached().await;
    let text_is = |want: &'static str| {
        move |m: &ServerMessage| match m {
            ServerMessage::AiMessageUpdate(u) if u.full_content_so_far.ends_with(want) => {
                Some(u.task_id.clone())
            }
            _ => None,
        }
    };
    // The other node's device has the first part: it went through the log and the bus.
    there.recv_until(text_is("First part.\n\n")).await;
    // The snapshot Redis will come back from, then a frame logged after it.
    c.redis_mut().server().cli(&["SAVE"]).await.unwrap();
    first.release();
    second.reached().await;
    let task = there.recv_until(text_is("Second part.\n\n")).await;

    // Redis dies without saving and comes back from the snapshot: the second part is gone
    // from the log. The rest of the answer follows.
    c.redis_mut().server().kill().await;
    c.redis_mut().server().start_again().await.unwrap();
    second.release();
    here.recv_until(|m| match m {
        ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => Some(()),
        _ => None,
    })
    .await;

    // A device resuming the turn from its start on the other node reads it from the log.
    let mut late = c.connect_showing(1, "bob", chat).await;
    let frames = replayed_from_start(&mut late, chat, &task).await;
    assert_eq!(answer_task(&frames), task);
    let (updates, sequences, expected) = numbered(&frames);
    assert_eq!(
        sequences, expected,
        "every update in order, none lost: {updates:#?}"
    );
    let texts: Vec<&str> = updates
        .iter()
        .map(|u| u.full_content_so_far.as_str())
        .collect();
    assert!(
        texts.iter().any(|t| t.ends_with("Second part.\n\n")),
        "the lost update is back: {texts:?}"
    );
    assert_eq!(texts.last(), Some(&WHOLE));
}

/// Redis restarts empty while a turn waits for its model: its lease and its log are gone.
/// The turn's next renewal puts the lease back (the chat is held again), and a device that
/// resumes the turn on the other node waits for the writer for a lease. The model is still
/// silent after that, so the answer is `recovered: false`, and then nothing more of the
/// turn reaches that device ("nothing more: sync instead"); it used to get the rest. Once
/// the writer goes on, its log is whole again and a new resume gets the rest in order.
#[tokio::test]
async fn after_an_empty_restart_a_resume_waits_for_the_running_turn_and_keeps_its_word() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let mut c = Cluster::start_outlasting_restarts(2, redis).await;
    let chat = "chat-empty-restart-resume";
    let gate = Gate::new();
    c.fake.push(Reply::Stall {
        chunks: text(&["First part.\n\n"]),
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: text(&["Second part.\n\n", "Third part.\n\n", "The end."]),
            delay: std::time::Duration::ZERO,
            usage: None,
        }),
    });
    let mut here = c.connect_showing(0, "bob", chat).await;
    here.send(&user_message(chat, "m1", "go on")).await;
    gate.reached().await;
    let task = here
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) => Some(u.task_id.clone()),
            _ => None,
        })
        .await;

    c.redis_mut().server().restart().await.unwrap();
    let lease = format!("{{c:{chat}}}:lease");
    let server = c.redis_mut().server();
    chatd_test_harness::process::wait_until("the lease put back by a renewal", || async {
        server
            .cli(&["EXISTS", &lease])
            .await
            .is_ok_and(|o| o.trim() == "1")
    })
    .await
    .unwrap();

    let mut gone = c.connect(1, "bob").await;
    gone.send(&resume(chat, &task, 1)).await;
    gone.send(&ping()).await;
    let recovered = recovered(&mut gone).await;
    assert!(!recovered, "no log while the model is silent past a lease");
    gone.recv_until(|m| matches!(m, ServerMessage::Pong(_)).then_some(()))
        .await;

    // A device on the same node showing the chat: it gets the rest, and `gone` would
    // have had each frame enqueued in the same delivery.
    let mut watcher = c.connect_showing(1, "bob", chat).await;
    gate.release();
    watcher
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => Some(()),
            _ => None,
        })
        .await;
    gone.send(&ping()).await;
    loop {
        match gone.recv().await {
            ServerMessage::Pong(_) => break,
            ServerMessage::AiMessageUpdate(u) => {
                panic!("a frame after `recovered: false`: {}", u.sequence)
            }
            _ => {}
        }
    }

    // The writer went on: its log is whole again, and a resume from the start gets it all.
    let mut late = c.connect(1, "bob").await;
    let frames = replayed_from_start(&mut late, chat, &task).await;
    let (updates, sequences, expected) = numbered(&frames);
    assert_eq!(sequences, expected, "the log is whole again");
    assert_eq!(
        updates.last().map(|u| u.full_content_so_far.as_str()),
        Some(WHOLE)
    );
}

/// The replay's updates, their sequences, and the sequences a whole log numbers (1..=n).
fn numbered(frames: &[ServerMessage]) -> (Vec<&AiMessageUpdate>, Vec<u64>, Vec<u64>) {
    let updates: Vec<_> = frames
        .iter()
        .filter_map(|f| match f {
            ServerMessage::AiMessageUpdate(u) => Some(u),
            _ => None,
        })
        .collect();
    let sequences: Vec<u64> = updates.iter().map(|u| u.sequence).collect();
    let expected = (1..=sequences.len() as u64).collect();
    (updates, sequences, expected)
}

fn resume(chat: &str, task: &chatd_protocol::TaskId, from: u64) -> chatd_protocol::ClientMessage {
    chatd_protocol::ClientMessage::ResumeAiTask(chatd_protocol::ResumeAiTask {
        chat_id: crate::support::chat_id(chat),
        task_id: task.clone(),
        last_sequence: from,
    })
}

/// A turn that ended before Redis came back without its log (or from a snapshot taken
/// before its end): a device whose node was out meanwhile reads that log later, so the node
/// that wrote it appends it again once its bus is back (chaos: missed turns).
#[tokio::test]
async fn an_ended_turn_whose_log_redis_lost_is_logged_again_by_its_node() {
    let mut c = Cluster::start(2).await;
    let chat = "chat-refilled";
    let mut d0 = c.connect_showing(0, "dave", chat).await;
    c.fake.push(Reply::Text {
        chunks: vec!["Kept ".into(), "in memory.".into()],
        delay: std::time::Duration::ZERO,
        usage: None,
    });
    d0.send(&user_message(chat, "m1", "remember this")).await;
    let task = task_of(&mut d0).await;
    let answer = updates_until_final(&mut d0, &task).await;
    assert_eq!(answer.last().map(|u| u.1.as_str()), Some("Kept in memory."));

    // The turn is over on node 0 (its log ended, and is kept there).
    c.wait_for_metric(0, "chatd_turn_logs_kept 1").await;
    // Redis comes back without the turn's log; node 0, whose bus reconnects, writes it again.
    c.redis_mut().server().restart().await.unwrap();
    c.wait_for_metric(0, "chatd_turn_logs_refilled_total 1")
        .await;

    // A device on the other node (one that was out meanwhile) gets the whole turn from it.
    let mut d1 = c.connect(1, "dave").await;
    d1.send(&resume(chat, &task, 0)).await;
    let recovered = recovered(&mut d1).await;
    assert!(
        recovered,
        "node 0 logged:\n{}\nnode 1 logged:\n{}",
        c.node(0).log_text(),
        c.node(1).log_text()
    );
    let got = updates_until_final(&mut d1, &task).await;
    assert_eq!(
        got.last(),
        answer.last(),
        "the log read after the restart: {got:?}"
    );

    // The store lost the record that m1 was answered too, and node 0 put it back with the
    // log: a copy of m1 from a device that never had the answer gets that answer, not a
    // second one (chaos runs AE and AF).
    let mut d2 = c.connect(1, "dave").await;
    d2.send(&user_message(chat, "m1", "remember this")).await;
    let (frames, last) = collect_answer(&mut d2).await;
    assert_eq!(last.task_id, task, "{frames:#?}");
    assert_eq!(last.full_content_so_far, "Kept in memory.");
    let started = frames
        .iter()
        .any(|f| matches!(f, ServerMessage::AiTaskInitiated(_)));
    assert!(!started, "m1 answered again: {frames:#?}");
}

/// Redis comes back from a snapshot that held a turn's lease but not its log, after the
/// turn had ended (the snapshot was taken after an empty restart, when the writer had put
/// its lease back but not yet its log). The node that takes the stale lease over waits for
/// the writer to put the log back, and ends nothing itself (chaos run AG: a `node_lost` at
/// sequence 1, for a turn answered in full, fenced the write-back off).
#[tokio::test]
async fn a_stale_lease_without_its_log_waits_for_the_log_to_come_back() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let c = Cluster::start_outlasting_restarts(2, redis).await;
    let chat = "chat-stale-lease";
    let gate = Gate::new();
    c.fake.push(Reply::Stall {
        chunks: text(&["Kept "]),
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: text(&["in memory."]),
            delay: std::time::Duration::ZERO,
            usage: None,
        }),
    });
    let mut d0 = c.connect_showing(0, "dave", chat).await;
    d0.send(&user_message(chat, "m1", "remember this")).await;
    let task = task_of(&mut d0).await;
    gate.reached().await;
    let lease = format!("{{c:{chat}}}:lease");
    let held = c.redis().single().cli(&["HGETALL", &lease]).await.unwrap();
    gate.release();
    let answer = updates_until_final(&mut d0, &task).await;
    assert_eq!(answer.last().map(|u| u.1.as_str()), Some("Kept in memory."));
    c.wait_for_metric(0, "chatd_turn_logs_kept 1").await;

    // What that snapshot holds: the lease, expired, and no log.
    let (log, meta) = (
        format!("{{c:{chat}}}:log:{task}"),
        format!("{{c:{chat}}}:logmeta:{task}"),
    );
    let stale = "redis.call('DEL', KEYS[2], KEYS[3]) \
        redis.call('HSET', KEYS[1], unpack(ARGV, 2)) \
        redis.call('HSET', KEYS[1], 'until', 1) \
        redis.call('ZADD', KEYS[4], 1, ARGV[1]) return 1";
    let mut args = vec![
        "EVAL",
        stale,
        "4",
        &lease,
        &log,
        &meta,
        "{turns}:leases",
        chat,
    ];
    args.extend(held.lines().map(str::trim).filter(|l| !l.is_empty()));
    let server = c.redis().single();
    server.cli(&args).await.unwrap();
    // A node takes it over (under the next generation) before the writer's bus is back.
    let generation = |fields: &str| {
        fields
            .lines()
            .skip_while(|l| l.trim() != "gen")
            .nth(1)
            .map(str::to_string)
    };
    let first = generation(&held);
    wait_until("the stale lease taken over", || async {
        let now = server.cli(&["HGETALL", &lease]).await.unwrap_or_default();
        generation(&now).is_some_and(|g| Some(&g) != first.as_ref())
    })
    .await
    .unwrap();
    server
        .cli(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .await
        .unwrap();
    c.wait_for_metric(0, "chatd_turn_logs_refilled_total 1")
        .await;
    wait_until("the chat handed on", || async {
        server
            .cli(&["EXISTS", &lease])
            .await
            .is_ok_and(|o| o.trim() == "0")
    })
    .await
    .unwrap();

    // The log ends with the answer, for a device on either node.
    let mut d1 = c.connect(1, "dave").await;
    d1.send(&resume(chat, &task, 0)).await;
    let got = updates_until_final(&mut d1, &task).await;
    assert_eq!(
        got.last(),
        answer.last(),
        "node 0 logged:\n{}\nnode 1 logged:\n{}",
        c.node(0).log_text(),
        c.node(1).log_text()
    );
}

/// A turn whose node died, ended by the node that took it over with `node_lost`, whose log
/// Redis then lost: the taker writes back the whole log it had read, not only the ending it
/// added (a device resuming from the start was told the log could not recover it; CI: the
/// paused-node test, when Redis lost the log while the taker wrote its ending).
#[tokio::test]
async fn a_taker_writes_back_the_whole_log_of_the_turn_it_ended() {
    let mut c = Cluster::start(2).await;
    let chat = "chat-taken-refilled";
    let (_gate, task, mut devices) = half_written(&c, "erin", chat, &[0, 1]).await;
    let (d1, logged) = (&mut devices[1], HALF_WRITTEN);

    // Node 0 dies; node 1 ends the turn from its log, and keeps what it wrote.
    c.kill(0).await;
    let lost = final_update(d1, &task).await;
    assert_eq!(lost.full_content_so_far, logged);
    c.wait_for_metric(1, "chatd_turn_logs_kept 1").await;

    // Redis comes back empty; node 1, whose bus reconnects, writes the log back.
    c.redis_mut().server().restart().await.unwrap();
    c.wait_for_metric(1, "chatd_turn_logs_refilled_total 1")
        .await;
    let mut d2 = c.connect(1, "erin").await;
    d2.send(&resume(chat, &task, 0)).await;
    let recovered = recovered(&mut d2).await;
    assert!(recovered, "node 1 logged:\n{}", c.node(1).log_text());
    let got = updates_until_final(&mut d2, &task).await;
    let sequences: Vec<u64> = got.iter().map(|u| u.0).collect();
    assert_eq!(
        sequences,
        (1..=lost.sequence).collect::<Vec<_>>(),
        "{got:?}"
    );
    assert_eq!(got.last().map(|u| u.1.as_str()), Some(logged));
}

/// Whether the device's `resume_ai_task` was answered `recovered: true`.
async fn recovered(ws: &mut chatd_test_harness::ws_client::WsClient) -> bool {
    ws.recv_until(|m| match m {
        ServerMessage::AiTaskResumed(r) => Some(r.recovered),
        _ => None,
    })
    .await
}

/// The final `ai_message_update` of `task` a device gets.
async fn final_update(
    ws: &mut chatd_test_harness::ws_client::WsClient,
    task: &chatd_protocol::TaskId,
) -> AiMessageUpdate {
    ws.recv_until(|m| match m {
        ServerMessage::AiMessageUpdate(u) if &u.task_id == task && u.is_final_chunk => {
            Some(u.clone())
        }
        _ => None,
    })
    .await
}
