//! The demo page in headless Chromium (`tests/browser/cluster.mjs`) on node A of a two-node
//! cluster (`cluster.rs`'s harness: real chatd processes, one redis-server, PostgreSQL): an
//! answer that runs on node B (started by a device of the same user there) streams to the
//! page, node B is SIGKILLed mid-answer, node A takes the turn over and ends it with
//! `node_lost`, and the page says so as a notice of its own, not as "Stopped."; the page's
//! socket never dropped and the chat goes on. The script prints `@need <action>` when the
//! servers must act, as in `browser.rs`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use chatd_test_harness::fake_llm::{Gate, Reply};
use chatd_test_harness::process::find_binary;
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::cluster::{Cluster, Shared};
use crate::support::user_message;

/// The page's node and the node the answer runs on (and dies with).
const PAGE_NODE: usize = 0;
const TURN_NODE: usize = 1;

#[tokio::test]
async fn the_page_shows_an_answer_cut_by_a_lost_node_as_lost() {
    let node = find_binary("node", &[], "apt-get install nodejs").unwrap();
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let web = "\n[web]\ndemo = true\ndev_login = true\n";
    let mut c = Cluster::start_with(2, redis, web).await;
    let gate = Gate::new();
    // The device on node B that starts the answer (its socket drops with node B).
    let mut elsewhere: Option<WsClient> = None;

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut child = tokio::process::Command::new(node)
        .arg(root.join("tests/browser/cluster.mjs"))
        .env("CHATD_URL", c.node(PAGE_NODE).http_url("/"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut output = Vec::new();
    let flows = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            println!("{line}");
            output.push(line.clone());
            let Some(need) = line.strip_prefix("@need ") else {
                continue;
            };
            let (action, arg) = need.split_once(' ').unwrap_or((need, "null"));
            match action {
                "answer-on-the-other-node" => {
                    // Another device of the user, on node B, asks in the chat the page shows:
                    // the turn runs on node B and stalls after two paragraphs.
                    let chat: String = serde_json::from_str(arg).unwrap();
                    c.fake.push(Reply::Stall {
                        chunks: vec!["First part.\n\n".into(), "Second part.\n\n".into()],
                        gate: gate.clone(),
                        then: Box::new(Reply::Text {
                            chunks: vec!["Never sent.".into()],
                            delay: Duration::ZERO,
                            usage: None,
                        }),
                    });
                    let mut ws = c.connect_showing(TURN_NODE, "alice", &chat).await;
                    ws.send(&user_message(&chat, "m-elsewhere", "asked on node B"))
                        .await;
                    gate.reached().await;
                    elsewhere = Some(ws);
                }
                "kill-the-turns-node" => c.kill(TURN_NODE).await,
                other => panic!("the browser script asked for `{other}`"),
            }
            stdin.write_all(b"ok\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(180), flows)
        .await
        .expect("the browser flow did not finish within 180 s");
    gate.release();
    drop(elsewhere);
    let status = child.wait().await.unwrap();
    assert!(
        status.success(),
        "the browser script failed ({status}); node A's log:\n{}",
        c.node(PAGE_NODE).log_text()
    );
    assert_eq!(
        output.last().map(String::as_str),
        Some("cluster flow passed")
    );
}
