//! Focus modes (`crate::focus`): the model starts one with its tool, or the user with
//! `chat_focus_mode_activate`; every device hears of it; while it is active its
//! instruction leads the system prompt and its tools are offered; it survives a restart
//! (the sealed record in the Redis AI cache); `chat_focus_mode_deactivate` ends it, and a
//! client still sending the old `active_focus_id` does not bring it back. Unknown focus
//! modes and other users' chats are refused with nothing changed.

use chatd_protocol::{ErrorCode, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, function_reply};
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::redis_cache::use_redis;
use crate::skills::{calls, text, tool_result};
use crate::support::{
    TestApp, answer_task, collect_answer, outcome, replayed_from_start, spawn_app, use_llm,
    user_message, user_message_with,
};

const FOCUS: &str = "docs-deep_dive";
const INSTRUCTION: &str = "Focus mode \"deep dive\"";

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The last main request: in focus (instruction first, the focus mode's tool offered) or not.
fn assert_focus(fake: &FakeLlm, on: bool) {
    let requests = fake.requests();
    let last = requests.last().unwrap();
    let prompt = system_prompt(last);
    assert_eq!(prompt.starts_with(INSTRUCTION), on, "{prompt}");
    assert_eq!(prompt.contains(INSTRUCTION), on, "{prompt}");
    assert_eq!(
        tool_names(last).contains(&"docs-search".to_string()),
        on,
        "{:?}",
        tool_names(last)
    );
}

async fn activated(ws: &mut WsClient, chat: &str) {
    let got = ws
        .recv_until(|m| match m {
            ServerMessage::FocusModeActivated(a) => Some(a.clone()),
            _ => None,
        })
        .await;
    assert_eq!((got.chat_id.as_str(), got.focus_id.as_str()), (chat, FOCUS));
}

async fn deactivated(ws: &mut WsClient, chat: &str) -> Option<String> {
    let got = ws
        .recv_until(|m| match m {
            ServerMessage::FocusModeDeactivated(d) => Some(d.clone()),
            _ => None,
        })
        .await;
    assert_eq!(got.chat_id.as_str(), chat);
    got.focus_id
}

async fn error(ws: &mut WsClient) -> chatd_protocol::ErrorPayload {
    ws.recv_until(|m| match m {
        ServerMessage::Error(e) => Some(e.clone()),
        _ => None,
    })
    .await
}

fn activate(chat: &str, focus: &str) -> Value {
    json!({"type": "chat_focus_mode_activate", "payload": {"chat_id": chat, "focus_id": focus}})
}

fn deactivate(chat: &str, focus: Option<&str>) -> Value {
    let mut payload = json!({"chat_id": chat});
    if let Some(f) = focus {
        payload["focus_id"] = json!(f);
    }
    json!({"type": "chat_focus_mode_deactivate", "payload": payload})
}

async fn ask(ws: &mut WsClient, chat: &str, id: &str) {
    ws.send(&user_message(chat, id, "how does resume work?"))
        .await;
    outcome(ws).await.answer();
}

async fn start(fake: &FakeLlm, redis: &RedisServer, dir: &std::path::Path) -> TestApp {
    let dir = dir.to_path_buf();
    spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_redis(c, redis);
        c.server.data_dir = dir;
    })
    .await
}

#[tokio::test]
async fn a_focus_mode_the_model_starts_changes_prompt_and_tools_survives_a_restart_and_ends() {
    let redis = RedisServer::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chat = "chat-focus";
    let app = start(&fake, &redis, dir.path()).await;
    let mut phone = app.connect_showing("alice", chat).await;
    let mut laptop = app.connect("alice").await;

    // Preprocessing finds the focus mode relevant: its tool is offered; the model calls it.
    fake.push_stage(
        "preprocess",
        function_reply(
            "preprocess",
            json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0, "language": "en",
                "category": "software_development", "complexity": "simple",
                "relevant_focus_modes": [FOCUS]}),
        ),
    );
    fake.push(calls(vec![chatd_test_harness::fake_llm::ToolCall {
        id: "c1".into(),
        name: FOCUS.into(),
        arguments: "{}".into(),
    }]));
    fake.push(text("Deep dive started."));
    phone
        .send(&user_message(chat, "m1", "explain resume in depth"))
        .await;
    let (frames, _) = collect_answer(&mut phone).await;
    let first = &fake.requests()[0];
    assert!(tool_names(first).contains(&FOCUS.to_string()));
    assert!(
        !system_prompt(first).contains(INSTRUCTION),
        "not active yet"
    );
    let told = tool_result(&fake.requests()[1], "c1");
    assert_eq!(told["status"], "activated", "{told}");
    assert!(told["instruction"].as_str().unwrap().contains("deep dive"));
    assert!(
        frames.iter().any(|f| matches!(f,
            ServerMessage::FocusModeActivated(a) if a.focus_id == FOCUS)),
        "the phone hears of it"
    );
    activated(&mut laptop, chat).await;
    // Written by the turn's writer: a device that resumes the turn sees it too.
    let mut tablet = app.connect("alice").await;
    let replay = replayed_from_start(&mut tablet, chat, &answer_task(&frames)).await;
    assert!(
        replay.iter().any(|f| matches!(f,
            ServerMessage::FocusModeActivated(a) if a.focus_id == FOCUS)),
        "{replay:?}"
    );
    drop(tablet);

    // The next turn is in focus.
    ask(&mut phone, chat, "m2").await;
    assert_focus(&fake, true);

    // A restart: the record is in Redis, sealed; the new process finds it.
    drop((phone, laptop));
    app.shutdown().await.unwrap();
    let app = start(&fake, &redis, dir.path()).await;
    let mut phone = app.connect_showing("alice", chat).await;
    let mut laptop = app.connect("alice").await;
    ask(&mut phone, chat, "m3").await;
    assert_focus(&fake, true);

    // Ended by the user: both devices hear it; a client still sending the old id is ignored.
    phone.send_json(deactivate(chat, None)).await;
    assert_eq!(deactivated(&mut phone, chat).await.as_deref(), Some(FOCUS));
    assert_eq!(deactivated(&mut laptop, chat).await.as_deref(), Some(FOCUS));
    phone
        .send(&user_message_with(chat, "m4", "and now?", |m| {
            m.active_focus_id = Some(FOCUS.into());
        }))
        .await;
    outcome(&mut phone).await.answer();
    assert_focus(&fake, false);
}

#[tokio::test]
async fn the_user_starts_a_focus_mode_and_bad_requests_change_nothing() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let chat = "chat-user-focus";
    let mut phone = app.connect_showing("alice", chat).await;
    let mut laptop = app.connect("alice").await;
    ask(&mut phone, chat, "m1").await;
    assert_focus(&fake, false);
    // The modes a user may start, listed for clients.
    let listed: serde_json::Value = reqwest::get(app.http_url("/v1/focus-modes"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        listed["focus_modes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == FOCUS && m["app_id"] == "docs"),
        "{listed}"
    );

    // An id no app declares.
    phone.send_json(activate(chat, "docs-nope")).await;
    let e = error(&mut phone).await;
    assert_eq!(e.code, ErrorCode::UnknownFocusMode);
    assert!(e.details.unwrap().contains(FOCUS));
    // Another user's chat.
    let mut mallory = app.connect("mallory").await;
    mallory.send_json(activate(chat, FOCUS)).await;
    assert_eq!(error(&mut mallory).await.code, ErrorCode::Forbidden);
    ask(&mut phone, chat, "m2").await;
    assert_focus(&fake, false);

    phone.send_json(activate(chat, FOCUS)).await;
    activated(&mut phone, chat).await;
    activated(&mut laptop, chat).await;
    ask(&mut phone, chat, "m3").await;
    assert_focus(&fake, true);
    // A device that opens the chat later is told the mode is active.
    let mut tablet = app.connect_showing("alice", chat).await;
    activated(&mut tablet, chat).await;

    // Ending another focus mode than the active one, or ending it in another user's chat.
    phone.send_json(deactivate(chat, Some("docs-nope"))).await;
    assert_eq!(error(&mut phone).await.code, ErrorCode::UnknownFocusMode);
    mallory.send_json(deactivate(chat, None)).await;
    assert_eq!(error(&mut mallory).await.code, ErrorCode::Forbidden);
    ask(&mut phone, chat, "m4").await;
    assert_focus(&fake, true);

    phone.send_json(deactivate(chat, Some(FOCUS))).await;
    assert_eq!(deactivated(&mut laptop, chat).await.as_deref(), Some(FOCUS));
    ask(&mut phone, chat, "m5").await;
    assert_focus(&fake, false);
    // Nothing active: not found for a named one, nothing changed.
    phone.send_json(deactivate(chat, Some(FOCUS))).await;
    assert_eq!(error(&mut phone).await.code, ErrorCode::NotFound);
}

/// Without a record the client's `active_focus_id` seeds the server's (and is kept).
#[tokio::test]
async fn the_clients_active_focus_id_seeds_a_chat_without_a_record() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let chat = "chat-seed";
    let mut phone = app.connect_showing("alice", chat).await;
    phone
        .send(&user_message_with(chat, "m1", "go deep", |m| {
            m.active_focus_id = Some(FOCUS.into());
        }))
        .await;
    outcome(&mut phone).await.answer();
    assert_focus(&fake, true);
    ask(&mut phone, chat, "m2").await;
    assert_focus(&fake, true);
}
