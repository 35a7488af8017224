//! A node cut off the bus for a moment (Redis down, its data kept) misses the frames other
//! nodes publish meanwhile; once its subscription is back, its devices get them from the
//! turn's log, in order, before the live ones (issue 37's sequence gaps). The node running
//! the turn keeps its log whole across the outage (its appends, and the frames behind them,
//! wait for Redis).

use std::time::Duration;

use chatd_protocol::{AiMessageUpdate, ServerMessage};
use chatd_test_harness::fake_llm::{Gate, Reply};
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;

use crate::cluster::{Cluster, Shared};
use crate::support::user_message;

const WHOLE: &str = "First part.\n\nSecond part.\n\nThird part.\n\nThe end.";

/// The sequences of the updates a device gets up to the final one, and the final one.
async fn updates_to_the_end(ws: &mut WsClient) -> (Vec<u64>, AiMessageUpdate) {
    let mut sequences = Vec::new();
    loop {
        let update = ws
            .recv_until(|m| match m {
                ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
                _ => None,
            })
            .await;
        sequences.push(update.sequence);
        if update.is_final_chunk {
            return (sequences, update);
        }
    }
}

#[tokio::test]
async fn frames_published_while_a_node_was_off_the_bus_reach_its_devices_in_order() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let mut c = Cluster::start_with(2, redis, "").await;
    let chat = "chat-bus-outage";
    let gate = Gate::new();
    c.fake.push(Reply::Stall {
        chunks: vec!["First part.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec![
                "Second part.\n\n".into(),
                "Third part.\n\n".into(),
                "The end.".into(),
            ],
            delay: Duration::ZERO,
            usage: None,
        }),
    });
    let mut here = c.connect_showing(0, "bob", chat).await;
    let mut there = c.connect_showing(1, "bob", chat).await;
    here.send(&user_message(chat, "m1", "go on")).await;
    gate.reached().await;
    let first = |m: &ServerMessage| match m {
        ServerMessage::AiMessageUpdate(u) => Some(u.sequence),
        _ => None,
    };
    let first_on_there = there.recv_until(first).await;

    // Redis goes away (its data kept) while the rest of the answer is written: the frames
    // wait for the log (no device sees a frame its log lacks), and the other node's
    // subscription is down meanwhile.
    c.redis_mut().server().stop_keeping_data().await.unwrap();
    gate.release();
    c.redis_mut().server().start_again().await.unwrap();
    // The device on the turn's node gets the whole answer once the log has it.
    here.recv_until(|m| match m {
        ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => {
            assert_eq!(u.full_content_so_far, WHOLE);
            Some(())
        }
        _ => None,
    })
    .await;

    // The other node's device gets every update after the one it had, in order, to the
    // final one with the whole answer.
    let (mut sequences, last) = updates_to_the_end(&mut there).await;
    sequences.insert(0, first_on_there);
    let expected: Vec<u64> = (first_on_there..first_on_there + sequences.len() as u64).collect();
    if sequences != expected {
        for i in 0..2 {
            let log = c.node(i).log_text();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("bus") || l.contains("log") || l.contains("WARN"))
                .collect();
            eprintln!("node {i}:\n{}", lines.join("\n"));
        }
    }
    assert_eq!(sequences, expected, "no gap, no repeat");
    assert_eq!(last.full_content_so_far, WHOLE);
    assert_eq!(last.error_code, None);
}

/// A turn that begins and ends while a node is off the bus (its Redis user may not use
/// channels for a moment: its subscriptions are dropped and cannot come back): none of its
/// frames reach that node, and its device had no frame of the turn to follow. Once the
/// node is back on the bus it finds the turn among the user's recent ones and its device
/// gets the whole turn from the log (issue 37: turns missed by devices on a node whose
/// Redis connection was cut).
#[tokio::test]
async fn a_turn_that_began_and_ended_while_a_node_was_off_the_bus_reaches_its_devices() {
    let c = cluster_with_a_node_to_cut().await;
    let chat = "chat-off-the-bus";
    let mut here = c.connect_showing(0, "bob", chat).await;
    let mut there = c.connect_showing(1, "bob", chat).await;

    // Node 2 loses its channels: its subscriber is dropped and cannot subscribe again.
    off_the_bus(&c).await;

    c.fake.push(Reply::Text {
        chunks: vec!["First part.\n\n".into(), "The end.".into()],
        delay: Duration::ZERO,
        usage: None,
    });
    here.send(&user_message(chat, "m1", "go on")).await;
    let whole = here
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => Some(u.clone()),
            _ => None,
        })
        .await;
    assert_eq!(whole.full_content_so_far, "First part.\n\nThe end.");

    // Back on the bus: the device on node 2 gets the turn from its first update to its
    // final one, in order.
    back_on_the_bus(&c).await;
    let (sequences, last) = updates_to_the_end(&mut there).await;
    let expected: Vec<u64> = (1..=sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "every update, in order");
    assert_eq!(last.task_id, whole.task_id);
    assert_eq!(last.full_content_so_far, whole.full_content_so_far);
}

/// Two nodes on one redis-server; node 2 (the second) uses a Redis user whose channels can
/// be taken away ([`off_the_bus`]).
async fn cluster_with_a_node_to_cut() -> Cluster {
    let server = RedisServer::start().await.unwrap();
    let cut_user = [
        "ACL", "SETUSER", "cut", "on", ">cut-pw", "~*", "&*", "+@all",
    ];
    server.cli(&cut_user).await.unwrap();
    let cut_url = format!("redis://cut:cut-pw@127.0.0.1:{}", server.port());
    Cluster::start_with_env(2, Shared::Server(server), "", |i| match i {
        2 => vec![("CHATD__CACHE__REDIS_URL", cut_url.clone())],
        _ => Vec::new(),
    })
    .await
}

/// Node 2 loses its channels: its subscriber is dropped and cannot subscribe again
/// (polled: Redis tells no one when it drops a subscriber).
async fn off_the_bus(c: &Cluster) {
    cli(c, &["ACL", "SETUSER", "cut", "resetchannels"]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cli(c, &["PUBSUB", "CHANNELS", "{n:node-2}*"])
        .await
        .contains("node-2")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node 2 kept its channels"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn back_on_the_bus(c: &Cluster) {
    cli(c, &["ACL", "SETUSER", "cut", "allchannels"]).await;
}

async fn cli(c: &Cluster, args: &[&str]) -> String {
    match c.redis() {
        Shared::Server(r) => r.cli(args).await.unwrap(),
        Shared::Cluster(_) => unreachable!(),
    }
}
