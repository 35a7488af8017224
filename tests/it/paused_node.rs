//! A node frozen past its lease (SIGSTOP) while it answers: another node ends the turn with
//! `node_lost` and the text its log held. When the node thaws it must not go on with the
//! answer where the devices can see it: whatever it writes after its lease lapsed waits for
//! the store's word, and a turn the store lost meanwhile (Redis came back empty) ends on
//! that node as it ended on the other, with the text the log held (chaos: two `node_lost`
//! texts for one turn).

use chatd_protocol::{ClientMessage, ErrorCode, ResumeAiTask, ServerMessage};

use crate::cluster::{Cluster, HALF_WRITTEN, half_written, updates_until_final};
use chatd_test_harness::process::wait_until;

use crate::support::chat_id;

#[tokio::test]
async fn a_thawed_node_whose_lost_turn_the_store_forgot_ends_it_with_the_logged_text() {
    let mut c = Cluster::start(2).await;
    let chat = "chat-frozen";
    let (gate, task, mut devices) = half_written(&c, "carol", chat, &[0, 1]).await;
    let (d1, logged) = (&mut devices[1], HALF_WRITTEN);

    // Node 0 freezes with the answer half written; node 1 ends the turn from its log.
    c.node(0).pause().await.unwrap();
    let lost = d1
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.task_id == task && u.is_final_chunk => {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(lost.error_code, Some(ErrorCode::NodeLost));
    assert_eq!(lost.full_content_so_far, logged);

    // Redis forgets it all; the model sends the rest of the answer; node 0 thaws.
    let redis = c.redis_mut().server();
    assert_eq!(redis.cli(&["FLUSHALL"]).await.unwrap().trim(), "OK");
    gate.release();
    c.node(0).resume().await.unwrap();

    // Once node 0 ended the turn, its log tells a device that resumes it what node 1 told
    // its devices: nothing past the logged text.
    c.wait_for_metric(0, r#"chatd_turns_total{outcome="error"} 1"#)
        .await;
    let mut d2 = c.connect(1, "carol").await;
    d2.send(&ClientMessage::ResumeAiTask(ResumeAiTask {
        chat_id: chat_id(chat),
        task_id: task.clone(),
        last_sequence: 0,
    }))
    .await;
    let updates = updates_until_final(&mut d2, &task).await;
    let (last_sequence, last_text) = updates.last().cloned().unwrap_or_default();
    assert_eq!(
        last_text, logged,
        "node 0 ended the turn with other text than node 1: {updates:?}"
    );
    assert_eq!(last_sequence, lost.sequence, "{updates:?}");
    assert!(
        updates.iter().all(|(_, text)| !text.contains("Third part")),
        "node 0 logged what it wrote after its lease lapsed: {updates:?}"
    );
}

/// A lone node frozen past its lease: no other node takes the turn over meanwhile, and the
/// store refuses the lapsed lease when the node thaws, so what the node writes after is
/// dropped. The turn still ends, from its log, with `node_lost`: the node leaves the
/// expired lease to be taken over (its own look for lost turns finds it) instead of
/// freeing the chat with no ending written (chaos run AH: devices not showing the chat
/// never heard that a cancelled turn had ended).
#[tokio::test]
async fn a_lapsed_turn_that_no_node_took_over_still_ends() {
    let c = Cluster::start(1).await;
    let chat = "chat-frozen-alone";
    let (gate, task, mut devices) = half_written(&c, "carol", chat, &[0]).await;
    let (d0, logged) = (&mut devices[0], HALF_WRITTEN);

    // Frozen until the store's clock is past the lease.
    c.node(0).pause().await.unwrap();
    let redis = c.redis().single();
    let lease = format!("{{c:{chat}}}:lease");
    wait_until("the lease expired by the store's clock", || async {
        let until = redis
            .cli(&["HGET", &lease, "until"])
            .await
            .unwrap_or_default();
        let now = redis.cli(&["TIME"]).await.unwrap_or_default();
        let now_ms = now
            .lines()
            .next()
            .and_then(|s| s.trim().parse::<u64>().ok());
        let until_ms = until.trim().parse::<u64>().ok();
        matches!((now_ms, until_ms), (Some(n), Some(u)) if n * 1000 > u)
    })
    .await
    .unwrap();
    gate.release();
    c.node(0).resume().await.unwrap();

    let last = updates_until_final(d0, &task).await;
    let (_, text) = last.last().cloned().unwrap_or_default();
    assert_eq!(text, logged, "the ending holds what the log held: {last:?}");
    d0.recv_until(|m| match m {
        ServerMessage::AiTypingEnded(t) if t.task_id == task => Some(()),
        _ => None,
    })
    .await;
}

/// A node frozen past its lease while Redis loses the turn's log (it came back empty) but
/// not its lease: the node that takes the lease over finds no log and waits for it. When
/// the frozen node thaws and hears the turn was taken, it puts back the entries it had
/// logged (not its later frames), and the taker ends the turn right after them, where the
/// devices are (chaos run AJ: the taker ended it at sequence 1 from an empty log, which
/// the devices that had ten updates dropped, and never heard the turn had ended).
#[tokio::test]
async fn a_thawed_node_puts_back_the_log_the_store_lost_for_the_taker() {
    let c = Cluster::start(2).await;
    let chat = "chat-put-back";
    let (gate, task, mut devices) = half_written(&c, "carol", chat, &[0, 1]).await;
    let logged = HALF_WRITTEN;

    // Node 0 freezes; the store loses the log (the lease stays, and lapses).
    c.node(0).pause().await.unwrap();
    let redis = c.redis().single();
    let (log, meta) = (
        format!("{{c:{chat}}}:log:{task}"),
        format!("{{c:{chat}}}:logmeta:{task}"),
    );
    assert_eq!(redis.cli(&["DEL", &log, &meta]).await.unwrap().trim(), "2");
    c.wait_for_metric(1, "chatd_lost_turns_total 1").await;

    // Node 0 thaws with the rest of the answer on its way: it is not logged, and the
    // turn ends after what the devices had.
    gate.release();
    c.node(0).resume().await.unwrap();
    for d in &mut devices {
        let updates = updates_until_final(d, &task).await;
        let last = updates.last().cloned().unwrap_or_default();
        assert_eq!(
            last,
            (3, logged.to_string()),
            "{updates:?}\nnode 0 logged:\n{}\nnode 1 logged:\n{}",
            c.node(0).log_text(),
            c.node(1).log_text()
        );
    }
}
