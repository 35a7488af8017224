//! The fault suite (issue 18): the model provider cuts a stream in the middle of a tool
//! call's arguments, stalls past the idle timeout (twice: the retry too), sends a malformed
//! chunk, and answers 429 once; Redis is frozen (SIGSTOP) mid-turn. Each case ends typed;
//! afterwards no task and no file descriptor is left over (counted before and after, in this
//! process, which holds chatd and the fake provider), and every message chatd acknowledged
//! is still in the next turn's history; 100 devices that stop reading beside 10 that read.
//! (Redis killed and restarted empty mid-turn: `redis_cache.rs` and `cluster.rs`; Vault
//! sealed, unreachable and rotated: `vault.rs`; those count tasks and descriptors too, with
//! [`counts`] and [`settled`].)

use std::time::Duration;

use chatd_protocol::{ErrorCode, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Gate, Reply};
use chatd_test_harness::ws_client::WsClient;

use crate::skills::text;
use crate::support::{collect_answer, conversation, spawn_app, use_llm, user_message};

/// The port of a service URL (`http://127.0.0.1:8200`, `redis://127.0.0.1:6379/0`) or address.
pub(crate) fn port(url: &str) -> u16 {
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("tcp://{url}")
    };
    reqwest::Url::parse(&url)
        .ok()
        .and_then(|u| u.port())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Inodes of the TCP sockets (v4 and v6) that are chatd's (see [`counts`]).
fn socket_inodes(ports: &[u16]) -> std::collections::HashSet<String> {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port_of = |addr: &str| {
                addr.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            let local = cols.get(1).and_then(|a| port_of(a));
            let remote = cols.get(2).and_then(|a| port_of(a));
            let ours =
                local == ports.first().copied() || remote.is_some_and(|r| ports.contains(&r));
            if let (true, Some(inode)) = (ours, cols.get(9)) {
                inodes.insert((*inode).to_string());
            }
        }
    }
    inodes
}

/// This test's chatd's open sockets and the live tokio tasks of this test's runtime.
/// `ports[0]` is chatd's: its listener and accepted sockets (local port) and the test's
/// clients (remote port); the others are the services it calls (sockets whose remote port
/// is theirs; the services' own accepted sockets are not chatd's). Tests run in parallel in
/// one process, so descriptors are counted by port, not in all.
pub(crate) fn counts(ports: &[u16]) -> (usize, usize) {
    let inodes = socket_inodes(ports);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |dir| {
        dir.flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|target| {
                let t = target.to_string_lossy();
                t.strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .is_some_and(|inode| inodes.contains(inode))
            })
            .count()
    });
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    (fds, tasks)
}

/// Waits (bounded) until the counts are back at or below `before`; returns the last seen.
/// The bound is generous: on a box busy with the other tests, closed sockets' tasks may take
/// seconds to end; a leaked one never does.
pub(crate) async fn settled(ports: &[u16], before: (usize, usize)) -> (usize, usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = counts(ports);
        if (now.0 <= before.0 && now.1 <= before.1) || tokio::time::Instant::now() > deadline {
            return now;
        }
        // Closing sockets and ending tasks is the runtime's work: let it run.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn turn(ws: &mut WsClient, id: &str, content: &str) -> Option<ErrorCode> {
    ws.send(&user_message("chat-faults", id, content)).await;
    let (_, last) = collect_answer(ws).await;
    ws.recv_until(|m| matches!(m, ServerMessage::AiTypingEnded(_)).then_some(()))
        .await;
    last.error_code
}

#[tokio::test]
async fn provider_faults_end_turns_typed_and_leak_nothing() {
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.idle_timeout = Duration::from_millis(300);
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut ws = app.connect_showing("zed", "chat-faults").await;
    fake.push(text("Warm."));
    assert_eq!(turn(&mut ws, "m0", "warm up").await, None);
    let ports = [app.addr.port(), port(&fake.base_url())];
    let before = counts(&ports);

    let never = Gate::new();
    let stall = || Reply::Stall {
        chunks: Vec::new(),
        gate: never.clone(),
        then: Box::new(text("never")),
    };
    let cases: Vec<(&str, Vec<Reply>, Option<ErrorCode>)> = vec![
        (
            "cut mid tool-call arguments",
            vec![Reply::CutInToolCall {
                name: "docs-search".into(),
                partial_arguments: "{\"requests\": [{\"query\": \"rea".into(),
            }],
            Some(ErrorCode::LlmUnavailable),
        ),
        (
            "stalled past the idle timeout, and again on the retry",
            vec![stall(), stall()],
            Some(ErrorCode::LlmUnavailable),
        ),
        (
            "a malformed chunk",
            vec![Reply::Raw {
                data: vec!["{\"choices\": [{\"delta\": {\"content\": ".into()],
            }],
            Some(ErrorCode::LlmUnavailable),
        ),
        (
            "429 once, then an answer",
            vec![
                Reply::RateLimited {
                    retry_after: Some(0),
                },
                text("After the wait."),
            ],
            None,
        ),
    ];
    for (i, (name, replies, want)) in cases.into_iter().enumerate() {
        for r in replies {
            fake.push(r);
        }
        let got = turn(
            &mut ws,
            &format!("m{}", i + 1),
            &format!("question {}", i + 1),
        )
        .await;
        assert_eq!(got, want, "{name}");
    }

    // Nothing acknowledged is lost: every message is in the next turn's history.
    fake.push(text("All good."));
    assert_eq!(turn(&mut ws, "m9", "and finally").await, None);
    let history = conversation(fake.requests().last().unwrap());
    for i in 0..=4 {
        let asked = if i == 0 {
            "warm up".to_string()
        } else {
            format!("question {i}")
        };
        assert!(
            history.iter().any(|(r, c)| r == "user" && *c == asked),
            "{asked} is in the history: {history:?}"
        );
    }

    let after = settled(&ports, before).await;
    assert!(
        after.0 <= before.0,
        "file descriptors: {} before, {} after",
        before.0,
        after.0
    );
    assert!(
        after.1 <= before.1,
        "tasks: {} before, {} after",
        before.1,
        after.1
    );
}

/// Redis frozen (SIGSTOP) in the middle of a turn: the answer still reaches the device, its
/// caching fails within the cache deadline (logged, not shown), a message sent while Redis
/// stays frozen gets a typed `cache_unavailable`, and once Redis thaws the chat goes on
/// (answered, or its history asked for: both typed). No task or descriptor is left over.
#[tokio::test]
async fn redis_frozen_mid_turn_ends_typed_and_recovers() {
    let redis = chatd_test_harness::redis::RedisServer::start()
        .await
        .unwrap();
    let fake = FakeLlm::start().await.unwrap();
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        crate::redis_cache::use_redis(c, &redis);
        c.cache.timeout = Duration::from_millis(300);
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut ws = app.connect_showing("yan", "chat-faults").await;
    fake.push(text("Warm."));
    assert_eq!(turn(&mut ws, "m0", "warm up").await, None);
    let ports = [app.addr.port(), port(&fake.base_url()), port(&redis.url())];
    let before = counts(&ports);

    let gate = Gate::new();
    fake.push(Reply::Stall {
        chunks: vec!["Before the freeze.\n\n".into()],
        gate: gate.clone(),
        then: Box::new(text("After it.")),
    });
    ws.send(&user_message("chat-faults", "m1", "a long one"))
        .await;
    gate.reached().await;
    redis.pause().await.unwrap();
    gate.release();
    let (_, last) = collect_answer(&mut ws).await;
    assert_eq!(last.full_content_so_far, "Before the freeze.\n\nAfter it.");
    ws.recv_until(|m| matches!(m, ServerMessage::AiTypingEnded(_)).then_some(()))
        .await;

    ws.send(&user_message("chat-faults", "m2", "while frozen"))
        .await;
    let refused = ws.recv_until(crate::support::error_code).await;
    assert_eq!(refused, ErrorCode::CacheUnavailable);

    redis.resume().await.unwrap();
    fake.push(text("Back."));
    ws.send(&user_message("chat-faults", "m3", "after the thaw"))
        .await;
    match crate::support::outcome(&mut ws).await {
        crate::support::Outcome::Answer(a) => assert_eq!(a.error_code, None),
        crate::support::Outcome::NeedHistory(_) => {}
        other => panic!("a typed outcome after the thaw, got {other:?}"),
    }
    drop(ws);
    let after = settled(&ports, before).await;
    assert!(
        after.0 <= before.0,
        "file descriptors: {before:?} → {after:?}"
    );
    assert!(after.1 <= before.1, "tasks: {before:?} → {after:?}");
}

/// A device of `user` showing `chat` that reads only its acknowledgement, then nothing: its
/// socket's receive buffer is small, so the server's queue for it fills at once.
async fn stalled_device(
    app: &crate::support::TestApp,
    user: &str,
    session: &str,
    chat: &str,
) -> (
    tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    std::sync::Arc<chatd::delivery::Device>,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(app.addr).await.unwrap();
    let url = app.ws_url(&format!("token={}&sessionId={session}", app.token(user)));
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    let show = serde_json::to_string(&crate::support::set_active_chat(Some(chat))).unwrap();
    ws.send(Message::text(show)).await.unwrap();
    loop {
        let Some(Ok(Message::Text(t))) = ws.next().await else {
            panic!("{user}'s stalled device closed before its acknowledgement");
        };
        if let Ok(ServerMessage::ActiveChatSetAck(_)) = serde_json::from_str(&t) {
            let hash = chatd::crypto::UserHash::of(&chatd::auth::UserId::parse(user).unwrap());
            let device = app
                .state
                .delivery
                .hub
                .devices(&hash)
                .into_iter()
                .find(|d| d.session_id == session)
                .unwrap_or_else(|| panic!("no device {session}"));
            return (ws, device);
        }
    }
}

/// Reads what the socket still holds, then the close frame's code.
async fn close_code(ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) -> u16 {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Close(frame)))) => return frame.map_or(1005, |f| f.code.into()),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => {
                eprintln!("stalled device read error: {e}");
                return 1006;
            }
            Ok(None) => {
                eprintln!("stalled device: stream ended without a close frame");
                return 1006;
            }
            Err(_) => panic!("no close within 60 s"),
        }
    }
}

/// 100 devices that stop reading beside 10 that read (ten users, one fast and ten stalled
/// devices each, every fast device asking for an 80 KB answer at once: over the 64 KiB bound): every fast device
/// gets its whole answer (delta streaming, so the test reads little), every stalled one is
/// closed with 4001, the next turn's history holds every acknowledged message, and no task
/// or file descriptor is left over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_devices_beside_fast_ones_are_closed_4001_and_leak_nothing() {
    const USERS: usize = 10;
    const STALLED: usize = 10;
    let fake = FakeLlm::start().await.unwrap();
    let long = Reply::Text {
        chunks: (0..200)
            .map(|i| format!("{i:04} {}\n\n", "lorem ipsum ".repeat(33)))
            .collect(),
        delay: Duration::ZERO,
        usage: None,
    };
    let app = spawn_app(|c| {
        use_llm(c, fake.base_url());
        c.llm.max_output_tokens = 100_000;
        c.server.outbox_bytes = 64 * 1024;
        // A stalled device holds little in the kernel, so it sees its 4001 soon after it
        // reads again (with the kernel's own tuning it could hold megabytes).
        c.server.socket_send_buffer_bytes = 64 * 1024;
        c.server.slow_consumer_grace = Duration::from_secs(2);
        c.pipeline.postprocessing = false;
    })
    .await;
    let users: Vec<String> = (0..USERS).map(|i| format!("user{i}")).collect();
    let chat = |u: &str| format!("chat-{u}");
    let mut fast = Vec::new();
    for u in &users {
        let url = app.ws_url(&format!("token={}&stream=delta", app.token(u)));
        let mut ws = WsClient::connect(&url).await.unwrap();
        ws.send(&crate::support::set_active_chat(Some(&chat(u))))
            .await;
        ws.recv_until(|m| matches!(m, ServerMessage::ActiveChatSetAck(_)).then_some(()))
            .await;
        fast.push(ws);
    }
    // A round of the same answers first, without stalled devices: chatd's connections to
    // the provider are pooled before counting.
    fake.set_default(long.clone());
    let warm = fast.iter_mut().zip(&users).map(|(ws, u)| async move {
        ws.send(&user_message(&chat(u), &format!("{u}-m0"), "warm up"))
            .await;
        collect_answer(ws).await;
    });
    futures_util::future::join_all(warm).await;
    // chatd's own sockets (listener, devices); its provider connections are pooled and the
    // pool's size follows how the answers overlapped, so they are counted apart: tasks may
    // grow by the pool's growth (a connection task each), nothing else.
    let ports = [app.addr.port()];
    // Both ends of every provider connection (chatd's client socket and the fake
    // provider's server socket, each held by one connection task), so a connection the
    // fake provider has not yet noticed closed is counted with its task.
    let provider = [port(&fake.base_url())];
    let before = counts(&ports);
    let tracked_before = tracked(&app);
    let pool_before = counts(&provider).0;
    let mut stalled = Vec::new();
    for u in &users {
        for k in 0..STALLED {
            stalled.push(stalled_device(&app, u, &format!("stalled-{u}-{k}"), &chat(u)).await);
        }
    }
    // A stalled device reads again only once the server closes it, then sees the close.
    let closes =
        futures_util::future::join_all(stalled.into_iter().map(|(mut ws, device)| async move {
            device.outbox.closing().await;
            close_code(&mut ws).await
        }));

    let answers = fast.iter_mut().zip(&users).map(|(ws, u)| async move {
        ws.send(&user_message(
            &chat(u),
            &format!("{u}-m1"),
            &format!("first from {u}"),
        ))
        .await;
        let (_, last) = collect_answer(ws).await;
        assert_eq!(last.error_code, None, "{u}");
        let text = &last.full_content_so_far;
        assert!(
            text.starts_with("0000 ") && text.contains("\n\n0199 "),
            "{u}: {} bytes",
            text.len()
        );
    });
    let ((), codes) = tokio::join!(
        async {
            futures_util::future::join_all(answers).await;
        },
        closes
    );
    assert!(
        codes.iter().all(|c| *c == 4001),
        "close codes of the stalled devices: {codes:?}"
    );

    // Nothing acknowledged is lost: each user's next turn holds the first message.
    fake.set_default(text("Short."));
    for (ws, u) in fast.iter_mut().zip(&users) {
        ws.send(&user_message(
            &chat(u),
            &format!("{u}-m2"),
            &format!("second from {u}"),
        ))
        .await;
        let (_, last) = collect_answer(ws).await;
        assert_eq!(last.error_code, None, "{u}");
        let history = conversation(fake.requests().last().unwrap());
        assert!(
            history
                .iter()
                .any(|(r, c)| r == "user" && *c == format!("first from {u}")),
            "{u}'s first message is in the history: {history:?}"
        );
    }

    let after = settled(&ports, before).await;
    let pool_growth = counts(&provider).0.saturating_sub(pool_before);
    assert!(
        after.0 <= before.0,
        "file descriptors: {before:?} → {after:?}"
    );
    assert!(
        after.1 <= before.1 + pool_growth,
        "tasks: {before:?} → {after:?} (provider sockets grew by {pool_growth}); chatd's trackers \
         (turn, connection): {tracked_before:?} → {:?}",
        tracked(&app)
    );
}

/// The tasks on chatd's own trackers (turns, connections): where a leak would be.
fn tracked(app: &crate::support::TestApp) -> (usize, usize) {
    let tasks = &app.state.tasks;
    (tasks.turns.len(), tasks.connections.len())
}
