//! After the login sync: phase 1 opens the chat last opened on any device (kept through
//! `set_active_chat`, forgotten with the chat), and the client pages the rest with
//! `load_more_chats`, `get_chat_messages` and `request_chat_content_batch`, with bounded
//! page sizes and another user's chats never shown (not told apart from unknown ones); a
//! user with 5,000 chats gets 10 chats' content and 100 chats' metadata at login, then pages.

use chatd_protocol::{ErrorCode, ServerMessage, SyncPhase};
use serde_json::json;

use crate::store::expect;
use crate::support::{error_code, set_active_chat, spawn_app};
use crate::sync::{fill, request, sync, unlimited};

#[tokio::test]
async fn the_login_sync_opens_the_chat_last_opened_and_the_rest_is_paged() {
    let app = spawn_app(unlimited).await;
    fill(&app).await;
    let mut phone = app.connect("alice").await;
    phone.send(&set_active_chat(Some("chat-17"))).await;
    expect(&mut phone, "active_chat_set_ack").await;

    // A new device logs in: chat-17 first (not the last edited), its content first too.
    let mut laptop = app.connect("alice").await;
    let got = sync(&mut laptop, request(SyncPhase::All)).await;
    assert_eq!(got.last_chat.as_ref().map(|c| c.as_str()), Some("chat-17"));
    assert_eq!(got.content[0].chat_id.as_str(), "chat-17");
    assert_eq!(got.content.len(), 10);

    // Metadata page by page: 25 chats, pages of 10.
    let mut listed = Vec::new();
    for offset in [0, 10, 20] {
        laptop
            .send_json(
                json!({"type": "load_more_chats", "payload": {"offset": offset, "limit": 10}}),
            )
            .await;
        match expect(&mut laptop, "load_more_chats_response").await {
            ServerMessage::LoadMoreChatsResponse(p) => {
                assert_eq!(p.total_chat_count, 25);
                assert_eq!(p.has_more, offset < 20, "offset {offset}");
                listed.extend(p.chats.into_iter().map(|c| c.chat_id));
            }
            other => panic!("{other:?}"),
        }
    }
    listed.dedup();
    assert_eq!(listed.len(), 25, "every chat once, in order");

    // Page sizes are bounded, and the connection goes on.
    for bad in [
        json!({"type": "load_more_chats", "payload": {"offset": 0, "limit": 101}}),
        json!({"type": "load_more_chats", "payload": {"limit": 0}}),
        json!({"type": "request_chat_content_batch", "payload": {"chat_ids": []}}),
        json!({"type": "request_chat_content_batch",
               "payload": {"chat_ids": (0..21).map(|i| format!("chat-{i:02}")).collect::<Vec<_>>()}}),
    ] {
        laptop.send_json(bad).await;
        assert_eq!(
            laptop.recv_until(error_code).await,
            ErrorCode::InvalidPayload
        );
    }

    // Deleting the chat forgets it: the next login opens the last edited chat.
    laptop
        .send_json(json!({"type": "delete_chat", "payload": {"chatId": "chat-17"}}))
        .await;
    expect(&mut laptop, "chat_deleted").await;
    let mut tablet = app.connect("alice").await;
    let got = sync(&mut tablet, request(SyncPhase::All)).await;
    assert_eq!(got.last_chat.as_ref().map(|c| c.as_str()), Some("chat-00"));
}

#[tokio::test]
async fn another_users_chats_are_not_found_by_any_page() {
    let app = spawn_app(unlimited).await;
    fill(&app).await;
    let mut bob = app.connect("bob").await;
    // Opening alice's chat is refused and not remembered for bob.
    bob.send(&set_active_chat(Some("chat-03"))).await;
    assert_eq!(bob.recv_until(error_code).await, ErrorCode::Forbidden);
    bob.send_json(json!({"type": "get_chat_messages", "payload": {"chat_id": "chat-03"}}))
        .await;
    assert_eq!(bob.recv_until(error_code).await, ErrorCode::NotFound);
    bob.send_json(json!({"type": "request_chat_content_batch",
        "payload": {"chat_ids": ["chat-03", "chat-unknown"]}}))
        .await;
    match expect(&mut bob, "chat_content_batch_response").await {
        ServerMessage::ChatContentBatchResponse(b) => {
            assert!(b.chats.is_empty() && b.embeds.is_empty() && b.embed_keys.is_empty());
            let missing: Vec<&str> = b.not_found.iter().map(|c| c.as_str()).collect();
            assert_eq!(missing, ["chat-03", "chat-unknown"]);
        }
        other => panic!("{other:?}"),
    }
    bob.send_json(json!({"type": "load_more_chats", "payload": {}}))
        .await;
    match expect(&mut bob, "load_more_chats_response").await {
        ServerMessage::LoadMoreChatsResponse(p) => {
            assert!(p.chats.is_empty());
            assert_eq!(p.total_chat_count, 0);
            assert!(!p.has_more);
        }
        other => panic!("{other:?}"),
    }
    let got = sync(&mut bob, request(SyncPhase::All)).await;
    assert_eq!(got.last_chat, None);
}

/// 5,000 stored chats: the login sync sends the content of 10 and the metadata of 100; the
/// client pages every other chat's metadata (pages of 100) and fetches content on demand.
#[tokio::test]
async fn five_thousand_chats_sync_in_pages() {
    use chatd::store::ChatPatch;
    use chatd_protocol::{ChatId, EncryptedMessage, MessageId, Role};

    let app = spawn_app(unlimited).await;
    let user = chatd::auth::UserId::parse("max").unwrap();
    let store = app.state.store.clone();
    let mut fills = tokio::task::JoinSet::new();
    for worker in 0..8usize {
        let (store, user) = (store.clone(), user.clone());
        fills.spawn(async move {
            for c in (worker..5000).step_by(8) {
                let chat = ChatId::parse(format!("chat-{c:04}")).unwrap();
                let patch = ChatPatch {
                    encrypted_title: Some(format!("enc-title-{c}")),
                    encrypted_chat_key: Some("enc-key".into()),
                    last_edited: Some(1_700_000_000 + c as i64),
                    ..ChatPatch::default()
                };
                store.update_chat(&user, &chat, &patch).await.unwrap();
                let message = EncryptedMessage {
                    message_id: MessageId::parse(format!("m-{c:04}")).unwrap(),
                    role: Role::User,
                    encrypted_content: format!("enc-message-{c}"),
                    created_at: 1_700_000_000 + c as i64,
                    encrypted_sender_name: None,
                    encrypted_category: None,
                    encrypted_model_name: None,
                    encrypted_thinking_content: None,
                    encrypted_thinking_signature: None,
                    encrypted_pii_mappings: None,
                    has_thinking: None,
                    thinking_token_count: None,
                    user_message_id: None,
                    status: None,
                    replaces_through: None,
                };
                store.add_message(&user, &chat, &message).await.unwrap();
            }
        });
    }
    fills.join_all().await;

    let mut ws = app.connect("max").await;
    let got = sync(&mut ws, request(SyncPhase::All)).await;
    assert_eq!(got.content.len(), 10, "phase 1b: 10 chats' content");
    assert_eq!(got.metadata.len(), 100, "phase 2: 100 chats' metadata");
    assert_eq!(
        got.last_chat.as_ref().map(|c| c.as_str()),
        Some("chat-4999")
    );

    let mut listed = std::collections::BTreeSet::new();
    let mut offset = 0;
    loop {
        ws.send_json(
            json!({"type": "load_more_chats", "payload": {"offset": offset, "limit": 100}}),
        )
        .await;
        let ServerMessage::LoadMoreChatsResponse(page) =
            expect(&mut ws, "load_more_chats_response").await
        else {
            unreachable!()
        };
        assert_eq!(page.total_chat_count, 5000);
        listed.extend(page.chats.into_iter().map(|c| c.chat_id));
        offset += 100;
        if !page.has_more {
            break;
        }
    }
    assert_eq!(listed.len(), 5000, "every chat listed once");
    ws.send_json(json!({"type": "request_chat_content_batch",
        "payload": {"chat_ids": ["chat-0000", "chat-2500", "chat-4998"]}}))
        .await;
    let ServerMessage::ChatContentBatchResponse(batch) =
        expect(&mut ws, "chat_content_batch_response").await
    else {
        unreachable!()
    };
    let contents: Vec<&str> = batch
        .chats
        .iter()
        .map(|c| c.messages[0].encrypted_content.as_str())
        .collect();
    assert_eq!(
        contents,
        ["enc-message-0", "enc-message-2500", "enc-message-4998"]
    );
}
