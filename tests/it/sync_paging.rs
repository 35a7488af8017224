//! After the login sync: phase 1 opens the chat last opened on any device (kept through
//! `set_active_chat`, forgotten with the chat), and the client pages the rest with
//! `load_more_chats`, `get_chat_messages` and `request_chat_content_batch`, with bounded
//! page sizes and another user's chats never shown (not told apart from unknown ones).

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
