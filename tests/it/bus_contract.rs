//! One behaviour suite for the bus between nodes, against the in-process bus and real
//! Redis pub/sub: a user's channel reaches the nodes that listen, in order; a node's own
//! channel; unsubscribing stops delivery; and (Redis) a restarted Redis is survived without
//! anyone subscribing again by hand.

use std::sync::Arc;
use std::time::Duration;

use chatd::auth::UserId;
use chatd::crypto::UserHash;
use chatd::delivery::bus::memory::{MemoryBus, MemoryBusNetwork};
use chatd::delivery::bus::redis::RedisBus;
use chatd::delivery::bus::{Bus, Received};
use chatd::ids::NodeId;
use chatd_test_harness::redis::RedisServer;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn user(u: &str) -> UserHash {
    UserHash::of(&UserId::parse(u).unwrap())
}

/// Two nodes of one bus and what each receives.
struct Pair {
    a: Arc<dyn Bus>,
    b: Arc<dyn Bus>,
    a_rx: mpsc::Receiver<Received>,
    b_rx: mpsc::Receiver<Received>,
    _guard: Option<(RedisServer, CancellationToken)>,
}

async fn next(rx: &mut mpsc::Receiver<Received>) -> Received {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("nothing arrived within 10 s")
        .expect("the bus stopped")
}

/// The next publication for a user, skipping reconnect notices.
async fn next_user(rx: &mut mpsc::Receiver<Received>) -> (UserHash, Vec<u8>) {
    loop {
        match next(rx).await {
            Received::User { user, payload } => return (user, payload),
            Received::Reconnected { .. } => continue,
            other => panic!("expected a user's publication, got {other:?}"),
        }
    }
}

async fn memory_pair() -> Pair {
    let net = MemoryBusNetwork::default();
    let (a_tx, a_rx) = mpsc::channel(64);
    let (b_tx, b_rx) = mpsc::channel(64);
    Pair {
        a: Arc::new(MemoryBus::join(&net, NodeId::parse("a").unwrap(), a_tx)),
        b: Arc::new(MemoryBus::join(&net, NodeId::parse("b").unwrap(), b_tx)),
        a_rx,
        b_rx,
        _guard: None,
    }
}

async fn redis_node(
    url: &str,
    name: &str,
    cancel: &CancellationToken,
) -> (Arc<dyn Bus>, mpsc::Receiver<Received>) {
    node_on(url, false, name, cancel).await
}

async fn node_on(
    url: &str,
    cluster: bool,
    name: &str,
    cancel: &CancellationToken,
) -> (Arc<dyn Bus>, mpsc::Receiver<Received>) {
    let (tx, rx) = mpsc::channel(64);
    let bus = RedisBus::connect(
        url,
        cluster,
        &NodeId::parse(name).unwrap(),
        tx,
        Duration::from_secs(2),
        &TaskTracker::new(),
        cancel.clone(),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while bus.ping().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the subscriber never came up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (bus, rx)
}

async fn redis_pair() -> Pair {
    let server = RedisServer::start().await.unwrap();
    let cancel = CancellationToken::new();
    let (a, a_rx) = redis_node(&server.url(), "a", &cancel).await;
    let (b, b_rx) = redis_node(&server.url(), "b", &cancel).await;
    Pair {
        a,
        b,
        a_rx,
        b_rx,
        _guard: Some((server, cancel)),
    }
}

async fn users_and_nodes_channels(mut p: Pair) {
    let (alice, bob) = (user("alice"), user("bob"));
    p.b.subscribe(&alice).await.unwrap();
    // Bob's channel has no listener: nothing arrives; alice's publications arrive in order.
    p.a.publish(&bob, b"not for b".to_vec()).await.unwrap();
    for i in 0..20u8 {
        p.a.publish(&alice, vec![i]).await.unwrap();
    }
    for i in 0..20u8 {
        assert_eq!(next_user(&mut p.b_rx).await, (alice.clone(), vec![i]));
    }
    // A node's own channel.
    p.b.publish_node(&NodeId::parse("a").unwrap(), b"cancel T".to_vec())
        .await
        .unwrap();
    match next(&mut p.a_rx).await {
        Received::Node { payload } => assert_eq!(payload, b"cancel T"),
        other => panic!("expected a control message, got {other:?}"),
    }
    // After unsubscribing, only the other listener hears it.
    p.a.subscribe(&alice).await.unwrap();
    p.b.unsubscribe(&alice).await.unwrap();
    p.b.subscribe(&bob).await.unwrap();
    p.a.publish(&alice, b"to a".to_vec()).await.unwrap();
    p.a.publish(&bob, b"to b".to_vec()).await.unwrap();
    assert_eq!(
        next_user(&mut p.a_rx).await,
        (alice.clone(), b"to a".to_vec())
    );
    assert_eq!(
        next_user(&mut p.b_rx).await,
        (bob.clone(), b"to b".to_vec()),
        "b no longer hears alice"
    );
    p.a.ping().await.unwrap();
}

#[tokio::test]
async fn memory_users_and_nodes_channels() {
    users_and_nodes_channels(memory_pair().await).await;
}

#[tokio::test]
async fn redis_users_and_nodes_channels() {
    users_and_nodes_channels(redis_pair().await).await;
}

#[tokio::test]
async fn redis_cluster_users_and_nodes_channels() {
    let cluster = chatd_test_harness::redis_cluster::RedisCluster::start(3)
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let (a, a_rx) = node_on(&cluster.seed_url(), true, "a", &cancel).await;
    let (b, b_rx) = node_on(&cluster.seed_url(), true, "b", &cancel).await;
    users_and_nodes_channels(Pair {
        a,
        b,
        a_rx,
        b_rx,
        _guard: None,
    })
    .await;
    cancel.cancel();
}

#[tokio::test]
async fn redis_restarted_is_survived_without_subscribing_again() {
    let mut server = RedisServer::start().await.unwrap();
    let cancel = CancellationToken::new();
    let (a, _a_rx) = redis_node(&server.url(), "a", &cancel).await;
    let (b, mut b_rx) = redis_node(&server.url(), "b", &cancel).await;
    let alice = user("alice");
    b.subscribe(&alice).await.unwrap();
    a.publish(&alice, b"before".to_vec()).await.unwrap();
    assert_eq!(next_user(&mut b_rx).await.1, b"before");

    server.restart().await.unwrap();
    // The subscriber notices, comes back, restores its channels and says so.
    loop {
        if matches!(next(&mut b_rx).await, Received::Reconnected { .. }) {
            break;
        }
    }
    assert!(b.ping().await.is_ok());
    // The publisher reconnects on its own; the first publish may meet the dead connection.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while a.publish(&alice, b"after".to_vec()).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "publisher never recovered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(next_user(&mut b_rx).await.1, b"after");
    cancel.cancel();
}

/// A node whose users' channels are busy from the start still subscribes its own channel:
/// frames arriving all the time must not keep the subscriber from restoring its channels.
#[tokio::test]
async fn redis_a_busy_node_still_comes_up_with_every_channel() {
    let server = RedisServer::start().await.unwrap();
    let cancel = CancellationToken::new();
    let (a, _a_rx) = redis_node(&server.url(), "a", &cancel).await;
    let alice = user("alice");
    let (tx, mut b_rx) = mpsc::channel(1024);
    let b = RedisBus::connect(
        &server.url(),
        false,
        &NodeId::parse("b").unwrap(),
        tx,
        Duration::from_secs(2),
        &TaskTracker::new(),
        cancel.clone(),
    )
    .await
    .unwrap();
    b.subscribe(&alice).await.unwrap();
    // Alice's channel is busy from now on (every 20 ms, faster than the retry period).
    let flood = {
        let a = a.clone();
        let alice = alice.clone();
        let stop = cancel.clone();
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                let _ = a.publish(&alice, b"busy".to_vec()).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let drain = tokio::spawn(async move { while b_rx.recv().await.is_some() {} });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while b.ping().await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the busy node never came up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let channels = server.cli(&["PUBSUB", "CHANNELS", "{n:*"]).await.unwrap();
    assert!(channels.contains("{n:b}:control"), "{channels}");
    cancel.cancel();
    let _ = flood.await;
    drain.abort();
}
