//! Cluster mode with real processes: three chatd nodes on one redis-server and one
//! PostgreSQL, a user's devices spread over them. Frames reach every device in the same
//! order; a message for a busy chat waits in Redis and is answered once, after the running
//! turn; a cancel sent to another node stops the turn; a device resumes on a third node;
//! the running node SIGKILLed ends the turn with `node_lost` within the lease; and Redis
//! holds no plaintext afterwards.

use std::time::Duration;

use chatd_protocol::{ClientMessage, ErrorCode, ResumeAiTask, ServerMessage, TaskId};
use chatd_test_harness::chatd_proc::ChatdProcess;
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::postgres::Postgres;
use chatd_test_harness::process::wait_until;
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::redis_cluster::RedisCluster;
use chatd_test_harness::ws_client::WsClient;

use crate::support::{
    chat_id, collect_answer, history_entry, outcome, set_active_chat, user_message,
    user_message_with,
};

const BIN: &str = env!("CARGO_BIN_EXE_chatd");
const SECRET: &str = "cluster-test-secret";
const MASTER_KEY: &str = "7f3a9c2e5b1d8f4a6c0e2b4d6f8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d2f4a";

/// The Redis the nodes share: one server, or a 3-master Redis Cluster.
pub(crate) enum Shared {
    Server(RedisServer),
    Cluster(RedisCluster),
}

impl Shared {
    fn url(&self) -> String {
        match self {
            Shared::Server(r) => r.url(),
            Shared::Cluster(c) => c.seed_url(),
        }
    }

    pub(crate) async fn dump(&self) -> Vec<(String, Vec<u8>)> {
        match self {
            Shared::Server(r) => r.dump().await.unwrap(),
            Shared::Cluster(c) => c.dump().await.unwrap(),
        }
    }

    /// The (sharded) pub/sub channels subscribed right now.
    async fn channels(&self) -> String {
        match self {
            Shared::Server(r) => r.cli(&["PUBSUB", "CHANNELS", "{n:*"]).await.unwrap(),
            Shared::Cluster(c) => {
                let mut all = String::new();
                for node in 0..c.ports().len() {
                    all += &c
                        .cli(node, &["PUBSUB", "SHARDCHANNELS", "{n:*"])
                        .await
                        .unwrap();
                }
                all
            }
        }
    }

    pub(crate) fn server(&mut self) -> &mut RedisServer {
        match self {
            Shared::Server(r) => r,
            Shared::Cluster(_) => panic!("this test restarts a single redis-server"),
        }
    }

    /// The single redis-server, to read and write its keys.
    pub(crate) fn single(&self) -> &RedisServer {
        match self {
            Shared::Server(r) => r,
            Shared::Cluster(_) => panic!("this test needs a single redis-server"),
        }
    }
}

pub(crate) struct Cluster {
    nodes: Vec<ChatdProcess>,
    redis: Shared,
    pub(crate) fake: FakeLlm,
    _pg: Postgres,
}

impl Cluster {
    pub(crate) async fn start(n: usize) -> Cluster {
        Self::start_on(n, Shared::Server(RedisServer::start().await.unwrap())).await
    }

    async fn start_on(n: usize, redis: Shared) -> Cluster {
        Self::start_with(n, redis, "").await
    }

    /// `n` nodes whose configuration ends with `extra` (TOML).
    pub(crate) async fn start_with(n: usize, redis: Shared, extra: &str) -> Cluster {
        Self::start_with_env(n, redis, extra, |_| Vec::new()).await
    }

    /// `n` nodes whose turn leases outlast a Redis restart on a loaded machine. With the
    /// 2 s lease a slow restart keeps every renewal from the store until the lease lapses,
    /// and a lapsed turn whose lease the store lost ends as lost (rightly: another node may
    /// have ended it meanwhile), which is not what a test of riding out a restart is about.
    pub(crate) async fn start_outlasting_restarts(n: usize, redis: Shared) -> Cluster {
        Self::launch(n, redis, "", "8s", |_| Vec::new()).await
    }

    /// [`Cluster::start_with`], node `i` (from 1) also getting the environment `env(i)`.
    pub(crate) async fn start_with_env(
        n: usize,
        redis: Shared,
        extra: &str,
        env: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Cluster {
        Self::launch(n, redis, extra, "2s", env).await
    }

    async fn launch(
        n: usize,
        redis: Shared,
        extra: &str,
        lease: &str,
        env: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Cluster {
        let redis_cluster = matches!(redis, Shared::Cluster(_));
        let pg = Postgres::start().await.unwrap();
        pg.create_database("cluster").await.unwrap();
        let fake = FakeLlm::start().await.unwrap();
        let mut nodes = Vec::new();
        for i in 1..=n {
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
redis_cluster = {redis_cluster}

[store]
url = "{pg}"

[links]
enabled = false

[pipeline]
speculative_main_call = "off"

[cluster]
enabled = true
node_id = "node-{i}"
lease = "{lease}"
{extra}
"#,
                llm = fake.base_url(),
                redis = redis.url(),
                redis_cluster = redis_cluster,
                pg = pg.url("cluster"),
            );
            let mut env = env(i);
            env.push(("CHATD_MASTER_KEY", MASTER_KEY.to_string()));
            nodes.push(
                ChatdProcess::start(std::path::Path::new(BIN), &config, &env)
                    .await
                    .unwrap(),
            );
        }
        // Every node listens on its own control channel (cancels from other nodes arrive
        // there at once, not only with the next lease renewal).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let channels = redis.channels().await;
            if (1..=n).all(|i| channels.contains(&format!("{{n:node-{i}}}:control"))) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "control channels not subscribed: {channels}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Cluster {
            nodes,
            redis,
            fake,
            _pg: pg,
        }
    }

    /// The Redis the nodes share.
    pub(crate) fn redis(&self) -> &Shared {
        &self.redis
    }

    pub(crate) fn node(&self, i: usize) -> &ChatdProcess {
        &self.nodes[i]
    }

    pub(crate) fn redis_mut(&mut self) -> &mut Shared {
        &mut self.redis
    }

    /// Waits until node `node`'s `/metrics` holds `line` (panics with its log after the
    /// harness's wait).
    pub(crate) async fn wait_for_metric(&self, node: usize, line: &str) {
        let url = self.node(node).http_url("/metrics");
        wait_until(line, || async {
            match reqwest::get(&url).await {
                Ok(m) => m.text().await.is_ok_and(|m| m.contains(line)),
                Err(_) => false,
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}; node {node} logged:\n{}", self.node(node).log_text()));
    }

    /// SIGKILLs node `i`: its sockets drop and its turns' leases are no longer renewed.
    pub(crate) async fn kill(&mut self, i: usize) {
        self.nodes[i].kill().await;
    }

    fn token(user: &str) -> String {
        chatd::auth::TokenKeys::from_secret(SECRET.as_bytes())
            .mint(
                &chatd::auth::UserId::parse(user).unwrap(),
                Duration::from_secs(600),
            )
            .unwrap()
    }

    pub(crate) async fn connect(&self, node: usize, user: &str) -> WsClient {
        WsClient::connect(&self.nodes[node].ws_url(&Self::token(user)))
            .await
            .unwrap()
    }

    pub(crate) async fn connect_showing(&self, node: usize, user: &str, chat: &str) -> WsClient {
        let mut ws = self.connect(node, user).await;
        ws.send(&set_active_chat(Some(chat))).await;
        ws.recv_until(|m| matches!(m, ServerMessage::ActiveChatSetAck(_)).then_some(()))
            .await;
        ws
    }
}

pub(crate) fn stall(gate: &Gate) -> Reply {
    Reply::Stall {
        chunks: vec!["First part.\n\n".into(), "Second part.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["Third part.\n\n".into(), "The end.".into()],
            delay: Duration::ZERO,
            usage: None,
        }),
    }
}

/// The answer updates a device gets for `task` up to `sequence` (or the final one):
/// (sequence, text).
pub(crate) async fn updates_until(
    ws: &mut WsClient,
    task: &TaskId,
    sequence: u64,
) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let u = ws
            .recv_until(|m| match m {
                ServerMessage::AiMessageUpdate(u) if &u.task_id == task => Some(u.clone()),
                _ => None,
            })
            .await;
        out.push((u.sequence, u.full_content_so_far.clone()));
        if u.is_final_chunk || u.sequence == sequence {
            return out;
        }
    }
}

/// The text [`stall`] answers before its gate.
pub(crate) const HALF_WRITTEN: &str = "First part.\n\nSecond part.\n\n";

/// A turn on node 0 whose model stalls at its gate after two chunks (see [`stall`]), once
/// every device (one showing `chat` on each of `nodes`, for `user`) had both: the gate,
/// the task and the devices.
pub(crate) async fn half_written(
    c: &Cluster,
    user: &str,
    chat: &str,
    nodes: &[usize],
) -> (Gate, TaskId, Vec<WsClient>) {
    let gate = Gate::new();
    c.fake.push(stall(&gate));
    let mut devices = Vec::new();
    for node in nodes {
        devices.push(c.connect_showing(*node, user, chat).await);
    }
    let first = devices.first_mut().expect("a device");
    first
        .send(&crate::support::user_message(chat, "m1", "tell me a story"))
        .await;
    let task = task_of(first).await;
    gate.reached().await;
    for d in &mut devices {
        let seen = updates_until(d, &task, 2).await;
        assert_eq!(seen.last().map(|u| u.1.as_str()), Some(HALF_WRITTEN));
    }
    (gate, task, devices)
}

pub(crate) async fn updates_until_final(ws: &mut WsClient, task: &TaskId) -> Vec<(u64, String)> {
    updates_until(ws, task, u64::MAX).await
}

pub(crate) async fn task_of(ws: &mut WsClient) -> TaskId {
    ws.recv_until(|m| match m {
        ServerMessage::AiTaskInitiated(t) => Some(t.ai_task_id.clone()),
        _ => None,
    })
    .await
}

#[tokio::test]
async fn devices_on_three_nodes_share_turns_queue_cancel_resume_and_survive_node_loss() {
    three_nodes(Cluster::start(3).await).await;
}

#[tokio::test]
async fn the_same_on_a_redis_cluster() {
    let redis = Shared::Cluster(RedisCluster::start(3).await.unwrap());
    three_nodes(Cluster::start_on(3, redis).await).await;
}

async fn three_nodes(mut c: Cluster) {
    let chat = "chat-cluster";

    // 1. Fan-out: the same frames, in the same order, on every node.
    let gate = Gate::new();
    c.fake.push(stall(&gate));
    let mut d1 = c.connect_showing(0, "alice", chat).await;
    let mut d2 = c.connect_showing(1, "alice", chat).await;
    let mut d3 = c.connect(2, "alice").await;
    d1.send(&user_message(chat, "m1", "tell me a story")).await;
    let t1 = task_of(&mut d1).await;
    gate.reached().await;

    // The device on node 2 has the two paragraphs streamed before the stall.
    let mut on_d2 = updates_until(&mut d2, &t1, 2).await;

    // 2. A message to another node waits behind the running turn (in Redis).
    d2.send(&user_message(chat, "m2", "and then?")).await;
    let queued = d2
        .recv_until(|m| match m {
            ServerMessage::MessageQueued(q) => Some(q.clone()),
            _ => None,
        })
        .await;
    assert_eq!(queued.active_task_id, t1);

    // 3. A device on the third node resumes the running turn from the start.
    let mut d4 = c.connect(2, "alice").await;
    d4.send(&ClientMessage::ResumeAiTask(ResumeAiTask {
        chat_id: chat_id(chat),
        task_id: t1.clone(),
        last_sequence: 0,
    }))
    .await;
    let resumed = d4
        .recv_until(|m| match m {
            ServerMessage::AiTaskResumed(r) => Some(r.recovered),
            _ => None,
        })
        .await;
    assert!(resumed, "the log is in Redis, readable from any node");

    gate.release();
    let on_d1 = updates_until_final(&mut d1, &t1).await;
    on_d2.extend(updates_until_final(&mut d2, &t1).await);
    let on_d4 = updates_until_final(&mut d4, &t1).await;
    assert_eq!(
        on_d1, on_d2,
        "the same frames in the same order on another node"
    );
    assert_eq!(on_d1, on_d4, "the resumed device: no gap, no duplicate");
    let seqs: Vec<u64> = on_d1.iter().map(|u| u.0).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        on_d1.last().unwrap().1,
        "First part.\n\nSecond part.\n\nThird part.\n\nThe end."
    );
    let background = d3
        .recv_until(|m| match m {
            ServerMessage::AiBackgroundResponseCompleted(b) if b.task_id == t1 => Some(b.clone()),
            _ => None,
        })
        .await;
    assert_eq!(background.full_content, on_d1.last().unwrap().1);

    // The queued message is answered after it, once (it runs where the first one ran).
    let (frames, answer) = collect_answer(&mut d2).await;
    assert_eq!(answer.user_message_id.as_str(), "m2");
    let started: Vec<_> = frames
        .iter()
        .filter(|m| matches!(m, ServerMessage::AiTaskInitiated(_)))
        .collect();
    assert_eq!(started.len(), 1, "answered once: {started:?}");

    // 4. Cancel from another node: the turn runs on node 1, the cancel goes to node 2.
    let gate = Gate::new();
    c.fake.push(stall(&gate));
    d1.send(&user_message(chat, "m3", "a long one")).await;
    let t3 = task_of(&mut d1).await;
    gate.reached().await;
    d2.send(&ClientMessage::CancelAiTask(chatd_protocol::CancelAiTask {
        task_id: t3.clone(),
        chat_id: None,
    }))
    .await;
    d2.recv_until(|m| matches!(m, ServerMessage::AiTaskCancelRequested(_)).then_some(()))
        .await;
    let last = d1
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.task_id == t3 && u.is_final_chunk => {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert!(last.interrupted_by_revocation);
    c.fake.wait_for_disconnect().await;

    // 5. The running node dies mid-answer: another node ends the turn with node_lost.
    let gate = Gate::new();
    c.fake.push(stall(&gate));
    d1.send(&user_message(chat, "m4", "once more")).await;
    let t4 = task_of(&mut d1).await;
    gate.reached().await;
    let before = d2
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.task_id == t4 && u.sequence == 2 => {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    c.nodes[0].kill().await;
    let lost_at = tokio::time::Instant::now();
    let last = d2
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.task_id == t4 && u.is_final_chunk => {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(last.error_code, Some(ErrorCode::NodeLost));
    assert_eq!(last.full_content_so_far, before.full_content_so_far);
    assert_eq!(last.sequence, 3);
    assert!(
        lost_at.elapsed() < Duration::from_secs(2 + 2 + 1),
        "noticed within lease + 2 s (+1 s of test slack)"
    );
    // The chat goes on.
    d2.send(&user_message(chat, "m5", "still there?")).await;
    let (_, answer) = collect_answer(&mut d2).await;
    assert_eq!(answer.user_message_id.as_str(), "m5");
    gate.release();

    // 6. Nothing in Redis is plaintext: no message, no answer.
    let dump = c.redis.dump().await;
    assert!(!dump.is_empty());
    for (key, value) in &dump {
        let text = String::from_utf8_lossy(value);
        for secret in [
            "tell me a story",
            "and then?",
            "First part",
            "The end",
            "once more",
        ] {
            assert!(!text.contains(secret), "plaintext {secret:?} in {key}");
            assert!(!key.contains(secret), "plaintext {secret:?} in a key name");
        }
    }
}

#[tokio::test]
async fn a_redis_restart_during_a_turn_is_survived_without_restarting_a_node() {
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let mut c = Cluster::start_outlasting_restarts(2, redis).await;
    let chat = "chat-redis-restart";
    let gate = Gate::new();
    c.fake.push(stall(&gate));
    let mut d1 = c.connect_showing(0, "bob", chat).await;
    let mut d2 = c.connect_showing(1, "bob", chat).await;
    d1.send(&user_message(chat, "m1", "keep going")).await;
    let t1 = task_of(&mut d1).await;
    gate.reached().await;

    // Redis comes back empty while the answer is held at the gate.
    c.redis.server().restart().await.unwrap();
    gate.release();
    // The running turn ends for the device on its node: the whole answer, no crash.
    let last = d1
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u) if u.task_id == t1 && u.is_final_chunk => {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(
        last.full_content_so_far,
        "First part.\n\nSecond part.\n\nThird part.\n\nThe end."
    );
    assert_eq!(last.error_code, None);

    // Both nodes are ready again by themselves (Redis, the bus subscription)...
    all_ready(&c).await;
    // ...and a new turn reaches the device on the other node (its channel was restored).
    start_after_restart(&mut d1, chat, "m2", "are you back?").await;
    let (_, on_d1) = collect_answer(&mut d1).await;
    let on_d2 = d2
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u)
                if u.user_message_id.as_str() == "m2" && u.is_final_chunk =>
            {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(on_d1.full_content_so_far, on_d2.full_content_so_far);
}

/// `cancel_skill` sent to a node that does not run the turn reaches the node that does:
/// the provider request is closed and the answer goes on without the skill.
#[tokio::test]
async fn cancel_skill_sent_to_another_node_stops_the_skill() {
    use chatd_protocol::SkillStatus;
    use chatd_test_harness::fake_skill::{FakeSkill, SkillReply};
    use serde_json::json;

    use crate::skills::{call, calls, cancel_skill, manifests, offer, status, text};

    let skill = FakeSkill::start().await.unwrap();
    skill.respond(|_| SkillReply::Hang);
    let apps = manifests(&skill);
    let extra = format!(
        "\n[skills]\napps_dir = {:?}\nallow_private_targets = true\n",
        apps.path().display().to_string()
    );
    let redis = Shared::Server(RedisServer::start().await.unwrap());
    let c = Cluster::start_with(2, redis, &extra).await;
    offer(&c.fake, &["demo-find"]);
    c.fake.push(calls(vec![call(
        "c1",
        "demo-find",
        json!([{"query": "slow"}]),
    )]));
    c.fake.push(text("Answer without it."));
    let chat = "chat-skill-cancel";
    let mut here = c.connect_showing(0, "carol", chat).await;
    let mut there = c.connect_showing(1, "carol", chat).await;
    here.send(&user_message(chat, "m1", "find it slowly")).await;
    // The device on the other node learns the skill task from the fan-out...
    let processing = status(&mut there, SkillStatus::Processing).await;
    skill
        .wait_until("the request reached the provider", |k| k.in_flight() == 1)
        .await;
    // ...and cancels it there.
    let ack = cancel_skill(&mut there, &processing.skill_task_id).await;
    assert_eq!(ack.status, "cancellation_requested");
    let cancelled = status(&mut here, SkillStatus::Cancelled).await;
    assert_eq!(cancelled.skill_task_id, processing.skill_task_id);
    skill
        .wait_until("the provider saw the client hang up", |k| k.hangups() == 1)
        .await;
    let (_, last) = collect_answer(&mut here).await;
    assert!(last.full_content_so_far.ends_with("Answer without it."));
    let (_, on_there) = collect_answer(&mut there).await;
    assert_eq!(on_there.full_content_so_far, last.full_content_so_far);
}

/// A focus mode started on one node: the device on the other node hears of it, and a turn
/// the other node runs is in focus (the record is in the shared cache); ended there, the
/// first node's device hears that.
#[tokio::test]
async fn a_focus_mode_started_on_one_node_applies_on_another() {
    use serde_json::json;

    let c = Cluster::start(2).await;
    let chat = "chat-focus-cluster";
    let mut here = c.connect_showing(0, "dana", chat).await;
    let mut there = c.connect_showing(1, "dana", chat).await;
    there
        .send_json(json!({"type": "chat_focus_mode_activate",
            "payload": {"chat_id": chat, "focus_id": "docs-deep_dive"}}))
        .await;
    for ws in [&mut here, &mut there] {
        let a = ws
            .recv_until(|m| match m {
                ServerMessage::FocusModeActivated(a) => Some(a.clone()),
                _ => None,
            })
            .await;
        assert_eq!(a.focus_id, "docs-deep_dive");
    }
    here.send(&user_message(chat, "m1", "go deep")).await;
    collect_answer(&mut here).await;
    let prompt = c.fake.requests()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.starts_with("Focus mode \"deep dive\""), "{prompt}");

    here.send_json(json!({"type": "chat_focus_mode_deactivate", "payload": {"chat_id": chat}}))
        .await;
    let d = there
        .recv_until(|m| match m {
            ServerMessage::FocusModeDeactivated(d) => Some(d.clone()),
            _ => None,
        })
        .await;
    assert_eq!(d.focus_id.as_deref(), Some("docs-deep_dive"));
}

/// A re-send the server asked for is always answered, however soon it comes: the request
/// goes out only once the turn that asked has let go of the chat (issue 35, defect 8: on the
/// Redis turn store a re-send could meet the asking turn still finishing, get
/// `already_processing`, and never be answered). Each round re-sends the moment
/// `request_chat_history` arrives.
#[tokio::test]
async fn a_history_resend_at_once_after_the_request_is_always_answered() {
    let c = Cluster::start(1).await;
    let mut ws = c.connect(0, "erin").await;
    for round in 0..20 {
        let chat = format!("chat-resend-{round}");
        // The client says the chat has a title: the cache has nothing of it.
        ws.send(&user_message_with(&chat, "m1", "and now?", |m| {
            m.message.chat_has_title = true;
        }))
        .await;
        outcome(&mut ws).await.need_history();
        ws.send(&user_message_with(&chat, "m1", "and now?", |m| {
            m.message.chat_has_title = true;
            m.message.message_history = Some(vec![history_entry(
                "m0",
                chatd_protocol::Role::User,
                "earlier",
                1,
            )]);
        }))
        .await;
        let answer = outcome(&mut ws).await.answer();
        assert_eq!(answer.chat_id, chat_id(&chat), "round {round}");
    }
}

/// The history is asked for once per message across the cluster (issue 35, defect 2: the
/// guard lived in each process, so a re-send on another node was asked about again, and a
/// client without the history could be sent round in circles). A plain re-send, without
/// the history, on the other node gets the typed error instead.
#[tokio::test]
async fn the_history_is_asked_for_once_per_message_on_any_node() {
    let c = Cluster::start(2).await;
    let mut first = c.connect(0, "fay").await;
    let mut second = c.connect(1, "fay").await;
    let chat = "chat-asked-once";
    first
        .send(&user_message_with(chat, "m1", "and now?", |m| {
            m.message.chat_has_title = true;
        }))
        .await;
    outcome(&mut first).await.need_history();
    second
        .send(&user_message_with(chat, "m1", "and now?", |m| {
            m.message.chat_has_title = true;
        }))
        .await;
    let error = outcome(&mut second).await.error();
    assert_eq!(error.code, ErrorCode::InvalidChatHistory, "{error:?}");
    // With the history it is answered, on either node.
    second
        .send(&user_message_with(chat, "m1", "and now?", |m| {
            m.message.chat_has_title = true;
            m.message.message_history = Some(vec![history_entry(
                "m0",
                chatd_protocol::Role::User,
                "earlier",
                1,
            )]);
        }))
        .await;
    outcome(&mut second).await.answer();
}

/// Redis restarted empty while the nodes keep their users' data keys in memory: frames of a
/// node still reach a device on a node that never saw that user's key (issue 35, defect 1:
/// the wrapped key lived only in Redis, so the third node could not open the frames and
/// dropped them unlogged). Frames on the bus carry their wrapped key.
#[tokio::test]
async fn after_redis_restarts_empty_frames_reach_devices_on_every_node() {
    let mut c = Cluster::start(3).await;
    let before = "chat-before-wipe";
    let mut d0 = c.connect_showing(0, "gus", before).await;
    let mut d1 = c.connect_showing(1, "gus", before).await;
    d0.send(&user_message(before, "m1", "hello")).await;
    collect_answer(&mut d0).await;
    collect_answer(&mut d1).await;

    c.redis.server().restart().await.unwrap();
    all_ready(&c).await;
    // A device on the third node, which has never opened this user's frames.
    let after = "chat-after-wipe";
    let mut d2 = c.connect_showing(2, "gus", after).await;
    d0.send(&set_active_chat(Some(after))).await;
    start_after_restart(&mut d0, after, "m2", "still there?").await;
    let (_, on_d0) = collect_answer(&mut d0).await;
    let on_d2 = d2
        .recv_until(|m| match m {
            ServerMessage::AiMessageUpdate(u)
                if u.user_message_id.as_str() == "m2" && u.is_final_chunk =>
            {
                Some(u.clone())
            }
            _ => None,
        })
        .await;
    assert_eq!(on_d0.full_content_so_far, on_d2.full_content_so_far);
}

/// Waits until every node answers `/readyz` (bounded: a node that stays unready fails).
async fn all_ready(c: &Cluster) {
    for node in &c.nodes {
        let url = node.http_url("/readyz");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !reqwest::get(&url)
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "a node stayed unready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Sends a message until its turn starts: the first call after a Redis restart may meet a
/// connection that is reconnecting (`cache_unavailable`).
async fn start_after_restart(ws: &mut WsClient, chat: &str, id: &str, text: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no turn after the restart"
        );
        ws.send(&user_message(chat, id, text)).await;
        let started = ws
            .recv_until(|m| match m {
                ServerMessage::AiTaskInitiated(_) => Some(true),
                ServerMessage::Error(e) if e.code == ErrorCode::CacheUnavailable => Some(false),
                _ => None,
            })
            .await;
        if started {
            return;
        }
    }
}
