//! A node cut off the bus for a moment (Redis down, its data kept) misses the frames other
//! nodes publish meanwhile; once its subscription is back, its devices get them from the
//! turn's log, in order, before the live ones (issue 37's sequence gaps). The node running
//! the turn keeps its log whole across the outage (its appends, and the frames behind them,
//! wait for Redis).

use std::time::Duration;

use chatd_protocol::ServerMessage;
use chatd_test_harness::fake_llm::{Gate, Reply};
use chatd_test_harness::redis::RedisServer;

use crate::cluster::{Cluster, Shared};
use crate::support::user_message;

const WHOLE: &str = "First part.\n\nSecond part.\n\nThird part.\n\nThe end.";

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
    let mut sequences = vec![first_on_there];
    let last = loop {
        let update = there
            .recv_until(|m| match m {
                ServerMessage::AiMessageUpdate(u) => Some(u.clone()),
                _ => None,
            })
            .await;
        sequences.push(update.sequence);
        if update.is_final_chunk {
            break update;
        }
    };
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
