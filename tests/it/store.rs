//! Persistence end to end over WebSocket: a chat turn followed by the client's encrypted
//! persistence messages, relayed to the user's other devices; duplicates stored once; key
//! mismatch and stale embeds refused; another user's ids refused with nothing changed;
//! `delete_chat` leaving no trace in the store or in a real Redis.

use chatd::auth::UserId;
use chatd::store::hash_id;
use chatd_protocol::{
    AiResponseCompleted, ChatId, ClientMessage, ClientVersions, DeleteChat, DeleteMessage, EmbedId,
    EmbedKey, EncryptedChatMetadata, EncryptedMessage, ErrorCode, MessageId, RequestEmbed, Role,
    ServerMessage, StoreEmbed, StoreEmbedKeys, UpdatePostProcessingMetadata, UpdateTitle,
};
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::ws_client::WsClient;

use crate::support::{chat_id, collect_answer, error_code, spawn_app, user_message};

pub fn metadata(chat: &str, message: &str, content: &str, key: &str) -> ClientMessage {
    ClientMessage::EncryptedChatMetadata(Box::new(EncryptedChatMetadata {
        chat_id: chat_id(chat),
        message_id: Some(MessageId::parse(message).unwrap()),
        encrypted_content: Some(content.to_string()),
        encrypted_sender_name: None,
        encrypted_category: Some(format!("enc-category-{chat}")),
        encrypted_pii_mappings: None,
        encrypted_title: Some(format!("enc-title-{chat}")),
        encrypted_icon: Some("enc-icon".into()),
        encrypted_chat_category: Some("enc-chat-category".into()),
        encrypted_chat_tags: None,
        encrypted_chat_key: Some(key.to_string()),
        allow_chat_key_rotation: false,
        created_at: Some(1_700_000_000),
        versions: ClientVersions::default(),
    }))
}

pub fn assistant(message: &str, content: &str) -> EncryptedMessage {
    EncryptedMessage {
        message_id: MessageId::parse(message).unwrap(),
        role: Role::Assistant,
        encrypted_content: content.to_string(),
        created_at: 1_700_000_001,
        encrypted_sender_name: None,
        encrypted_category: None,
        encrypted_model_name: Some("enc-model".into()),
        encrypted_thinking_content: None,
        encrypted_thinking_signature: None,
        encrypted_pii_mappings: None,
        has_thinking: None,
        thinking_token_count: None,
        user_message_id: None,
        status: Some("synced".into()),
        replaces_through: None,
    }
}

pub fn completed(chat: &str, message: &str, content: &str) -> ClientMessage {
    ClientMessage::AiResponseCompleted(Box::new(AiResponseCompleted {
        chat_id: chat_id(chat),
        message: assistant(message, content),
        versions: ClientVersions::default(),
        replace: false,
    }))
}

pub fn store_embed(id: &str, chat: &str, version: u64) -> ClientMessage {
    ClientMessage::StoreEmbed(Box::new(StoreEmbed {
        embed_id: EmbedId::parse(id).unwrap(),
        encrypted_type: Some("enc-type".into()),
        encrypted_content: Some(format!("enc-embed-{id}-v{version}")),
        encrypted_text_preview: None,
        status: Some("finished".into()),
        hashed_chat_id: Some(hash_id(chat)),
        hashed_message_id: None,
        hashed_task_id: None,
        embed_ids: Vec::new(),
        parent_embed_id: None,
        version_number: version,
        content_hash: None,
        text_length_chars: None,
        is_private: false,
        is_shared: false,
        embed_keys: Vec::new(),
    }))
}

pub fn embed_key(id: &str, chat: &str) -> ClientMessage {
    ClientMessage::StoreEmbedKeys(StoreEmbedKeys {
        keys: vec![EmbedKey {
            hashed_embed_id: hash_id(id),
            key_type: "chat".into(),
            hashed_chat_id: Some(hash_id(chat)),
            encrypted_embed_key: format!("wrapped-key-{id}"),
            created_at: 1_700_000_000,
        }],
    })
}

/// Receives until a frame of the given type (skipping others, e.g. a turn's late frames).
pub async fn expect(ws: &mut WsClient, kind: &str) -> ServerMessage {
    ws.recv_until(|m| (m.type_name() == kind).then(|| m.clone()))
        .await
}

/// Receives until an `error` frame and returns its code.
pub async fn expect_error(ws: &mut WsClient) -> ErrorCode {
    ws.recv_until(error_code).await
}

/// Stores a chat (user message with metadata) and an assistant message for `user`.
pub async fn store_chat(ws: &mut WsClient, chat: &str) {
    ws.send(&metadata(
        chat,
        &format!("{chat}-u"),
        &format!("enc-user-{chat}"),
        "key-1",
    ))
    .await;
    expect(ws, "encrypted_metadata_stored").await;
    ws.send(&completed(
        chat,
        &format!("{chat}-a"),
        &format!("enc-answer-{chat}"),
    ))
    .await;
    expect(ws, "ai_response_storage_confirmed").await;
}

fn uid(s: &str) -> UserId {
    UserId::parse(s).unwrap()
}

#[tokio::test]
async fn a_turn_then_its_persistence_reaches_the_store_and_the_other_device() {
    let app = spawn_app(|_| {}).await;
    let mut a = app.connect_showing("alice", "chat-1").await;
    let mut b = app.connect("alice").await;

    a.send(&user_message("chat-1", "m-user-1", "Hello there"))
        .await;
    let (_, last) = collect_answer(&mut a).await;
    let answer_id = last.message_id.clone();
    expect(&mut a, "post_processing_completed").await;

    // The client encrypts the user message and the metadata.
    a.send(&metadata("chat-1", "m-user-1", "enc-user-message", "key-1"))
        .await;
    match expect(&mut a, "chat_message_confirmed").await {
        ServerMessage::ChatMessageConfirmed(c) => assert_eq!(c.message_id.as_str(), "m-user-1"),
        other => panic!("{other:?}"),
    }
    match expect(&mut a, "encrypted_metadata_stored").await {
        ServerMessage::EncryptedMetadataStored(s) => {
            assert_eq!(s.versions.messages_v, 1);
            assert_eq!(s.versions.title_v, 1);
        }
        other => panic!("{other:?}"),
    }
    match expect(&mut b, "encrypted_chat_metadata").await {
        ServerMessage::EncryptedChatMetadata(u) => {
            assert_eq!(u.chat.encrypted_title.as_deref(), Some("enc-title-chat-1"));
            assert_eq!(u.chat.encrypted_chat_key.as_deref(), Some("key-1"));
            assert_eq!(
                u.message.unwrap().encrypted_content,
                "enc-user-message",
                "the other device gets the ciphertext"
            );
        }
        other => panic!("{other:?}"),
    }

    // The assistant message, with a plaintext `content` sent by mistake: dropped.
    let mut frame = serde_json::to_value(completed(
        "chat-1",
        answer_id.as_str(),
        "enc-assistant-message",
    ))
    .unwrap();
    frame["payload"]["message"]["content"] = "PLAINTEXT-LEAK-8812".into();
    a.send_json(frame.clone()).await;
    match expect(&mut a, "ai_response_storage_confirmed").await {
        ServerMessage::AiResponseStorageConfirmed(c) => {
            assert!(c.stored);
            assert_eq!(c.versions.messages_v, 2);
        }
        other => panic!("{other:?}"),
    }
    match expect(&mut b, "new_encrypted_message").await {
        ServerMessage::NewEncryptedMessage(m) => {
            assert_eq!(m.message.encrypted_content, "enc-assistant-message")
        }
        other => panic!("{other:?}"),
    }
    // A duplicate is acknowledged and not stored again.
    a.send_json(frame).await;
    match expect(&mut a, "ai_response_storage_confirmed").await {
        ServerMessage::AiResponseStorageConfirmed(c) => {
            assert!(!c.stored);
            assert_eq!(c.versions.messages_v, 2);
        }
        other => panic!("{other:?}"),
    }
    let stored = app
        .state
        .store
        .messages(&uid("alice"), &[chat_id("chat-1")])
        .await
        .unwrap();
    let contents: Vec<&str> = stored
        .iter()
        .map(|(_, m)| m.encrypted_content.as_str())
        .collect();
    assert_eq!(contents, ["enc-user-message", "enc-assistant-message"]);
    let db = std::fs::read(app.state.config.server.data_dir.join("chatd.db")).unwrap();
    let wal =
        std::fs::read(app.state.config.server.data_dir.join("chatd.db-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(
            !bytes.windows(19).any(|w| w == b"PLAINTEXT-LEAK-8812"),
            "plaintext content must never be stored"
        );
    }

    // Post-processing metadata and a title change.
    a.send(&ClientMessage::UpdatePostProcessingMetadata(Box::new(
        UpdatePostProcessingMetadata {
            encrypted_chat_summary: Some("enc-summary".into()),
            encrypted_follow_up_suggestions: Some("enc-follow-ups".into()),
            ..UpdatePostProcessingMetadata::new(chat_id("chat-1"))
        },
    )))
    .await;
    expect(&mut a, "post_processing_metadata_stored").await;
    match expect(&mut b, "chat_metadata_updated").await {
        ServerMessage::ChatMetadataUpdated(u) => {
            assert_eq!(
                u.chat.encrypted_chat_summary.as_deref(),
                Some("enc-summary")
            )
        }
        other => panic!("{other:?}"),
    }
    a.send(&ClientMessage::UpdateTitle(UpdateTitle {
        chat_id: chat_id("chat-1"),
        encrypted_title: "enc-title-2".into(),
        encrypted_chat_key: None,
    }))
    .await;
    for ws in [&mut a, &mut b] {
        match expect(ws, "chat_title_updated").await {
            ServerMessage::ChatTitleUpdated(t) => {
                assert_eq!(t.encrypted_title, "enc-title-2");
                assert_eq!(t.versions.title_v, 2);
            }
            other => panic!("{other:?}"),
        }
    }

    // Deleting a message: both devices learn it, the store drops it.
    a.send(&ClientMessage::DeleteMessage(DeleteMessage {
        chat_id: chat_id("chat-1"),
        message_id: MessageId::parse("m-user-1").unwrap(),
        embed_ids_to_delete: Vec::new(),
    }))
    .await;
    for ws in [&mut a, &mut b] {
        expect(ws, "message_deleted").await;
    }
    let left = app
        .state
        .store
        .messages(&uid("alice"), &[chat_id("chat-1")])
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
}

#[tokio::test]
async fn a_different_chat_key_is_refused_unless_rotation_is_allowed() {
    let app = spawn_app(|_| {}).await;
    let mut a = app.connect("alice").await;
    store_chat(&mut a, "chat-k").await;

    a.send(&metadata("chat-k", "m-2", "enc-2", "key-OTHER"))
        .await;
    assert_eq!(expect_error(&mut a).await, ErrorCode::ChatKeyMismatch);
    let stored = app
        .state
        .store
        .chat(&uid("alice"), &chat_id("chat-k"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.encrypted_chat_key.as_deref(), Some("key-1"));
    assert_eq!(
        stored.versions.messages_v, 2,
        "the message was not stored either"
    );

    let mut rotate = metadata("chat-k", "m-2", "enc-2", "key-OTHER");
    if let ClientMessage::EncryptedChatMetadata(m) = &mut rotate {
        m.allow_chat_key_rotation = true;
    }
    a.send(&rotate).await;
    expect(&mut a, "encrypted_metadata_stored").await;
    let stored = app
        .state
        .store
        .chat(&uid("alice"), &chat_id("chat-k"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.encrypted_chat_key.as_deref(), Some("key-OTHER"));
    assert_eq!(stored.versions.messages_v, 3);
}

#[tokio::test]
async fn a_first_title_without_icon_is_stored_and_reported_incomplete() {
    let app = spawn_app(|_| {}).await;
    let mut a = app.connect("alice").await;
    let mut bare = metadata("chat-i", "m-1", "enc-1", "key-1");
    if let ClientMessage::EncryptedChatMetadata(m) = &mut bare {
        m.encrypted_icon = None;
    }
    a.send(&bare).await;
    assert_eq!(
        expect_error(&mut a).await,
        ErrorCode::IncompleteChatMetadata
    );
    // What came is stored all the same (the message, the title, the category).
    let stored = app
        .state
        .store
        .chat(&uid("alice"), &chat_id("chat-i"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.encrypted_title.as_deref(), Some("enc-title-chat-i"));
    assert_eq!(stored.versions.messages_v, 1);
    // Complete, then a later title alone is fine.
    store_chat(&mut a, "chat-i").await;
    a.send(&bare).await;
    expect(&mut a, "encrypted_metadata_stored").await;
}

#[tokio::test]
async fn embeds_are_versioned_relayed_and_served_back_encrypted() {
    let app = spawn_app(|_| {}).await;
    let mut a = app.connect("alice").await;
    let mut b = app.connect("alice").await;
    store_chat(&mut a, "chat-e").await;

    a.send(&store_embed("emb-1", "chat-e", 2)).await;
    expect(&mut a, "embed_stored").await;
    match expect(&mut b, "embed_update").await {
        ServerMessage::EmbedUpdate(u) => {
            assert_eq!(u.embed_id.as_str(), "emb-1");
            assert_eq!(u.version_number, 2);
        }
        other => panic!("{other:?}"),
    }
    a.send(&store_embed("emb-1", "chat-e", 1)).await;
    assert_eq!(expect_error(&mut a).await, ErrorCode::StaleVersion);
    a.send(&embed_key("emb-1", "chat-e")).await;
    expect(&mut a, "embed_keys_stored").await;

    a.send(&ClientMessage::RequestEmbed(RequestEmbed {
        embed_id: EmbedId::parse("emb-1").unwrap(),
    }))
    .await;
    match expect(&mut a, "send_embed_data").await {
        ServerMessage::SendEmbedData(d) => {
            assert!(d.already_encrypted);
            let embed = d.embed.unwrap();
            assert_eq!(
                embed.encrypted_content.as_deref(),
                Some("enc-embed-emb-1-v2")
            );
            assert_eq!(d.embed_keys.len(), 1);
            assert_eq!(d.embed_keys[0].encrypted_embed_key, "wrapped-key-emb-1");
        }
        other => panic!("{other:?}"),
    }
    // Bad input: no content.
    a.send_json(serde_json::json!({"type": "store_embed", "payload": {"embed_id": "emb-2"}}))
        .await;
    assert_eq!(expect_error(&mut a).await, ErrorCode::InvalidPayload);

    // An embed with its keys in the frame: each device stores its own copy of the same
    // version (its own key), the first copy is kept whole and the second acknowledged.
    let keyed = |device: &str, keys_of: &str| {
        let mut m = serde_json::to_value(store_embed("emb-3", "chat-e", 1)).unwrap();
        m["payload"]["encrypted_content"] = format!("{device}-body").into();
        m["payload"]["embed_keys"] = serde_json::json!([{"hashed_embed_id": hash_id(keys_of),
            "key_type": "chat", "hashed_chat_id": hash_id("chat-e"),
            "encrypted_embed_key": format!("{device}-key"), "created_at": 1}]);
        m
    };
    a.send_json(keyed("phone", "emb-3")).await;
    expect(&mut a, "embed_stored").await;
    b.send_json(keyed("laptop", "emb-3")).await;
    expect(&mut b, "embed_stored").await;
    a.send(&ClientMessage::RequestEmbed(RequestEmbed {
        embed_id: EmbedId::parse("emb-3").unwrap(),
    }))
    .await;
    match expect(&mut a, "send_embed_data").await {
        ServerMessage::SendEmbedData(d) => {
            let embed = d.embed.unwrap();
            assert_eq!(embed.encrypted_content.as_deref(), Some("phone-body"));
            let keys: Vec<_> = d
                .embed_keys
                .iter()
                .map(|k| &k.encrypted_embed_key)
                .collect();
            assert_eq!(keys, ["phone-key"]);
        }
        other => panic!("{other:?}"),
    }
    // Keys of another embed in the frame: refused, nothing stored.
    a.send_json(keyed("phone", "emb-9")).await;
    assert_eq!(expect_error(&mut a).await, ErrorCode::InvalidPayload);
}

#[tokio::test]
async fn another_users_ids_are_refused_and_nothing_changes() {
    let app = spawn_app(|_| {}).await;
    let mut alice = app.connect("alice").await;
    store_chat(&mut alice, "chat-a").await;
    alice.send(&store_embed("emb-a", "chat-a", 1)).await;
    expect(&mut alice, "embed_stored").await;
    let store = app.state.store.clone();
    let before_chat = store.chat(&uid("alice"), &chat_id("chat-a")).await.unwrap();
    let before_messages = store
        .messages(&uid("alice"), &[chat_id("chat-a")])
        .await
        .unwrap();
    let before_embed = store
        .embed(&uid("alice"), &EmbedId::parse("emb-a").unwrap())
        .await
        .unwrap();

    let mut bob = app.connect("bob").await;
    let attempts = [
        (
            metadata("chat-a", "bob-m", "x", "key-1"),
            ErrorCode::Forbidden,
        ),
        (completed("chat-a", "bob-a", "x"), ErrorCode::Forbidden),
        (
            ClientMessage::UpdatePostProcessingMetadata(Box::new(UpdatePostProcessingMetadata {
                encrypted_chat_summary: Some("x".into()),
                ..UpdatePostProcessingMetadata::new(chat_id("chat-a"))
            })),
            ErrorCode::Forbidden,
        ),
        (
            ClientMessage::UpdateTitle(UpdateTitle {
                chat_id: chat_id("chat-a"),
                encrypted_title: "x".into(),
                encrypted_chat_key: None,
            }),
            ErrorCode::Forbidden,
        ),
        (
            ClientMessage::DeleteMessage(DeleteMessage {
                chat_id: chat_id("chat-a"),
                message_id: MessageId::parse("chat-a-u").unwrap(),
                embed_ids_to_delete: vec![EmbedId::parse("emb-a").unwrap()],
            }),
            ErrorCode::Forbidden,
        ),
        (
            ClientMessage::DeleteChat(DeleteChat {
                chat_id: chat_id("chat-a"),
            }),
            ErrorCode::Forbidden,
        ),
        (
            ClientMessage::RequestEmbed(RequestEmbed {
                embed_id: EmbedId::parse("emb-a").unwrap(),
            }),
            ErrorCode::NotFound,
        ),
    ];
    for (msg, code) in attempts {
        let kind = msg.type_name();
        bob.send(&msg).await;
        assert_eq!(expect_error(&mut bob).await, code, "{kind}");
    }
    // Bad ids are typed errors too.
    bob.send_json(serde_json::json!({"type": "delete_chat", "payload": {"chatId": "bad id"}}))
        .await;
    assert_eq!(expect_error(&mut bob).await, ErrorCode::InvalidPayload);

    assert_eq!(
        store.chat(&uid("alice"), &chat_id("chat-a")).await.unwrap(),
        before_chat
    );
    assert_eq!(
        store
            .messages(&uid("alice"), &[chat_id("chat-a")])
            .await
            .unwrap(),
        before_messages
    );
    assert_eq!(
        store
            .embed(&uid("alice"), &EmbedId::parse("emb-a").unwrap())
            .await
            .unwrap(),
        before_embed
    );
    assert!(
        store
            .chat(&uid("bob"), &chat_id("chat-bob"))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store.count_chats(&uid("bob")).await.unwrap(), 0);
}

/// Ids belong to their owner: a user who learns another's ids before they are stored
/// (a task id, a user message id, a skill embed id) and stores them first in his own chat
/// only stores his own rows; the owner's writes then succeed and her chat holds them.
#[tokio::test]
async fn ids_another_user_stored_first_never_block_the_owner() {
    let app = spawn_app(|_| {}).await;
    let mut bob = app.connect("bob").await;
    store_chat(&mut bob, "chat-bob").await;
    // Bob stores Alice's future ids first, in his own chat.
    bob.send(&completed("chat-bob", "alice-task-1", "bob-squat"))
        .await;
    expect(&mut bob, "ai_response_storage_confirmed").await;
    bob.send(&metadata("chat-bob", "alice-user-1", "bob-squat", "key-1"))
        .await;
    expect(&mut bob, "encrypted_metadata_stored").await;
    bob.send(&store_embed("alice-embed-1", "chat-bob", 1)).await;
    expect(&mut bob, "embed_stored").await;

    let mut alice = app.connect("alice").await;
    alice
        .send(&metadata("chat-alice", "alice-user-1", "enc-hers", "key-a"))
        .await;
    expect(&mut alice, "encrypted_metadata_stored").await;
    alice
        .send(&completed("chat-alice", "alice-task-1", "enc-her-answer"))
        .await;
    match expect(&mut alice, "ai_response_storage_confirmed").await {
        ServerMessage::AiResponseStorageConfirmed(c) => assert!(c.stored, "{c:?}"),
        other => panic!("{other:?}"),
    }
    alice
        .send(&store_embed("alice-embed-1", "chat-alice", 1))
        .await;
    expect(&mut alice, "embed_stored").await;

    let store = app.state.store.clone();
    let hers = store
        .messages(&uid("alice"), &[chat_id("chat-alice")])
        .await
        .unwrap();
    let contents: Vec<&str> = hers
        .iter()
        .map(|(_, m)| m.encrypted_content.as_str())
        .collect();
    assert_eq!(contents, vec!["enc-hers", "enc-her-answer"]);
    let embed = store
        .embed(&uid("alice"), &EmbedId::parse("alice-embed-1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        embed.hashed_chat_id.as_deref(),
        Some(hash_id("chat-alice").as_str())
    );
    // Bob's rows are his own and untouched.
    let his = store
        .messages(&uid("bob"), &[chat_id("chat-bob")])
        .await
        .unwrap();
    assert_eq!(
        his.iter()
            .filter(|(_, m)| m.encrypted_content == "bob-squat")
            .count(),
        2
    );
}

#[tokio::test]
async fn delete_chat_removes_every_trace_from_the_store_and_redis() {
    let redis = RedisServer::start().await.unwrap();
    let app = spawn_app(|c| {
        c.cache.backend = chatd::config::CacheBackendKind::Redis;
        c.cache.redis_url = redis.url();
    })
    .await;
    let chat = "chat-gone-5521";
    let mut a = app.connect_showing("alice", chat).await;
    let mut b = app.connect("alice").await;
    // A turn fills the AI cache (with a cached embed); persistence fills the store.
    a.send(&crate::support::user_message_with(
        chat,
        "m-1",
        "Hello",
        |m| {
            m.embeds = vec![chatd_protocol::ClientEmbed {
                embed_id: EmbedId::parse("emb-gone").unwrap(),
                embed_type: "web_page".into(),
                content: "title: x".into(),
                status: None,
                version_number: 1,
                content_hash: None,
            }];
        },
    ))
    .await;
    collect_answer(&mut a).await;
    store_chat(&mut a, chat).await;
    a.send(&store_embed("emb-gone", chat, 1)).await;
    expect(&mut a, "embed_stored").await;
    a.send(&embed_key("emb-gone", chat)).await;
    expect(&mut a, "embed_keys_stored").await;
    // Phase 1 warms the sync cache.
    a.send(&ClientMessage::PhasedSyncRequest(Box::new(
        chatd_protocol::PhasedSyncRequest {
            phase: chatd_protocol::SyncPhase::Phase1,
            client_chat_versions: Default::default(),
            client_chat_ids: Vec::new(),
            client_embed_ids: Vec::new(),
        },
    )))
    .await;
    expect(&mut a, "phased_sync_complete").await;
    let dump = redis.dump().await.unwrap();
    assert!(
        dump.iter()
            .any(|(k, _)| k.contains(chat) && k.ends_with(":messages:ai")),
        "{dump:?}"
    );
    assert!(
        dump.iter()
            .any(|(k, _)| k.contains(chat) && k.ends_with(":messages:sync")),
        "{dump:?}"
    );
    assert!(
        dump.iter()
            .any(|(k, _)| k.starts_with("{u:") && k.ends_with(":embed:emb-gone")),
        "{dump:?}"
    );

    a.send(&ClientMessage::DeleteChat(DeleteChat {
        chat_id: chat_id(chat),
    }))
    .await;
    for ws in [&mut a, &mut b] {
        match expect(ws, "chat_deleted").await {
            ServerMessage::ChatDeleted(d) => assert_eq!(d.chat_id.as_str(), chat),
            other => panic!("{other:?}"),
        }
    }
    let store = &app.state.store;
    let alice = uid("alice");
    assert!(store.chat(&alice, &chat_id(chat)).await.unwrap().is_none());
    assert!(
        store
            .messages(&alice, &[chat_id(chat)])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .embed(&alice, &EmbedId::parse("emb-gone").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .embed_keys(&alice, &[hash_id("emb-gone")])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.count_chats(&alice).await.unwrap(), 0);
    let dump = redis.dump().await.unwrap();
    for (key, value) in &dump {
        assert!(!key.contains(chat), "{key} survived the deletion");
        assert!(!key.contains("emb-gone"), "{key} survived the deletion");
        let text = String::from_utf8_lossy(value);
        assert!(!text.contains(chat), "{key} still names the chat: {text}");
    }
    let _: ChatId = chat_id(chat);
}

#[tokio::test]
async fn readyz_reports_the_store() {
    let pg = chatd_test_harness::postgres::Postgres::start()
        .await
        .unwrap();
    pg.create_database("ready").await.unwrap();
    let url = pg.url("ready");
    let app = spawn_app(|c| c.store.url = url).await;
    let body = app.readyz().await;
    assert_eq!(body["checks"]["store"], "ok", "{body}");
    drop(pg);
    let http = reqwest::Client::new();
    let ready = http.get(app.http_url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["down"], serde_json::json!(["store"]), "{body}");
}

#[test]
fn check_config_validates_store_url_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let run = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_chatd"))
            .arg("check-config")
            .current_dir(dir.path())
            .env("CHATD__STORE__URL", url)
            .output()
            .unwrap()
    };
    let ok = run("postgres://chatd@127.0.0.1/chatd");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("store postgres"));
    let bad = run("mysql://db/chatd");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("store.url"));
}

/// The store owns a chat's `messages_v`: after a restart (the memory cache is empty), the
/// next message is counted after the stored ones, and the turn asks for the history it
/// knows the chat has instead of answering as if the chat were new.
#[tokio::test]
async fn after_a_restart_messages_v_and_the_expected_history_come_from_the_store() {
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_path_buf();
    let first = spawn_app(|c| c.server.data_dir = dir.clone()).await;
    let mut ws = first.connect("alice").await;
    store_chat(&mut ws, "chat-r").await;
    drop(ws);
    first.shutdown().await.unwrap();

    let second = spawn_app(|c| c.server.data_dir = dir.clone()).await;
    let mut ws = second.connect_showing("alice", "chat-r").await;
    ws.send(&user_message("chat-r", "m3", "and again")).await;
    match expect(&mut ws, "chat_message_confirmed").await {
        ServerMessage::ChatMessageConfirmed(c) => assert_eq!(c.new_messages_v, 3),
        other => panic!("unexpected {other:?}"),
    }
    let request = crate::support::outcome(&mut ws).await.need_history();
    // Before the store counted, this chat looked new and was answered without history.
    assert_eq!(request.reason, chatd_protocol::HistoryReason::CacheMiss);

    // Another user still cannot take the chat over.
    let mut bob = second.connect("bob").await;
    bob.send(&user_message("chat-r", "b1", "mine?")).await;
    assert_eq!(expect_error(&mut bob).await, ErrorCode::Forbidden);
}

/// `key_check`: the first check value a user's device sends is kept (in the permanent
/// store, so a restart keeps it); every later one gets the stored value back; another user
/// has their own; an empty one is refused.
#[tokio::test]
async fn the_first_key_check_is_kept_and_served_to_every_later_device() {
    let app = spawn_app(|_| {}).await;
    let check = |value: &str| serde_json::json!({"type": "key_check", "payload": {"encrypted_check": value}});
    let stored = |m: ServerMessage| match m {
        ServerMessage::KeyCheck(k) => k.encrypted_check,
        other => panic!("{other:?}"),
    };
    let mut first = app.connect("alice").await;
    first
        .send_json(check("sealed-by-the-first-passphrase"))
        .await;
    assert_eq!(
        stored(expect(&mut first, "key_check").await),
        "sealed-by-the-first-passphrase"
    );
    let mut later = app.connect("alice").await;
    later.send_json(check("sealed-by-another-passphrase")).await;
    assert_eq!(
        stored(expect(&mut later, "key_check").await),
        "sealed-by-the-first-passphrase"
    );
    let mut bob = app.connect("bob").await;
    bob.send_json(check("bobs")).await;
    assert_eq!(stored(expect(&mut bob, "key_check").await), "bobs");
    bob.send_json(check("")).await;
    assert_eq!(expect_error(&mut bob).await, ErrorCode::InvalidPayload);
}
