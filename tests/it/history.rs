//! History from the sealed AI cache, and the `request_chat_history` fallback: cache hits,
//! a restart (memory backend) → `cache_miss`, the client's re-send, an incomplete cache →
//! `insufficient_cache_history`, bad re-sends → `invalid_chat_history` (no loop), and
//! embed references resolved for the model.

use chatd_protocol::{ClientEmbed, EmbedId, ErrorCode, HistoryReason, Role};
use chatd_test_harness::fake_llm::FakeLlm;

use crate::support::{
    conversation, history_entry, outcome, spawn_app, use_llm, user_message, user_message_with,
};

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

const ANSWER: &str = "Hello from the fake LLM.\n\nSecond paragraph.";

#[tokio::test]
async fn a_follow_up_is_a_cache_hit_and_the_model_sees_the_whole_chat() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-h").await;
    ws.send(&user_message("chat-h", "m1", "first question"))
        .await;
    assert_eq!(outcome(&mut ws).await.answer().full_content_so_far, ANSWER);
    ws.send(&user_message("chat-h", "m2", "second question"))
        .await;
    outcome(&mut ws).await.answer();

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        conversation(&requests[0]),
        vec![pair("user", "first question")]
    );
    assert_eq!(
        conversation(&requests[1]),
        vec![
            pair("user", "first question"),
            pair("assistant", ANSWER),
            pair("user", "second question")
        ]
    );
    let metrics = reqwest::get(app.http_url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        !metrics.contains("chatd_history_requests_total{"),
        "no fallback on a cache hit"
    );
}

#[tokio::test]
async fn after_a_restart_an_existing_chat_is_a_cache_miss_and_the_resend_is_cached() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-r").await;
    ws.send(&user_message("chat-r", "m1", "before the restart"))
        .await;
    outcome(&mut ws).await.answer();
    drop(ws);
    app.shutdown().await.unwrap();

    // A new process: the in-memory cache is empty; the client knows the chat has a title.
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("alice", "chat-r").await;
    let existing = |m: &mut chatd_protocol::ChatMessageAdded| m.message.chat_has_title = true;
    ws.send(&user_message_with(
        "chat-r",
        "m3",
        "after the restart",
        existing,
    ))
    .await;
    let request = outcome(&mut ws).await.need_history();
    assert_eq!(request.reason, HistoryReason::CacheMiss);
    assert_eq!(request.chat_id.as_str(), "chat-r");
    assert_eq!(fake.requests().len(), 1, "no model call without history");

    ws.send(&user_message_with(
        "chat-r",
        "m3",
        "after the restart",
        |m| {
            m.message.chat_has_title = true;
            m.message.message_history = Some(vec![
                history_entry("m1", Role::User, "before the restart", 1),
                history_entry("a1", Role::Assistant, "an earlier answer", 2),
            ]);
        },
    ))
    .await;
    outcome(&mut ws).await.answer();
    let requests = fake.requests();
    assert_eq!(
        conversation(&requests[1]),
        vec![
            pair("user", "before the restart"),
            pair("assistant", "an earlier answer"),
            pair("user", "after the restart")
        ]
    );

    // The re-sent history was cached: the next message is a hit.
    ws.send(&user_message_with("chat-r", "m4", "and again", existing))
        .await;
    outcome(&mut ws).await.answer();
    let requests = fake.requests();
    assert_eq!(conversation(&requests[2]).len(), 5);
    assert_eq!(conversation(&requests[2])[3], pair("assistant", ANSWER));
}

#[tokio::test]
async fn a_resend_without_usable_history_is_an_error_not_a_loop() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("bob", "chat-x").await;
    let existing = |m: &mut chatd_protocol::ChatMessageAdded| m.message.chat_has_title = true;
    ws.send(&user_message_with("chat-x", "m5", "hello?", existing))
        .await;
    assert_eq!(
        outcome(&mut ws).await.need_history().reason,
        HistoryReason::CacheMiss
    );

    // Re-sent without message_history: a typed error, not a second request.
    ws.send(&user_message_with("chat-x", "m5", "hello?", existing))
        .await;
    let error = outcome(&mut ws).await.error();
    assert_eq!(error.code, ErrorCode::InvalidChatHistory);
    assert_eq!(error.message_id.as_ref().map(|m| m.as_str()), Some("m5"));

    // Asked again for a new message, answered with an empty history: also an error.
    ws.send(&user_message_with("chat-x", "m6", "hello again", existing))
        .await;
    outcome(&mut ws).await.need_history();
    ws.send(&user_message_with("chat-x", "m6", "hello again", |m| {
        m.message.chat_has_title = true;
        m.message.message_history = Some(Vec::new());
    }))
    .await;
    assert_eq!(
        outcome(&mut ws).await.error().code,
        ErrorCode::InvalidChatHistory
    );

    // A malformed entry (over the content limit) is refused before anything is cached.
    let huge = "x".repeat(256 * 1024 + 1);
    ws.send(&user_message_with("chat-x", "m6", "hello again", |m| {
        m.message.message_history = Some(vec![history_entry("s1", Role::User, &huge, 1)]);
    }))
    .await;
    assert_eq!(
        outcome(&mut ws).await.error().code,
        ErrorCode::InvalidChatHistory
    );
    assert!(fake.requests().is_empty(), "no model call for any of these");

    // The connection is fine and a proper re-send works.
    ws.send(&user_message_with("chat-x", "m6", "hello again", |m| {
        m.message.message_history = Some(vec![history_entry("m0", Role::User, "long ago", 1)]);
    }))
    .await;
    outcome(&mut ws).await.answer();
}

#[tokio::test]
async fn an_incomplete_cache_asks_for_the_history_with_counts() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("carol", "chat-i").await;
    for i in 0..3 {
        ws.send(&user_message(
            "chat-i",
            &format!("m{i}"),
            &format!("question {i}"),
        ))
        .await;
        outcome(&mut ws).await.answer();
    }
    // Six messages cached; keep only the newest two, as if the rest were lost.
    let cache = &app.state.ai_cache;
    let user = chatd::crypto::UserHash::of(&chatd::auth::UserId::parse("carol").unwrap());
    let chat = chatd_protocol::ChatId::parse("chat-i").unwrap();
    let sealed = cache
        .backend()
        .ai_read(&user, &chat, cache.policy())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sealed.len(), 6);
    cache
        .backend()
        .ai_write(
            &user,
            &chat,
            chatd::cache::WriteMode::Replace,
            sealed[4..].to_vec(),
            cache.policy(),
        )
        .await
        .unwrap();

    ws.send(&user_message("chat-i", "m9", "question 9")).await;
    let request = outcome(&mut ws).await.need_history();
    assert_eq!(request.reason, HistoryReason::InsufficientCacheHistory);
    assert_eq!(request.expected_messages, Some(6));
    assert_eq!(request.cached_messages, Some(2));
}

#[tokio::test]
async fn embed_references_reach_the_model_as_toon_and_missing_ones_as_a_marker() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| use_llm(c, fake.base_url())).await;
    let mut ws = app.connect_showing("dana", "chat-e").await;
    let content = "Compare these:\n```json\n{\"type\": \"web_page\", \"embed_id\": \"emb-1\"}\n```\n\
                   ```json\n{\"type\": \"code\", \"embed_id\": \"emb-gone\"}\n```\nThanks";
    let with_embed = |m: &mut chatd_protocol::ChatMessageAdded| {
        m.embeds = vec![ClientEmbed {
            embed_id: EmbedId::parse("emb-1").unwrap(),
            embed_type: "web_page".into(),
            content: "embed_id: emb-1\ntitle: The Rust Book\nurl: https://doc.rust-lang.org/book/"
                .into(),
            status: Some("finished".into()),
            version_number: 1,
            content_hash: None,
        }];
    };
    ws.send(&user_message_with("chat-e", "m1", content, with_embed))
        .await;
    // The cache lacks emb-gone: the client is asked for it once.
    let asked = outcome(&mut ws).await.need_embeds();
    assert_eq!(asked.message_id.as_str(), "m1");
    assert_eq!(asked.embed_ids, vec![EmbedId::parse("emb-gone").unwrap()]);
    assert!(fake.requests().is_empty(), "no model call while asking");
    // The client does not have it either: the re-send is answered with a marker.
    ws.send(&user_message_with("chat-e", "m1", content, with_embed))
        .await;
    outcome(&mut ws).await.answer();
    let seen = &conversation(&fake.requests()[0])[0].1;
    assert!(
        seen.starts_with("Compare these:\n```toon\n# embed: web_page\n"),
        "{seen}"
    );
    assert!(seen.contains("title: The Rust Book"), "{seen}");
    assert!(
        !seen.contains("embed_id"),
        "client-only fields are dropped: {seen}"
    );
    assert!(seen.contains("[code embed unavailable]"), "{seen}");
    assert!(seen.ends_with("Thanks"));

    // The message is cached with its reference intact and resolved again next turn.
    ws.send(&user_message("chat-e", "m2", "and?")).await;
    outcome(&mut ws).await.answer();
    let again = &conversation(&fake.requests()[1])[0].1;
    assert_eq!(again, seen);
}
