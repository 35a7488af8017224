use chatd_protocol::{ChatId, Empty, MessageId};

use super::*;

fn settings(mode: StreamMode) -> OutboxSettings {
    OutboxSettings {
        capacity: 64,
        max_bytes: 2048,
        grace: Duration::from_secs(5),
        mode,
    }
}

fn update(task: &str, text: &str, sequence: u64, is_final_chunk: bool) -> ServerMessage {
    ServerMessage::AiMessageUpdate(AiMessageUpdate::new(
        TaskId::parse(task).unwrap(),
        ChatId::parse("c1").unwrap(),
        MessageId::parse(task).unwrap(),
        text.into(),
        sequence,
        is_final_chunk,
    ))
}

fn pong() -> ServerMessage {
    ServerMessage::Pong(Empty {})
}

/// The queued frames, decoded.
fn queued(rx: &OutboxReceiver) -> Vec<ServerMessage> {
    rx.drain()
        .iter()
        .map(|f| serde_json::from_str(f.text.as_str()).unwrap())
        .collect()
}

fn text_of(msg: &ServerMessage) -> (u64, bool, String, Option<String>) {
    match msg {
        ServerMessage::AiMessageUpdate(u) => (
            u.sequence,
            u.delta,
            u.full_content_so_far.clone(),
            u.content_delta.clone(),
        ),
        other => (0, false, other.type_name().to_string(), None),
    }
}

#[test]
fn a_tasks_newer_update_replaces_its_queued_one_and_nothing_else_is_dropped() {
    let (out, rx) = outbox(settings(StreamMode::Cumulative), Arc::new(Metrics::new()));
    assert!(out.send(&update("t1", "a", 1, false)));
    assert!(out.send(&pong()));
    assert!(out.send(&update("t2", "x", 1, false)));
    assert!(out.send(&update("t1", "ab", 2, false)));
    assert!(out.send(&update("t1", "abc", 3, true)));
    assert!(
        out.send(&update("t1", "abc", 4, false)),
        "after the final: kept"
    );
    let got: Vec<_> = queued(&rx).iter().map(text_of).collect();
    assert_eq!(
        got,
        vec![
            (0, false, "pong".into(), None),
            (1, false, "x".into(), None),
            // t1's updates 1 and 2 were superseded; its final frame stays.
            (3, false, "abc".into(), None),
            (4, false, "abc".into(), None),
        ]
    );
}

#[test]
fn a_delta_device_gets_the_added_text_merged_while_behind() {
    let (out, rx) = outbox(settings(StreamMode::Delta), Arc::new(Metrics::new()));
    out.send(&update("t1", "Hello", 1, false));
    let first: Vec<_> = queued(&rx).iter().map(text_of).collect();
    assert_eq!(first, vec![(1, true, String::new(), Some("Hello".into()))]);
    // Behind: two updates queue up and merge into one delta from what was written.
    out.send(&update("t1", "Hello, wo", 2, false));
    out.send(&update("t1", "Hello, world", 3, false));
    let got: Vec<_> = queued(&rx).iter().map(text_of).collect();
    assert_eq!(got, vec![(3, true, String::new(), Some(", world".into()))]);
    // Link repair's correction is not an extension: whole; then deltas from it again.
    out.send(&pong());
    out.send(&update("t1", "Hi, world", 4, false));
    let got: Vec<_> = queued(&rx).iter().map(text_of).collect();
    assert_eq!(
        got,
        vec![
            (0, false, "pong".into(), None),
            (4, false, "Hi, world".into(), None),
        ]
    );
    out.send(&update("t1", "Hi, world!", 5, false));
    out.send(&update("t1", "Hi, world!", 6, true));
    let got: Vec<_> = queued(&rx).iter().map(text_of).collect();
    // The final frame replaced the queued delta and carries the whole text.
    assert_eq!(got, vec![(6, false, "Hi, world!".into(), None)]);
}

#[test]
fn twice_the_byte_bound_closes_with_4001_and_frees_the_queue() {
    let (out, rx) = outbox(settings(StreamMode::Cumulative), Arc::new(Metrics::new()));
    let big = "x".repeat(1500);
    // Non-cumulative frames are never coalesced: 3 of them pass 2 × 2048 bytes.
    let error = |i: u64| {
        ServerMessage::Error(chatd_protocol::ErrorPayload::new(
            chatd_protocol::ErrorCode::InvalidPayload,
            format!("{i}{big}"),
        ))
    };
    assert!(out.send(&error(1)));
    assert!(out.send(&error(2)));
    assert!(!out.send(&error(3)));
    assert_eq!(rx.close_code(), Some(CloseCode::SlowConsumer));
    assert!(rx.drain().is_empty(), "a slow consumer's queue is freed");
    assert!(out.peak_bytes() <= 2 * 2048);
}

#[tokio::test(start_paused = true)]
async fn a_queue_over_the_bound_for_the_grace_is_reported_and_one_brought_under_is_not() {
    let (out, rx) = outbox(settings(StreamMode::Cumulative), Arc::new(Metrics::new()));
    let big = "y".repeat(3000);
    out.send(&update("t1", &big, 1, false));
    let started = Instant::now();
    // Brought under before the grace ends: the watch keeps waiting.
    tokio::select! {
        () = rx.stayed_over() => panic!("reported before the grace"),
        () = tokio::time::sleep(Duration::from_secs(4)) => {}
    }
    assert_eq!(rx.next_batch(32, 16 * 1024).await.len(), 1);
    rx.written();
    out.send(&update("t1", &format!("{big}z"), 2, false));
    rx.stayed_over().await;
    assert!(started.elapsed() >= Duration::from_secs(9), "a new grace");
}

/// Issue 35, defect 7: a frame the writer took is still held until it is written (it waits
/// in the socket library's buffer while the client does not read), so taking it off the
/// queue does not end the grace; writing it does.
#[tokio::test(start_paused = true)]
async fn a_frame_taken_but_not_written_stays_held_until_written() {
    let (out, rx) = outbox(settings(StreamMode::Cumulative), Arc::new(Metrics::new()));
    let big = "y".repeat(3000);
    out.send(&update("t1", &big, 1, false));
    let started = Instant::now();
    assert_eq!(rx.next_batch(32, 16 * 1024).await.len(), 1);
    assert!(rx.held_bytes() > 3000, "in flight: {}", rx.held_bytes());
    // The queue is empty, the frame unwritten: the grace runs on.
    out.send(&pong());
    rx.stayed_over().await;
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    // Written: only the pong is held, under the bound; a new frame over it starts a new grace.
    rx.written();
    assert!(rx.held_bytes() < 100);
    out.send(&update("t2", &big, 1, false));
    let again = Instant::now();
    rx.stayed_over().await;
    assert_eq!(again.elapsed(), Duration::from_secs(5));
}
