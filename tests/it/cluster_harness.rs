//! The multi-node harness itself: a 3-master Redis Cluster spreads hash tags over its nodes
//! and `dump` reads them all; a redis-server's dump reads streams and pausing freezes it.
//! (The chatd processes of the harness are exercised by `cluster.rs`.)

use chatd_test_harness::process::wait_until;
use chatd_test_harness::redis::RedisServer;
use chatd_test_harness::redis_cluster::RedisCluster;

#[tokio::test]
async fn redis_cluster_spreads_hash_tags_and_dump_reads_every_node() {
    let cluster = RedisCluster::start(3).await.unwrap();
    assert_eq!(cluster.ports().len(), 3);
    assert_eq!(cluster.urls()[0], cluster.seed_url());

    // Tags a..h hash to slots owned by different masters; keys sharing a tag share a slot.
    let tags = ["a", "b", "c", "d", "e", "f", "g", "h"];
    for tag in tags {
        for part in ["x", "y"] {
            let key = format!("{{{tag}}}:{part}");
            cluster
                .cli_routed(&["SET", &key, &format!("value-{tag}-{part}")])
                .await
                .unwrap();
        }
        assert_eq!(
            cluster.keyslot(&format!("{{{tag}}}:x")).await.unwrap(),
            cluster.keyslot(&format!("{{{tag}}}:y")).await.unwrap()
        );
    }
    cluster
        .cli_routed(&["XADD", "{a}:stream", "*", "field", "stream-value-a"])
        .await
        .unwrap();
    cluster
        .cli_routed(&["HSET", "{b}:hash", "hfield", "hash-value-b"])
        .await
        .unwrap();

    let mut holders = 0;
    let mut held = 0;
    for node in 0..3 {
        let keys = cluster.node_keys(node).await.unwrap();
        holders += usize::from(!keys.is_empty());
        held += keys.len();
        // A node holds both keys of a tag or neither.
        for tag in tags {
            let x = keys.contains(&format!("{{{tag}}}:x"));
            let y = keys.contains(&format!("{{{tag}}}:y"));
            assert_eq!(x, y, "tag {tag} split across nodes");
        }
    }
    assert!(holders >= 2, "8 tags all landed on one of 3 masters");
    assert_eq!(held, tags.len() * 2 + 2);

    let dump = cluster.dump().await.unwrap();
    assert_eq!(dump.len(), tags.len() * 2 + 2);
    let value_of = |key: &str| {
        let (_, v) = dump.iter().find(|(k, _)| k == key).unwrap();
        String::from_utf8_lossy(v).into_owned()
    };
    assert_eq!(value_of("{c}:y").trim(), "value-c-y");
    assert!(value_of("{a}:stream").contains("stream-value-a"));
    assert!(value_of("{b}:hash").contains("hash-value-b"));
}

#[tokio::test]
async fn redis_server_dump_reads_streams_and_pause_freezes_it() {
    let redis = RedisServer::start().await.unwrap();
    redis
        .cli(&["XADD", "s", "*", "f1", "stream-one", "f2", "stream-two"])
        .await
        .unwrap();
    redis.cli(&["HSET", "h", "k", "hash-value"]).await.unwrap();
    let dump = redis.dump().await.unwrap();
    let stream = &dump.iter().find(|(k, _)| k == "s").unwrap().1;
    let stream = String::from_utf8_lossy(stream);
    assert!(stream.contains("stream-one") && stream.contains("stream-two"));
    assert!(
        String::from_utf8_lossy(&dump.iter().find(|(k, _)| k == "h").unwrap().1)
            .contains("hash-value")
    );

    let pid = redis.pid().unwrap();
    redis.pause().await.unwrap();
    wait_until("redis-server stopped", || async move {
        process_state(pid) == Some('T')
    })
    .await
    .unwrap();
    redis.resume().await.unwrap();
    wait_until("redis-server running", || async move {
        process_state(pid) != Some('T')
    })
    .await
    .unwrap();
    assert_eq!(redis.cli(&["PING"]).await.unwrap().trim(), "PONG");
}

/// The state letter of a process (`T`: stopped) from `/proc/PID/stat`.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}
