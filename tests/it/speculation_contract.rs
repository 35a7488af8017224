//! One contract for the speculation record (`pipeline::speculation::record`), run against
//! the record in process, a real redis-server and a 3-master Redis Cluster, each as two
//! nodes' handles on one record: a chat's record round-trips per user and chat, is replaced
//! and forgotten; scored guesses add up in the shared record exactly as `SharedRecord::add`
//! says (the window, the moving waste), whichever node sends them, and none is lost to
//! concurrent writers. On Redis alone: no key names a chat or a user, both keys expire,
//! the chat's value is sealed and opens only under its own chat; and a Redis that stalls
//! costs a turn no more than the recall's wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chatd::auth::UserId;
use chatd::cache::WrappedKeys;
use chatd::cache::memory::MemoryBackend;
use chatd::crypto::{Keyring, LocalKeyProvider, UserHash};
use chatd::pipeline::speculation::record::memory::MemoryRecords;
use chatd::pipeline::speculation::record::redis::{RedisRecords, SHARED, SHARED_TTL, chat_key};
use chatd::pipeline::speculation::record::{
    ChatRecord, Outcome, SharedRecord, SpeculationRecords, StoredPlan, Tally,
};
use chatd::pipeline::speculation::{Predictions, RECALL_WAIT};
use chatd_protocol::ChatId;
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::redis_cluster::RedisCluster;

const TTL: Duration = Duration::from_secs(3600);

/// Two nodes' handles on one record.
struct Nodes {
    a: Arc<dyn SpeculationRecords>,
    b: Arc<dyn SpeculationRecords>,
}

fn user(name: &str) -> UserHash {
    UserHash::of(&UserId::parse(name).unwrap())
}
fn chat(c: &str) -> ChatId {
    ChatId::parse(c).unwrap()
}

fn record(category: &str, hits: f32) -> ChatRecord {
    ChatRecord {
        plan: StoredPlan {
            model: "fake-model".into(),
            category: category.into(),
            language: "fr".into(),
            skills: vec!["travel-search_flights".into()],
            focus_mode: Some("docs-deep_dive".into()),
            injection_caution: true,
        },
        tally: Tally { hits, misses: 1.0 },
    }
}

fn memory() -> Nodes {
    let m = Arc::new(MemoryRecords::new(1000, TTL));
    Nodes { a: m.clone(), b: m }
}

/// A node's record on Redis: its own connection and keyring, the master key and the store
/// of wrapped data keys shared (as every node of a cluster has them).
fn redis_node(
    url: &str,
    cluster: bool,
    wrapped: &Arc<MemoryBackend>,
) -> Arc<dyn SpeculationRecords> {
    let provider = Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([9u8; 32])));
    let store = Arc::new(WrappedKeys(wrapped.clone()));
    let keyring = Arc::new(Keyring::new(provider, store, Duration::from_secs(60)));
    Arc::new(RedisRecords::new(url, cluster, Duration::from_secs(2), keyring, TTL).unwrap())
}

fn redis_nodes(url: &str, cluster: bool) -> Nodes {
    let wrapped = Arc::new(MemoryBackend::new(1000));
    Nodes {
        a: redis_node(url, cluster, &wrapped),
        b: redis_node(url, cluster, &wrapped),
    }
}

async fn redis() -> (RedisServer, Nodes) {
    let server = RedisServer::start().await.unwrap();
    let nodes = redis_nodes(&server.url(), false);
    (server, nodes)
}

async fn redis_cluster() -> (RedisCluster, Nodes) {
    let cluster = RedisCluster::start(3).await.unwrap();
    let nodes = redis_nodes(&cluster.seed_url(), true);
    (cluster, nodes)
}

fn close(got: SharedRecord, want: SharedRecord) -> bool {
    let near = |x: f32, y: f32| (x - y).abs() < 1e-4;
    near(got.tally.hits, want.tally.hits)
        && near(got.tally.misses, want.tally.misses)
        && near(got.waste, want.waste)
}

async fn a_chats_record_round_trips_per_user_and_chat(n: Nodes) {
    let (alice, bob) = (user("alice"), user("bob"));
    let c = chat("chat-record");
    let empty = n.a.read(&alice, &c).await.unwrap();
    assert_eq!(empty.chat, None);
    assert_eq!(empty.shared, SharedRecord::default());
    n.a.write(&alice, &c, record("oncology", 3.0), None)
        .await
        .unwrap();
    // The other node reads it; no outcome was scored, so the shared record is unchanged.
    let read = n.b.read(&alice, &c).await.unwrap();
    assert_eq!(read.chat, Some(record("oncology", 3.0)));
    assert_eq!(read.shared, SharedRecord::default());
    assert_eq!(
        n.b.read(&bob, &c).await.unwrap().chat,
        None,
        "another user's"
    );
    let other = chat("chat-other");
    assert_eq!(n.b.read(&alice, &other).await.unwrap().chat, None);
    // A later turn replaces it, on either node.
    n.b.write(&alice, &c, record("travel", 4.0), None)
        .await
        .unwrap();
    let read = n.a.read(&alice, &c).await.unwrap();
    assert_eq!(read.chat, Some(record("travel", 4.0)));
    n.a.forget(&alice, &c).await.unwrap();
    assert_eq!(n.b.read(&alice, &c).await.unwrap().chat, None, "forgotten");
}

async fn outcomes_add_up_in_the_shared_record_like_the_model(n: Nodes) {
    let u = user("alice");
    let mut model = SharedRecord::default();
    // Past the window (halving) with hits, misses and wasted calls, from both nodes.
    for i in 0..45 {
        let outcome = Outcome {
            hit: i % 3 != 0,
            speculated: i % 2 == 0,
        };
        model.add(outcome);
        let node = if i % 2 == 0 { &n.a } else { &n.b };
        let c = chat(&format!("chat-{}", i % 4));
        node.write(&u, &c, record("a", 0.0), Some(outcome))
            .await
            .unwrap();
        let shared = n.a.read(&u, &c).await.unwrap().shared;
        assert!(close(shared, model), "turn {i}: {shared:?} != {model:?}");
    }
    assert!(
        model.tally.hits + model.tally.misses < 45.0,
        "the window halved"
    );
    assert!(model.waste > 0.0);
}

async fn concurrent_writers_lose_no_outcome(n: Nodes) {
    let u = user("alice");
    let wasted = Outcome {
        hit: false,
        speculated: true,
    };
    let writes = (0..40).map(|i| {
        let node = if i % 2 == 0 { n.a.clone() } else { n.b.clone() };
        let u = u.clone();
        async move {
            let c = chat(&format!("chat-{i}"));
            node.write(&u, &c, record("a", 0.0), Some(wasted)).await
        }
    });
    for r in futures_util::future::join_all(writes).await {
        r.unwrap();
    }
    let mut model = SharedRecord::default();
    for _ in 0..40 {
        model.add(wasted);
    }
    let shared = n.b.read(&u, &chat("chat-0")).await.unwrap().shared;
    assert!(close(shared, model), "{shared:?} != {model:?}");
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::memory()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_server, nodes) = super::redis().await;
                    super::$name(nodes).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_cluster, nodes) = super::redis_cluster().await;
                    super::$name(nodes).await;
                }
            )*
        }
    };
}

contract!(
    a_chats_record_round_trips_per_user_and_chat,
    outcomes_add_up_in_the_shared_record_like_the_model,
    concurrent_writers_lose_no_outcome,
);

/// Redis holds no chat id, user id or plan in clear, and both keys expire.
#[tokio::test]
async fn redis_keys_hash_the_chat_expire_and_values_are_sealed() {
    let (server, n) = redis().await;
    let (alice, c) = (user("alice"), chat("chat-very-private"));
    let outcome = Outcome {
        hit: true,
        speculated: true,
    };
    n.a.write(&alice, &c, record("oncology", 1.0), Some(outcome))
        .await
        .unwrap();
    let dump = server.dump().await.unwrap();
    let key = chat_key(&alice, &c);
    assert_eq!(dump.len(), 2, "the chat's record and the shared one");
    for (k, v) in &dump {
        assert!(
            !k.contains("chat-very-private") && !k.contains("alice"),
            "{k}"
        );
        let v = String::from_utf8_lossy(v);
        for word in ["oncology", "travel", "fake-model", "deep_dive"] {
            assert!(!v.contains(word), "{k} holds {word}");
        }
    }
    assert!(
        key.starts_with(&format!("{{u:{}}}:", alice.as_str())),
        "{key}"
    );
    let pttl = |k: String| {
        let server = &server;
        async move {
            let out = server.cli(&["PTTL", &k]).await.unwrap();
            out.trim().parse::<i64>().unwrap()
        }
    };
    let chat_ttl = pttl(key.clone()).await;
    assert!(
        chat_ttl > 0 && chat_ttl <= TTL.as_millis() as i64,
        "{chat_ttl}"
    );
    let shared_ttl = pttl(SHARED.to_string()).await;
    let most = SHARED_TTL.as_millis() as i64;
    assert!(shared_ttl > 0 && shared_ttl <= most, "{shared_ttl}");
    // The sealed value copied under another chat's key does not open there.
    let other = chat("chat-other");
    let copied = server.cli(&["COPY", &key, &chat_key(&alice, &other)]).await;
    assert_eq!(copied.unwrap().trim(), "1");
    assert_eq!(n.b.read(&alice, &other).await.unwrap().chat, None);
    assert!(n.b.read(&alice, &c).await.unwrap().chat.is_some());
}

/// A stalled Redis: the turn's recall gives up after its wait and knows nothing; the write
/// fails quietly (a hint is not worth an error).
#[tokio::test]
async fn a_stalled_redis_costs_a_turn_no_more_than_the_recalls_wait() {
    let (server, n) = redis().await;
    let (alice, c) = (user("alice"), chat("chat-stalled"));
    n.a.write(&alice, &c, record("a", 1.0), None).await.unwrap();
    let predictions = Predictions::new(n.b.clone());
    let tasks = tokio_util::task::TaskTracker::new();
    assert!(
        predictions
            .recall(&tasks, &alice, &c)
            .known()
            .await
            .chat
            .is_some()
    );
    server.pause().await.unwrap();
    let started = Instant::now();
    let known = predictions.recall(&tasks, &alice, &c).known().await;
    let waited = started.elapsed();
    assert_eq!(known.chat, None, "nothing known");
    // Well under the store's own deadline (2 s): the recall's wait is what bounds it.
    assert!(
        waited < Duration::from_secs(1),
        "waited {waited:?} ({RECALL_WAIT:?})"
    );
    server.resume().await.unwrap();
}
