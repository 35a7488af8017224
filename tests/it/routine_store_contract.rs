//! One contract for the routine run store, on each of its homes: the in-memory cache
//! backend, a real `redis-server`, SQLite and a real PostgreSQL. Records round-trip sealed,
//! one run per chat waits (an expired waiting run gives way), cancel requests, the drive,
//! and one user never reads another's.

use std::sync::Arc;
use std::time::Duration;

use chatd::cache::CacheBackend;
use chatd::cache::memory::MemoryBackend;
use chatd::cache::redis::RedisBackend;
use chatd::crypto::WrappedKeyStore;
use chatd::crypto::{Keyring, LocalKeyProvider, UserHash};
use chatd::routines::journal::{EffectKind, Entry, RunRecord, RunStatus};
use chatd::routines::store::{Home, RunStore};
use chatd::store::Store;
use chatd::store::values::StoreWrappedKeys;
use chatd_protocol::{ChatId, RunId};
use chatd_test_harness::postgres::Postgres;
use chatd_test_harness::process::wait_until;
use chatd_test_harness::redis::RedisServer;
use serde_json::json;

const TTL: Duration = Duration::from_secs(3600);

fn user(name: &str) -> UserHash {
    UserHash::of(&chatd::auth::UserId::parse(name).unwrap())
}

fn store_in(home: Home, wrapped: Arc<dyn WrappedKeyStore>) -> RunStore {
    let provider = Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([9u8; 32])));
    let keyring = Arc::new(Keyring::new(provider, wrapped, Duration::from_secs(60)));
    RunStore::new(home, keyring)
}

fn store(backend: Arc<dyn CacheBackend>) -> RunStore {
    let wrapped = Arc::new(chatd::cache::WrappedKeys(backend.clone()));
    store_in(Home::Cache(backend), wrapped)
}

fn in_store(store: Arc<dyn Store>) -> RunStore {
    let wrapped = Arc::new(StoreWrappedKeys(store.clone()));
    store_in(Home::Store(store), wrapped)
}

fn record(chat: &str) -> RunRecord {
    RunRecord {
        run_id: RunId::random(),
        chat_id: ChatId::parse(chat).unwrap(),
        routine: "demo.ask".into(),
        args: json!({"topic": "secret-topic-5521"}),
        status: RunStatus::Paused,
        journal: vec![Entry {
            kind: EffectKind::Model,
            request: json!({"prompt": "p"}),
            result: json!("model-said-7731"),
        }],
        question: Some("Where to?".into()),
        frames: Vec::new(),
        created_at: 1,
        slice_started_at: 1,
    }
}

/// `open` opens the store over the same backend each time (a second node, or a restart).
async fn contract(open: impl Fn() -> RunStore) {
    let s = open();
    let (alice, bob) = (user("alice"), user("bob"));
    let run = record("chat-a");
    s.put(&alice, &run, TTL).await.unwrap();
    assert_eq!(s.get(&alice, &run.run_id).await.unwrap(), Some(run.clone()));
    assert_eq!(
        s.get(&bob, &run.run_id).await.unwrap(),
        None,
        "another user's run"
    );

    // One run per chat waits.
    let chat = run.chat_id.clone();
    assert!(
        s.claim_waiting(&alice, &chat, &run.run_id, TTL)
            .await
            .unwrap()
    );
    assert!(
        s.claim_waiting(&alice, &chat, &run.run_id, TTL)
            .await
            .unwrap()
    );
    let other = RunId::random();
    assert!(!s.claim_waiting(&alice, &chat, &other, TTL).await.unwrap());
    assert_eq!(
        s.waiting(&alice, &chat).await.unwrap(),
        Some(run.run_id.clone())
    );
    assert_eq!(s.waiting(&bob, &chat).await.unwrap(), None);
    s.clear_waiting(&alice, &chat).await.unwrap();
    assert_eq!(s.waiting(&alice, &chat).await.unwrap(), None);
    assert!(s.claim_waiting(&alice, &chat, &other, TTL).await.unwrap());

    // Cancel requests.
    assert!(!s.cancel_requested(&alice, &run.run_id).await.unwrap());
    s.request_cancel(&alice, &run.run_id).await.unwrap();
    assert!(s.cancel_requested(&alice, &run.run_id).await.unwrap());
    assert!(!s.cancel_requested(&bob, &run.run_id).await.unwrap());
    s.delete(&alice, &run.run_id).await.unwrap();
    assert_eq!(s.get(&alice, &run.run_id).await.unwrap(), None);
    assert!(!s.cancel_requested(&alice, &run.run_id).await.unwrap());

    // The drive, per user and app.
    let value = json!({"home": "drive-value-3391"});
    s.drive_put(&alice, "web", "profile", &value, TTL)
        .await
        .unwrap();
    assert_eq!(
        s.drive_get(&alice, "web", "profile").await.unwrap(),
        Some(value)
    );
    assert_eq!(s.drive_get(&alice, "docs", "profile").await.unwrap(), None);
    assert_eq!(s.drive_get(&bob, "web", "profile").await.unwrap(), None);

    // A waiting run whose time is up gives way to the next one.
    let chat = ChatId::parse("chat-expiring").unwrap();
    let (first, second) = (RunId::random(), RunId::random());
    assert!(
        s.claim_waiting(&alice, &chat, &first, Duration::from_millis(1))
            .await
            .unwrap()
    );
    wait_until("the waiting run expired", || async {
        s.waiting(&alice, &chat).await.unwrap().is_none()
    })
    .await
    .unwrap();
    assert!(s.claim_waiting(&alice, &chat, &second, TTL).await.unwrap());
    assert_eq!(
        s.waiting(&alice, &chat).await.unwrap(),
        Some(second.clone())
    );

    // Opened again (a restart), the store finds the waiting runs, and only those.
    let again = open();
    assert_eq!(
        again.waiting(&alice, &chat).await.unwrap(),
        Some(second.clone())
    );
    let quiet = ChatId::parse("chat-quiet").unwrap();
    assert_eq!(again.waiting(&alice, &quiet).await.unwrap(), None);
    again.clear_waiting(&alice, &chat).await.unwrap();
    assert_eq!(again.waiting(&alice, &chat).await.unwrap(), None);
    let third = RunId::random();
    assert!(
        again
            .claim_waiting(&alice, &quiet, &third, TTL)
            .await
            .unwrap()
    );
    assert_eq!(again.waiting(&alice, &quiet).await.unwrap(), Some(third));
}

#[tokio::test]
async fn the_memory_backend_keeps_the_contract() {
    let backend: Arc<dyn CacheBackend> = Arc::new(MemoryBackend::new(10_000));
    contract(|| store(backend.clone())).await;
}

#[tokio::test]
async fn redis_keeps_the_contract_and_holds_no_plaintext() {
    let redis = RedisServer::start().await.unwrap();
    let backend: Arc<dyn CacheBackend> =
        Arc::new(RedisBackend::new(&redis.url(), false, Duration::from_secs(2)).unwrap());
    contract(|| store(backend.clone())).await;
    let s = store(Arc::new(
        RedisBackend::new(&redis.url(), false, Duration::from_secs(2)).unwrap(),
    ));
    s.put(&user("carol"), &record("chat-c"), TTL).await.unwrap();
    for (key, value) in redis.dump().await.unwrap() {
        let text = String::from_utf8_lossy(&value);
        for secret in [
            "secret-topic-5521",
            "model-said-7731",
            "drive-value-3391",
            "Where to?",
        ] {
            assert!(!text.contains(secret), "{key} holds plaintext");
        }
        assert!(
            !key.contains("profile"),
            "a drive key's name is hashed: {key}"
        );
    }
}

#[tokio::test]
async fn sqlite_keeps_the_contract_and_holds_no_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let url = format!("sqlite://{}", path.display());
    let db = chatd::store::open(&url).await.unwrap();
    contract(|| in_store(db.clone())).await;
    in_store(db)
        .put(&user("carol"), &record("chat-c"), TTL)
        .await
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    for side in ["-wal", "-shm"] {
        bytes.extend(std::fs::read(format!("{}{side}", path.display())).unwrap_or_default());
    }
    let text = String::from_utf8_lossy(&bytes);
    for secret in [
        "secret-topic-5521",
        "model-said-7731",
        "drive-value-3391",
        "Where to?",
    ] {
        assert!(!text.contains(secret), "the database holds {secret}");
    }
}

#[tokio::test]
async fn postgres_keeps_the_contract() {
    let pg = Postgres::start().await.unwrap();
    pg.create_database("runs").await.unwrap();
    let db = chatd::store::open(&pg.url("runs")).await.unwrap();
    contract(|| in_store(db.clone())).await;
}
