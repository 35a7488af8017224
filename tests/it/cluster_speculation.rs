//! The speculation record shared in cluster mode, with real processes: two chatd nodes on
//! one redis-server and one PostgreSQL, `speculative_main_call = "on"`. A chat whose turns
//! alternate between the nodes keeps its sticky guess: the second node's first turn for the
//! chat opens its early main call with the plan the first node's turn decided (the fake
//! model sees it arrive while preprocessing is held), and that call is the one used.

use std::time::Duration;

use chatd::crypto::UserHash;
use chatd::pipeline::speculation::record::redis::chat_key;
use chatd_protocol::ServerMessage;
use chatd_test_harness::chatd_proc::ChatdProcess;
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply, function_reply};
use chatd_test_harness::postgres::Postgres;
use chatd_test_harness::process::wait_until;
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::support::{chat_id, collect_answer, set_active_chat, user_message};

const BIN: &str = env!("CARGO_BIN_EXE_chatd");
const SECRET: &str = "cluster-speculation-secret";
const MASTER_KEY: &str = "3c5e7b9d2f4a7f3a9c2e5b1d8f4a6c0e2b4d6f8a1c3e5b7d9f0a2c4e6b8d0f1a";

async fn node(i: usize, fake: &FakeLlm, redis: &RedisServer, pg: &Postgres) -> ChatdProcess {
    let config = format!(
        r#"
[auth]
secret = "{SECRET}"

[llm]
provider = "openai_compatible"
base_url = "{llm}"
api_key = "unused"
model = "fake-model"

[cache]
backend = "redis"
redis_url = "{redis}"

[store]
url = "{pg}"

[links]
enabled = false

[pipeline]
speculative_main_call = "on"
postprocessing = false

[cluster]
enabled = true
node_id = "node-{i}"
"#,
        llm = fake.base_url(),
        redis = redis.url(),
        pg = pg.url("speculation"),
    );
    let env = [("CHATD_MASTER_KEY", MASTER_KEY.to_string())];
    ChatdProcess::start(std::path::Path::new(BIN), &config, &env)
        .await
        .unwrap()
}

async fn connect_showing(node: &ChatdProcess, user: &str, chat: &str) -> WsClient {
    let token = chatd::auth::TokenKeys::from_secret(SECRET.as_bytes())
        .mint(
            &chatd::auth::UserId::parse(user).unwrap(),
            Duration::from_secs(600),
        )
        .unwrap();
    let mut ws = WsClient::connect(&node.ws_url(&token)).await.unwrap();
    ws.send(&set_active_chat(Some(chat))).await;
    ws.recv_until(|m| matches!(m, ServerMessage::ActiveChatSetAck(_)).then_some(()))
        .await;
    ws
}

/// Preprocessing's next reply waits at `gate`, then decides French.
fn held_preprocessing(fake: &FakeLlm, gate: &Gate) {
    fake.push_stage(
        "preprocess",
        Reply::Stall {
            chunks: Vec::new(),
            gate: gate.clone(),
            then: Box::new(function_reply("preprocess", json!({"language": "fr"}))),
        },
    );
}

fn french(request: &Value) -> bool {
    crate::support::turn_context(request).contains("`fr`")
}

async fn metrics(node: &ChatdProcess) -> String {
    reqwest::get(node.http_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn calls(outcome: &str) -> String {
    format!("chatd_speculative_main_calls_total{{outcome=\"{outcome}\"}} 1")
}

#[tokio::test]
async fn a_chat_keeps_its_sticky_guess_when_its_turns_alternate_between_nodes() {
    let redis = RedisServer::start().await.unwrap();
    let pg = Postgres::start().await.unwrap();
    pg.create_database("speculation").await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_default(Reply::Text {
        chunks: vec!["D'accord.".into()],
        delay: Duration::ZERO,
        usage: None,
    });
    let (one, two) = (
        node(1, &fake, &redis, &pg).await,
        node(2, &fake, &redis, &pg).await,
    );
    let chat = "chat-sticky";

    // Node 1, the chat's first turn: nothing known, so the early call guesses the plan of
    // an unremarkable message (English); preprocessing decides French, the guess is wasted.
    let gate = Gate::new();
    held_preprocessing(&fake, &gate);
    let mut here = connect_showing(&one, "alice", chat).await;
    here.send(&user_message(chat, "m1", "un")).await;
    gate.reached().await;
    fake.wait_for_requests(1).await;
    assert!(!french(&fake.requests()[0]), "nothing known yet");
    gate.release();
    collect_answer(&mut here).await;
    let first = fake.requests();
    assert_eq!(first.len(), 2, "the wasted guess and the decided call");
    assert!(french(&first[1]));
    assert!(metrics(&one).await.contains(&calls("wasted")));

    // The turn's record reaches Redis (written off the turn's path), under a key that
    // names neither the user nor the chat.
    let owner = UserHash::of(&chatd::auth::UserId::parse("alice").unwrap());
    let key = chat_key(&owner, &chat_id(chat));
    let redis_ref = &redis;
    wait_until("the chat's speculation record", || {
        let key = key.clone();
        async move { redis_ref.cli(&["EXISTS", &key]).await.unwrap().trim() == "1" }
    })
    .await
    .unwrap();

    // Node 2, the chat's first turn there: the early call already carries the chat's last
    // plan (French) while preprocessing is still held, and it is the call that answers.
    let gate = Gate::new();
    held_preprocessing(&fake, &gate);
    let mut there = connect_showing(&two, "alice", chat).await;
    there.send(&user_message(chat, "m2", "deux")).await;
    gate.reached().await;
    fake.wait_for_requests(3).await;
    assert!(french(&fake.requests()[2]), "the sticky guess from node 1");
    gate.release();
    let (_, last) = collect_answer(&mut there).await;
    assert_eq!(last.full_content_so_far, "D'accord.");
    assert_eq!(fake.requests().len(), 3, "the early call was the main call");
    let on_two = metrics(&two).await;
    assert!(on_two.contains(&calls("used")), "{on_two}");
    assert!(!on_two.contains("outcome=\"wasted\""), "{on_two}");
}
