//! One contract for every cache backend, run against the in-memory backend, a real
//! `redis-server` and a 3-master Redis Cluster: bounds, the 3-chat LRU with its embed and settings cascade, atomic
//! eviction under concurrent writes, the turn's read-and-append, the sync cache, small values and expiry.
//! On the Cluster, every key of one user lands in one slot.

use std::sync::Arc;
use std::time::Duration;

use chatd::cache::backend::keys;
use chatd::cache::memory::MemoryBackend;
use chatd::cache::redis::RedisBackend;
use chatd::cache::{AiPolicy, CacheBackend, WriteMode};
use chatd::crypto::UserHash;
use chatd_protocol::{ChatId, EmbedId};
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::redis_cluster::RedisCluster;

const POLICY: AiPolicy = AiPolicy {
    ttl: Duration::from_secs(3600),
    max_messages: 100,
    max_chats: 3,
};

fn user(name: &str) -> UserHash {
    UserHash::of(&chatd::auth::UserId::parse(name).unwrap())
}
fn chat(s: &str) -> ChatId {
    ChatId::parse(s).unwrap()
}
fn embed(s: &str) -> EmbedId {
    EmbedId::parse(s).unwrap()
}
fn entries(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range.map(|i| format!("sealed-{i}").into_bytes()).collect()
}

async fn redis_backend() -> (RedisServer, Arc<dyn CacheBackend>) {
    let server = RedisServer::start().await.unwrap();
    let backend = RedisBackend::new(&server.url(), false, Duration::from_secs(2)).unwrap();
    (server, Arc::new(backend))
}

async fn redis_cluster_backend() -> (RedisCluster, Arc<dyn CacheBackend>) {
    let cluster = RedisCluster::start(3).await.unwrap();
    let backend = RedisBackend::new(&cluster.seed_url(), true, Duration::from_secs(2)).unwrap();
    (cluster, Arc::new(backend))
}

fn memory_backend() -> Arc<dyn CacheBackend> {
    Arc::new(MemoryBackend::new(100_000))
}

async fn messages_are_ordered_capped_and_replaceable(b: Arc<dyn CacheBackend>) {
    let (u, c) = (user("alice"), chat("c1"));
    assert_eq!(b.ai_read(&u, &c, POLICY).await.unwrap(), None);
    b.ai_write(&u, &c, WriteMode::Append, entries(0..60), POLICY)
        .await
        .unwrap();
    b.ai_write(&u, &c, WriteMode::Append, entries(60..150), POLICY)
        .await
        .unwrap();
    let got = b.ai_read(&u, &c, POLICY).await.unwrap().unwrap();
    assert_eq!(got, entries(50..150), "the newest 100, oldest first");
    b.ai_write(&u, &c, WriteMode::Replace, entries(7..9), POLICY)
        .await
        .unwrap();
    assert_eq!(
        b.ai_read(&u, &c, POLICY).await.unwrap().unwrap(),
        entries(7..9)
    );
    // Another user's chat of the same id is a different entry.
    assert_eq!(b.ai_read(&user("bob"), &c, POLICY).await.unwrap(), None);
}

async fn fourth_chat_evicts_the_least_recent_with_its_embeds_and_settings(
    b: Arc<dyn CacheBackend>,
) {
    let u = user("alice");
    let ttl = POLICY.ttl;
    for c in ["c1", "c2", "c3"] {
        b.ai_write(&u, &chat(c), WriteMode::Append, entries(0..2), POLICY)
            .await
            .unwrap();
    }
    b.embed_put(&u, &chat("c1"), &embed("only-c1"), b"e1".to_vec(), ttl)
        .await
        .unwrap();
    b.embed_put(&u, &chat("c1"), &embed("shared"), b"es".to_vec(), ttl)
        .await
        .unwrap();
    b.embed_put(&u, &chat("c3"), &embed("shared"), b"es".to_vec(), ttl)
        .await
        .unwrap();
    b.settings_put(&u, &chat("c1"), "travel:home_city", b"s1".to_vec(), ttl)
        .await
        .unwrap();
    b.settings_put(&u, &chat("c2"), "travel:home_city", b"s2".to_vec(), ttl)
        .await
        .unwrap();
    // Reading c1 makes it recent: c2 is now the least recently used.
    assert!(b.ai_read(&u, &chat("c1"), POLICY).await.unwrap().is_some());

    let evicted = b
        .ai_write(&u, &chat("c4"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    assert_eq!(evicted, vec![chat("c2")]);
    assert_eq!(b.ai_read(&u, &chat("c2"), POLICY).await.unwrap(), None);
    assert_eq!(
        b.settings_get(&u, &chat("c2"), "travel:home_city")
            .await
            .unwrap(),
        None
    );
    assert!(
        b.settings_get(&u, &chat("c1"), "travel:home_city")
            .await
            .unwrap()
            .is_some()
    );

    // Evicting c3 next keeps the embed that c1 still references; evicting c1 drops its own.
    b.ai_read(&u, &chat("c1"), POLICY).await.unwrap();
    let evicted = b
        .ai_write(&u, &chat("c5"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    assert_eq!(evicted, vec![chat("c3")]);
    assert_eq!(
        b.embed_get(&u, &embed("shared")).await.unwrap().as_deref(),
        Some(&b"es"[..])
    );
    b.ai_read(&u, &chat("c4"), POLICY).await.unwrap();
    b.ai_read(&u, &chat("c5"), POLICY).await.unwrap();
    let evicted = b
        .ai_write(&u, &chat("c6"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    assert_eq!(evicted, vec![chat("c1")]);
    assert_eq!(b.embed_get(&u, &embed("only-c1")).await.unwrap(), None);
    assert_eq!(b.embed_get(&u, &embed("shared")).await.unwrap(), None);
    assert_eq!(
        b.settings_get(&u, &chat("c1"), "travel:home_city")
            .await
            .unwrap(),
        None
    );
    for c in ["c4", "c5", "c6"] {
        assert!(
            b.ai_read(&u, &chat(c), POLICY).await.unwrap().is_some(),
            "{c} stays"
        );
    }
    // Other users are untouched by alice's evictions.
    let bob = user("bob");
    b.ai_write(&bob, &chat("b1"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    b.ai_write(&u, &chat("c7"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    assert!(
        b.ai_read(&bob, &chat("b1"), POLICY)
            .await
            .unwrap()
            .is_some()
    );
}

async fn concurrent_writes_never_leave_more_than_the_limit(b: Arc<dyn CacheBackend>) {
    let u = user("carol");
    let writes = (0..24).map(|i| {
        let (b, u) = (b.clone(), u.clone());
        async move {
            b.ai_write(
                &u,
                &chat(&format!("k{i}")),
                WriteMode::Append,
                entries(0..3),
                POLICY,
            )
            .await
            .unwrap()
        }
    });
    let evicted: Vec<ChatId> = futures_util::future::join_all(writes)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(
        evicted.len(),
        21,
        "every write beyond the third evicts exactly one chat"
    );
    let mut present = 0;
    for i in 0..24 {
        if let Some(list) = b
            .ai_read(&u, &chat(&format!("k{i}")), POLICY)
            .await
            .unwrap()
        {
            assert_eq!(list.len(), 3, "a surviving chat is whole");
            present += 1;
        }
    }
    assert_eq!(present, 3);
}

async fn ai_delete_removes_the_chat_and_its_exclusive_data(b: Arc<dyn CacheBackend>) {
    let u = user("dave");
    let ttl = POLICY.ttl;
    b.ai_write(&u, &chat("d1"), WriteMode::Append, entries(0..2), POLICY)
        .await
        .unwrap();
    b.embed_put(&u, &chat("d1"), &embed("d1-e"), b"x".to_vec(), ttl)
        .await
        .unwrap();
    b.settings_put(&u, &chat("d1"), "app:key", b"y".to_vec(), ttl)
        .await
        .unwrap();
    b.ai_delete(&u, &chat("d1")).await.unwrap();
    assert_eq!(b.ai_read(&u, &chat("d1"), POLICY).await.unwrap(), None);
    assert_eq!(b.embed_get(&u, &embed("d1-e")).await.unwrap(), None);
    assert_eq!(
        b.settings_get(&u, &chat("d1"), "app:key").await.unwrap(),
        None
    );
}

async fn summaries_are_read_from_the_lru_and_go_with_their_chat(b: Arc<dyn CacheBackend>) {
    let (u, ttl) = (user("sam"), POLICY.ttl);
    let summary = |c: &str| format!("summary-{c}").into_bytes();
    for c in ["s1", "s2", "s3"] {
        b.ai_write(&u, &chat(c), WriteMode::Append, entries(0..1), POLICY)
            .await
            .unwrap();
        b.kv_put(&keys::chat_summary(&u, c), summary(c), ttl)
            .await
            .unwrap();
    }
    // A summary of a chat the cache does not hold, and another user's, are not others'.
    b.kv_put(&keys::chat_summary(&u, "gone"), summary("gone"), ttl)
        .await
        .unwrap();
    let t = user("tom");
    b.ai_write(&t, &chat("t1"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    b.kv_put(&keys::chat_summary(&t, "t1"), summary("t1"), ttl)
        .await
        .unwrap();
    // s1 read last: the most recently used.
    b.ai_read(&u, &chat("s1"), POLICY).await.unwrap();
    let read = b.ai_summaries(&u, &chat("s2"), 3).await.unwrap();
    assert_eq!(read.own, Some(summary("s2")));
    assert_eq!(
        read.others,
        [(chat("s1"), summary("s1")), (chat("s3"), summary("s3"))]
    );
    let read = b.ai_summaries(&u, &chat("new"), 1).await.unwrap();
    assert_eq!(
        (read.own, read.others),
        (None, vec![(chat("s1"), summary("s1"))])
    );
    assert!(
        b.ai_summaries(&u, &chat("s1"), 0)
            .await
            .unwrap()
            .others
            .is_empty()
    );
    // Deleted with its chat, evicted with it too (s2 is now the least recently used).
    b.ai_delete(&u, &chat("s3")).await.unwrap();
    assert_eq!(b.ai_summaries(&u, &chat("s3"), 0).await.unwrap().own, None);
    b.ai_write(&u, &chat("s4"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    b.ai_write(&u, &chat("s5"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    assert_eq!(b.ai_summaries(&u, &chat("s2"), 0).await.unwrap().own, None);
    let read = b.ai_summaries(&u, &chat("s5"), 3).await.unwrap();
    assert_eq!(read.others, [(chat("s1"), summary("s1"))]);
}

async fn read_append_returns_the_list_before_and_appends_like_a_write(b: Arc<dyn CacheBackend>) {
    let (u, c) = (user("erin"), chat("r1"));
    let small = AiPolicy {
        max_messages: 5,
        ..POLICY
    };
    assert_eq!(
        b.ai_read_append(&u, &c, entries(0..2), small, false)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        b.ai_read(&u, &c, small).await.unwrap(),
        None,
        "a miss without create writes nothing"
    );
    assert_eq!(
        b.ai_read_append(&u, &c, entries(0..2), small, true)
            .await
            .unwrap(),
        None,
        "a created chat had nothing before"
    );
    assert_eq!(
        b.ai_read(&u, &c, small).await.unwrap().unwrap(),
        entries(0..2)
    );
    assert_eq!(
        b.ai_read_append(&u, &c, entries(2..6), small, false)
            .await
            .unwrap()
            .unwrap(),
        entries(0..2),
        "the list as it was"
    );
    assert_eq!(
        b.ai_read(&u, &c, small).await.unwrap().unwrap(),
        entries(1..6),
        "appended, then trimmed to the newest 5"
    );
    assert_eq!(
        b.ai_read_append(&u, &c, entries(6..7), small, true)
            .await
            .unwrap()
            .unwrap(),
        entries(1..6),
        "create changes nothing for a cached chat"
    );
}

async fn read_append_miss_never_evicts_and_a_created_chat_evicts_like_a_write(
    b: Arc<dyn CacheBackend>,
) {
    let u = user("frank");
    let ttl = POLICY.ttl;
    for c in ["f1", "f2", "f3"] {
        b.ai_write(&u, &chat(c), WriteMode::Append, entries(0..2), POLICY)
            .await
            .unwrap();
    }
    b.embed_put(&u, &chat("f1"), &embed("f1-only"), b"e".to_vec(), ttl)
        .await
        .unwrap();
    b.settings_put(&u, &chat("f1"), "app:key", b"s".to_vec(), ttl)
        .await
        .unwrap();
    assert_eq!(
        b.ai_read_append(&u, &chat("f4"), entries(0..1), POLICY, false)
            .await
            .unwrap(),
        None
    );
    assert!(
        b.embed_get(&u, &embed("f1-only")).await.unwrap().is_some(),
        "a miss evicts nothing"
    );
    for c in ["f1", "f2", "f3"] {
        assert_eq!(
            b.ai_read(&u, &chat(c), POLICY).await.unwrap().unwrap(),
            entries(0..2),
            "{c} stays"
        );
    }
    // f1 is the least recently used: creating f4 evicts it with its embed and settings.
    b.ai_read_append(&u, &chat("f4"), entries(0..1), POLICY, true)
        .await
        .unwrap();
    assert_eq!(b.ai_read(&u, &chat("f1"), POLICY).await.unwrap(), None);
    assert_eq!(b.embed_get(&u, &embed("f1-only")).await.unwrap(), None);
    assert_eq!(
        b.settings_get(&u, &chat("f1"), "app:key").await.unwrap(),
        None
    );
    // A hit on f2 makes it the most recent: the next new chat evicts f3.
    assert_eq!(
        b.ai_read_append(&u, &chat("f2"), entries(2..3), POLICY, false)
            .await
            .unwrap()
            .unwrap(),
        entries(0..2)
    );
    let evicted = b
        .ai_write(&u, &chat("f5"), WriteMode::Append, entries(0..1), POLICY)
        .await
        .unwrap();
    assert_eq!(evicted, vec![chat("f3")]);
    assert_eq!(
        b.ai_read(&u, &chat("f2"), POLICY).await.unwrap().unwrap(),
        entries(0..3)
    );
}

async fn sync_cache_and_small_values(b: Arc<dyn CacheBackend>) {
    let (a, z) = (user("alice"), user("zed"));
    let ttl = Duration::from_secs(3600);
    b.sync_put(&a, &chat("s1"), entries(0..3), ttl)
        .await
        .unwrap();
    b.sync_put(&a, &chat("s2"), entries(3..4), ttl)
        .await
        .unwrap();
    b.sync_put(&z, &chat("s1"), entries(9..10), ttl)
        .await
        .unwrap();
    assert_eq!(
        b.sync_get(&a, &chat("s1")).await.unwrap().unwrap(),
        entries(0..3)
    );
    b.sync_put(&a, &chat("s1"), entries(5..6), ttl)
        .await
        .unwrap();
    assert_eq!(
        b.sync_get(&a, &chat("s1")).await.unwrap().unwrap(),
        entries(5..6),
        "put replaces"
    );
    b.sync_clear(&a).await.unwrap();
    assert_eq!(b.sync_get(&a, &chat("s1")).await.unwrap(), None);
    assert_eq!(b.sync_get(&a, &chat("s2")).await.unwrap(), None);
    assert_eq!(
        b.sync_get(&z, &chat("s1")).await.unwrap().unwrap(),
        entries(9..10),
        "other users keep theirs"
    );

    b.kv_put("dek:test", b"wrapped".to_vec(), ttl)
        .await
        .unwrap();
    assert_eq!(
        b.kv_get("dek:test").await.unwrap().as_deref(),
        Some(&b"wrapped"[..])
    );
    b.kv_delete("dek:test").await.unwrap();
    assert_eq!(b.kv_get("dek:test").await.unwrap(), None);
    b.ping().await.unwrap();
}

async fn counters_count_atomically_and_start_only_from_a_seed(b: Arc<dyn CacheBackend>) {
    let ttl = Duration::from_secs(3600);
    let key = "user:u:chat:c:messages_v";
    assert_eq!(b.counter_get(key).await.unwrap(), None);
    assert_eq!(
        b.counter_bump(key, None, ttl).await.unwrap(),
        None,
        "no seed, no counter"
    );
    assert_eq!(b.counter_get(key).await.unwrap(), None);
    assert_eq!(b.counter_bump(key, Some(4), ttl).await.unwrap(), Some(5));
    assert_eq!(
        b.counter_bump(key, Some(100), ttl).await.unwrap(),
        Some(6),
        "an existing counter ignores the seed"
    );
    let bumps = (0..20).map(|_| b.counter_bump(key, None, ttl));
    let mut values: Vec<u64> = futures_util::future::join_all(bumps)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    values.sort_unstable();
    assert_eq!(
        values,
        (7..27).collect::<Vec<u64>>(),
        "each bump counts once"
    );
    assert_eq!(b.counter_get(key).await.unwrap(), Some(26));
    b.kv_delete(key).await.unwrap();
    assert_eq!(b.counter_get(key).await.unwrap(), None);
}

async fn field_markers_are_claimed_once_bounded_and_deleted_with_their_key(
    b: Arc<dyn CacheBackend>,
) {
    let ttl = Duration::from_secs(3600);
    let key = "{u:u}:chat:c:seen";
    let claims =
        (0..10).map(|i| b.field_claim(key, "m1", format!("sent-{i}").into_bytes(), ttl, 3));
    let held: Vec<Vec<u8>> = futures_util::future::join_all(claims)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(
        held.iter().all(|h| h == &held[0]),
        "one claim wins and every caller sees it: {held:?}"
    );
    b.field_put(key, "m1", b"answered".to_vec(), ttl)
        .await
        .unwrap();
    assert_eq!(
        b.field_claim(key, "m1", b"again".to_vec(), ttl, 3)
            .await
            .unwrap(),
        b"answered"
    );
    b.field_delete(key, "m1").await.unwrap();
    assert_eq!(
        b.field_claim(key, "m1", b"fresh".to_vec(), ttl, 3)
            .await
            .unwrap(),
        b"fresh",
        "a deleted field can be claimed again"
    );
    for m in ["m2", "m3"] {
        b.field_claim(key, m, b"x".to_vec(), ttl, 3).await.unwrap();
    }
    // Full (3 fields): the next new field starts the key over.
    assert_eq!(
        b.field_claim(key, "m4", b"new".to_vec(), ttl, 3)
            .await
            .unwrap(),
        b"new"
    );
    assert_eq!(
        b.field_claim(key, "m1", b"after".to_vec(), ttl, 3)
            .await
            .unwrap(),
        b"after",
        "the older fields went"
    );
    b.kv_delete(key).await.unwrap();
    assert_eq!(
        b.field_claim(key, "m4", b"gone".to_vec(), ttl, 3)
            .await
            .unwrap(),
        b"gone",
        "deleting the key forgets every field"
    );
}

async fn pending_answers_are_kept_per_user_until_dropped(b: Arc<dyn CacheBackend>) {
    let (a, z) = (user("alice"), user("zed"));
    let ttl = Duration::from_secs(3600);
    assert!(b.pending_list(&a).await.unwrap().is_empty());
    b.pending_put(&a, "m1", b"one".to_vec(), ttl).await.unwrap();
    b.pending_put(&a, "m2", b"two".to_vec(), ttl).await.unwrap();
    b.pending_put(&a, "m1", b"one again".to_vec(), ttl)
        .await
        .unwrap();
    b.pending_put(&z, "m9", b"zed's".to_vec(), ttl)
        .await
        .unwrap();
    let mut got = b.pending_list(&a).await.unwrap();
    got.sort();
    assert_eq!(
        got,
        [
            ("m1".to_string(), b"one again".to_vec()),
            ("m2".to_string(), b"two".to_vec())
        ]
    );
    b.pending_delete(&a, "m1").await.unwrap();
    b.pending_delete(&a, "unknown").await.unwrap();
    assert_eq!(
        b.pending_list(&a).await.unwrap(),
        [("m2".to_string(), b"two".to_vec())]
    );
    assert_eq!(
        b.pending_list(&z).await.unwrap().len(),
        1,
        "other users keep theirs"
    );
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::memory_backend()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_server, backend) = super::redis_backend().await;
                    super::$name(backend).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_cluster, backend) = super::redis_cluster_backend().await;
                    super::$name(backend).await;
                }
            )*
        }
    };
}

contract!(
    messages_are_ordered_capped_and_replaceable,
    fourth_chat_evicts_the_least_recent_with_its_embeds_and_settings,
    concurrent_writes_never_leave_more_than_the_limit,
    ai_delete_removes_the_chat_and_its_exclusive_data,
    summaries_are_read_from_the_lru_and_go_with_their_chat,
    read_append_returns_the_list_before_and_appends_like_a_write,
    read_append_miss_never_evicts_and_a_created_chat_evicts_like_a_write,
    sync_cache_and_small_values,
    counters_count_atomically_and_start_only_from_a_seed,
    pending_answers_are_kept_per_user_until_dropped,
    field_markers_are_claimed_once_bounded_and_deleted_with_their_key,
);

/// Memory backend: expiry on tokio's clock, so paused time drives it.
#[tokio::test(start_paused = true)]
async fn memory_entries_expire_and_reads_refresh_the_ttl() {
    let b = memory_backend();
    let (u, c) = (user("alice"), chat("t1"));
    let policy = AiPolicy {
        ttl: Duration::from_secs(100),
        ..POLICY
    };
    b.ai_write(&u, &c, WriteMode::Append, entries(0..1), policy)
        .await
        .unwrap();
    b.sync_put(&u, &c, entries(0..1), Duration::from_secs(10))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(
        b.ai_read(&u, &c, policy).await.unwrap().is_some(),
        "read at 60 s refreshes to 160 s"
    );
    assert_eq!(
        b.sync_get(&u, &c).await.unwrap(),
        None,
        "sync entry expired at 10 s"
    );
    tokio::time::advance(Duration::from_secs(90)).await;
    assert!(b.ai_read(&u, &c, policy).await.unwrap().is_some());
    tokio::time::advance(Duration::from_secs(101)).await;
    assert_eq!(b.ai_read(&u, &c, policy).await.unwrap(), None);
}

/// Redis: expiry is Redis's own; check the TTLs it holds instead of waiting them out.
#[tokio::test]
async fn redis_keys_carry_their_ttls() {
    let (server, b) = redis_backend().await;
    let (u, c) = (user("alice"), chat("t1"));
    let policy = AiPolicy {
        ttl: Duration::from_secs(86_400),
        ..POLICY
    };
    b.ai_write(&u, &c, WriteMode::Append, entries(0..1), policy)
        .await
        .unwrap();
    b.sync_put(&u, &c, entries(0..1), Duration::from_secs(3600))
        .await
        .unwrap();
    let ttl = |key: String| {
        let server = &server;
        async move {
            server
                .cli(&["TTL", &key])
                .await
                .unwrap()
                .trim()
                .parse::<i64>()
                .unwrap()
        }
    };
    let ai = ttl(keys::ai_messages(&u, "t1")).await;
    assert!((86_000..=86_400).contains(&ai), "AI list TTL {ai}");
    let lru = ttl(keys::ai_lru(&u)).await;
    assert!((86_000..=86_400).contains(&lru), "LRU TTL {lru}");
    let sync = ttl(keys::sync(&u, "t1")).await;
    assert!((3_500..=3_600).contains(&sync), "sync TTL {sync}");
}

/// Redis Cluster: every key of one user's AI cache, embeds, settings and sync cache is in
/// the user's slot (one hash tag), and different users spread over the slots.
#[tokio::test]
async fn redis_cluster_keeps_each_users_keys_in_one_slot() {
    let (cluster, b) = redis_cluster_backend().await;
    let ttl = POLICY.ttl;
    let users: Vec<UserHash> = ["alice", "bob", "carol", "dave", "erin"]
        .into_iter()
        .map(user)
        .collect();
    for u in &users {
        // Four chats: the fourth evicts the first inside the script, across keys.
        for c in ["c1", "c2", "c3", "c4"] {
            b.ai_write(u, &chat(c), WriteMode::Append, entries(0..2), POLICY)
                .await
                .unwrap();
            b.embed_put(u, &chat(c), &embed(&format!("{c}-e")), b"e".to_vec(), ttl)
                .await
                .unwrap();
            b.settings_put(u, &chat(c), "app:key", b"s".to_vec(), ttl)
                .await
                .unwrap();
            b.sync_put(u, &chat(c), entries(0..1), ttl).await.unwrap();
        }
        b.ai_read_append(u, &chat("c5"), entries(0..1), POLICY, true)
            .await
            .unwrap();
        b.ai_delete(u, &chat("c3")).await.unwrap();
    }
    b.sync_clear(&users[0]).await.unwrap();

    let dump = cluster.dump().await.unwrap();
    let mut slots = std::collections::HashSet::new();
    for u in &users {
        let tag = keys::tag(u);
        let mine: Vec<&String> = dump
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.starts_with(&tag))
            .collect();
        // c1 and c2 were evicted and c3 deleted, each with its embed and settings.
        let mut expected = vec![
            keys::ai_messages(u, "c4"),
            keys::ai_messages(u, "c5"),
            keys::ai_lru(u),
            keys::embed(u, "c4-e"),
            keys::embed_index(u, "c4"),
            keys::settings(u, "c4", "app:key"),
            keys::settings_index(u, "c4"),
        ];
        if u != &users[0] {
            expected.extend(["c1", "c2", "c3", "c4"].map(|c| keys::sync(u, c)));
            expected.push(keys::sync_index(u));
        }
        let mut found: Vec<String> = mine.iter().map(|k| k.to_string()).collect();
        found.sort();
        expected.sort();
        assert_eq!(found, expected);
        let slot = cluster.keyslot(&tag).await.unwrap();
        for key in &mine {
            assert_eq!(cluster.keyslot(key).await.unwrap(), slot, "{key}");
        }
        slots.insert(slot);
    }
    assert!(slots.len() > 1, "five users in one slot: {slots:?}");
    assert!(
        dump.iter().all(|(k, _)| k.starts_with("{u:")),
        "every cache key is tagged by its user: {dump:?}"
    );
}
