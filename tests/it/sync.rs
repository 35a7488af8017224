//! Phased sync end to end: a fresh device receives exactly the stored ciphertexts
//! (byte-equal), in phases, on SQLite and PostgreSQL; a device that has some chats gets only
//! what it lacks and pages the rest (`request_chat_content_batch`, `get_chat_messages`);
//! the sync cache is warmed by a phase 1 on its own, and a finished sync (`all` or phase 3)
//! clears it, on the memory and the Redis cache.

use std::collections::{BTreeMap, BTreeSet};

use chatd::crypto::UserHash;
use chatd_protocol::{
    ChatContent, ChatId, ClientMessage, ClientVersions, EmbedId, PhasedSyncRequest, ServerMessage,
    SyncPhase,
};
use chatd_test_harness::postgres::Postgres;
use chatd_test_harness::ws_client::WsClient;

use crate::store::{embed_key, expect, store_chat, store_embed};
use crate::support::{TestApp, chat_id, spawn_app};

/// Filling 25 chats sends ~50 frames at once: lift the rate limits.
pub fn unlimited(c: &mut chatd::config::Config) {
    c.limits.connection_rate = 100_000;
    c.limits.connection_burst = 100_000;
    c.limits.user_rate = 100_000;
    c.limits.user_burst = 100_000;
}

pub fn request(phase: SyncPhase) -> PhasedSyncRequest {
    PhasedSyncRequest {
        phase,
        client_chat_versions: BTreeMap::new(),
        client_chat_ids: Vec::new(),
        client_embed_ids: Vec::new(),
    }
}

#[derive(Default, Debug)]
pub struct Synced {
    pub last_chat: Option<ChatId>,
    pub content: Vec<ChatContent>,
    pub metadata: Vec<ChatId>,
    total: u64,
    batches: Vec<(u64, bool)>,
    embeds: Vec<EmbedId>,
    embed_keys: usize,
}

pub async fn sync(ws: &mut WsClient, req: PhasedSyncRequest) -> Synced {
    ws.send(&ClientMessage::PhasedSyncRequest(Box::new(req)))
        .await;
    let mut out = Synced::default();
    loop {
        match ws.recv().await {
            ServerMessage::Phase1LastChatReady(p) => out.last_chat = p.chat_id,
            ServerMessage::Phase1bChatContentReady(p) => {
                out.content.extend(p.chats);
                out.embeds.extend(p.embeds.into_iter().map(|e| e.embed_id));
                out.embed_keys += p.embed_keys.len();
            }
            ServerMessage::Phase2ChatsReady(p) => {
                out.metadata.extend(p.chats.into_iter().map(|c| c.chat_id));
                out.total = p.total_chat_count;
            }
            ServerMessage::BackgroundMessageSync(p) => {
                out.batches.push((p.batch_number, p.is_last_batch));
                out.content.extend(p.chats);
                out.embeds.extend(p.embeds.into_iter().map(|e| e.embed_id));
                out.embed_keys += p.embed_keys.len();
            }
            ServerMessage::PhasedSyncComplete(_) => return out,
            ServerMessage::Error(e) => panic!("sync failed: {e:?}"),
            _ => {}
        }
    }
}

/// 25 chats (each a user and an assistant message), an embed with a key in chat-07.
pub async fn fill(app: &TestApp) {
    let mut ws = app.connect("alice").await;
    for i in 0..25 {
        store_chat(&mut ws, &format!("chat-{i:02}")).await;
    }
    ws.send(&store_embed("emb-7", "chat-07", 1)).await;
    expect(&mut ws, "embed_stored").await;
    ws.send(&embed_key("emb-7", "chat-07")).await;
    expect(&mut ws, "embed_keys_stored").await;
}

async fn fresh_device_gets_exactly_the_stored_ciphertexts(app: TestApp) {
    fill(&app).await;
    let store = &app.state.store;
    let alice = chatd::auth::UserId::parse("alice").unwrap();
    let ids: Vec<ChatId> = (0..25).map(|i| chat_id(&format!("chat-{i:02}"))).collect();
    let stored = store.messages(&alice, &ids).await.unwrap();

    let mut fresh = app.connect("alice").await;
    let got = sync(&mut fresh, request(SyncPhase::All)).await;
    assert!(got.last_chat.is_some());
    assert_eq!(got.total, 25);
    assert_eq!(
        got.metadata.len(),
        25,
        "phase 2: metadata of every chat (≤ 100)"
    );
    // `all` is phases 1 and 2: phase 1b covers 10 chats, no phase 3.
    assert_eq!(got.content.len(), 10);
    assert!(got.batches.is_empty());
    // The client pages the rest: 15 chats' content in one batch (with the embed).
    let have: BTreeSet<ChatId> = got.content.iter().map(|c| c.chat_id.clone()).collect();
    let rest: Vec<ChatId> = ids.iter().filter(|c| !have.contains(c)).cloned().collect();
    let mut got = got;
    fresh
        .send_json(serde_json::json!({"type": "request_chat_content_batch",
            "payload": {"chat_ids": rest}}))
        .await;
    match expect(&mut fresh, "chat_content_batch_response").await {
        ServerMessage::ChatContentBatchResponse(b) => {
            assert!(b.not_found.is_empty());
            got.content.extend(b.chats);
            got.embeds.extend(b.embeds.into_iter().map(|e| e.embed_id));
            got.embed_keys += b.embed_keys.len();
        }
        other => panic!("{other:?}"),
    }
    let synced_ids: BTreeSet<ChatId> = got.content.iter().map(|c| c.chat_id.clone()).collect();
    assert_eq!(synced_ids.len(), 25, "every chat's content exactly once");
    assert_eq!(got.content.len(), 25);
    let mut received: Vec<(ChatId, chatd_protocol::EncryptedMessage)> = got
        .content
        .iter()
        .flat_map(|c| c.messages.iter().map(|m| (c.chat_id.clone(), m.clone())))
        .collect();
    received.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(received, stored, "byte-equal ciphertexts");
    assert_eq!(got.embeds, vec![EmbedId::parse("emb-7").unwrap()]);
    assert_eq!(got.embed_keys, 1);

    // A device that has everything but two chats, and the embed, gets only those two.
    let mut versions = BTreeMap::new();
    for c in store.chats_page(&alice, None, 100).await.unwrap() {
        if c.chat_id.as_str() != "chat-03" && c.chat_id.as_str() != "chat-20" {
            versions.insert(
                c.chat_id.clone(),
                ClientVersions {
                    messages_v: Some(c.versions.messages_v),
                    title_v: Some(c.versions.title_v),
                    last_edited_overall_timestamp: None,
                },
            );
        }
    }
    let mut partial = app.connect("alice").await;
    let got = sync(
        &mut partial,
        PhasedSyncRequest {
            phase: SyncPhase::All,
            client_chat_versions: versions,
            client_chat_ids: Vec::new(),
            client_embed_ids: vec![EmbedId::parse("emb-7").unwrap()],
        },
    )
    .await;
    // Phase 1b holds chat-03 (among the 10 most recent); phase 2 names both.
    let synced: BTreeSet<&str> = got.content.iter().map(|c| c.chat_id.as_str()).collect();
    assert_eq!(synced, BTreeSet::from(["chat-03"]));
    let meta: BTreeSet<&str> = got.metadata.iter().map(|c| c.as_str()).collect();
    assert_eq!(meta, BTreeSet::from(["chat-03", "chat-20"]));
    assert!(got.embeds.is_empty(), "embeds the client has are skipped");
    // The client opens chat-20: its messages, byte-equal.
    partial
        .send_json(
            serde_json::json!({"type": "get_chat_messages", "payload": {"chat_id": "chat-20"}}),
        )
        .await;
    match expect(&mut partial, "chat_messages_response").await {
        ServerMessage::ChatMessagesResponse(r) => {
            let want: Vec<_> = stored
                .iter()
                .filter(|(c, _)| c.as_str() == "chat-20")
                .map(|(_, m)| m.clone())
                .collect();
            assert_eq!(r.messages, want);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_fresh_device_syncs_the_stored_ciphertexts_on_sqlite() {
    let app = spawn_app(unlimited).await;
    fresh_device_gets_exactly_the_stored_ciphertexts(app).await;
}

#[tokio::test]
async fn a_fresh_device_syncs_the_stored_ciphertexts_on_postgres() {
    let pg = Postgres::start().await.unwrap();
    pg.create_database("sync").await.unwrap();
    let url = pg.url("sync");
    let app = spawn_app(|c| {
        unlimited(c);
        c.store.url = url;
    })
    .await;
    assert_eq!(app.state.store.backend_name(), "postgres");
    fresh_device_gets_exactly_the_stored_ciphertexts(app).await;
}

#[tokio::test]
async fn phase_1_warms_the_sync_cache_and_phase_3_clears_it() {
    let app = spawn_app(unlimited).await;
    fill(&app).await;
    let alice = chatd::auth::UserId::parse("alice").unwrap();
    let hash = UserHash::of(&alice);
    let backend = app.state.ai_cache.backend().clone();
    let recent = app.state.store.chats_page(&alice, None, 10).await.unwrap();
    // Storing warmed the chats (see the end of this test); start cold.
    assert!(
        backend
            .sync_get(&hash, &recent[0].chat_id)
            .await
            .unwrap()
            .is_some()
    );
    backend.sync_clear(&hash).await.unwrap();
    for c in &recent {
        assert!(backend.sync_get(&hash, &c.chat_id).await.unwrap().is_none());
    }
    let mut ws = app.connect("alice").await;
    let first = sync(&mut ws, request(SyncPhase::Phase1)).await;
    assert_eq!(first.content.len(), 10);
    for c in &recent {
        assert!(
            backend.sync_get(&hash, &c.chat_id).await.unwrap().is_some(),
            "phase 1 warms {}",
            c.chat_id
        );
    }
    // Served from the warm cache: the same ciphertexts.
    let again = sync(&mut ws, request(SyncPhase::Phase1)).await;
    assert_eq!(again.content, first.content);
    // A new message makes the cached copy stale; it is not served.
    ws.send(&crate::store::completed(
        recent[0].chat_id.as_str(),
        "late-answer",
        "enc-late",
    ))
    .await;
    expect(&mut ws, "ai_response_storage_confirmed").await;
    let fresh = sync(&mut ws, request(SyncPhase::Phase1)).await;
    let newest = fresh.content.iter().find(|c| {
        c.chat_id.as_str() == "late-answer"
            || c.messages.iter().any(|m| m.encrypted_content == "enc-late")
    });
    assert!(
        newest.is_some(),
        "the new message is synced, not the stale cache"
    );

    let done = sync(&mut ws, request(SyncPhase::Phase3)).await;
    assert_eq!(done.batches.last().map(|b| b.1), Some(true));
    for c in &recent {
        assert!(
            backend.sync_get(&hash, &c.chat_id).await.unwrap().is_none(),
            "phase 3 clears the sync cache"
        );
    }

    // Messages stored during a session keep their chat warm for the next login.
    let chat = recent[1].chat_id.clone();
    ws.send(&crate::store::completed(
        chat.as_str(),
        "session-answer",
        "enc-session",
    ))
    .await;
    expect(&mut ws, "ai_response_storage_confirmed").await;
    let cached = backend.sync_get(&hash, &chat).await.unwrap();
    assert_eq!(cached.map(|b| b.len()), Some(4), "header + 3 messages");
    let login = sync(&mut ws, request(SyncPhase::Phase1)).await;
    let synced = login.content.iter().find(|c| c.chat_id == chat).unwrap();
    let stored = app
        .state
        .store
        .messages(&alice, std::slice::from_ref(&chat))
        .await
        .unwrap();
    let stored: Vec<_> = stored.into_iter().map(|(_, m)| m).collect();
    assert_eq!(synced.messages, stored);
}

/// Issue 35, defect 3: the login sync the reference client sends (`all`: phases 1 and 2,
/// then paging) consumes the sync cache: once it is complete, and after the paging, the
/// user has no copy left in it (before, every copy stayed for its hour: only phase 3 cleared).
async fn a_finished_sync_leaves_no_sync_cache_behind(app: TestApp) {
    fill(&app).await;
    let alice = chatd::auth::UserId::parse("alice").unwrap();
    let hash = UserHash::of(&alice);
    let backend = app.state.ai_cache.backend().clone();
    let ids: Vec<ChatId> = (0..25).map(|i| chat_id(&format!("chat-{i:02}"))).collect();
    let copies = || async {
        let mut left = Vec::new();
        for c in &ids {
            if backend.sync_get(&hash, c).await.unwrap().is_some() {
                left.push(c.as_str().to_string());
            }
        }
        left
    };
    // Storing kept every chat's copy current for the next login.
    assert_eq!(copies().await.len(), 25);

    let mut ws = app.connect("alice").await;
    let got = sync(&mut ws, request(SyncPhase::All)).await;
    assert_eq!(got.content.len(), 10, "phase 1b: ten chats");
    assert_eq!(copies().await, Vec::<String>::new(), "consumed by the sync");
    // Paging the rest reads the store and leaves nothing behind.
    let have: BTreeSet<ChatId> = got.content.iter().map(|c| c.chat_id.clone()).collect();
    let rest: Vec<ChatId> = ids.iter().filter(|c| !have.contains(c)).cloned().collect();
    ws.send_json(serde_json::json!({"type": "request_chat_content_batch",
        "payload": {"chat_ids": rest}}))
        .await;
    match expect(&mut ws, "chat_content_batch_response").await {
        ServerMessage::ChatContentBatchResponse(b) => assert_eq!(b.chats.len(), 15),
        other => panic!("{other:?}"),
    }
    ws.send_json(serde_json::json!({"type": "get_chat_messages",
        "payload": {"chat_id": "chat-20"}}))
        .await;
    expect(&mut ws, "chat_messages_response").await;
    assert_eq!(copies().await, Vec::<String>::new(), "paging writes none");

    // A message stored afterwards keeps its chat's copy current for the next login, whose
    // `all` sync is served it and clears it again.
    ws.send(&crate::store::completed(
        "chat-03",
        "after-sync",
        "enc-after",
    ))
    .await;
    expect(&mut ws, "ai_response_storage_confirmed").await;
    assert_eq!(copies().await, vec!["chat-03".to_string()]);
    let mut next = app.connect("alice").await;
    let login = sync(&mut next, request(SyncPhase::All)).await;
    let chat = login
        .content
        .iter()
        .find(|c| c.chat_id.as_str() == "chat-03");
    assert!(
        chat.is_some_and(|c| c
            .messages
            .iter()
            .any(|m| m.encrypted_content == "enc-after")),
        "the new message is synced"
    );
    assert_eq!(copies().await, Vec::<String>::new());
}

#[tokio::test]
async fn a_finished_sync_leaves_no_sync_cache_behind_in_memory() {
    let app = spawn_app(unlimited).await;
    a_finished_sync_leaves_no_sync_cache_behind(app).await;
}

#[tokio::test]
async fn a_finished_sync_leaves_no_sync_cache_behind_in_redis() {
    let redis = chatd_test_harness::redis::RedisServer::start()
        .await
        .unwrap();
    let app = spawn_app(|c| {
        unlimited(c);
        crate::redis_cache::use_redis(c, &redis);
    })
    .await;
    assert_eq!(
        app.state.config.cache.backend,
        chatd::config::CacheBackendKind::Redis
    );
    a_finished_sync_leaves_no_sync_cache_behind(app).await;
}

#[tokio::test]
async fn a_user_without_chats_and_a_bad_phase() {
    let app = spawn_app(unlimited).await;
    let mut ws = app.connect("nobody").await;
    let got = sync(&mut ws, request(SyncPhase::All)).await;
    assert_eq!(got.last_chat, None);
    assert!(got.content.is_empty() && got.metadata.is_empty());
    assert_eq!(got.total, 0);
    assert!(got.batches.is_empty(), "`all` is phases 1 and 2");
    let later = sync(&mut ws, request(SyncPhase::Phase3)).await;
    assert_eq!(later.batches, vec![(1, true)], "one terminating batch");
    ws.send_json(
        serde_json::json!({"type": "phased_sync_request", "payload": {"phase": "phase9"}}),
    )
    .await;
    let code = ws.recv_until(crate::support::error_code).await;
    assert_eq!(code, chatd_protocol::ErrorCode::InvalidPayload);
    // The connection survives.
    let again = sync(&mut ws, request(SyncPhase::Phase2)).await;
    assert_eq!(again.total, 0);
}

/// A sync runs beside the connection's read loop: while it waits on the store (a table lock
/// held by the test), a message on the same connection is answered; the sync then finishes.
#[tokio::test]
async fn a_message_sent_during_a_slow_sync_is_answered_at_once() {
    use sqlx::Connection;

    let pg = Postgres::start().await.unwrap();
    pg.create_database("slow_sync").await.unwrap();
    let url = pg.url("slow_sync");
    let app = spawn_app(|c| {
        unlimited(c);
        c.store.url = url.clone();
    })
    .await;
    let mut ws = app.connect_showing("alice", "chat-live").await;
    // The chat is claimed before the lock: its next message needs no store query.
    ws.send(&crate::support::user_message("chat-live", "m1", "hello"))
        .await;
    crate::support::collect_answer(&mut ws).await;

    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE chats IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();

    ws.send(&ClientMessage::PhasedSyncRequest(Box::new(request(
        SyncPhase::All,
    ))))
    .await;
    ws.send(&crate::support::user_message(
        "chat-live",
        "m2",
        "still there?",
    ))
    .await;
    let (frames, last) = crate::support::collect_answer(&mut ws).await;
    assert!(last.is_final_chunk);
    assert!(
        !frames
            .iter()
            .any(|f| matches!(f, ServerMessage::PhasedSyncComplete(_))),
        "the sync is still waiting on the store: {frames:?}"
    );

    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
    ws.recv_until(|m| match m {
        ServerMessage::PhasedSyncComplete(c) => Some(c.clone()),
        _ => None,
    })
    .await;
}
