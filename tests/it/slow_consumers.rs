//! Slow consumers (issue 18, item 1): a long answer from the fake LLM (about 120 KB of
//! text in 300 paragraphs, so about 18 MB of cumulative frames) reaches a client that
//! reads, clients that fall behind, and one that stops reading. A client behind gets the
//! task's updates coalesced (only the newest text stays queued) and the complete final
//! text; a `?stream=delta` client reassembles exactly what a cumulative client shows; one
//! that stays over `server.outbox_bytes` is closed with 4001, its queue bounded all along,
//! counting what waits in the socket library's buffer (issue 35, defect 7).

use std::time::Duration;

use chatd::auth::UserId;
use chatd::config::Config;
use chatd::crypto::UserHash;
use chatd::delivery::Device;
use chatd_protocol::{AiMessageUpdate, ServerMessage};
use chatd_test_harness::fake_llm::{FakeLlm, Reply};
use chatd_test_harness::ws_client::WsClient;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{TestApp, collect_answer, set_active_chat, spawn_app, use_llm, user_message};

const CHAT: &str = "chat-long";

/// 300 paragraphs of about 400 bytes.
fn long_answer() -> Reply {
    Reply::Text {
        chunks: (0..300)
            .map(|i| format!("{i:04} {}\n\n", "lorem ipsum ".repeat(33)))
            .collect(),
        delay: Duration::ZERO,
        usage: None,
    }
}

async fn app_with(fake: &FakeLlm, edit: impl FnOnce(&mut Config)) -> TestApp {
    let url = fake.base_url();
    spawn_app(move |c| {
        use_llm(c, url);
        // 120 KB of answer: past the default cut at 4096 tokens.
        c.llm.max_output_tokens = 100_000;
        edit(c);
    })
    .await
}

/// A device of alice showing the chat, opened with `query` (e.g. `stream=delta`).
async fn device(app: &TestApp, session: &str, query: &str) -> WsClient {
    let url = app.ws_url(&format!(
        "token={}&sessionId={session}&{query}",
        app.token("alice")
    ));
    let mut ws = WsClient::connect(&url).await.unwrap();
    ws.send(&set_active_chat(Some(CHAT))).await;
    ws.recv_until(|m| matches!(m, ServerMessage::ActiveChatSetAck(_)).then_some(()))
        .await;
    ws
}

/// The server side of alice's device `session`.
fn server_device(app: &TestApp, session: &str) -> std::sync::Arc<Device> {
    let hash = UserHash::of(&UserId::parse("alice").unwrap());
    app.state
        .delivery
        .hub
        .devices(&hash)
        .into_iter()
        .find(|d| d.session_id == session)
        .unwrap_or_else(|| panic!("no device {session}"))
}

/// Reads a task's updates as a client would show them: a `delta` frame appends, any
/// other replaces. Returns the text before the final frame, the final frame and the
/// number of updates; sequences must increase.
async fn reassemble(ws: &mut WsClient) -> (String, AiMessageUpdate, usize) {
    let mut text = String::new();
    let mut last_sequence = 0;
    let mut updates = 0;
    loop {
        let ServerMessage::AiMessageUpdate(u) = ws.recv().await else {
            continue;
        };
        assert!(
            u.sequence > last_sequence,
            "{} after {last_sequence}",
            u.sequence
        );
        last_sequence = u.sequence;
        updates += 1;
        if u.is_final_chunk {
            assert!(!u.delta, "the final frame carries the whole text");
            return (text, u, updates);
        }
        match u.delta {
            true => text.push_str(u.content_delta.as_deref().unwrap_or_default()),
            false => text = u.full_content_so_far.clone(),
        }
    }
}

#[tokio::test]
async fn a_client_behind_gets_a_coalesced_stream_and_a_delta_client_the_same_text() {
    let fake = FakeLlm::start().await.unwrap();
    fake.push(long_answer());
    let app = app_with(&fake, |_| {}).await;
    let mut fast = device(&app, "fast", "").await;
    let mut fast_delta = device(&app, "fast-delta", "stream=delta").await;
    let mut behind = device(&app, "behind", "").await;
    let mut behind_delta = device(&app, "behind-delta", "stream=delta").await;

    fast.send(&user_message(CHAT, "m1", "Tell me everything"))
        .await;
    let ((frames, last), (delta_text, delta_last, _)) =
        tokio::join!(collect_answer(&mut fast), reassemble(&mut fast_delta));
    let full = last.full_content_so_far.clone();
    assert!(full.len() > 100_000, "a long answer: {}", full.len());
    assert!(delta_text == full, "deltas reassemble the cumulative text");
    assert!(delta_last.full_content_so_far == full);
    let fast_updates = frames
        .iter()
        .filter(|m| matches!(m, ServerMessage::AiMessageUpdate(_)))
        .count();

    // The behind devices had the final frame queued when the fast one read it: now they
    // read everything they were sent.
    // (The final frame supersedes a queued update: the text before it may be older.)
    let (text, final_frame, updates) = reassemble(&mut behind).await;
    assert!(
        final_frame.full_content_so_far == full,
        "the final text is complete"
    );
    assert!(full.starts_with(&text));
    assert!(
        updates < fast_updates,
        "coalesced: {updates} updates, the fast device {fast_updates}"
    );
    // Deltas are small (about 200 KB in all instead of 18 MB): the socket holds them all,
    // so this device is hardly behind at all (merging queued deltas is a unit test).
    let (text, final_frame, _) = reassemble(&mut behind_delta).await;
    assert!(text == full, "deltas read late reassemble the same text");
    assert!(final_frame.full_content_so_far == full);
    // A behind device's queue held about one update, never the whole stream.
    for session in ["behind", "behind-delta"] {
        let peak = server_device(&app, session).outbox.peak_bytes();
        assert!(peak < 1 << 20, "{session}: {peak} bytes queued at most");
    }
    let coalesced = app.state.metrics.frames_coalesced.get();
    assert!(coalesced > 0);

    // A mode chatd does not know is refused before the upgrade.
    let url = app.ws_url(&format!("token={}&stream=words", app.token("alice")));
    let (status, reason) = WsClient::refusal(url.into_client_request().unwrap())
        .await
        .unwrap();
    assert_eq!(status, 400, "{reason}");
}

/// Three long answers in a row: a device that stops reading keeps only the newest text of
/// each (its final frames stay), so its queue passes the bound in the third and stays over
/// (unless its blocked write times out first).
#[tokio::test]
async fn a_client_that_stops_reading_is_closed_4001_and_its_queue_stays_bounded() {
    const BOUND: usize = 256 * 1024;
    let fake = FakeLlm::start().await.unwrap();
    for _ in 0..3 {
        fake.push(long_answer());
    }
    let app = app_with(&fake, |c| {
        c.server.outbox_bytes = BOUND;
        c.server.slow_consumer_grace = Duration::from_millis(300);
    })
    .await;
    let mut fast = device(&app, "fast", "").await;
    let mut stalled = device(&app, "stalled", "").await;
    let device = server_device(&app, "stalled");

    let mut produced = 0;
    for m in ["m1", "m2", "m3"] {
        fast.send(&user_message(CHAT, m, "Tell me everything"))
            .await;
        let (frames, _) = collect_answer(&mut fast).await;
        produced += frames
            .iter()
            .map(|f| serde_json::to_string(f).unwrap().len())
            .sum::<usize>();
    }
    assert!(
        produced > 40 * BOUND,
        "{produced} bytes sent to the fast device"
    );

    // The stalled device read nothing: its socket filled and its writes blocked; its queue
    // went over the bound and stayed there, or (on a loaded machine, answers arriving
    // slower) the blocked write timed out first. Either way the server closed it, its queue
    // bounded all along.
    tokio::time::timeout(Duration::from_secs(15), device.outbox.closing())
        .await
        .expect("the stalled device is closed after the grace");
    let peak = device.outbox.peak_bytes();
    assert!(peak <= 2 * BOUND, "queued at most: {peak}");
    // Reading again, the client gets what the socket held, then the close frame.
    let (code, reason) = stalled.expect_close().await;
    assert_eq!(code, 4001, "{reason}");
    assert!(reason.contains("slow consumer"), "{reason}");
    // The other device is unaffected.
    fast.send_json(serde_json::json!({"type": "ping"})).await;
    fast.recv_until(|m| matches!(m, ServerMessage::Pong(_)).then_some(()))
        .await;
}

/// Issue 35, defect 7: a client with a 4 KiB receive buffer (`server.outbox_bytes` 1 MiB,
/// `server.socket_send_buffer_bytes` 64 KiB) stops reading while a large answer streams, and
/// reads again once the answer is over. Its first big update (0.9 MB, under the bound) was
/// handed to the socket library and waits in its buffer; the queue behind it holds one
/// coalesced update, also under the bound, and the blocked write ends before its 10 s. Held,
/// that is 1.8 MB, over the bound for longer than the grace: the client must get a 4001 close
/// frame after what the socket held (its buffers and that one frame; its queue is dropped),
/// not the whole answer and then silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_again_after_a_large_answer_gets_4001_after_a_bounded_tail() {
    const BOUND: usize = 1 << 20;
    const SOCKET_BUFFER: usize = 64 * 1024;
    let fake = FakeLlm::start().await.unwrap();
    // One paragraph of 0.9 MB, then small ones for about 4 s (well past the grace).
    let mut chunks = vec![format!("{}\n\n", "lorem ipsum ".repeat(75_000))];
    chunks.extend((0..40).map(|i| format!("{i:04} and then some more.\n\n")));
    fake.push(Reply::Text {
        chunks,
        delay: Duration::from_millis(100),
        usage: None,
    });
    let app = app_with(&fake, |c| {
        c.llm.max_output_tokens = 1_000_000;
        c.server.outbox_bytes = BOUND;
        c.server.socket_send_buffer_bytes = SOCKET_BUFFER;
        c.server.slow_consumer_grace = Duration::from_millis(500);
        c.pipeline.postprocessing = false;
    })
    .await;
    let mut fast = device(&app, "fast", "stream=delta").await;
    let mut stalled = stalled_device(&app, "stalled").await;
    let device = server_device(&app, "stalled");

    fast.send(&user_message(CHAT, "m1", "Tell me everything"))
        .await;
    let (_, last, _) = reassemble(&mut fast).await;
    let full = last.full_content_so_far;
    assert!(full.len() > 900_000, "a large answer: {}", full.len());
    fast.recv_until(|m| matches!(m, ServerMessage::AiTypingEnded(_)).then_some(()))
        .await;

    // The answer is over: the stalled client reads again.
    let (received, code) = read_to_close(&mut stalled).await;
    assert_eq!(code, Some(4001), "{received} bytes, then no close frame");
    assert!(device.outbox.is_closed());
    // What the socket held: the kernel's buffers (Linux doubles SO_SNDBUF; the client's
    // side), the socket library's batch and one update; never the queue behind them.
    let one_frame = full.len() + 1024;
    let held = 4 * SOCKET_BUFFER + 16 * 1024 + one_frame;
    assert!(
        received <= held,
        "{received} bytes before the close, over {held}"
    );
    assert!(device.outbox.peak_bytes() < 2 * BOUND);
}

/// A device of alice showing the chat whose socket has a 4 KiB receive buffer, and which
/// reads nothing after the acknowledgement until the test reads it.
async fn stalled_device(
    app: &TestApp,
    session: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let tcp = socket.connect(app.addr).await.unwrap();
    let url = app.ws_url(&format!("token={}&sessionId={session}", app.token("alice")));
    let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    let show = serde_json::to_string(&set_active_chat(Some(CHAT))).unwrap();
    ws.send(Message::text(show)).await.unwrap();
    loop {
        let Some(Ok(Message::Text(t))) = ws.next().await else {
            panic!("the stalled device closed before its acknowledgement");
        };
        if let Ok(ServerMessage::ActiveChatSetAck(_)) = serde_json::from_str(&t) {
            return ws;
        }
    }
}

/// Reads until the close frame: the text bytes received before it and its code (`None`:
/// the stream ended without one, or nothing came within the harness's deadline).
async fn read_to_close(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> (usize, Option<u16>) {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    let mut received = 0;
    loop {
        let next = tokio::time::timeout(chatd_test_harness::ws_client::RECV_DEADLINE, ws.next());
        match next.await {
            Ok(Some(Ok(Message::Text(t)))) => received += t.len(),
            Ok(Some(Ok(Message::Close(frame)))) => {
                return (received, Some(frame.map_or(1005, |f| f.code.into())));
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(_)) | None) | Err(_) => return (received, None),
        }
    }
}
