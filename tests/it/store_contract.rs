//! The store contract, run on both backends: SQLite (a temp file) and a real PostgreSQL
//! started by the harness. Ownership, versions, idempotence, key checks, embed versions,
//! paging and deletion must behave the same on both.

use std::sync::Arc;

use chatd::auth::UserId;
use chatd::store::{ChatCursor, ChatPatch, Store, StoreError, hash_id};
use chatd_protocol::{ChatId, EmbedId, EmbedKey, EncryptedMessage, MessageId, Role, StoreEmbed};
use chatd_test_harness::postgres::Postgres;

fn user(s: &str) -> UserId {
    UserId::parse(s).unwrap()
}

fn chat(s: &str) -> ChatId {
    ChatId::parse(s).unwrap()
}

pub fn message(id: &str, role: Role, content: &str, created_at: i64) -> EncryptedMessage {
    EncryptedMessage {
        message_id: MessageId::parse(id).unwrap(),
        role,
        encrypted_content: content.to_string(),
        created_at,
        encrypted_sender_name: None,
        encrypted_category: Some("enc-cat".into()),
        encrypted_model_name: None,
        encrypted_thinking_content: None,
        encrypted_thinking_signature: None,
        encrypted_pii_mappings: None,
        has_thinking: None,
        thinking_token_count: None,
        user_message_id: None,
        status: None,
        replaces_through: None,
    }
}

pub fn embed(id: &str, chat: &str, version: u64) -> StoreEmbed {
    StoreEmbed {
        embed_id: EmbedId::parse(id).unwrap(),
        encrypted_type: Some("enc-type".into()),
        encrypted_content: Some(format!("enc-content-v{version}")),
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
    }
}

fn titled(title: &str, key: &str) -> ChatPatch {
    ChatPatch {
        encrypted_title: Some(title.into()),
        encrypted_chat_key: Some(key.into()),
        last_edited: Some(100),
        ..ChatPatch::default()
    }
}

/// `chat`'s versions are `owner`'s to read; `other`'s read is refused.
async fn owned_by(store: &dyn Store, owner: &str, other: &str, chat: &ChatId) {
    let versions = store.chat_versions(&user(owner), chat).await.unwrap();
    assert!(versions.is_some(), "{owner} reads {chat:?}");
    assert!(matches!(
        store.chat_versions(&user(other), chat).await,
        Err(StoreError::Forbidden)
    ));
}

/// The stored body and keys are `device`'s copy of `version`.
async fn stored_copy(store: &dyn Store, a: &UserId, id: &EmbedId, device: &str, version: u64) {
    let got = store.embed(a, id).await.unwrap().unwrap();
    assert_eq!(
        got.encrypted_content,
        Some(format!("{device}-body-v{version}"))
    );
    assert!(got.embed_keys.is_empty(), "keys are not kept in the body");
    let mut keys: Vec<String> = store
        .embed_keys(a, &[hash_id(id.as_str())])
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.encrypted_embed_key)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            format!("{device}-chat-key-v{version}"),
            format!("{device}-master-key-v{version}")
        ]
    );
}

/// Two devices store the same embed version, each under its own key, with the keys in the
/// frame: the first copy is kept whole (its body with its keys), the second is dropped
/// without an error; a newer version replaces both.
async fn embeds_with_their_keys(store: &dyn Store) {
    let a = UserId::parse("keyed-alice").unwrap();
    let id = EmbedId::parse("keyed-1").unwrap();
    let copy = |device: &str, version: u64| {
        let mut e = embed("keyed-1", "chat-k", version);
        e.encrypted_content = Some(format!("{device}-body-v{version}"));
        e.embed_keys = ["chat", "master"]
            .map(|kind| EmbedKey {
                hashed_embed_id: hash_id("keyed-1"),
                key_type: kind.into(),
                hashed_chat_id: (kind == "chat").then(|| hash_id("chat-k")),
                encrypted_embed_key: format!("{device}-{kind}-key-v{version}"),
                created_at: 1,
            })
            .to_vec();
        e
    };
    store.put_embed(&a, &copy("phone", 1)).await.unwrap();
    store.put_embed(&a, &copy("laptop", 1)).await.unwrap();
    stored_copy(store, &a, &id, "phone", 1).await;
    store.put_embed(&a, &copy("laptop", 2)).await.unwrap();
    stored_copy(store, &a, &id, "laptop", 2).await;
    let err = store.put_embed(&a, &copy("phone", 1)).await.unwrap_err();
    assert!(
        matches!(err, StoreError::StaleVersion { sent: 1, stored: 2 }),
        "{err:?}"
    );
    stored_copy(store, &a, &id, "laptop", 2).await;
}

async fn contract(store: Arc<dyn Store>) {
    embeds_with_their_keys(store.as_ref()).await;
    let (a, b) = (user("alice"), user("bob"));
    let c1 = chat("chat-1");
    store.ping().await.unwrap();
    // A chat no one stored: no versions, for anyone.
    assert!(store.chat_versions(&a, &c1).await.unwrap().is_none());

    // Metadata: created on first write, title_v counts title changes.
    let d = store
        .update_chat(&a, &c1, &titled("t1", "k1"))
        .await
        .unwrap();
    assert_eq!(d.encrypted_title.as_deref(), Some("t1"));
    assert_eq!(d.versions.title_v, 1);
    let d = store
        .update_chat(&a, &c1, &titled("t1", "k1"))
        .await
        .unwrap();
    assert_eq!(d.versions.title_v, 1, "the same title is not a new version");
    let d = store
        .update_chat(&a, &c1, &titled("t2", "k1"))
        .await
        .unwrap();
    assert_eq!(d.versions.title_v, 2);

    // A different chat key is refused, nothing changes; rotation must be explicit.
    let err = store
        .update_chat(&a, &c1, &titled("t3", "k2"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::ChatKeyMismatch), "{err:?}");
    let d = store.chat(&a, &c1).await.unwrap().unwrap();
    assert_eq!(d.encrypted_title.as_deref(), Some("t2"));
    assert_eq!(d.encrypted_chat_key.as_deref(), Some("k1"));
    let mut rotate = titled("t3", "k2");
    rotate.allow_key_rotation = true;
    let d = store.update_chat(&a, &c1, &rotate).await.unwrap();
    assert_eq!(d.encrypted_chat_key.as_deref(), Some("k2"));

    // Messages: each new one raises messages_v; a duplicate id is acknowledged, not stored.
    let m1 = message("m-1", Role::User, "cipher-1", 200);
    let m2 = message("m-2", Role::Assistant, "cipher-2", 200);
    let r = store.add_message(&a, &c1, &m1).await.unwrap();
    assert!(r.is_new);
    assert_eq!(r.versions.messages_v, 1);
    assert_eq!(r.versions.last_edited_overall_timestamp, 200);
    let r = store.add_message(&a, &c1, &m2).await.unwrap();
    assert_eq!(r.versions.messages_v, 2);
    let r = store.add_message(&a, &c1, &m2).await.unwrap();
    assert!(!r.is_new);
    assert_eq!(r.versions.messages_v, 2);
    let stored = store.messages(&a, std::slice::from_ref(&c1)).await.unwrap();
    assert_eq!(
        stored,
        vec![(c1.clone(), m1.clone()), (c1.clone(), m2.clone())],
        "stored exactly once, in order, byte-equal"
    );

    // Another user: every operation on alice's ids is refused and changes nothing.
    owned_by(store.as_ref(), "alice", "bob", &c1).await;
    let before = store.chat(&a, &c1).await.unwrap();
    assert!(matches!(
        store.update_chat(&b, &c1, &titled("x", "k2")).await,
        Err(StoreError::Forbidden)
    ));
    assert!(matches!(
        store
            .add_message(&b, &c1, &message("m-b", Role::User, "x", 1))
            .await,
        Err(StoreError::Forbidden)
    ));
    assert!(matches!(
        store.authorize(&b, &c1).await,
        Err(StoreError::Forbidden)
    ));
    store.authorize(&a, &c1).await.unwrap();
    store.authorize(&b, &chat("free")).await.unwrap();
    assert!(store.chat(&b, &c1).await.unwrap().is_none());
    assert!(
        store
            .messages(&b, std::slice::from_ref(&c1))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.delete_message(&b, &c1, &m1.message_id, &[]).await,
        Err(StoreError::Forbidden)
    ));
    assert!(matches!(
        store.delete_chat(&b, &c1).await,
        Err(StoreError::Forbidden)
    ));
    assert_eq!(store.chat(&a, &c1).await.unwrap(), before);
    assert_eq!(
        store
            .messages(&a, std::slice::from_ref(&c1))
            .await
            .unwrap()
            .len(),
        2
    );
    // No refused write created a chat of Bob's.
    assert_eq!(store.count_chats(&b).await.unwrap(), 0);

    // Message ids are their owner's: Bob storing Alice's message id in his own chat stores
    // his own message and changes nothing of hers; an id Bob stored first does not block
    // Alice storing it in her chat.
    let bob_chat = chat("bob-chat");
    let her_chat = chat("alice-ids");
    assert!(store.add_message(&b, &bob_chat, &m1).await.unwrap().is_new);
    let squatted = message("m-next", Role::Assistant, "bob's", 300);
    let added = store.add_message(&b, &bob_chat, &squatted).await.unwrap();
    assert!(added.is_new);
    let hers = message("m-next", Role::Assistant, "alice's", 6);
    assert!(
        store
            .add_message(&a, &her_chat, &hers)
            .await
            .unwrap()
            .is_new
    );
    assert_eq!(
        store
            .messages(&a, std::slice::from_ref(&her_chat))
            .await
            .unwrap(),
        vec![(her_chat.clone(), hers.clone())]
    );
    assert_eq!(
        store
            .messages(&b, std::slice::from_ref(&bob_chat))
            .await
            .unwrap(),
        vec![(bob_chat.clone(), m1.clone()), (bob_chat.clone(), squatted)]
    );
    // Bob deleting "his" m-next deletes his own; once gone it is not_found for him, and
    // Alice's stays.
    store
        .delete_message(&b, &bob_chat, &hers.message_id, &[])
        .await
        .unwrap();
    assert!(matches!(
        store
            .delete_message(&b, &bob_chat, &hers.message_id, &[])
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store
            .messages(&a, std::slice::from_ref(&her_chat))
            .await
            .unwrap()
            .len(),
        1
    );
    store.delete_chat(&b, &bob_chat).await.unwrap();
    store.delete_chat(&a, &her_chat).await.unwrap();

    // Embeds: versions only move forward; another user cannot overwrite or read them.
    let e1 = EmbedId::parse("e-1").unwrap();
    store
        .put_embed(&a, &embed("e-1", "chat-1", 1))
        .await
        .unwrap();
    let err = store
        .put_embed(&a, &embed("e-1", "chat-1", 0))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::StaleVersion { sent: 0, stored: 1 }),
        "{err:?}"
    );
    store
        .put_embed(&a, &embed("e-1", "chat-1", 2))
        .await
        .unwrap();
    assert!(store.embed(&b, &e1).await.unwrap().is_none());
    // Embed ids are their owner's: Bob's embed of the same id is his own row.
    store
        .put_embed(&b, &embed("e-1", "bob-chat", 9))
        .await
        .unwrap();
    assert_eq!(
        store.embed(&b, &e1).await.unwrap().unwrap().version_number,
        9
    );
    let got = store.embed(&a, &e1).await.unwrap().unwrap();
    assert_eq!(got.encrypted_content.as_deref(), Some("enc-content-v2"));
    assert_eq!(got.version_number, 2);
    let by_chat = store
        .embeds_for_chats(&a, &[hash_id("chat-1")])
        .await
        .unwrap();
    assert_eq!(by_chat.len(), 1);
    assert!(
        store
            .embeds_for_chats(&b, &[hash_id("chat-1")])
            .await
            .unwrap()
            .is_empty()
    );
    let key = EmbedKey {
        hashed_embed_id: hash_id("e-1"),
        key_type: "chat".into(),
        hashed_chat_id: Some(hash_id("chat-1")),
        encrypted_embed_key: "wrapped".into(),
        created_at: 5,
    };
    assert_eq!(
        store
            .put_embed_keys(&a, std::slice::from_ref(&key))
            .await
            .unwrap(),
        1
    );
    store
        .put_embed_keys(&a, std::slice::from_ref(&key))
        .await
        .unwrap();
    assert_eq!(
        store.embed_keys(&a, &[hash_id("e-1")]).await.unwrap(),
        vec![key.clone()]
    );
    assert!(
        store
            .embed_keys(&b, &[hash_id("e-1")])
            .await
            .unwrap()
            .is_empty()
    );

    // Deleting a message raises messages_v; deleting it again is not_found.
    let v = store
        .delete_message(&a, &c1, &m1.message_id, &[])
        .await
        .unwrap();
    assert_eq!(v.messages_v, 3);
    assert!(matches!(
        store.delete_message(&a, &c1, &m1.message_id, &[]).await,
        Err(StoreError::NotFound)
    ));

    // Paging: most recently edited first, every chat exactly once.
    for i in 0..25 {
        let mut p = titled(&format!("t{i}"), "k");
        p.last_edited = Some(1000 + i64::from(i % 7));
        store
            .update_chat(&a, &chat(&format!("page-{i:02}")), &p)
            .await
            .unwrap();
    }
    assert_eq!(store.count_chats(&a).await.unwrap(), 26);
    let mut seen = Vec::new();
    let mut cursor: Option<ChatCursor> = None;
    loop {
        let page = store.chats_page(&a, cursor.as_ref(), 10).await.unwrap();
        if page.is_empty() {
            break;
        }
        cursor = page.last().map(ChatCursor::after);
        seen.extend(page);
    }
    assert_eq!(seen.len(), 26);
    let stamps: Vec<i64> = seen
        .iter()
        .map(|c| c.versions.last_edited_overall_timestamp)
        .collect();
    assert!(stamps.windows(2).all(|w| w[0] >= w[1]), "{stamps:?}");
    let unique: std::collections::HashSet<_> = seen.iter().map(|c| c.chat_id.clone()).collect();
    assert_eq!(unique.len(), 26);
    // Offset pages list the same order.
    let mut by_offset = Vec::new();
    for offset in (0..30).step_by(10) {
        by_offset.extend(store.chats_at(&a, offset, 10).await.unwrap());
    }
    assert_eq!(by_offset, seen);
    assert!(store.chats_at(&b, 0, 10).await.unwrap().is_empty());
    // The chat last opened: the owner's only, replaced, gone with the chat.
    assert_eq!(store.last_opened(&a).await.unwrap(), None);
    store.set_last_opened(&a, &seen[3].chat_id).await.unwrap();
    store.set_last_opened(&a, &seen[5].chat_id).await.unwrap();
    assert_eq!(
        store.last_opened(&a).await.unwrap().as_ref(),
        Some(&seen[5])
    );
    store.set_last_opened(&b, &seen[5].chat_id).await.unwrap();
    assert_eq!(store.last_opened(&b).await.unwrap(), None, "not bob's chat");
    store.delete_chat(&a, &seen[5].chat_id).await.unwrap();
    assert_eq!(store.last_opened(&a).await.unwrap(), None);

    // Deleting the chat removes its messages, embeds and keys.
    let gone = store.delete_chat(&a, &c1).await.unwrap();
    assert_eq!(gone.messages, 1);
    assert_eq!(gone.embeds, vec![e1.clone()]);
    assert!(store.chat(&a, &c1).await.unwrap().is_none());
    assert!(
        store
            .messages(&a, std::slice::from_ref(&c1))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.embed(&a, &e1).await.unwrap().is_none());
    assert!(
        store
            .embed_keys(&a, &[hash_id("e-1")])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.delete_chat(&a, &c1).await,
        Err(StoreError::NotFound)
    ));
    // The id is free again.
    store
        .update_chat(&b, &c1, &titled("bob", "kb"))
        .await
        .unwrap();
    // A corrected answer replaces the stored one (same id) and raises messages_v; a user's
    // message cannot be replaced, nor another user's anything.
    let c9 = chat("chat-9");
    let user_msg = message("m9-u", Role::User, "cipher-u", 300);
    let answer = message("m9-a", Role::Assistant, "cipher-a", 301);
    store.add_message(&a, &c9, &user_msg).await.unwrap();
    store.add_message(&a, &c9, &answer).await.unwrap();
    let corrected = message("m9-a", Role::Assistant, "cipher-corrected", 301);
    let v = store.replace_message(&a, &c9, &corrected).await.unwrap();
    assert_eq!(v.messages_v, 3);
    let stored = store.messages(&a, std::slice::from_ref(&c9)).await.unwrap();
    assert_eq!(
        stored,
        vec![
            (c9.clone(), user_msg.clone()),
            (c9.clone(), corrected.clone())
        ]
    );
    let edited_user = message("m9-u", Role::User, "cipher-x", 300);
    assert!(matches!(
        store.replace_message(&a, &c9, &edited_user).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store.replace_message(&b, &c9, &corrected).await,
        Err(StoreError::NotFound)
    ));

    // Rejected settings/memory suggestion hashes: kept with the owner's chat once each,
    // returned with it, and another user's chat is forbidden.
    let h1 = "a".repeat(64);
    assert!(store.reject_suggestion(&a, &c9, &h1).await.unwrap());
    assert!(
        !store.reject_suggestion(&a, &c9, &h1).await.unwrap(),
        "idempotent"
    );
    assert!(
        store
            .reject_suggestion(&a, &c9, &"b".repeat(64))
            .await
            .unwrap()
    );
    let details = store.chat(&a, &c9).await.unwrap().unwrap();
    assert_eq!(
        details.rejected_suggestion_hashes,
        vec![h1.clone(), "b".repeat(64)]
    );
    assert!(matches!(
        store.reject_suggestion(&b, &c9, &h1).await,
        Err(StoreError::Forbidden)
    ));
    // Rejections of one chat at the same time: none lost.
    let hashes: Vec<String> = (0..16).map(|i| format!("{i:064x}")).collect();
    let all =
        futures_util::future::join_all(hashes.iter().map(|h| store.reject_suggestion(&a, &c9, h)))
            .await;
    assert!(all.into_iter().all(|r| r.unwrap()));
    let kept = store
        .chat(&a, &c9)
        .await
        .unwrap()
        .unwrap()
        .rejected_suggestion_hashes;
    for h in &hashes {
        assert!(kept.contains(h), "a concurrent rejection was lost");
    }
}

#[tokio::test]
async fn sqlite_store_meets_the_contract() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let store = chatd::store::open(&url).await.unwrap();
    assert_eq!(store.backend_name(), "sqlite");
    contract(store).await;
    // Migrations are idempotent: reopening applies nothing and keeps the data.
    let again = chatd::store::open(&url).await.unwrap();
    assert_eq!(again.count_chats(&user("alice")).await.unwrap(), 25);
    // The reopened store knows the chats it holds (deleted and taken by bob, chat-1 is
    // his; SQLite's filter of present chats is read from the file), and one it does not.
    owned_by(again.as_ref(), "bob", "alice", &chat("chat-1")).await;
    let (bob, never) = (user("bob"), chat("never-stored"));
    assert!(again.chat_versions(&bob, &never).await.unwrap().is_none());
    let wal = dir.path().join("store.db-wal");
    assert!(wal.exists(), "SQLite runs in WAL mode");
}

#[tokio::test]
async fn postgres_store_meets_the_contract() {
    let pg = Postgres::start().await.unwrap();
    pg.create_database("contract").await.unwrap();
    let url = pg.url("contract");
    let store = chatd::store::open(&url).await.unwrap();
    assert_eq!(store.backend_name(), "postgres");
    contract(store).await;
    let again = chatd::store::open(&url).await.unwrap();
    assert_eq!(again.count_chats(&user("alice")).await.unwrap(), 25);
    owned_by(again.as_ref(), "bob", "alice", &chat("chat-1")).await;
    let versions = pg
        .psql("contract", "SELECT count(*) FROM _sqlx_migrations")
        .await
        .unwrap();
    let files = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
        .unwrap()
        .count();
    assert_eq!(
        versions.trim(),
        files.to_string(),
        "each migration applied once"
    );
}
