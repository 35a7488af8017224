//! One behaviour suite for the turn store, run against the memory store and a real
//! redis-server: admission, queue, hand-over, leases and their fence, cancel requests,
//! take-over of expired leases (one winner), and the per-turn log.

use std::sync::Arc;
use std::time::Duration;

use chatd::auth::UserId;
use chatd::crypto::UserHash;
use chatd::ids::NodeId;
use chatd::turn::store::memory::MemoryTurnStore;
use chatd::turn::store::redis::RedisTurnStore;
use chatd::turn::store::{
    Admit, Admitted, CancelReason, Finished, Lease, LogSlot, NotedTurn, RECENT_TURNS, TurnStore,
    TurnStoreError,
};
use chatd_protocol::{ChatId, MessageId, TaskId};
use chatd_test_harness::redis::RedisServer;

const LONG: Duration = Duration::from_secs(60);
/// Short enough to expire within a test, polled with a deadline.
const SHORT: Duration = Duration::from_millis(300);

fn owner() -> UserHash {
    UserHash::of(&UserId::parse("alice").unwrap())
}
fn node(n: &str) -> NodeId {
    NodeId::parse(n).unwrap()
}
fn chat(c: &str) -> ChatId {
    ChatId::parse(c).unwrap()
}
fn msg(m: &str) -> MessageId {
    MessageId::parse(m).unwrap()
}

async fn admit(
    s: &dyn TurnStore,
    c: &ChatId,
    m: &str,
    on: &str,
    lease: Duration,
    max_queue: usize,
) -> Admitted {
    s.admit(Admit {
        chat: c,
        owner: &owner(),
        task: &TaskId::random(),
        node: &node(on),
        message: &msg(m),
        value: format!("value of {m}").into_bytes(),
        lease,
        max_queue,
    })
    .await
    .unwrap()
}

fn started(a: Admitted) -> Lease {
    match a {
        Admitted::Started(l) => l,
        other => panic!("expected a start, got {other:?}"),
    }
}

/// Polls until `lease` has expired (the store's own view).
async fn until_expired(s: &dyn TurnStore, c: &ChatId) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.active(c).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn admission_queue_and_hand_over(s: Arc<dyn TurnStore>) {
    let c = chat("c-queue");
    let first = started(admit(s.as_ref(), &c, "m1", "a", LONG, 2).await);
    assert_eq!(first.owner, owner());
    assert_eq!(s.active(&c).await.unwrap(), Some(first.clone()));
    assert_eq!(s.find_task(&first.task).await.unwrap(), Some(first.clone()));
    for m in ["m2", "m3"] {
        assert!(matches!(
            admit(s.as_ref(), &c, m, "b", LONG, 2).await,
            Admitted::Queued { active } if active == first
        ));
    }
    assert!(matches!(
        admit(s.as_ref(), &c, "m4", "b", LONG, 2).await,
        Admitted::QueueFull { .. }
    ));
    // The message the running turn answers, sent again: neither queued nor started.
    assert!(matches!(
        admit(s.as_ref(), &c, "m1", "b", LONG, 2).await,
        Admitted::Running { active } if active == first
    ));
    // Another owner's message never joins this chat's queue.
    let mallory = UserHash::of(&UserId::parse("mallory").unwrap());
    let foreign = Admit {
        chat: &c,
        owner: &mallory,
        task: &TaskId::random(),
        node: &node("b"),
        message: &msg("x1"),
        value: b"not yours".to_vec(),
        lease: LONG,
        max_queue: 2,
    };
    assert_eq!(s.admit(foreign).await.unwrap(), Admitted::Foreign);
    // A re-send replaces its queued copy in place.
    let again = Admit {
        chat: &c,
        owner: &owner(),
        task: &TaskId::random(),
        node: &node("b"),
        message: &msg("m2"),
        value: b"m2 with history".to_vec(),
        lease: LONG,
        max_queue: 2,
    };
    assert!(matches!(
        s.admit(again).await.unwrap(),
        Admitted::Queued { .. }
    ));

    let next_task = TaskId::random();
    let Finished::Next { lease, queued } = s.finish(&first, &next_task, LONG).await.unwrap() else {
        panic!("the queue goes to the next turn")
    };
    assert_eq!(lease.task, next_task);
    assert_eq!(lease.node, first.node, "same node");
    assert_eq!(lease.message, msg("m3"));
    assert!(lease.generation > first.generation);
    assert_eq!(
        queued,
        [b"m2 with history".to_vec(), b"value of m3".to_vec()]
    );
    assert!(matches!(
        s.finish(&first, &TaskId::random(), LONG).await,
        Err(TurnStoreError::Fenced)
    ));
    assert_eq!(
        s.finish(&lease, &TaskId::random(), LONG).await.unwrap(),
        Finished::Free
    );
    assert_eq!(s.active(&c).await.unwrap(), None);
    assert_eq!(s.find_task(&lease.task).await.unwrap(), None);
}

async fn leases_renew_expire_and_fence(s: Arc<dyn TurnStore>) {
    let c = chat("c-lease");
    let lease = started(admit(s.as_ref(), &c, "m1", "a", SHORT, 10).await);
    assert_eq!(s.renew(&lease, SHORT).await.unwrap().cancel, None);
    let stale = Lease {
        generation: lease.generation + 7,
        ..lease.clone()
    };
    assert!(matches!(
        s.renew(&stale, SHORT).await,
        Err(TurnStoreError::Fenced)
    ));
    until_expired(s.as_ref(), &c).await;
    assert!(matches!(
        s.renew(&lease, SHORT).await,
        Err(TurnStoreError::Fenced)
    ));
    // A lease the store has no trace of (it lost its data): the running turn holds the
    // chat again, so a new message queues behind it and the finish hands it over.
    let lost = Lease {
        chat: chat("c-never-seen"),
        ..lease.clone()
    };
    assert!(s.renew(&lost, LONG).await.unwrap().reclaimed);
    assert_eq!(s.active(&lost.chat).await.unwrap(), Some(lost.clone()));
    assert!(!s.renew(&lost, LONG).await.unwrap().reclaimed);
    assert!(matches!(
        admit(s.as_ref(), &lost.chat, "m9", "b", LONG, 10).await,
        Admitted::Queued { active } if active == lost
    ));
    let Finished::Next { lease: after, .. } =
        s.finish(&lost, &TaskId::random(), LONG).await.unwrap()
    else {
        panic!("the message queued behind the reclaimed lease runs next")
    };
    assert!(after.generation > lost.generation);
    // An expired lease holds the chat until a node takes it over (its lost turn is
    // ended first); then the message queued meanwhile goes on.
    assert!(matches!(
        admit(s.as_ref(), &c, "m2", "b", LONG, 10).await,
        Admitted::Queued { active } if active == lease
    ));
    let taken = s.take_over_expired(&node("b"), LONG, 10).await.unwrap();
    let won = taken.into_iter().find(|l| l.chat == c).expect("taken over");
    let Finished::Next {
        lease: next,
        queued,
    } = s.finish(&won, &TaskId::random(), LONG).await.unwrap()
    else {
        panic!("the queued message runs after the lost turn")
    };
    assert!(next.generation > lease.generation);
    assert_eq!(queued, [b"value of m2".to_vec()]);
}

async fn cancel_requests_reach_the_renewal(s: Arc<dyn TurnStore>) {
    let c = chat("c-cancel");
    let lease = started(admit(s.as_ref(), &c, "m1", "a", LONG, 10).await);
    let _ = admit(s.as_ref(), &c, "m2", "a", LONG, 10).await;
    s.request_cancel(&lease, CancelReason::Revoked, LONG)
        .await
        .unwrap();
    assert_eq!(
        s.renew(&lease, LONG).await.unwrap().cancel,
        Some(CancelReason::Revoked)
    );
    s.request_cancel(&lease, CancelReason::ChatDeleted, LONG)
        .await
        .unwrap();
    assert_eq!(
        s.renew(&lease, LONG).await.unwrap().cancel,
        Some(CancelReason::ChatDeleted)
    );
    assert_eq!(
        s.finish(&lease, &TaskId::random(), LONG).await.unwrap(),
        Finished::Free,
        "a deleted chat's queue is dropped"
    );
}

async fn expired_leases_are_taken_over_once(s: Arc<dyn TurnStore>) {
    let c = chat("c-lost");
    let lost = started(admit(s.as_ref(), &c, "m1", "dead", SHORT, 10).await);
    let live = started(admit(s.as_ref(), &chat("c-live"), "m1", "a", LONG, 10).await);
    let _ = admit(s.as_ref(), &c, "m2", "a", LONG, 10).await;
    assert_eq!(
        s.log_append(
            &c,
            &lost.task,
            LogSlot::new(lost.generation, 1),
            b"before".to_vec(),
            100,
            LONG
        )
        .await
        .unwrap(),
        1
    );
    until_expired(s.as_ref(), &c).await;
    let (na, nb) = (node("a"), node("b"));
    let (a, b) = tokio::join!(
        s.take_over_expired(&na, LONG, 10),
        s.take_over_expired(&nb, LONG, 10)
    );
    let mut taken: Vec<Lease> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    assert_eq!(taken.len(), 1, "exactly one node wins: {taken:?}");
    let won = taken.remove(0);
    assert_eq!(
        (won.chat.clone(), won.task.clone()),
        (c.clone(), lost.task.clone())
    );
    assert!(won.generation > lost.generation);
    assert!(matches!(
        s.renew(&lost, LONG).await,
        Err(TurnStoreError::Fenced)
    ));
    assert!(matches!(
        s.log_append(
            &c,
            &lost.task,
            LogSlot::new(lost.generation, 2),
            b"late".to_vec(),
            100,
            LONG
        )
        .await,
        Err(TurnStoreError::Fenced)
    ));
    assert_eq!(
        s.log_append(
            &c,
            &lost.task,
            LogSlot::new(won.generation, 2),
            b"node_lost".to_vec(),
            100,
            LONG
        )
        .await
        .unwrap(),
        2
    );
    // The node that lost the turn cannot end the log under its new owner.
    assert!(matches!(
        s.log_end(&c, &lost.task, lost.generation, LONG).await,
        Err(TurnStoreError::Fenced)
    ));
    assert!(!s.log_read(&c, &lost.task, 0).await.unwrap().unwrap().ended);
    s.log_end(&c, &lost.task, won.generation, LONG)
        .await
        .unwrap();
    assert!(s.log_read(&c, &lost.task, 0).await.unwrap().unwrap().ended);
    let Finished::Next { queued, .. } = s.finish(&won, &TaskId::random(), LONG).await.unwrap()
    else {
        panic!("the lost turn's queue goes on")
    };
    assert_eq!(queued, [b"value of m2".to_vec()]);
    // The live lease was not touched.
    assert!(s.renew(&live, LONG).await.is_ok());
}

/// A lease taken over whose task has no log (Redis came back from a snapshot that held the
/// lease but not the log its node wrote back since): the log stays absent, so the node
/// that ended the turn can still put it back; the taker's first append fences it.
async fn a_lost_turn_without_a_log_can_get_it_back(s: Arc<dyn TurnStore>) {
    let c = chat("c-unlogged");
    let lost = started(admit(s.as_ref(), &c, "m1", "dead", SHORT, 10).await);
    until_expired(s.as_ref(), &c).await;
    let won = s.take_over_expired(&node("b"), LONG, 10).await.unwrap();
    let [won] = won.as_slice() else {
        panic!("one lease taken over: {won:?}")
    };
    assert!(s.log_read(&c, &lost.task, 0).await.unwrap().is_none());
    let put_back = |generation: u64, index: u64, entry: &'static [u8]| {
        let (s, c, t) = (s.clone(), c.clone(), lost.task.clone());
        async move {
            let slot = LogSlot::new(generation, index);
            s.log_append(&c, &t, slot, entry.to_vec(), 100, LONG).await
        }
    };
    assert_eq!(put_back(lost.generation, 1, b"answer").await.unwrap(), 1);
    assert_eq!(put_back(won.generation, 2, b"node_lost").await.unwrap(), 2);
    assert!(matches!(
        put_back(lost.generation, 3, b"late").await,
        Err(TurnStoreError::Fenced)
    ));
    let read = s.log_read(&c, &lost.task, 0).await.unwrap().unwrap();
    assert_eq!(read.last, 2);
}

/// The log keeps the writer's numbering: a repeated index (a retried append that had
/// landed) writes nothing, and after entries were lost (a store restarted from an older
/// snapshot) the next frame keeps its own index, not the store's count.
async fn logs_keep_the_writers_numbering(s: Arc<dyn TurnStore>) {
    let (c, t) = (chat("c-numbered"), TaskId::random());
    let append = |index: u64, text: &'static str| {
        let s = s.clone();
        let (c, t) = (c.clone(), t.clone());
        async move {
            s.log_append(
                &c,
                &t,
                LogSlot::new(1, index),
                text.as_bytes().to_vec(),
                10,
                LONG,
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(append(1, "one").await, 1);
    assert_eq!(append(2, "two").await, 2);
    assert_eq!(append(2, "two again").await, 2, "a repeat");
    assert_eq!(append(5, "five").await, 5, "frames 3 and 4 were lost");
    let read = s.log_read(&c, &t, 0).await.unwrap().unwrap();
    let entries: Vec<(u64, Vec<u8>)> = read.entries;
    assert_eq!(
        entries,
        [
            (1, b"one".to_vec()),
            (2, b"two".to_vec()),
            (5, b"five".to_vec())
        ]
    );
    assert_eq!(read.last, 5);
    // A writer that wants no hole asks for the next index: a log behind it says where it is.
    let strict = |index: u64| {
        let s = s.clone();
        let (c, t) = (c.clone(), t.clone());
        async move {
            let slot = LogSlot::new(1, index).contiguous();
            s.log_append(&c, &t, slot, b"x".to_vec(), 10, LONG).await
        }
    };
    assert!(matches!(
        strict(7).await,
        Err(TurnStoreError::Behind { last: 5 })
    ));
    assert_eq!(strict(6).await.unwrap(), 6);
    assert_eq!(strict(6).await.unwrap(), 6, "a repeat is still a repeat");
    assert_eq!(s.log_read(&c, &t, 0).await.unwrap().unwrap().last, 6);
    // A log the store lost refuses a writer's next frame and stays lost until the writer
    // puts its frames back: a device resuming meanwhile finds no log, never an empty one
    // that would let the writer's next frame through after nothing.
    let lost = TaskId::random();
    let slot = LogSlot::new(2, 9).contiguous();
    assert!(matches!(
        s.log_append(&c, &lost, slot, b"x".to_vec(), 10, LONG).await,
        Err(TurnStoreError::Behind { last: 0 })
    ));
    assert_eq!(s.log_read(&c, &lost, 0).await.unwrap(), None);
}

async fn logs_number_trim_end_and_expire(s: Arc<dyn TurnStore>) {
    let (c, t) = (chat("c-log"), TaskId::random());
    assert_eq!(s.log_read(&c, &t, 0).await.unwrap(), None);
    for i in 1..=5u64 {
        let index = s
            .log_append(
                &c,
                &t,
                LogSlot::new(1, i),
                format!("e{i}").into_bytes(),
                3,
                LONG,
            )
            .await
            .unwrap();
        assert_eq!(index, i);
    }
    let all = s.log_read(&c, &t, 0).await.unwrap().unwrap();
    assert_eq!(all.first, Some(3), "trimmed to the newest 3");
    assert_eq!(all.last, 5);
    assert!(!all.ended);
    let indexes: Vec<u64> = all.entries.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, [3, 4, 5]);
    assert_eq!(all.entries[0].1, b"e3");
    let after = s.log_read(&c, &t, 4).await.unwrap().unwrap();
    assert_eq!(after.entries, [(5, b"e5".to_vec())]);
    assert!(
        s.log_read(&c, &t, 9)
            .await
            .unwrap()
            .unwrap()
            .entries
            .is_empty()
    );
    s.log_end(&c, &t, 1, SHORT).await.unwrap();
    assert!(s.log_read(&c, &t, 0).await.unwrap().unwrap().ended);
    assert!(matches!(
        s.log_append(
            &c,
            &t,
            LogSlot::new(1, 6),
            b"after the end".to_vec(),
            3,
            LONG
        )
        .await,
        Err(TurnStoreError::Fenced)
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.log_read(&c, &t, 0).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the log never expired"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    s.ping().await.unwrap();
}

/// A user's recent turns: the ones noted since a time, with their chats, at most
/// `RECENT_TURNS` (notes within one millisecond have no order among them, so the test
/// checks sets); other users see none; a note again keeps one entry.
async fn recent_turns_are_noted_per_user(s: Arc<dyn TurnStore>) {
    let bob = UserHash::of(&UserId::parse("bob").unwrap());
    let now = chatd::clock::unix_millis();
    let turns: Vec<NotedTurn> = (0..RECENT_TURNS + 2)
        .map(|i| NotedTurn {
            chat: chat(&format!("c-recent-{}", i % 3)),
            task: TaskId::random(),
            at_ms: now + i as i64,
        })
        .collect();
    for turn in &turns {
        s.note_turn(&owner(), turn, LONG).await.unwrap();
    }
    let noted = s.recent_turns(&owner(), now).await.unwrap();
    assert_eq!(noted, turns[2..], "the newest RECENT_TURNS, oldest first");
    assert!(s.recent_turns(&bob, now).await.unwrap().is_empty());
    let later = now + RECENT_TURNS as i64 + 2;
    assert!(s.recent_turns(&owner(), later).await.unwrap().is_empty());
    assert_eq!(s.recent_turns(&owner(), now + 5).await.unwrap(), turns[5..]);

    // A note again keeps one entry, at the time it names (a turn noted again after the
    // store lost its notes keeps its place).
    let mut again = noted[0].clone();
    again.at_ms = now + 100;
    s.note_turn(&owner(), &again, LONG).await.unwrap();
    let after = s.recent_turns(&owner(), now).await.unwrap();
    assert_eq!(after.len(), RECENT_TURNS);
    assert_eq!(after.iter().filter(|n| n.task == again.task).count(), 1);
    assert_eq!(after.last(), Some(&again));
}

async fn redis_store() -> (RedisServer, Arc<dyn TurnStore>) {
    let server = RedisServer::start().await.unwrap();
    let store = RedisTurnStore::new(&server.url(), false, Duration::from_secs(2)).unwrap();
    (server, Arc::new(store))
}

async fn redis_cluster_store() -> (
    chatd_test_harness::redis_cluster::RedisCluster,
    Arc<dyn TurnStore>,
) {
    let cluster = chatd_test_harness::redis_cluster::RedisCluster::start(3)
        .await
        .unwrap();
    let store = RedisTurnStore::new(&cluster.seed_url(), true, Duration::from_secs(2)).unwrap();
    (cluster, Arc::new(store))
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(std::sync::Arc::new(super::MemoryTurnStore::default())).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_server, store) = super::redis_store().await;
                    super::$name(store).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test]
                async fn $name() {
                    let (_cluster, store) = super::redis_cluster_store().await;
                    super::$name(store).await;
                }
            )*
        }
    };
}

contract!(
    admission_queue_and_hand_over,
    leases_renew_expire_and_fence,
    cancel_requests_reach_the_renewal,
    expired_leases_are_taken_over_once,
    a_lost_turn_without_a_log_can_get_it_back,
    logs_number_trim_end_and_expire,
    logs_keep_the_writers_numbering,
    recent_turns_are_noted_per_user,
);

/// A node that admits a turn and never hears the reply (it stops, or its link to Redis is
/// cut, between the script and the reply) leaves a lease no node runs: it is still taken
/// over once it expires (its deadline was recorded before the admission), so the message
/// gets its `node_lost` ending and the chat is not held for a day.
#[tokio::test]
async fn an_admission_whose_reply_was_lost_is_taken_over() {
    let server = RedisServer::start().await.unwrap();
    // Generous for a loaded machine; the pause outlasts two of them (the deadline's write,
    // then the admission's).
    let timeout = Duration::from_secs(1);
    let s = RedisTurnStore::new(&server.url(), false, timeout).unwrap();
    // The scripts are loaded (a paused server would refuse to load one later).
    let _ = started(admit(&s, &chat("c-first"), "m1", "a", LONG, 10).await);

    // Writes wait on the server past the node's timeout, then run.
    let c = chat("c-unheard");
    server
        .cli(&["CLIENT", "PAUSE", "3000", "WRITE"])
        .await
        .unwrap();
    let unheard = s
        .admit(Admit {
            chat: &c,
            owner: &owner(),
            task: &TaskId::random(),
            node: &node("dead"),
            message: &msg("m1"),
            value: b"value of m1".to_vec(),
            lease: SHORT,
            max_queue: 10,
        })
        .await;
    assert!(unheard.is_err(), "the reply came in time: {unheard:?}");
    // Scripts queue behind the paused admission: a lease once the pause is over.
    let held = loop {
        if let Ok(held) = s.active(&c).await {
            break held;
        }
    };
    assert!(held.is_some(), "the admission never ran");
    until_expired(&s, &c).await;
    let taken = s.take_over_expired(&node("b"), LONG, 10).await.unwrap();
    assert_eq!(
        taken.iter().map(|l| &l.chat).collect::<Vec<_>>(),
        vec![&c],
        "the unheard lease was not taken over"
    );
}
