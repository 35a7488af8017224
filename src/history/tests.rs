//! `prepare` on a cache hit (one read-and-append) against the memory backend: a chat new
//! to the cache is created, a miss on a chat with earlier messages writes nothing (so it
//! evicts nothing), and a plain re-send of a cached message leaves it cached once; a re-sent
//! history is cached uncounted (bounded by its length) while a hit's new message is counted.

use chatd_protocol::{ChatId, ClientMessage, HistoryReason, MessageId, Role, parse_client_message};

use super::{Prepared, prepare};
use crate::auth::UserId;
use crate::cache::ai::{AiCache, CachedMessage, Loaded};
use crate::crypto::UserHash;
use crate::inbound::{Inbound, MessageOptions};

fn cache() -> AiCache {
    AiCache::in_memory(10)
}

fn user() -> UserHash {
    UserHash::of(&UserId::parse("alice").expect("valid user"))
}

fn chat(s: &str) -> ChatId {
    ChatId::parse(s).expect("valid chat id")
}

fn inbound(chat: &str, id: &str, prior: u64) -> Inbound {
    let frame = serde_json::json!({
        "type": "chat_message_added",
        "payload": {"chat_id": chat, "message": {
            "message_id": id, "role": "user", "content": format!("text of {id}"), "created_at": 5,
        }},
    });
    let Ok(ClientMessage::ChatMessageAdded(m)) = parse_client_message(&frame.to_string()) else {
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
}

fn cached(id: &str, role: Role) -> CachedMessage {
    CachedMessage {
        message_id: MessageId::parse(id).expect("valid message id"),
        role,
        content: format!("text of {id}"),
        created_at: 1,
        category: None,
        model_name: None,
        token_count: Some(3),
        replaces_through: None,
    }
}

async fn ids(cache: &AiCache, chat: &ChatId) -> Option<Vec<String>> {
    match cache.load(&user(), chat).await.expect("cache up") {
        Loaded::Missing => None,
        Loaded::Present { messages, failed } => {
            assert_eq!(failed, 0);
            Some(
                messages
                    .iter()
                    .map(|m| m.message_id.as_str().to_string())
                    .collect(),
            )
        }
    }
}

#[tokio::test]
async fn a_hit_appends_the_new_message_and_a_new_chat_is_created() {
    let (cache, u) = (cache(), user());
    let c = chat("c1");
    let prepared = prepare(&cache, &u, &c, &[inbound("c1", "m1", 0)])
        .await
        .expect("cache up");
    let Prepared::Ready(history) = prepared else {
        panic!("a new chat is served from nothing: {prepared:?}")
    };
    assert_eq!(history.len(), 1);
    assert_eq!(ids(&cache, &c).await, Some(vec!["m1".to_string()]));

    cache
        .append(&u, &c, &[cached("a1", Role::Assistant)])
        .await
        .expect("cache up");
    let prepared = prepare(&cache, &u, &c, &[inbound("c1", "m2", 2)])
        .await
        .expect("cache up");
    let Prepared::Ready(history) = prepared else {
        panic!("expected a hit: {prepared:?}")
    };
    assert_eq!(history.len(), 3);
    assert_eq!(
        ids(&cache, &c).await,
        Some(vec!["m1".into(), "a1".into(), "m2".into()])
    );
}

#[tokio::test]
async fn a_plain_resend_of_a_cached_message_stays_cached_once() {
    let (cache, u) = (cache(), user());
    let c = chat("c1");
    let seed = [
        cached("h0", Role::User),
        cached("h1", Role::Assistant),
        cached("m2", Role::User),
    ];
    cache.replace(&u, &c, &seed).await.expect("cache up");
    let prepared = prepare(&cache, &u, &c, &[inbound("c1", "m2", 2)])
        .await
        .expect("cache up");
    let Prepared::Ready(history) = prepared else {
        panic!("expected a hit: {prepared:?}")
    };
    assert_eq!(history.len(), 3, "the model sees the message once");
    assert_eq!(
        ids(&cache, &c).await,
        Some(vec!["h0".into(), "h1".into(), "m2".into()]),
        "the cache holds it once"
    );
}

#[tokio::test]
async fn a_miss_with_earlier_messages_writes_nothing_and_evicts_nothing() {
    let (cache, u) = (cache(), user());
    for c in ["c1", "c2", "c3"] {
        cache
            .append(&u, &chat(c), &[cached("x", Role::User)])
            .await
            .expect("cache up");
    }
    let c4 = chat("c4");
    let prepared = prepare(&cache, &u, &c4, &[inbound("c4", "m9", 4)])
        .await
        .expect("cache up");
    let Prepared::NeedHistory(request) = prepared else {
        panic!("expected a miss: {prepared:?}")
    };
    assert_eq!(request.reason, HistoryReason::CacheMiss);
    assert_eq!(ids(&cache, &c4).await, None, "no partial chat");
    for c in ["c1", "c2", "c3"] {
        assert!(ids(&cache, &chat(c)).await.is_some(), "{c} stays");
    }
}

#[tokio::test]
async fn a_resent_history_is_cached_uncounted_and_a_new_message_counted() {
    let (cache, u) = (cache(), user());
    let c = chat("c1");
    let frame = serde_json::json!({
        "type": "chat_message_added",
        "payload": {"chat_id": "c1", "message": {
            "message_id": "m3", "role": "user", "content": "and now?", "created_at": 5,
            "message_history": [
                {"message_id": "h1", "role": "user", "content": "an earlier question", "created_at": 1},
                {"message_id": "h2", "role": "assistant", "content": "its answer", "created_at": 2},
            ],
        }},
    });
    let Ok(ClientMessage::ChatMessageAdded(m)) = parse_client_message(&frame.to_string()) else {
        panic!("test frame must parse")
    };
    let resend = Inbound {
        options: MessageOptions::from_message(&m),
        message: m.message,
        embeds: m.embeds,
        conn: 1,
        prior_messages: 2,
        history_requested: true,
    };
    let prepared = prepare(&cache, &u, &c, &[resend]).await.expect("cache up");
    let Prepared::Ready(history) = prepared else {
        panic!("a re-send is served: {prepared:?}")
    };
    // Bounded by byte length, not counted on the turn's path.
    assert_eq!(
        history[0].tokens,
        crate::pipeline::tokens::Tokens::AtMost("an earlier question".len() as u32)
    );
    let Loaded::Present { messages, .. } = cache.load(&u, &c).await.expect("cache up") else {
        panic!("the re-sent history is cached")
    };
    let counts: Vec<(&str, Option<u32>)> = messages
        .iter()
        .map(|m| (m.message_id.as_str(), m.token_count))
        .collect();
    // The re-sent history uncounted; the message being answered (small) counted.
    assert_eq!(
        counts,
        vec![
            ("h1", None),
            ("h2", None),
            ("m3", Some(crate::pipeline::tokens::count("and now?")))
        ]
    );

    // A later message on a hit is small and counted when cached.
    prepare(&cache, &u, &c, &[inbound("c1", "m4", 3)])
        .await
        .expect("cache up");
    let Loaded::Present { messages, .. } = cache.load(&u, &c).await.expect("cache up") else {
        panic!("cached")
    };
    let last = messages.last().expect("m4 cached");
    assert_eq!(last.message_id.as_str(), "m4");
    assert_eq!(
        last.token_count,
        Some(crate::pipeline::tokens::count("text of m4"))
    );
}
