use chatd_protocol::{ClientEmbed, EmbedId};

use super::*;
use crate::auth::UserId;

fn cache() -> AiCache {
    AiCache::in_memory(3)
}

fn msg(i: i64) -> CachedMessage {
    CachedMessage {
        message_id: MessageId::parse(format!("m{i}")).unwrap(),
        role: Role::User,
        content: format!("message {i}"),
        created_at: i,
        category: None,
        model_name: None,
        token_count: Some(3),
        replaces_through: None,
    }
}

#[tokio::test]
async fn messages_roundtrip_capped_and_bound_to_owner() {
    let cache = cache();
    let a = UserHash::of(&UserId::parse("a").unwrap());
    let b = UserHash::of(&UserId::parse("b").unwrap());
    let chat = ChatId::parse("c1").unwrap();
    assert_eq!(cache.load(&a, &chat).await.unwrap(), Loaded::Missing);
    let msgs: Vec<_> = (0..5).map(msg).collect();
    cache.append(&a, &chat, &msgs).await.unwrap();
    let Loaded::Present { messages, failed } = cache.load(&a, &chat).await.unwrap() else {
        panic!("expected the chat")
    };
    assert_eq!(failed, 0);
    assert_eq!(messages, msgs[2..].to_vec());
    // Bob's view of the same key names: nothing (his own key space is empty).
    assert_eq!(cache.load(&b, &chat).await.unwrap(), Loaded::Missing);
}

#[tokio::test]
async fn embeds_version_and_owner_rules() {
    let cache = cache();
    let a = UserHash::of(&UserId::parse("a").unwrap());
    let b = UserHash::of(&UserId::parse("b").unwrap());
    let chat = ChatId::parse("c1").unwrap();
    let mut e = ClientEmbed {
        embed_id: EmbedId::parse("e1").unwrap(),
        embed_type: "web_page".into(),
        content: "title: One".into(),
        status: Some("finished".into()),
        version_number: 2,
        content_hash: None,
    };
    assert_eq!(
        cache.put_embed(&a, &chat, &e).await.unwrap(),
        EmbedWrite::Stored
    );
    e.content = "title: Older".into();
    e.version_number = 1;
    assert_eq!(
        cache.put_embed(&a, &chat, &e).await.unwrap(),
        EmbedWrite::Unchanged
    );
    e.content = "title: Newer".into();
    e.version_number = 3;
    assert_eq!(
        cache.put_embed(&a, &chat, &e).await.unwrap(),
        EmbedWrite::Stored
    );
    // Embed ids are per user: Bob's embed of the same id is his own entry.
    assert!(cache.get_embed(&b, &e.embed_id).await.unwrap().is_none());
    let mut bobs = e.clone();
    bobs.content = "title: Bob's".into();
    assert_eq!(
        cache.put_embed(&b, &chat, &bobs).await.unwrap(),
        EmbedWrite::Stored
    );
    let got = cache.get_embed(&a, &e.embed_id).await.unwrap().unwrap();
    assert_eq!(got.content, "title: Newer");
    let got = cache.get_embed(&b, &e.embed_id).await.unwrap().unwrap();
    assert_eq!(got.content, "title: Bob's");
    // Alice's entry copied under Bob's key is refused and does not open for him.
    let backend = cache.backend();
    let alices = backend.embed_get(&a, &e.embed_id).await.unwrap().unwrap();
    backend
        .embed_put(&b, &chat, &e.embed_id, alices, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        cache.put_embed(&b, &chat, &bobs).await.unwrap(),
        EmbedWrite::Foreign
    );
    assert!(cache.get_embed(&b, &e.embed_id).await.unwrap().is_none());
}
