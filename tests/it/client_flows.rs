//! The reference web client's everyday flows, with frames shaped as that client sends them
//! (raw JSON, its field names): the history re-send with system and empty messages, a
//! duplicated chat's top-level history, a first title without its category (the message is
//! stored, only the gap reported), the chat key relayed to a second device, and
//! `ai_typing_ended` after every kind of turn end on every device.

use std::time::Duration;

use chatd::auth::UserId;
use chatd_protocol::{ChatId, ErrorCode, HistoryReason, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply, function_reply};
use chatd_test_harness::ws_client::WsClient;
use serde_json::{Value, json};

use crate::support::{TestApp, outcome, spawn_app, use_llm};

const ANSWER: &str = "Hello from the fake LLM.\n\nSecond paragraph.";

/// `chat_message_added` as `sendersChatMessages.ts` builds it.
fn client_message(chat: &str, id: &str, content: &str, has_title: bool) -> Value {
    json!({
        "type": "chat_message_added",
        "payload": {
            "chat_id": chat,
            "parent_id": null,
            "message": {
                "message_id": id, "role": "user", "content": content,
                "created_at": 1_700_000_100, "sender_name": "",
                "chat_has_title": has_title,
            },
            "encrypted_chat_key": "wrapped-chat-key-v1",
            "is_incognito": false,
            "app_settings_memories_metadata": [],
            "embeds": [],
            "encrypted_embeds": [],
        }
    })
}

/// Every message the model was sent, system prompt included: (role, content).
fn messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

#[tokio::test]
async fn the_history_resend_quotes_system_messages_as_user_notices_and_skips_empty_ones() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-rs").await;
    // A chat the client has (titled) but this server's cache does not.
    ws.send_json(client_message("chat-rs", "m3", "and now?", true))
        .await;
    assert_eq!(
        outcome(&mut ws).await.need_history().reason,
        HistoryReason::CacheMiss
    );

    // The client re-sends every message it stores, in the order it stores them.
    let refusal = "I can't help with that request.";
    let mut again = client_message("chat-rs", "m3", "and now?", true);
    again["payload"]["message"]["message_history"] = json!([
        {"message_id": "m1", "role": "user", "content": "something risky", "created_at": 1_700_000_001,
         "sender_name": ""},
        {"message_id": "s1", "role": "system", "content": refusal, "created_at": 1_700_000_002},
        {"message_id": "m2", "role": "user", "content": "fine, what is 2+2?", "created_at": 1_700_000_003},
        {"message_id": "a2", "role": "assistant", "content": "4", "created_at": 1_700_000_004,
         "category": "general_knowledge", "model_name": "fake"},
        {"message_id": "a3", "role": "assistant", "content": "", "created_at": 1_700_000_005},
        {"message_id": "a4", "role": "assistant", "content": null, "created_at": 1_700_000_006},
        {"message_id": "m3", "role": "user", "content": "and now?", "created_at": 1_700_000_100},
    ]);
    ws.send_json(again).await;
    assert_eq!(outcome(&mut ws).await.answer().full_content_so_far, ANSWER);

    let seen = messages(&fake.requests()[0]);
    let tail: Vec<_> = seen.iter().filter(|(r, _)| r != "system").collect();
    let notice = pair("user", &chatd::pipeline::quoted_notice(refusal));
    assert!(notice.1.contains(&format!("> {refusal}")));
    assert_eq!(
        tail,
        vec![
            &pair("user", "something risky"),
            &notice,
            &pair("user", "fine, what is 2+2?"),
            &pair("assistant", "4"),
            &pair("user", "and now?"),
        ],
        "the client's system message is a quoted notice in a user message, empty ones are gone"
    );
    assert_eq!(
        seen.iter().filter(|(r, _)| r == "system").count(),
        2,
        "only chatd's own prompt (first) and the turn's context (last) are system messages"
    );

    // The re-sent history was cached: the next message is a hit with the same context.
    ws.send_json(client_message("chat-rs", "m4", "thanks", true))
        .await;
    outcome(&mut ws).await.answer();
    let next = messages(&fake.requests()[1]);
    assert!(next.contains(&notice));
    assert_eq!(
        next.iter().rfind(|(r, _)| r != "system"),
        Some(&pair("user", "thanks"))
    );
}

#[tokio::test]
async fn a_duplicated_chat_sends_its_history_at_the_top_level() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("bob", "chat-dup").await;
    // A duplicated chat has no title yet; its history comes beside `message`, unasked.
    let mut first = client_message("chat-dup", "m9", "continue from here", false);
    first["payload"]["message_history"] = json!([
        {"message_id": "o1", "role": "user", "content": "original question", "created_at": 1},
        {"message_id": "o2", "role": "assistant", "content": "original answer", "created_at": 2},
    ]);
    ws.send_json(first).await;
    outcome(&mut ws).await.answer();
    let seen = messages(&fake.requests()[0]);
    let tail: Vec<_> = seen.iter().filter(|(r, _)| r != "system").collect();
    assert_eq!(
        tail,
        vec![
            &pair("user", "original question"),
            &pair("assistant", "original answer"),
            &pair("user", "continue from here"),
        ]
    );
}

#[tokio::test]
async fn a_first_title_without_category_stores_the_message_and_reports_the_gap() {
    let app = spawn_app(|_| {}).await;
    let mut a = app.connect("carol").await;
    let mut b = app.connect("carol").await;
    // As the client sends it when preprocessing gave a title but no category or icon.
    a.send_json(json!({"type": "encrypted_chat_metadata", "payload": {
        "chat_id": "chat-t", "message_id": "m1", "encrypted_content": "enc-user-message",
        "encrypted_sender_name": "enc-name", "encrypted_category": null,
        "encrypted_pii_mappings": null, "encrypted_title": "enc-title",
        "encrypted_icon": null, "encrypted_chat_category": null, "encrypted_chat_tags": null,
        "encrypted_chat_key": "wrapped-chat-key-v1", "allow_chat_key_rotation": false,
        "chat_key_rotation_reason": null, "created_at": 1_700_000_000,
        "versions": {"messages_v": 1, "title_v": 1, "last_edited_overall_timestamp": 1_700_000_000},
        "message_history": [], "chat_has_title": false,
    }}))
    .await;
    let mut kinds = Vec::new();
    let gap = a
        .recv_until(|m| {
            kinds.push(m.type_name());
            match m {
                ServerMessage::Error(e) => Some(e.clone()),
                _ => None,
            }
        })
        .await;
    assert_eq!(
        kinds,
        [
            "chat_message_confirmed",
            "encrypted_metadata_stored",
            "error"
        ]
    );
    assert_eq!(gap.code, ErrorCode::IncompleteChatMetadata);
    assert_eq!(
        gap.details.as_deref(),
        Some("missing: encrypted_icon, encrypted_chat_category")
    );
    assert_eq!(gap.message_id.as_ref().map(|m| m.as_str()), Some("m1"));
    // Stored: the message, the title and the key; the other device was told.
    let user = UserId::parse("carol").unwrap();
    let chat = ChatId::parse("chat-t").unwrap();
    let stored = app.state.store.chat(&user, &chat).await.unwrap().unwrap();
    assert_eq!(stored.encrypted_title.as_deref(), Some("enc-title"));
    assert_eq!(
        stored.encrypted_chat_key.as_deref(),
        Some("wrapped-chat-key-v1")
    );
    assert_eq!(stored.versions.messages_v, 1);
    let relayed = b
        .recv_until(|m| match m {
            ServerMessage::EncryptedChatMetadata(u) => Some(u.clone()),
            _ => None,
        })
        .await;
    assert_eq!(
        relayed.message.map(|m| m.encrypted_content),
        Some("enc-user-message".to_string())
    );

    // The icon and category sent later complete it, with no error.
    a.send_json(json!({"type": "encrypted_chat_metadata", "payload": {
        "chat_id": "chat-t", "encrypted_icon": "enc-icon", "encrypted_chat_category": "enc-cat",
    }}))
    .await;
    let next = a
        .recv_until(|m| match m {
            ServerMessage::EncryptedMetadataStored(_) | ServerMessage::Error(_) => Some(m.clone()),
            _ => None,
        })
        .await;
    assert_eq!(next.type_name(), "encrypted_metadata_stored", "{next:?}");
}

#[tokio::test]
async fn the_chat_key_travels_with_the_relay_and_the_typing_frame() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut a = app.connect_showing("dana", "chat-k").await;
    let mut b = app.connect("dana").await;
    a.send_json(client_message("chat-k", "m1", "hello", false))
        .await;
    let relayed = b
        .recv_until(|m| match m {
            ServerMessage::NewChatMessage(n) => Some(n.clone()),
            _ => None,
        })
        .await;
    assert_eq!(
        relayed.encrypted_chat_key.as_deref(),
        Some("wrapped-chat-key-v1")
    );
    for ws in [&mut a, &mut b] {
        let typing = ws
            .recv_until(|m| match m {
                ServerMessage::AiTypingStarted(t) => Some(t.clone()),
                _ => None,
            })
            .await;
        assert_eq!(
            typing.encrypted_chat_key.as_deref(),
            Some("wrapped-chat-key-v1")
        );
    }
}

/// Reads until `ai_typing_ended` for the task, returning the frame types seen on the way.
async fn until_typing_ended(ws: &mut WsClient) -> Vec<&'static str> {
    let mut kinds = Vec::new();
    ws.recv_until(|m| {
        kinds.push(m.type_name());
        matches!(m, ServerMessage::AiTypingEnded(_)).then_some(())
    })
    .await;
    kinds
}

/// The device showing the chat sees the final frame, then `ai_typing_ended`; the other
/// sees the background completion, then `ai_typing_ended`.
async fn both_see_typing_end(showing: &mut WsClient, other: &mut WsClient) {
    let kinds = until_typing_ended(showing).await;
    let final_at = kinds
        .iter()
        .rposition(|k| *k == "ai_message_update")
        .expect("the final frame came first");
    assert_eq!(final_at + 1, kinds.len() - 1, "{kinds:?}");
    let kinds = until_typing_ended(other).await;
    assert_eq!(
        kinds[kinds.len() - 2],
        "ai_background_response_completed",
        "{kinds:?}"
    );
}

async fn two_devices(app: &TestApp, user: &str, chat: &str) -> (WsClient, WsClient) {
    (
        app.connect_showing(user, chat).await,
        app.connect(user).await,
    )
}

#[tokio::test]
async fn typing_ends_after_every_kind_of_turn_end_on_every_device() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;

    // Answered.
    let (mut a, mut b) = two_devices(&app, "erin", "chat-1").await;
    a.send_json(client_message("chat-1", "m1", "hi", false))
        .await;
    both_see_typing_end(&mut a, &mut b).await;

    // Refused by preprocessing.
    fake.push_stage(
        "preprocess",
        function_reply(
            "preprocess",
            json!({"harmful_or_illegal_score": 9, "misuse_risk_score": 0, "language": "en",
                "category": "general_knowledge", "complexity": "simple"}),
        ),
    );
    let (mut a, mut b) = two_devices(&app, "erin", "chat-2").await;
    a.send_json(client_message("chat-2", "m2", "something harmful", false))
        .await;
    both_see_typing_end(&mut a, &mut b).await;

    // Failed: the provider cuts the stream mid-answer.
    fake.push(Reply::CutAfter {
        chunks: vec!["A partial answer.\n\n".into()],
    });
    let (mut a, mut b) = two_devices(&app, "erin", "chat-3").await;
    a.send_json(client_message("chat-3", "m3", "tell me", false))
        .await;
    both_see_typing_end(&mut a, &mut b).await;

    // Cancelled while streaming.
    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Starting.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["never shown".into()],
            delay: Duration::ZERO,
            usage: None,
        }),
    });
    let (mut a, mut b) = two_devices(&app, "erin", "chat-4").await;
    a.send_json(client_message("chat-4", "m4", "a long one", false))
        .await;
    let task = a
        .recv_until(|m| match m {
            ServerMessage::AiTaskInitiated(t) => Some(t.ai_task_id.clone()),
            _ => None,
        })
        .await;
    gate.reached().await;
    a.send_json(json!({"type": "cancel_ai_task", "payload": {"task_id": task.as_str(), "chat_id": "chat-4"}}))
        .await;
    both_see_typing_end(&mut a, &mut b).await;
    gate.release();
}

#[tokio::test]
async fn reasoning_streams_as_thinking_frames_and_never_reaches_the_answer_or_the_model() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("fay", "chat-r").await;
    for (field, message) in [("reasoning_content", "m1"), ("reasoning", "m2")] {
        fake.push(Reply::Reasoning {
            field,
            reasoning: vec!["Let me think. ".into(), "Two plus two is four.".into()],
            then: Box::new(Reply::Text {
                chunks: vec!["The answer ".into(), "is 4.".into()],
                delay: Duration::ZERO,
                usage: None,
            }),
        });
        ws.send_json(client_message("chat-r", message, "what is 2+2?", false))
            .await;
        let mut thinking = Vec::new();
        let mut order = Vec::new();
        let last = ws
            .recv_until(|m| {
                order.push(m.type_name());
                match m {
                    ServerMessage::ThinkingChunk(t) => {
                        thinking.push((t.sequence, t.content.clone()));
                        None
                    }
                    ServerMessage::AiMessageUpdate(u) if u.is_final_chunk => Some(u.clone()),
                    _ => None,
                }
            })
            .await;
        assert_eq!(
            thinking,
            vec![
                (1, "Let me think. ".to_string()),
                (2, "Two plus two is four.".to_string())
            ],
            "{field}"
        );
        let complete = order.iter().position(|k| *k == "thinking_complete");
        let first_update = order.iter().position(|k| *k == "ai_message_update");
        assert!(
            complete.is_some() && complete < first_update,
            "thinking_complete before the answer: {order:?}"
        );
        assert_eq!(last.full_content_so_far, "The answer is 4.");
    }
    // The model's next context holds the answers, never the reasoning.
    ws.send_json(client_message("chat-r", "m3", "thanks", false))
        .await;
    outcome(&mut ws).await.answer();
    let seen = messages(&fake.requests()[2]);
    assert!(seen.contains(&pair("assistant", "The answer is 4.")));
    assert!(
        seen.iter().all(|(_, c)| !c.contains("Two plus two")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_embed_the_cache_lacks_is_asked_for_and_used_once_it_comes() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("gus", "chat-emb").await;
    // A message quoting an embed (a reference block, as the client writes it) whose
    // plaintext this server never saw (stored before a restart, say).
    let content = "What does this page say?\n```json\n{\"type\": \"web_page\", \"embed_id\": \"emb-page\"}\n```";
    ws.send_json(client_message("chat-emb", "m1", content, false))
        .await;
    let asked = outcome(&mut ws).await.need_embeds();
    assert_eq!(asked.chat_id.as_str(), "chat-emb");
    assert_eq!(asked.message_id.as_str(), "m1");
    let ids: Vec<&str> = asked.embed_ids.iter().map(|e| e.as_str()).collect();
    assert_eq!(ids, ["emb-page"]);
    assert!(fake.requests().is_empty());

    // The client re-sends the message with the embed from its store.
    let mut again = client_message("chat-emb", "m1", content, false);
    again["payload"]["embeds"] = json!([{
        "embed_id": "emb-page", "type": "web_page", "status": "finished",
        "content": "embed_id: emb-page\ntitle: Ferris\nsummary: Ferris is the Rust mascot",
    }]);
    ws.send_json(again).await;
    outcome(&mut ws).await.answer();
    let seen = crate::support::conversation(&fake.requests()[0])
        .pop()
        .unwrap()
        .1;
    assert!(
        seen.contains("summary: Ferris is the Rust mascot"),
        "{seen}"
    );
    assert!(!seen.contains("unavailable"), "{seen}");
    // Counted once: the re-send is not a second message.
    ws.send_json(client_message("chat-emb", "m2", "thanks", false))
        .await;
    let count = ws
        .recv_until(|m| match m {
            ServerMessage::ChatMessageConfirmed(c) if c.message_id.as_str() == "m2" => {
                Some(c.new_messages_v)
            }
            _ => None,
        })
        .await;
    assert_eq!(count, 3, "m1, its answer, m2");
}

#[tokio::test]
async fn a_resent_embed_whose_hash_does_not_match_is_not_used() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("hal", "chat-h").await;
    let content = "Look:\n```json\n{\"type\": \"web_page\", \"embed_id\": \"emb-x\"}\n```";
    let mut first = client_message("chat-h", "m1", content, false);
    first["payload"]["embeds"] = json!([{
        "embed_id": "emb-x", "type": "web_page", "content": "title: tampered",
        "content_hash": chatd::cache::ai::content_hash("web_page", "title: original"),
    }]);
    ws.send_json(first).await;
    // Not cached: the server still lacks it and asks.
    let asked = outcome(&mut ws).await.need_embeds();
    let ids: Vec<&str> = asked.embed_ids.iter().map(|e| e.as_str()).collect();
    assert_eq!(ids, ["emb-x"]);
}
