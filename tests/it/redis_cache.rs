//! chatd on a real `redis-server`: nothing plaintext at rest, tampered or moved ciphertext
//! does not open (→ `decryption_failed`), and Redis dying mid-turn and coming back empty
//! is survived (→ `cache_miss` next turn). And chatd on a Redis Cluster (`cache.redis_cluster`).

use chatd::config::CacheBackendKind;
use chatd_protocol::{HistoryReason, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::redis::RedisServer;
use redis::AsyncCommands;

use crate::support::{outcome, spawn_app, use_llm, user_message, user_message_with};

pub(crate) fn use_redis(c: &mut chatd::config::Config, redis: &RedisServer) {
    c.cache.backend = CacheBackendKind::Redis;
    c.cache.redis_url = redis.url();
}

async fn redis_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn hash(user: &str) -> String {
    chatd::crypto::UserHash::of(&chatd::auth::UserId::parse(user).unwrap())
        .as_str()
        .to_string()
}

/// The AI-cache list of a user's chat.
fn ai_key(user: &str, chat: &str) -> String {
    let user = chatd::crypto::UserHash::of(&chatd::auth::UserId::parse(user).unwrap());
    chatd::cache::backend::keys::ai_messages(&user, chat)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn nothing_in_redis_is_plaintext() {
    let redis = RedisServer::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    fake.set_default(Reply::Text {
        chunks: vec!["The zebra-answer-4471 is here.\n\n".into(), "Done.".into()],
        delay: std::time::Duration::ZERO,
        usage: None,
    });
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_redis(c, &redis);
    })
    .await;
    let user = "plaintext-probe-user-9931";
    let mut ws = app.connect_showing(user, "chat-p").await;
    ws.send(&user_message_with(
        "chat-p",
        "m1",
        "my secret question quokka-7781",
        |m| {
            m.embeds = vec![chatd_protocol::ClientEmbed {
                embed_id: chatd_protocol::EmbedId::parse("emb-p").unwrap(),
                embed_type: "web_page".into(),
                content: "title: embed-secret-title-5150".into(),
                status: None,
                version_number: 1,
                content_hash: None,
            }];
        },
    ))
    .await;
    outcome(&mut ws).await.answer();
    ws.send(&user_message(
        "chat-p",
        "m2",
        "follow-up secret wombat-3303",
    ))
    .await;
    outcome(&mut ws).await.answer();

    let dump = redis.dump().await.unwrap();
    assert!(
        dump.iter().any(|(k, _)| k.ends_with(":messages:ai")),
        "the chat is cached: {dump:?}"
    );
    let embed_key = chatd::cache::backend::keys::embed(
        &chatd::crypto::UserHash::of(&chatd::auth::UserId::parse(user).unwrap()),
        "emb-p",
    );
    assert!(dump.iter().any(|(k, _)| *k == embed_key));
    for (key, value) in &dump {
        for secret in [
            "quokka-7781",
            "wombat-3303",
            "zebra-answer-4471",
            "embed-secret-title-5150",
            user,
            chatd::auth::UserId::parse(user).unwrap().as_str(),
        ] {
            assert!(!key.contains(secret), "{secret} in key {key}");
            assert!(!contains(value, secret), "{secret} in the value of {key}");
        }
        if key.starts_with("dek:") {
            // Data keys are stored only wrapped by the key service.
            assert!(
                value.starts_with(b"local:v1:"),
                "wrapped data key expected in {key}"
            );
        }
    }
}

#[tokio::test]
async fn tampered_or_moved_ciphertext_does_not_open() {
    let redis = RedisServer::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_redis(c, &redis);
    })
    .await;
    let mut conn = redis_conn(&redis).await;

    // Alice's chat, then one byte of her first cached message flipped.
    let mut alice = app.connect_showing("alice", "chat-t").await;
    alice.send(&user_message("chat-t", "m1", "hi")).await;
    outcome(&mut alice).await.answer();
    let key = ai_key("alice", "chat-t");
    let mut first: Vec<u8> = conn.lindex(&key, 0).await.unwrap();
    let last = first.len() - 1;
    first[last] ^= 0x01;
    let _: () = conn.lset(&key, 0, first).await.unwrap();
    alice
        .send(&user_message("chat-t", "m2", "still there?"))
        .await;
    assert_eq!(
        outcome(&mut alice).await.need_history().reason,
        HistoryReason::DecryptionFailed
    );
    alice.send(&crate::support::ping()).await;
    assert!(
        matches!(alice.recv().await, ServerMessage::Pong(_)),
        "the connection survives"
    );

    // Bob's chat, then Alice's (intact) ciphertext and wrapped keys copied under Bob's names.
    let mut alice2 = app.connect_showing("alice", "chat-a2").await;
    alice2
        .send(&user_message("chat-a2", "m1", "alice's secret"))
        .await;
    outcome(&mut alice2).await.answer();
    let mut bob = app.connect_showing("bob", "chat-b").await;
    bob.send(&user_message("chat-b", "b1", "bob's question"))
        .await;
    outcome(&mut bob).await.answer();
    let alice_list: Vec<Vec<u8>> = conn
        .lrange(ai_key("alice", "chat-a2"), 0, -1)
        .await
        .unwrap();
    let bob_key = ai_key("bob", "chat-b");
    let _: () = conn.del(&bob_key).await.unwrap();
    let _: () = conn.rpush(&bob_key, alice_list).await.unwrap();
    let deks: Vec<String> = conn.keys(format!("dek:{}:*", hash("alice"))).await.unwrap();
    for dek in deks {
        let wrapped: Vec<u8> = conn.get(&dek).await.unwrap();
        let moved = dek.replace(&hash("alice"), &hash("bob"));
        let _: () = conn.set(moved, wrapped).await.unwrap();
    }
    bob.send(&user_message("chat-b", "b2", "what did I say?"))
        .await;
    assert_eq!(
        outcome(&mut bob).await.need_history().reason,
        HistoryReason::DecryptionFailed
    );
}

#[tokio::test]
async fn redis_dying_mid_turn_and_returning_empty_is_survived() {
    let mut redis = RedisServer::start().await.unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        use_redis(c, &redis);
        c.cache.timeout = std::time::Duration::from_millis(500);
    })
    .await;
    let mut ws = app.connect_showing("erin", "chat-k").await;
    ws.send(&user_message("chat-k", "m1", "first")).await;
    outcome(&mut ws).await.answer();
    let ports = [
        app.addr.port(),
        crate::faults::port(&fake.base_url()),
        crate::faults::port(&redis.url()),
    ];
    let before = crate::faults::counts(&ports);

    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Mid-turn paragraph.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(Reply::Text {
            chunks: vec!["End.".into()],
            delay: std::time::Duration::ZERO,
            usage: None,
        }),
    });
    ws.send(&user_message("chat-k", "m2", "second")).await;
    gate.reached().await;
    redis.kill().await;
    gate.release();
    // The answer still streams; only caching it fails (logged, never shown as a crash).
    let answer = outcome(&mut ws).await.answer();
    assert_eq!(answer.full_content_so_far, "Mid-turn paragraph.\n\nEnd.");

    // While Redis is down: a typed error for the next message, and /readyz says so.
    ws.send(&user_message("chat-k", "m3", "third")).await;
    assert_eq!(
        outcome(&mut ws).await.error().code,
        chatd_protocol::ErrorCode::CacheUnavailable
    );
    let ready = reqwest::get(app.http_url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["down"], serde_json::json!(["cache"]));

    // Back, but empty: the chat falls back to the client's history, then works. (This
    // client stored nothing, so the store counts no messages; like the web client, it
    // says the chat exists with `chat_has_title`.)
    redis.restart().await.unwrap();
    let fourth = user_message_with("chat-k", "m4", "fourth", |m| {
        m.message.chat_has_title = true
    });
    ws.send(&fourth).await;
    let request = loop {
        // The connection manager may need one failed attempt to notice the new server.
        match outcome(&mut ws).await {
            crate::support::Outcome::NeedHistory(r) => break r,
            crate::support::Outcome::Error(e)
                if e.code == chatd_protocol::ErrorCode::CacheUnavailable =>
            {
                ws.send(&fourth).await;
            }
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(request.reason, HistoryReason::CacheMiss);
    ws.send(&user_message_with("chat-k", "m4", "fourth", |m| {
        m.message.message_history = Some(vec![crate::support::history_entry(
            "m1",
            chatd_protocol::Role::User,
            "first",
            1,
        )]);
    }))
    .await;
    outcome(&mut ws).await.answer();
    assert_eq!(
        reqwest::get(app.http_url("/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );
    // Redis killed and back empty left no task or descriptor behind.
    let after = crate::faults::settled(&ports, before).await;
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "fds, tasks: {before:?} → {after:?}"
    );
}

/// A cache hit is one Redis round trip: `prepare` reads the chat and appends the new
/// message with a single script call (the commands inside it count in `commandstats` too,
/// but only one EVALSHA reaches the server).
#[tokio::test]
async fn a_cache_hit_is_one_script_call() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use chatd::cache::ai::{AiCache, CachedMessage};
    use chatd::cache::redis::RedisBackend;
    use chatd::cache::{AiPolicy, CacheBackend};
    use chatd::crypto::{Keyring, LocalKeyProvider, UserHash};
    use chatd::history::{Prepared, prepare};
    use chatd::turn::{Inbound, MessageOptions};
    use chatd_protocol::{ChatId, ClientMessage, MessageId, Role, parse_client_message};

    let redis = RedisServer::start().await.unwrap();
    let backend: Arc<dyn CacheBackend> =
        Arc::new(RedisBackend::new(&redis.url(), false, Duration::from_secs(2)).unwrap());
    let provider = Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([9u8; 32])));
    let keyring = Arc::new(Keyring::new(
        provider,
        Arc::new(chatd::cache::WrappedKeys(backend.clone())),
        Duration::from_secs(60),
    ));
    let cache = AiCache::new(
        backend,
        keyring,
        AiPolicy {
            ttl: Duration::from_secs(3600),
            max_messages: 10,
            max_chats: 3,
        },
    );
    let user = UserHash::of(&chatd::auth::UserId::parse("alice").unwrap());
    let chat = ChatId::parse("c1").unwrap();
    let seed: Vec<CachedMessage> = (0..4)
        .map(|i| CachedMessage {
            message_id: MessageId::parse(format!("h{i}")).unwrap(),
            role: if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            },
            content: format!("earlier message {i}"),
            created_at: i,
            category: None,
            model_name: None,
            token_count: Some(3),
            replaces_through: None,
        })
        .collect();
    // Seeding also creates and caches the data key, so the hit needs no key lookup.
    cache.replace(&user, &chat, &seed).await.unwrap();
    let inbound = |id: &str, prior: u64| {
        let frame = serde_json::json!({
            "type": "chat_message_added",
            "payload": {"chat_id": "c1", "message": {
                "message_id": id, "role": "user", "content": "and now?", "created_at": 9,
            }},
        });
        let Ok(ClientMessage::ChatMessageAdded(m)) = parse_client_message(&frame.to_string())
        else {
            panic!("test frame must parse")
        };
        Inbound {
            options: MessageOptions::from_message(&m),
            message: m.message,
            embeds: m.embeds,
            conn: 1,
            prior_messages: prior,
            history_requested: false,
        }
    };
    // The first hit also loads the script into Redis (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA).
    let first = prepare(&cache, &user, &chat, &[inbound("m4", 4)])
        .await
        .unwrap();
    assert!(matches!(first, Prepared::Ready(_)), "{first:?}");

    redis.cli(&["CONFIG", "RESETSTAT"]).await.unwrap();
    let prepared = prepare(&cache, &user, &chat, &[inbound("m5", 5)])
        .await
        .unwrap();
    let stats = redis.cli(&["INFO", "commandstats"]).await.unwrap();

    let Prepared::Ready(history) = prepared else {
        panic!("expected a hit: {prepared:?}")
    };
    assert_eq!(history.len(), 6);
    let calls: BTreeMap<&str, u64> = stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name, rest.split(',').next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(calls.get("evalsha"), Some(&1), "{stats}");
    assert_eq!(
        calls.get("lrange"),
        Some(&1),
        "one read, inside the script: {stats}"
    );
    for top_level in ["eval", "get", "set", "script|load", "multi", "exec"] {
        assert!(!calls.contains_key(top_level), "{top_level}: {stats}");
    }
}

/// `cache.redis_cluster`: chatd caches a turn (with an embed) on a 3-master Redis Cluster,
/// the next turn is a cache hit, and the user's cache keys share one slot.
#[tokio::test]
async fn chatd_on_a_redis_cluster_caches_turns_in_the_users_slot() {
    use chatd_test_harness::redis_cluster::RedisCluster;

    let cluster = RedisCluster::start(3).await.unwrap();
    let app = spawn_app(|c| {
        c.cache.backend = CacheBackendKind::Redis;
        c.cache.redis_url = cluster.seed_url();
        c.cache.redis_cluster = true;
    })
    .await;
    assert_eq!(
        reqwest::get(app.http_url("/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );
    let mut ws = app.connect_showing("alice", "chat-c").await;
    ws.send(&user_message_with("chat-c", "m1", "hello cluster", |m| {
        m.embeds = vec![chatd_protocol::ClientEmbed {
            embed_id: chatd_protocol::EmbedId::parse("emb-c").unwrap(),
            embed_type: "web_page".into(),
            content: "title: cluster".into(),
            status: None,
            version_number: 1,
            content_hash: None,
        }];
    }))
    .await;
    outcome(&mut ws).await.answer();
    ws.send(&user_message("chat-c", "m2", "still cached?"))
        .await;
    outcome(&mut ws).await.answer();

    let alice = chatd::crypto::UserHash::of(&chatd::auth::UserId::parse("alice").unwrap());
    let tag = chatd::cache::backend::keys::tag(&alice);
    let slot = cluster.keyslot(&tag).await.unwrap();
    let dump = cluster.dump().await.unwrap();
    let mine: Vec<&String> = dump
        .iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with(&tag))
        .collect();
    assert!(
        mine.contains(&&ai_key("alice", "chat-c"))
            && mine.contains(&&chatd::cache::backend::keys::embed(&alice, "emb-c")),
        "{mine:?}"
    );
    for key in mine {
        assert_eq!(cluster.keyslot(key).await.unwrap(), slot, "{key}");
    }
}
