//! `spawn_app`: a chatd on a free port with a temp data dir, configured by editing the
//! config struct; plus small builders for client messages.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use chatd::app::App;
use chatd::auth::{TokenKeys, UserId};
use chatd::config::{Config, LlmProvider};
use chatd::state::AppState;
use chatd_protocol::{ChatId, ChatMessageAdded, ClientMessage, MessageId, Role, ServerMessage};
use chatd_test_harness::ws_client::WsClient;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SECRET: &str = "integration-test-secret";

pub struct TestApp {
    pub addr: SocketAddr,
    #[allow(dead_code)] // for tests that inspect server state directly
    pub state: Arc<AppState>,
    keys: TokenKeys,
    shutdown: CancellationToken,
    server: Option<JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

/// A test config: free port, temp data dir, fixed secret, instant simulated model.
pub fn test_config(dir: &std::path::Path) -> Config {
    let mut config = Config::defaults().unwrap();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.data_dir = dir.to_path_buf();
    config.server.shutdown_grace = Duration::from_secs(5);
    config.auth.secret = Some(SECRET.to_string().into());
    config.llm.simulated_pace = Duration::ZERO;
    // Answers may hold links (the simulated model's do): no checks leave the machine.
    config.links.enabled = false;
    // Tests count and inspect the model requests they cause; the speculative main call (a
    // request that may be sent and then dropped) is switched on by its own tests.
    config.pipeline.speculative_main_call = chatd::config::Speculation::Off;
    config
}

pub async fn spawn_app(edit: impl FnOnce(&mut Config)) -> TestApp {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    edit(&mut config);
    let app = App::build(config).await.unwrap();
    let addr = app.local_addr().unwrap();
    let state = app.state().clone();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(app.run_until_stopped(shutdown.clone()));
    TestApp {
        addr,
        state,
        keys: TokenKeys::from_secret(SECRET.as_bytes()),
        shutdown,
        server: Some(server),
        _dir: dir,
    }
}

/// Points every stage at an OpenAI-compatible base URL (the fake LLM).
pub fn use_llm(config: &mut Config, base_url: String) {
    config.llm.provider = LlmProvider::OpenaiCompatible;
    config.llm.base_url = base_url;
    config.llm.model = "fake-model".into();
    config.llm.idle_timeout = Duration::from_secs(10);
}

impl TestApp {
    pub fn token(&self, user: &str) -> String {
        self.token_for(user, Duration::from_secs(600))
    }

    /// A token of `user` that expires after `ttl`.
    pub fn token_for(&self, user: &str, ttl: Duration) -> String {
        self.keys.mint(&UserId::parse(user).unwrap(), ttl).unwrap()
    }

    pub fn ws_url(&self, query: &str) -> String {
        format!("ws://{}/v1/ws?{query}", self.addr)
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The body of `/readyz` (whatever its status).
    pub async fn readyz(&self) -> serde_json::Value {
        let ready = reqwest::get(self.http_url("/readyz")).await.unwrap();
        ready.json().await.unwrap()
    }

    pub async fn connect(&self, user: &str) -> WsClient {
        WsClient::connect(&self.ws_url(&format!("token={}", self.token(user))))
            .await
            .unwrap()
    }

    /// Connects and makes `chat` the device's active chat.
    pub async fn connect_showing(&self, user: &str, chat: &str) -> WsClient {
        let mut ws = self.connect(user).await;
        ws.send(&set_active_chat(Some(chat))).await;
        ws.recv_until(|m| matches!(m, ServerMessage::ActiveChatSetAck(_)).then_some(()))
            .await;
        ws
    }

    /// Fires the shutdown token and waits for the server to drain.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        self.shutdown.cancel();
        match self.server.take() {
            Some(handle) => tokio::time::timeout(Duration::from_secs(20), handle)
                .await
                .expect("server did not stop within 20 s")
                .expect("server task panicked"),
            None => Ok(()),
        }
    }

    pub fn start_shutdown(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub fn chat_id(s: &str) -> ChatId {
    ChatId::parse(s).unwrap()
}

pub fn set_active_chat(chat: Option<&str>) -> ClientMessage {
    ClientMessage::SetActiveChat(chatd_protocol::SetActiveChat {
        chat_id: chat.map(chat_id),
    })
}

pub fn user_message(chat: &str, message_id: &str, content: &str) -> ClientMessage {
    ClientMessage::ChatMessageAdded(Box::new(ChatMessageAdded::user(
        chat_id(chat),
        MessageId::parse(message_id).unwrap(),
        content.to_string(),
        1_700_000_000,
    )))
}

pub fn error_code(msg: &ServerMessage) -> Option<chatd_protocol::ErrorCode> {
    match msg {
        ServerMessage::Error(e) => Some(e.code),
        _ => None,
    }
}

/// Receives frames until the final `ai_message_update`, checking that sequences increase
/// and content is cumulative; returns (frames seen, final frame).
pub async fn collect_answer(
    ws: &mut WsClient,
) -> (Vec<ServerMessage>, chatd_protocol::AiMessageUpdate) {
    let mut seen = Vec::new();
    let mut last_seq = 0;
    let mut last_text = String::new();
    loop {
        let msg = ws.recv().await;
        if let ServerMessage::AiMessageUpdate(u) = &msg {
            assert!(
                u.sequence > last_seq,
                "sequence must increase: {} after {}",
                u.sequence,
                last_seq
            );
            assert!(
                u.full_content_so_far.starts_with(&last_text) || u.is_final_chunk,
                "content must be cumulative"
            );
            last_seq = u.sequence;
            last_text = u.full_content_so_far.clone();
            if u.is_final_chunk {
                let u = u.clone();
                seen.push(msg);
                return (seen, u);
            }
        }
        seen.push(msg);
    }
}

/// `user_message` with the payload edited (history, embeds, `chat_has_title`, ...).
pub fn user_message_with(
    chat: &str,
    message_id: &str,
    content: &str,
    edit: impl FnOnce(&mut ChatMessageAdded),
) -> ClientMessage {
    let ClientMessage::ChatMessageAdded(mut m) = user_message(chat, message_id, content) else {
        unreachable!()
    };
    edit(&mut m);
    ClientMessage::ChatMessageAdded(m)
}

/// One earlier message for `message_history`.
pub fn history_entry(
    id: &str,
    role: Role,
    content: &str,
    created_at: i64,
) -> chatd_protocol::HistoryMessage {
    chatd_protocol::HistoryMessage {
        message_id: MessageId::parse(id).unwrap(),
        role,
        content: content.to_string(),
        created_at,
        sender_name: None,
        category: None,
        model_name: None,
        replaces_through: None,
    }
}

/// How the server answered a chat message.
#[derive(Debug)]
pub enum Outcome {
    Answer(chatd_protocol::AiMessageUpdate),
    NeedHistory(chatd_protocol::RequestChatHistory),
    NeedEmbeds(chatd_protocol::RequestChatEmbeds),
    Error(chatd_protocol::ErrorPayload),
}

impl Outcome {
    pub fn answer(self) -> chatd_protocol::AiMessageUpdate {
        match self {
            Outcome::Answer(a) => a,
            other => panic!("expected an answer, got {other:?}"),
        }
    }
    pub fn need_history(self) -> chatd_protocol::RequestChatHistory {
        match self {
            Outcome::NeedHistory(r) => r,
            other => panic!("expected request_chat_history, got {other:?}"),
        }
    }
    pub fn need_embeds(self) -> chatd_protocol::RequestChatEmbeds {
        match self {
            Outcome::NeedEmbeds(r) => r,
            other => panic!("expected request_chat_embeds, got {other:?}"),
        }
    }
    pub fn error(self) -> chatd_protocol::ErrorPayload {
        match self {
            Outcome::Error(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

/// Reads frames until the turn's outcome: the final answer frame (sequences checked), a
/// `request_chat_history`, or an error about a chat.
pub async fn outcome(ws: &mut WsClient) -> Outcome {
    let mut last_seq = 0;
    loop {
        match ws.recv().await {
            ServerMessage::AiMessageUpdate(u) => {
                assert!(
                    u.sequence > last_seq,
                    "sequence must increase: {} after {}",
                    u.sequence,
                    last_seq
                );
                last_seq = u.sequence;
                if u.is_final_chunk {
                    return Outcome::Answer(u);
                }
            }
            ServerMessage::RequestChatHistory(r) => return Outcome::NeedHistory(r),
            ServerMessage::RequestChatEmbeds(r) => return Outcome::NeedEmbeds(r),
            ServerMessage::Error(e) if e.chat_id.is_some() => return Outcome::Error(e),
            _ => {}
        }
    }
}

/// The `messages` array of a recorded LLM request as (role, content) pairs, system prompt dropped.
pub fn conversation(request: &serde_json::Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The main request's per-turn system message (date, language, caution, the chat's summary,
/// settings/memories data): the first system message after the system prompt, which
/// follows the history (tool rounds and a reprocessing caution come after it).
pub fn turn_context(request: &serde_json::Value) -> String {
    let messages = request["messages"].as_array().map(Vec::as_slice);
    let after_prompt = messages.unwrap_or_default().iter().skip(1);
    after_prompt
        .filter(|m| m["role"] == "system")
        .find_map(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Whether `later` (a chat's next main request) starts with every message of `earlier`
/// before its per-turn system message, byte for byte: the prefix a provider's prompt cache
/// keeps.
pub fn extends_prefix(earlier: &serde_json::Value, later: &serde_json::Value) -> bool {
    let (earlier, later) = (&earlier["messages"], &later["messages"]);
    let (Some(earlier), Some(later)) = (earlier.as_array(), later.as_array()) else {
        return false;
    };
    let turn = earlier.iter().skip(1).position(|m| m["role"] == "system");
    let prefix = turn.map_or(earlier.len(), |p| p + 1);
    later.len() > prefix && earlier[..prefix] == later[..prefix]
}

pub fn ping() -> ClientMessage {
    ClientMessage::Ping(chatd_protocol::Empty {})
}

/// Every frame a device that resumes `task` from its start gets, up to the replayed final
/// `ai_message_update` (the turn must have ended): what the turn's log holds for it.
pub async fn replayed_from_start(
    ws: &mut WsClient,
    chat: &str,
    task: &chatd_protocol::TaskId,
) -> Vec<ServerMessage> {
    ws.send(&ClientMessage::ResumeAiTask(chatd_protocol::ResumeAiTask {
        chat_id: chat_id(chat),
        task_id: task.clone(),
        last_sequence: 0,
    }))
    .await;
    let mut seen = Vec::new();
    loop {
        let msg = ws.recv().await;
        let last = matches!(&msg, ServerMessage::AiMessageUpdate(u) if u.is_final_chunk);
        seen.push(msg);
        if last {
            return seen;
        }
    }
}

/// The task id of the answer among `frames`.
pub fn answer_task(frames: &[ServerMessage]) -> chatd_protocol::TaskId {
    frames
        .iter()
        .find_map(|f| match f {
            ServerMessage::AiMessageUpdate(u) => Some(u.task_id.clone()),
            _ => None,
        })
        .expect("an ai_message_update")
}
