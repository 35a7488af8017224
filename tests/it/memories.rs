//! App settings and memories end to end (seed 002) with the fake LLM: preprocessing picks
//! categories, the chat's sealed cache is read first and what is missing is asked of every
//! device without waiting, a confirmation (minutes or days later) seals the valid entries
//! into the chat's cache for the next turn's prompt, eviction of the chat removes them, a
//! "no" is remembered, and the model's proposals go to the client to decide.

use chatd::auth::UserId;
use chatd::crypto::UserHash;
use chatd_protocol::{
    AppSettingsMemoriesConfirmed, AppSettingsMemoriesProposal, AppSettingsMemoriesProposalResult,
    AppSettingsMemoryEntry, ClientMessage, DismissAppSettingsMemoriesDialog, ErrorCode,
    ProposalAction, RequestAppSettingsMemories, ServerMessage,
};
use chatd_test_harness::fake_llm::{FakeLlm, Reply, ToolCall, function_reply};
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::skills::{text, tool_result};
use crate::support::{
    TestApp, answer_task, chat_id, collect_answer, ping, replayed_from_start, spawn_app, use_llm,
    user_message,
};

async fn setup(max_chats: usize) -> (FakeLlm, TestApp) {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.cache.ai_max_chats = max_chats;
    })
    .await;
    (fake, app)
}

/// Preprocessing names these settings/memories categories as relevant.
fn relevant(fake: &FakeLlm, keys: &[&str]) {
    fake.push_stage(
        "preprocess",
        function_reply(
            "preprocess",
            json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0, "language": "en",
                "category": "general_knowledge", "complexity": "simple",
                "relevant_app_settings_and_memories": keys}),
        ),
    );
}

/// One turn: the answer's frames (the settings request among them, if any).
async fn turn(
    ws: &mut WsClient,
    fake: &FakeLlm,
    chat: &str,
    id: &str,
    content: &str,
) -> (Vec<ServerMessage>, Option<RequestAppSettingsMemories>) {
    fake.push(text("An answer."));
    ws.send(&user_message(chat, id, content)).await;
    let (frames, _) = collect_answer(ws).await;
    let request = frames.iter().find_map(|f| match f {
        ServerMessage::RequestAppSettingsMemories(r) => Some(r.clone()),
        _ => None,
    });
    (frames, request)
}

fn call_raw(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.to_string(),
    }
}

fn entry(app: &str, key: &str, content: Value) -> AppSettingsMemoryEntry {
    AppSettingsMemoryEntry {
        app_id: app.into(),
        item_key: key.into(),
        content,
    }
}

fn confirm(chat: &str, request_id: &str, entries: Vec<AppSettingsMemoryEntry>) -> ClientMessage {
    ClientMessage::AppSettingsMemoriesConfirmed(Box::new(AppSettingsMemoriesConfirmed {
        chat_id: chat_id(chat),
        request_id: request_id.into(),
        app_settings_memories: entries,
    }))
}

async fn dismissed(ws: &mut WsClient) -> DismissAppSettingsMemoriesDialog {
    ws.recv_until(|m| match m {
        ServerMessage::DismissAppSettingsMemoriesDialog(d) => Some(d.clone()),
        _ => None,
    })
    .await
}

async fn error(ws: &mut WsClient) -> chatd_protocol::ErrorPayload {
    ws.recv_until(|m| match m {
        ServerMessage::Error(e) => Some(e.clone()),
        _ => None,
    })
    .await
}

/// Every frame up to the answer to a ping (the connection's messages are handled in order).
async fn settle(ws: &mut WsClient) -> Vec<ServerMessage> {
    ws.send(&ping()).await;
    let mut seen = Vec::new();
    loop {
        match ws.recv().await {
            ServerMessage::Pong(_) => return seen,
            other => seen.push(other),
        }
    }
}

async fn cached(app: &TestApp, user: &str, chat: &str, key: &str) -> Option<Vec<Value>> {
    app.state
        .memories
        .store
        .entries(
            &UserHash::of(&UserId::parse(user).unwrap()),
            &chat_id(chat),
            key,
        )
        .await
        .unwrap()
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Preprocessing asks only for categories the user has saved entries of, when the client
/// lists them (`app_settings_memories_metadata`, seed 002): its prompt offers those, and a
/// category the model names anyway is not requested. New entries may still be suggested
/// for any category. (Issue 35, defect 4: the list fed nothing.)
#[tokio::test]
async fn only_the_categories_the_user_saved_are_asked_for() {
    let (fake, app) = setup(3).await;
    let mut ws = app.connect_showing("alice", "chat-saved").await;
    relevant(&fake, &["travel:trips", "travel:preferences"]);
    fake.push(text("An answer."));
    ws.send(&crate::support::user_message_with(
        "chat-saved",
        "m1",
        "Plan my holiday",
        |m| m.app_settings_memories_metadata = Some(vec!["travel-preferences".into()]),
    ))
    .await;
    let (frames, _) = collect_answer(&mut ws).await;
    let request = frames
        .iter()
        .find_map(|f| match f {
            ServerMessage::RequestAppSettingsMemories(r) => Some(r.clone()),
            _ => None,
        })
        .expect("the saved category is requested");
    assert_eq!(request.requested_keys, vec!["travel:preferences"]);
    let prompt = fake.stage_requests("preprocess")[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let (saved, all) = prompt
        .split_once("Every app settings/memories category")
        .unwrap();
    assert!(
        saved.contains("travel:preferences") && !saved.contains("travel:trips"),
        "{prompt}"
    );
    assert!(
        all.contains("travel:trips") && all.contains("docs:interests"),
        "{prompt}"
    );
}

/// Request → the answer goes on without the data → confirmed later (one entry invalid: a
/// typed error, the valid one kept) → the next turn's prompt holds the entry as data → the
/// chat is evicted by a fourth chat → its entries are gone.
#[tokio::test]
async fn entries_are_asked_confirmed_later_used_next_turn_and_evicted_with_the_chat() {
    let (fake, app) = setup(3).await;
    let mut ws = app.connect_showing("alice", "chat-trip").await;
    relevant(&fake, &["travel:trips", "travel:nonexistent", "nope"]);
    let (_, request) = turn(&mut ws, &fake, "chat-trip", "m1", "Plan my holiday").await;
    let request = request.expect("the missing category is requested");
    assert_eq!(request.requested_keys, vec!["travel:trips"]);
    assert_eq!(request.message_id.as_str(), "m1");
    assert_eq!(request.system_message.role, chatd_protocol::Role::System);
    assert!(request.system_message.content.ends_with("travel:trips"));
    assert!(!crate::support::turn_context(&fake.requests()[0]).contains("app_settings_memories"));

    ws.send(&confirm(
        "chat-trip",
        &request.request_id,
        vec![
            entry(
                "travel",
                "trips",
                json!({"destination": "Lisbon", "travellers": 2}),
            ),
            entry("travel", "trips", json!({"destination": 5})),
        ],
    ))
    .await;
    let e = error(&mut ws).await;
    assert_eq!(e.code, ErrorCode::InvalidSettingsMemoryEntry);
    assert!(e.details.unwrap().contains("$.destination"));
    let d = dismissed(&mut ws).await;
    assert_eq!(
        (d.request_id.as_str(), d.reason.as_str()),
        (request.request_id.as_str(), "confirmed")
    );
    assert_eq!(
        cached(&app, "alice", "chat-trip", "travel:trips").await,
        Some(vec![json!({"destination": "Lisbon", "travellers": 2})])
    );

    relevant(&fake, &["travel-trips"]);
    let (_, again) = turn(&mut ws, &fake, "chat-trip", "m2", "What should I pack?").await;
    assert!(again.is_none(), "a cached category is not asked for");
    // The entries change from turn to turn: data in the per-turn system message after the
    // history, never in the system prompt (the prefix the provider caches).
    let prompt = crate::support::turn_context(&fake.requests()[1]);
    assert!(prompt.contains("never instructions"), "{prompt}");
    assert!(!system_prompt(&fake.requests()[1]).contains("Lisbon"));
    assert!(crate::support::extends_prefix(
        &fake.requests()[0],
        &fake.requests()[1]
    ));
    assert!(
        prompt.contains("Lisbon") && prompt.contains("```toon"),
        "{prompt}"
    );
    assert!(
        !crate::support::conversation(&fake.requests()[1])
            .iter()
            .any(|(_, c)| c.contains("Lisbon")),
        "the entries are data in a system message, not a conversation message"
    );

    for (chat, id) in [("chat-b", "b1"), ("chat-c", "c1"), ("chat-d", "d1")] {
        turn(&mut ws, &fake, chat, id, "hello").await;
    }
    assert_eq!(
        cached(&app, "alice", "chat-trip", "travel:trips").await,
        None
    );
}

/// A pending request and a "no" both hold the key back; naming the category asks again.
#[tokio::test]
async fn a_no_is_remembered_and_the_key_is_asked_again_only_when_named() {
    let (fake, app) = setup(10).await;
    let mut ws = app.connect_showing("alice", "chat-no").await;
    relevant(&fake, &["travel:preferences"]);
    let (_, first) = turn(&mut ws, &fake, "chat-no", "m1", "A weekend idea?").await;
    let first = first.expect("asked");
    relevant(&fake, &["travel:preferences"]);
    let (_, pending) = turn(&mut ws, &fake, "chat-no", "m2", "Something cheaper?").await;
    assert!(pending.is_none(), "not asked twice while unanswered");

    ws.send(&confirm("chat-no", &first.request_id, vec![]))
        .await;
    assert_eq!(dismissed(&mut ws).await.reason, "declined");
    relevant(&fake, &["travel:preferences"]);
    let (_, after_no) = turn(&mut ws, &fake, "chat-no", "m3", "And in winter?").await;
    assert!(after_no.is_none(), "not asked after a no");

    relevant(&fake, &["travel:preferences"]);
    let (_, named) = turn(
        &mut ws,
        &fake,
        "chat-no",
        "m4",
        "Use my travel preferences please",
    )
    .await;
    assert_eq!(
        named.expect("asked again").requested_keys,
        vec!["travel:preferences"]
    );
    ws.send(&confirm("chat-no", &first.request_id, vec![]))
        .await;
    assert_eq!(
        error(&mut ws).await.code,
        ErrorCode::NotFound,
        "answered once"
    );
}

/// Another user cannot confirm for a chat that is not theirs, nor find the owner's
/// request; malformed ids and unknown categories are typed errors; nothing is stored.
#[tokio::test]
async fn foreign_chats_unknown_requests_and_categories_are_refused() {
    let (fake, app) = setup(10).await;
    let mut alice = app.connect_showing("alice", "chat-own").await;
    relevant(&fake, &["travel:trips"]);
    let (_, request) = turn(&mut alice, &fake, "chat-own", "m1", "Trip?").await;
    let request = request.unwrap();
    let lisbon = || vec![entry("travel", "trips", json!({"destination": "Lisbon"}))];

    let mut bob = app.connect("bob").await;
    bob.send(&confirm("chat-own", &request.request_id, lisbon()))
        .await;
    assert_eq!(error(&mut bob).await.code, ErrorCode::Forbidden);
    bob.send(&confirm("chat-bob", &request.request_id, lisbon()))
        .await;
    assert_eq!(error(&mut bob).await.code, ErrorCode::NotFound);
    bob.send(&confirm("chat-bob", "../../x", lisbon())).await;
    assert_eq!(error(&mut bob).await.code, ErrorCode::InvalidPayload);
    assert_eq!(
        cached(&app, "alice", "chat-own", "travel:trips").await,
        None
    );
    assert_eq!(cached(&app, "bob", "chat-own", "travel:trips").await, None);

    alice
        .send(&confirm(
            "chat-own",
            &request.request_id,
            vec![
                entry("travel", "diet", json!({"x": 1})),
                entry("nosuchapp", "trips", json!({"destination": "Rome"})),
                entry("web", "preferred_sources", json!({"site": "example.org"})),
            ],
        ))
        .await;
    for _ in 0..2 {
        assert_eq!(
            error(&mut alice).await.code,
            ErrorCode::UnknownSettingsCategory
        );
    }
    assert_eq!(
        error(&mut alice).await.code,
        ErrorCode::InvalidPayload,
        "not requested"
    );
    assert_eq!(dismissed(&mut alice).await.reason, "declined");
    assert_eq!(
        cached(&app, "alice", "chat-own", "travel:trips").await,
        None
    );
    assert_eq!(
        cached(&app, "alice", "chat-own", "web:preferred_sources").await,
        None
    );
}

/// The model proposes changes through the per-turn tools; the answer does not wait; the
/// client accepts one (it enters the chat's cache) and declines the other; an invalid
/// entry is never proposed.
#[tokio::test]
async fn a_proposal_accepted_enters_the_cache_and_a_declined_one_does_not() {
    let (fake, app) = setup(10).await;
    let mut ws = app.connect_showing("alice", "chat-prop").await;
    relevant(&fake, &["travel:trips"]);
    fake.push(Reply::ToolCalls {
        calls: vec![
            call_raw(
                "p1",
                "travel-settings_memories_add_trips",
                json!({"entry": {"destination": "Kyoto"}}),
            ),
            call_raw(
                "p2",
                "travel.settings_memories_add_trips",
                json!({"entry": {"destination": "Oslo"}}),
            ),
            call_raw(
                "p3",
                "travel-settings_memories_add_trips",
                json!({"entry": {"destination": 7}}),
            ),
        ],
        text_before: None,
    });
    fake.push(text("I proposed saving your trips."));
    ws.send(&user_message(
        "chat-prop",
        "m1",
        "I am going to Kyoto and Oslo",
    ))
    .await;
    let (frames, answer) = collect_answer(&mut ws).await;
    assert!(answer.full_content_so_far.contains("proposed"));
    let proposals: Vec<AppSettingsMemoriesProposal> = frames
        .iter()
        .chain(settle(&mut ws).await.iter())
        .filter_map(|f| match f {
            ServerMessage::AppSettingsMemoriesProposal(p) => Some((**p).clone()),
            _ => None,
        })
        .collect();
    assert_eq!(proposals.len(), 2, "the invalid entry is not proposed");
    // Written by the turn's writer: a device that resumes the turn gets them too.
    let mut tablet = app.connect("alice").await;
    let replay = replayed_from_start(&mut tablet, "chat-prop", &answer_task(&frames)).await;
    let replayed = replay
        .iter()
        .filter(|f| matches!(f, ServerMessage::AppSettingsMemoriesProposal(_)))
        .count();
    assert_eq!(replayed, 2, "{replay:?}");
    drop(tablet);
    assert!(
        proposals.iter().all(|p| p.action == ProposalAction::Add
            && p.app_id == "travel"
            && p.category == "trips")
    );
    let main = &fake.requests()[0];
    let offered: Vec<&str> = main["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        offered.contains(&"travel-settings_memories_delete_trips"),
        "{offered:?}"
    );
    let told = tool_result(&fake.requests()[1], "p1");
    assert_eq!(told["status"], "proposed");
    assert_eq!(tool_result(&fake.requests()[1], "p3")["status"], "error");

    let kyoto = proposals
        .iter()
        .find(|p| p.entry["destination"] == "Kyoto")
        .unwrap();
    let oslo = proposals
        .iter()
        .find(|p| p.entry["destination"] == "Oslo")
        .unwrap();
    let decide = |id: &str, accepted: bool| {
        ClientMessage::AppSettingsMemoriesProposalResult(AppSettingsMemoriesProposalResult {
            proposal_id: id.into(),
            accepted,
        })
    };
    ws.send(&decide(&kyoto.proposal_id, true)).await;
    ws.send(&decide(&oslo.proposal_id, false)).await;
    settle(&mut ws).await;
    assert_eq!(
        cached(&app, "alice", "chat-prop", "travel:trips").await,
        Some(vec![json!({"destination": "Kyoto"})])
    );
    ws.send(&decide(&kyoto.proposal_id, true)).await;
    assert_eq!(
        error(&mut ws).await.code,
        ErrorCode::NotFound,
        "decided once"
    );
    let mut bob = app.connect("bob").await;
    bob.send(&decide(&oslo.proposal_id, true)).await;
    assert_eq!(error(&mut bob).await.code, ErrorCode::NotFound);
}

/// Answers the suggestion stages by what they ask (phase 2 runs concurrently).
fn suggestion_responder(fake: &FakeLlm) {
    fake.set_stage_responder(|name, body| {
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        match name {
            "choose_settings_memories_categories" => Some(function_reply(
                name,
                json!({"categories": ["travel:trips", "travel-preferences", "web:preferred_sources"]}),
            )),
            "suggest_settings_memory_entry" if system.contains("user's Trips") => Some(
                function_reply(
                    name,
                    json!({"suggested_title": "Kyoto in Autumn",
                           "item_value": {"destination": "Kyoto"}}),
                ),
            ),
            // Not valid against the category's schema: dropped.
            "suggest_settings_memory_entry" if system.contains("Travel preferences") => Some(
                function_reply(
                    name,
                    json!({"suggested_title": "Trains", "item_value": {"preference": 5}}),
                ),
            ),
            "suggest_settings_memory_entry" => Some(function_reply(
                name,
                json!({"suggested_title": "MDN", "item_value": {"site": "developer.mozilla.org"}}),
            )),
            _ => None,
        }
    });
}

fn worth_suggesting(fake: &FakeLlm, keys: &[&str]) {
    fake.push_stage(
        "preprocess",
        function_reply(
            "preprocess",
            json!({"harmful_or_illegal_score": 0, "misuse_risk_score": 0, "language": "en",
                "category": "general_knowledge", "complexity": "simple",
                "relevant_new_app_settings_and_memories": keys}),
        ),
    );
}

async fn suggestions(ws: &mut WsClient) -> Vec<chatd_protocol::SuggestedSettingsMemoryEntry> {
    ws.recv_until(|m| match m {
        ServerMessage::PostProcessingCompleted(p) => Some(p.suggested_settings_memories.clone()),
        _ => None,
    })
    .await
}

fn reject(chat: &str, hash: &str) -> ClientMessage {
    ClientMessage::RejectSettingsMemorySuggestion(chatd_protocol::RejectSettingsMemorySuggestion {
        chat_id: chat_id(chat),
        hash: hash.into(),
    })
}

/// Phase 1 chooses among the existing candidate categories, phase 2 writes one entry each
/// (the one invalid against its schema is dropped); a rejected suggestion's hash is kept
/// with the chat (idempotent, relayed, malformed or foreign refused) and never suggested
/// again in the chat, also after a restart.
#[tokio::test]
async fn suggestions_are_two_phase_schema_valid_and_a_rejected_one_never_returns() {
    let fake = FakeLlm::start().await.unwrap();
    suggestion_responder(&fake);
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_path_buf();
    let first = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.server.data_dir = dir.clone();
    })
    .await;
    let mut ws = first.connect_showing("alice", "chat-sug").await;
    let mut other = first.connect("alice").await;
    worth_suggesting(
        &fake,
        &[
            "travel:trips",
            "travel:preferences",
            "web:preferred_sources",
            "travel:bogus",
        ],
    );
    fake.push(text("Kyoto is lovely in autumn."));
    ws.send(&user_message(
        "chat-sug",
        "m1",
        "I will visit Kyoto; I read MDN",
    ))
    .await;
    let got = suggestions(&mut ws).await;
    let pairs: Vec<(&str, &str)> = got
        .iter()
        .map(|s| (s.item_type.as_str(), s.suggested_title.as_str()))
        .collect();
    assert_eq!(
        pairs,
        vec![("trips", "Kyoto in Autumn"), ("preferred_sources", "MDN")]
    );
    let choose = &fake.stage_requests("choose_settings_memories_categories")[0];
    let offered =
        &choose["tools"][0]["function"]["parameters"]["properties"]["categories"]["items"]["enum"];
    assert_eq!(
        offered,
        &json!([
            "travel:trips",
            "travel:preferences",
            "web:preferred_sources"
        ])
    );
    assert_eq!(
        fake.stage_requests("suggest_settings_memory_entry").len(),
        3
    );

    let hash = chatd::memories::suggest::suggestion_hash("travel", "trips", "kyoto in autumn");
    for bad in ["abc", &hash.to_uppercase(), &format!("{}g", &hash[1..])] {
        ws.send(&reject("chat-sug", bad)).await;
        assert_eq!(
            error(&mut ws).await.code,
            ErrorCode::InvalidPayload,
            "{bad}"
        );
    }
    for _ in 0..2 {
        ws.send(&reject("chat-sug", &hash)).await;
        let relayed = other
            .recv_until(|m| match m {
                ServerMessage::SettingsMemorySuggestionRejected(r) => Some(r.clone()),
                _ => None,
            })
            .await;
        assert_eq!(relayed.hash, hash);
    }
    settle(&mut ws).await;
    let stored = first
        .state
        .store
        .chat(&UserId::parse("alice").unwrap(), &chat_id("chat-sug"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.rejected_suggestion_hashes,
        vec![hash.clone()],
        "once"
    );
    let mut bob = first.connect("bob").await;
    bob.send(&reject("chat-sug", &"0".repeat(64))).await;
    assert_eq!(error(&mut bob).await.code, ErrorCode::Forbidden);
    drop((ws, other, bob));
    first.shutdown().await.unwrap();

    let second = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.server.data_dir = dir.clone();
    })
    .await;
    let mut ws = second.connect_showing("alice", "chat-sug").await;
    worth_suggesting(&fake, &["travel:trips", "web:preferred_sources"]);
    fake.push(text("Pack warm clothes."));
    ws.send(&user_message("chat-sug", "m2", "What to pack for Kyoto?"))
        .await;
    let got = suggestions(&mut ws).await;
    assert_eq!(got.len(), 1, "the rejected suggestion is not sent again");
    assert_eq!(got[0].item_type, "preferred_sources");
    let bob_store = second
        .state
        .store
        .chat(&UserId::parse("alice").unwrap(), &chat_id("chat-sug"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bob_store.rejected_suggestion_hashes, vec![hash]);
}

/// On Redis: a confirmed entry is stored only sealed (nor is it in any key), under the
/// chat's settings key and index, and evicting the chat deletes both.
#[tokio::test]
async fn on_redis_entries_are_sealed_and_evicted_with_their_chat() {
    let redis = chatd_test_harness::redis::RedisServer::start()
        .await
        .unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        crate::redis_cache::use_redis(c, &redis);
        c.cache.ai_max_chats = 3;
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-r").await;
    relevant(&fake, &["travel:trips"]);
    let (_, request) = turn(&mut ws, &fake, "chat-r", "m1", "Where next?").await;
    ws.send(&confirm(
        "chat-r",
        &request.unwrap().request_id,
        vec![entry(
            "travel",
            "trips",
            json!({"destination": "quokka-island-8812"}),
        )],
    ))
    .await;
    dismissed(&mut ws).await;
    let user = UserHash::of(&UserId::parse("alice").unwrap());
    let key = chatd::cache::backend::keys::settings(&user, "chat-r", "travel:trips");
    let index = chatd::cache::backend::keys::settings_index(&user, "chat-r");
    let dump = redis.dump().await.unwrap();
    assert!(dump.iter().any(|(k, _)| *k == key), "{dump:?}");
    assert!(dump.iter().any(|(k, _)| *k == index));
    for (k, v) in &dump {
        assert!(!k.contains("quokka"), "{k}");
        assert!(
            !v.windows(6).any(|w| w == b"quokka"),
            "plaintext in the value of {k}"
        );
    }
    for (chat, id) in [("chat-s", "s1"), ("chat-t", "t1"), ("chat-u", "u1")] {
        turn(&mut ws, &fake, chat, id, "hello").await;
    }
    let dump = redis.dump().await.unwrap();
    assert!(
        !dump.iter().any(|(k, _)| *k == key || *k == index),
        "evicted"
    );
}
