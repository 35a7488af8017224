use chatd_protocol::UserMessage;

use super::*;
use crate::crypto::LocalKeyProvider;
use crate::delivery::ConnectionId;
use crate::inbound::MessageOptions;
use crate::pipeline::Interruption;
use crate::turn::store::memory::MemoryTurnStore;

fn inbound(id: &str, conn: ConnectionId) -> Inbound {
    Inbound {
        message: UserMessage {
            message_id: MessageId::parse(id).unwrap(),
            role: chatd_protocol::Role::User,
            content: format!("text of {id}"),
            created_at: 1,
            sender_name: None,
            temp_id: None,
            chat_has_title: false,
            current_chat_title: None,
            message_history: None,
        },
        embeds: Vec::new(),
        conn,
        prior_messages: 0,
        history_requested: false,
        options: MessageOptions::default(),
    }
}

/// Two nodes' `Turns` over one store (as two processes over one Redis).
fn nodes(max_queue: usize) -> (Turns, Turns) {
    let store: Arc<dyn TurnStore> = Arc::new(MemoryTurnStore::default());
    let keys = Arc::new(LocalKeyProvider::new(zeroize::Zeroizing::new([5u8; 32])));
    let keyring = Arc::new(Keyring::new(
        keys,
        Arc::new(crate::cache::WrappedKeys(Arc::new(
            crate::cache::memory::MemoryBackend::new(100),
        ))),
        Duration::from_secs(60),
    ));
    let node = |n: &str| {
        Turns::new(
            store.clone(),
            Some(keyring.clone()),
            NodeId::parse(n).unwrap(),
            Duration::from_secs(10),
            max_queue,
        )
    };
    (node("a"), node("b"))
}

fn ids() -> (UserId, UserId, ChatId) {
    (
        UserId::parse("a").unwrap(),
        UserId::parse("b").unwrap(),
        ChatId::parse("c").unwrap(),
    )
}

#[tokio::test]
async fn one_turn_per_chat_across_nodes_then_one_merged_follow_up() {
    let (a, _, chat) = ids();
    let root = CancellationToken::new();
    let (here, there) = nodes(10);
    let Ok(Admission::Start(t1)) = here.admit(&a, &chat, inbound("m1", 1), &root).await else {
        panic!("the first message starts a turn")
    };
    // Messages sent to the other node wait behind the running turn, sealed in the store.
    for m in ["m2", "m3"] {
        let admitted = there.admit(&a, &chat, inbound(m, 2), &root).await;
        assert!(matches!(
            admitted,
            Ok(Admission::Queued { ref active_task_id }) if active_task_id == &t1.task_id
        ));
    }
    let t2 = here.finish(&t1, &root).await.unwrap();
    assert_eq!(t2.user_message_id.as_str(), "m3");
    assert_eq!(t2.requesters, vec![2]);
    assert!(t2.lease.generation > t1.lease.generation);
    let merged: Vec<_> = t2.inbound.iter().map(|i| i.message_id().as_str()).collect();
    assert_eq!(merged, ["m2", "m3"]);
    assert_eq!(t2.inbound[0].message.content, "text of m2");
    assert!(here.finish(&t2, &root).await.is_none());
    assert!(here.active_task(&a, &chat).await.is_none());
}

#[tokio::test]
async fn the_queue_is_bounded_and_a_resent_message_replaces_its_copy() {
    let (a, _, chat) = ids();
    let root = CancellationToken::new();
    let (here, _) = nodes(1);
    let _ = here.admit(&a, &chat, inbound("m0", 1), &root).await;
    assert!(matches!(
        here.admit(&a, &chat, inbound("m1", 1), &root).await,
        Ok(Admission::Queued { .. })
    ));
    assert!(matches!(
        here.admit(&a, &chat, inbound("m2", 1), &root).await,
        Ok(Admission::QueueFull)
    ));
    assert!(matches!(
        here.admit(&a, &chat, inbound("m1", 3), &root).await,
        Ok(Admission::Queued { .. })
    ));
}

#[tokio::test]
async fn cancel_checks_the_owner_here_and_from_another_node() {
    let (a, b, chat) = ids();
    let root = CancellationToken::new();
    let (here, there) = nodes(10);
    let Ok(Admission::Start(t)) = here.admit(&a, &chat, inbound("m1", 1), &root).await else {
        panic!()
    };
    assert_eq!(
        here.cancel(&b, &t.task_id).await,
        Err(CancelError::Forbidden)
    );
    assert_eq!(
        there.cancel(&b, &t.task_id).await,
        Err(CancelError::Forbidden)
    );
    assert_eq!(
        there.cancel(&a, &TaskId::random()).await,
        Err(CancelError::NotFound)
    );
    assert!(!t.cancel.is_cancelled());
    // From the other node: recorded for the running node, which reads it on renewal.
    assert_eq!(
        there.cancel(&a, &t.task_id).await,
        Ok(Some(NodeId::parse("a").unwrap()))
    );
    assert!(here.renew(&t).await);
    assert!(t.cancel.is_cancelled());
    assert_eq!(t.interruption(), Interruption::Cancelled);
}

#[tokio::test]
async fn abandoning_a_deleted_chat_drops_its_queue_and_marks_the_turn() {
    let (a, b, chat) = ids();
    let root = CancellationToken::new();
    let (here, there) = nodes(10);
    let Ok(Admission::Start(t)) = here.admit(&a, &chat, inbound("m1", 1), &root).await else {
        panic!()
    };
    let _ = here.admit(&a, &chat, inbound("m2", 1), &root).await;
    there.abandon(&b, &chat).await;
    assert!(here.renew(&t).await);
    assert!(!t.cancel.is_cancelled() && !t.abandoned(), "not b's chat");
    there.abandon(&a, &chat).await;
    assert!(here.renew(&t).await);
    assert!(t.cancel.is_cancelled() && t.abandoned());
    assert!(
        here.finish(&t, &root).await.is_none(),
        "the queued message is not answered"
    );
}

/// A node whose lease moved on (it was paused past it, another node took the turn over)
/// stops the turn at its next renewal and writes nothing back.
#[tokio::test(start_paused = true)]
async fn a_turn_whose_lease_moved_on_stops_and_writes_nothing_back() {
    let (a, _, chat) = ids();
    let root = CancellationToken::new();
    let (here, there) = nodes(10);
    let Ok(Admission::Start(t)) = here.admit(&a, &chat, inbound("m1", 1), &root).await else {
        panic!()
    };
    tokio::time::advance(Duration::from_secs(11)).await;
    let node = NodeId::parse("b").unwrap();
    let taken = there
        .store()
        .take_over_expired(&node, Duration::from_secs(10), 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "the other node takes the expired lease");
    assert!(!here.renew(&t).await, "the lease moved on");
    assert!(t.cancel.is_cancelled() && t.abandoned());
}

/// Redis restarted empty under a running turn: the renewal puts the lease back (the chat
/// is held again, so a new message queues behind it rather than starting a second turn).
#[tokio::test]
async fn a_lease_the_store_lost_is_reclaimed_by_its_turn() {
    let (a, _, chat) = ids();
    let root = CancellationToken::new();
    let (here, _) = nodes(10);
    let Ok(Admission::Start(t)) = here.admit(&a, &chat, inbound("m1", 1), &root).await else {
        panic!()
    };
    // The same node on a store that lost everything.
    let (emptied, _) = nodes(10);
    assert!(emptied.renew(&t).await, "reclaimed");
    assert_eq!(
        emptied.active_task(&a, &chat).await,
        Some(t.task_id.clone())
    );
    let Ok(Admission::Queued { .. }) = emptied.admit(&a, &chat, inbound("m2", 1), &root).await
    else {
        panic!("a new message queues behind the reclaimed lease")
    };
}

/// The same after this node's lease lapsed (a pause): another node may have ended the turn
/// with `node_lost` before the store lost that record, so the turn ends as lost too.
#[tokio::test(start_paused = true)]
async fn a_lost_lease_that_had_lapsed_ends_the_turn_as_lost() {
    let (a, _, chat) = ids();
    let root = CancellationToken::new();
    let (here, _) = nodes(10);
    let Ok(Admission::Start(t)) = here.admit(&a, &chat, inbound("m1", 1), &root).await else {
        panic!()
    };
    tokio::time::advance(Duration::from_secs(11)).await;
    let (emptied, _) = nodes(10);
    emptied.renew(&t).await;
    assert!(t.cancel.is_cancelled() && t.abandoned());
    assert_eq!(t.interruption(), Interruption::NodeLost);
}
