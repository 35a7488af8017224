use std::time::Duration;

use chatd_protocol::{AiMessageUpdate, MessageId};

use super::*;
use crate::delivery::outbox::{OutboxReceiver, OutboxSettings, StreamMode, outbox};
use crate::metrics::Metrics;

fn device(hub: &Hub) -> (Arc<Device>, OutboxReceiver) {
    let settings = OutboxSettings {
        capacity: 64,
        max_bytes: 1 << 20,
        grace: Duration::from_secs(5),
        mode: StreamMode::Cumulative,
    };
    let (out, rx) = outbox(settings, Arc::new(Metrics::new()));
    let user = UserId::parse("bob").unwrap();
    let d = Arc::new(Device::new("s".into(), user, out));
    hub.register(d.clone());
    (d, rx)
}

fn update(sequence: u64) -> ServerMessage {
    ServerMessage::AiMessageUpdate(AiMessageUpdate::new(
        TaskId::parse("t1").unwrap(),
        ChatId::parse("c1").unwrap(),
        MessageId::parse("m1").unwrap(),
        format!("text {sequence}"),
        sequence,
        false,
    ))
}

/// The final update, numbered `sequence`.
fn final_update(sequence: u64) -> ServerMessage {
    let mut last = update(sequence);
    if let ServerMessage::AiMessageUpdate(u) = &mut last {
        u.is_final_chunk = true;
    }
    last
}

/// The turn's `ai_task_initiated`.
fn started(task: &TaskId) -> ServerMessage {
    ServerMessage::AiTaskInitiated(chatd_protocol::AiTaskInitiated {
        chat_id: ChatId::parse("c1").unwrap(),
        user_message_id: MessageId::parse("m1").unwrap(),
        ai_task_id: task.clone(),
        status: "processing_started".into(),
    })
}

/// The sequences of the updates queued for the device.
fn sequences(rx: &OutboxReceiver) -> Vec<u64> {
    rx.drain()
        .iter()
        .filter_map(|f| match serde_json::from_str(f.text.as_str()) {
            Ok(ServerMessage::AiMessageUpdate(u)) => Some(u.sequence),
            _ => None,
        })
        .collect()
}

#[test]
fn a_peer_frame_past_a_missed_update_holds_the_turn_for_a_catch_up() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let (user, task) = (d.user_hash.clone(), TaskId::parse("t1").unwrap());
    let send = |index: u64, sequence: u64| {
        let msg = update(sequence);
        let frame = EncodedFrame::new(&msg);
        hub.send_turn_minding_gaps(&user, &Audience::All, (&task, index), (frame, &msg), false)
    };
    // Index 2 is a frame for other devices only: no gap, the updates follow each other.
    assert!(send(1, 1).is_empty());
    assert!(send(3, 2).is_empty());
    assert_eq!(sequences(&rx), [1, 2]);
    // Update 3 never came (lost on the bus): update 4 is held, the device is named.
    let missed = send(5, 4);
    assert_eq!(missed.len(), 1);
    assert!(send(6, 5).is_empty(), "held, not named again");
    assert!(sequences(&rx).is_empty());
    // The catch-up replays what the log has, then the held frames follow.
    d.replay(&task, 4, &update(3));
    d.replay(&task, 5, &update(4));
    d.end_resume(&task);
    assert_eq!(sequences(&rx), [3, 4, 5]);
    // This node's own frames never hold.
    let msg = update(7);
    hub.send_turn(
        &user,
        &Audience::All,
        &task,
        8,
        EncodedFrame::new(&msg),
        &msg,
    );
    assert_eq!(sequences(&rx), [7]);
}

/// Two nodes ended one turn (one was paused past its lease, another ended the turn with
/// `node_lost`, and Redis lost the record of that before the first woke up): the device
/// keeps the first ending; no update reaches it after the final one.
#[test]
fn no_update_reaches_a_device_after_the_final_one() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let (user, task) = (d.user_hash.clone(), TaskId::parse("t1").unwrap());
    let send = |index: u64, msg: &ServerMessage| {
        hub.send_turn(
            &user,
            &Audience::All,
            &task,
            index,
            EncodedFrame::new(msg),
            msg,
        );
    };
    let last = final_update(2);
    send(1, &update(1));
    send(2, &last);
    send(3, &update(3));
    send(4, &update(4));
    assert_eq!(sequences(&rx), [1, 2]);
    // A correction replaces the answer after its end: it is taken.
    let mut corrected = update(5);
    if let ServerMessage::AiMessageUpdate(u) = &mut corrected {
        u.correction = Some(chatd_protocol::Correction::HarmfulResponse);
    }
    send(5, &corrected);
    assert_eq!(sequences(&rx), [5]);
}

/// A catch-up (after a bus outage, or on showing a chat) leaves alone a turn being
/// resumed (the resume ends the hold) and a turn the device had the end of; catching up on
/// many turns forgets idle positions first, never one a resume holds.
#[test]
fn a_catch_up_leaves_a_resume_and_an_ended_turn_alone() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let task = TaskId::parse("t1").unwrap();
    d.begin_resume(&task, 0);
    assert!(!d.begin_catch_up(&task), "a resume holds it");
    for i in 0..super::position::TRACKED_TURNS + 2 {
        let other = TaskId::parse(format!("other-{i}")).unwrap();
        assert!(d.begin_catch_up(&other));
        d.end_resume(&other);
    }
    d.skip_to(&task, 1, 1);
    d.replay(&task, 2, &update(2));
    d.end_resume(&task);
    assert_eq!(sequences(&rx), [2], "the resume's position was kept");

    let last = final_update(3);
    d.replay(&task, 3, &last);
    assert!(!d.begin_catch_up(&task), "it had the end");
}

/// A frame sent again (its node appended it again to a log the store lost) reaches a
/// device that follows the turn, never one that connected since.
#[test]
fn a_frame_sent_again_reaches_only_devices_that_follow_the_turn() {
    let hub = Hub::default();
    let (follower, rx) = device(&hub);
    let (newcomer, new_rx) = device(&hub);
    let (user, task) = (follower.user_hash.clone(), TaskId::parse("t1").unwrap());
    follower.replay(&task, 1, &update(1));
    assert_eq!(sequences(&rx), [1]);
    let again = update(2);
    let frame = (EncodedFrame::new(&again), &again);
    hub.send_turn_minding_gaps(&user, &Audience::All, (&task, 2), frame, true);
    assert_eq!(sequences(&rx), [2]);
    assert!(sequences(&new_rx).is_empty(), "{}", newcomer.conn_id);
}

/// A device that had many newer turns forgets its positions in older ones, but not where
/// it stood: a catch-up or a frame sent again never replays what it had, nor a turn it had
/// the end of.
#[test]
fn a_forgotten_turn_is_measured_against_where_the_device_stood() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let (user, task) = (d.user_hash.clone(), TaskId::parse("t1").unwrap());
    let last = final_update(2);
    d.replay(&task, 1, &update(1));
    d.replay(&task, 2, &last);
    for i in 0..super::position::TRACKED_TURNS + 2 {
        let other = TaskId::parse(format!("other-{i}")).unwrap();
        d.replay(&other, 1, &update(1));
    }
    assert_eq!(sequences(&rx).len(), 2 + super::position::TRACKED_TURNS + 2);
    assert!(!d.follows(&task), "its position was forgotten");
    assert!(!d.begin_catch_up(&task), "it had the end");
    d.replay(&task, 1, &update(1));
    let again = update(2);
    let frame = (EncodedFrame::new(&again), &again);
    hub.send_turn_minding_gaps(&user, &Audience::All, (&task, 2), frame, false);
    assert!(sequences(&rx).is_empty(), "nothing of the ended turn again");

    // A turn it had part of, and the end of as a device not showing the chat: forgotten,
    // a replay from the log sends only what it lacks, and nothing of the other.
    let (part, background) = (TaskId::parse("t2").unwrap(), TaskId::parse("t3").unwrap());
    d.replay(&part, 1, &update(1));
    let done = ServerMessage::AiBackgroundResponseCompleted(
        serde_json::from_value(serde_json::json!({"chat_id": "c1", "message_id": "m1",
            "user_message_id": "u1", "task_id": "t3", "full_content": "text"}))
        .unwrap(),
    );
    hub.send_turn_minding_gaps(
        &user,
        &Audience::All,
        (&background, 1),
        (EncodedFrame::new(&done), &done),
        false,
    );
    for i in 0..super::position::TRACKED_TURNS + 2 {
        let other = TaskId::parse(format!("more-{i}")).unwrap();
        d.replay(&other, 1, &update(1));
    }
    rx.drain();
    assert!(!d.begin_catch_up(&background), "it had the end");
    assert!(d.begin_catch_up(&part));
    d.replay(&part, 1, &update(1));
    d.replay(&part, 2, &update(2));
    d.end_resume(&part);
    assert_eq!(sequences(&rx), [2]);
}

/// A node that took a turn over ended it after a log that had lost the newest update (Redis
/// came back from a snapshot): its final update, numbered like the lost one, reaches a
/// device that had the lost one numbered after it, and one that had not as it is; a final
/// update past updates nothing holds any more is numbered after the device's newest.
#[test]
fn a_final_update_numbered_at_what_a_device_had_is_renumbered_after_it() {
    let hub = Hub::default();
    let (ahead, rx) = device(&hub);
    let (behind, behind_rx) = device(&hub);
    let (user, task) = (ahead.user_hash.clone(), TaskId::parse("t1").unwrap());
    ahead.replay(&task, 1, &update(1));
    ahead.replay(&task, 2, &update(2));
    behind.replay(&task, 1, &update(1));
    let lost = final_update(2);
    let frame = (EncodedFrame::new(&lost), &lost);
    hub.send_turn_minding_gaps(&user, &Audience::All, (&task, 3), frame, false);
    assert_eq!(sequences(&rx), [1, 2, 3]);
    assert_eq!(sequences(&behind_rx), [1, 2]);

    // A log whose head was lost gives a device catching up only the ending: numbered right
    // after what the device had (it holds the whole text).
    let (late, late_rx) = device(&hub);
    late.replay(&task, 1, &update(1));
    let ending = final_update(9);
    late.replay(&task, 9, &ending);
    assert_eq!(sequences(&late_rx), [1, 2]);
}

/// A device got a frame past an update it never had (the update's node died before sending
/// it): that update, replayed from the log, still reaches it, though the log holds it
/// before the frame the device had.
#[test]
fn the_update_a_device_lacks_reaches_it_from_before_its_position() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let task = TaskId::parse("t1").unwrap();
    d.replay(&task, 1, &update(1));
    let typing_ended = ServerMessage::AiTypingEnded(
        serde_json::from_value(serde_json::json!({"chat_id": "c1", "message_id": "m1",
            "task_id": "t1"}))
        .unwrap(),
    );
    d.replay(&task, 3, &typing_ended);
    d.replay(&task, 2, &update(2));
    d.replay(&task, 2, &update(2));
    assert_eq!(sequences(&rx), [1, 2], "taken once");
}

mod resume;
