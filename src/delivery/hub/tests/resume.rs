//! A device resuming a turn (`resume_ai_task`): what the replay sends, what the held live
//! frames wait for, and what is never sent twice.

use super::*;

/// A resume replayed a log that had lost its tail (Redis came back from an older
/// snapshot): a held live update that skips one keeps the hold until the log, read again,
/// fills the gap.
#[test]
fn a_resume_whose_held_frames_skip_an_update_holds_them_until_the_gap_is_filled() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let (user, task) = (d.user_hash.clone(), TaskId::parse("t1").unwrap());
    d.begin_resume(&task, 0);
    let live = update(4);
    let frame = (EncodedFrame::new(&live), &live);
    hub.send_turn_minding_gaps(&user, &Audience::All, (&task, 4), frame, false);
    d.replay(&task, 1, &update(1));
    d.replay(&task, 2, &update(2));
    assert!(!d.end_resume_if_whole(&task), "update 3 is missing");
    assert_eq!(sequences(&rx), [1, 2]);
    d.replay(&task, 3, &update(3));
    assert!(d.end_resume_if_whole(&task));
    assert_eq!(sequences(&rx), [3, 4]);
    assert!(d.end_resume_if_whole(&task), "nothing is held");
}

/// A resume from 0 that replayed a log being written back (Redis came back empty; the
/// turn's node puts its frames back one by one), which held the turn's first frame but no
/// update yet: a held live update that skips the first ones keeps the hold until the log,
/// read again, has them (chaos: `sequence 7 after 0`).
#[test]
fn a_resume_from_zero_holds_a_live_update_past_updates_the_log_lacked() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let (user, task) = (d.user_hash.clone(), TaskId::parse("t1").unwrap());
    d.begin_resume(&task, 0);
    let live = update(7);
    let frame = (EncodedFrame::new(&live), &live);
    hub.send_turn_minding_gaps(&user, &Audience::All, (&task, 9), frame, false);
    let started = started(&task);
    d.replay(&task, 1, &started);
    assert!(!d.end_resume_if_whole(&task), "updates 1 to 6 are missing");
    for sequence in 1..=6 {
        d.replay(&task, sequence + 2, &update(sequence));
    }
    assert!(d.end_resume_if_whole(&task));
    assert_eq!(sequences(&rx), [1, 2, 3, 4, 5, 6, 7]);
}

/// A resume from 0 whose log lost every update (its writer's node died and Redis came back
/// empty; the node that took the turn over ended it after what was left): the ending, the
/// whole text, goes out numbered 1 (chaos: `sequence 4 after 0` right after a resume). A
/// device that never resumed gets it as numbered: it starts wherever the turn stands.
#[test]
fn a_resume_from_zero_gets_a_final_update_past_lost_updates_numbered_1() {
    let hub = Hub::default();
    let (resumed, rx) = device(&hub);
    let (joined, joined_rx) = device(&hub);
    let task = TaskId::parse("t1").unwrap();
    resumed.begin_resume(&task, 0);
    resumed.replay(&task, 5, &final_update(4));
    resumed.end_resume(&task);
    assert_eq!(sequences(&rx), [1]);

    joined.replay(&task, 5, &final_update(4));
    assert_eq!(sequences(&joined_rx), [4]);
}

/// A resume from 0 replayed a log being written back that held other frames of the turn
/// but no update, and its hold ended before the next live frame came: a live update past
/// updates the device never had starts a hold for a catch-up from the log, as it does for
/// a device that had updates (chaos run AE: `sequence 11 after 0`).
#[test]
fn after_a_resume_from_zero_a_live_update_past_missing_ones_waits_for_a_catch_up() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let (user, task) = (d.user_hash.clone(), TaskId::parse("t1").unwrap());
    d.begin_resume(&task, 0);
    let started = started(&task);
    d.replay(&task, 1, &started);
    assert!(d.end_resume_if_whole(&task), "nothing held yet");
    let live = update(3);
    let frame = (EncodedFrame::new(&live), &live);
    let held = hub.send_turn_minding_gaps(&user, &Audience::All, (&task, 5), frame, false);
    assert_eq!(held.len(), 1, "the device waits for a catch-up");
    for sequence in 1..=2 {
        d.replay(&task, sequence + 2, &update(sequence));
    }
    d.end_resume(&task);
    assert_eq!(sequences(&rx), [1, 2, 3]);
}

/// A device not showing the chat had the turn's end as `ai_background_response_completed`;
/// it opens the chat and resumes the turn from 0: it gets the updates and the final one
/// (the resume used to send none: the device counted as having had the end; a test saw it
/// when its device connected while the turn's last frames went out).
#[test]
fn a_resume_after_a_background_completion_gets_the_answer() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let task = TaskId::parse("t1").unwrap();
    let done: ServerMessage = serde_json::from_value(serde_json::json!({
        "type": "ai_background_response_completed",
        "payload": {"chat_id": "c1", "message_id": "t1", "user_message_id": "m1",
            "task_id": "t1", "full_content": "text 2"}
    }))
    .unwrap();
    d.replay(&task, 9, &done);
    d.begin_resume(&task, 0);
    d.replay(&task, 1, &update(1));
    d.replay(&task, 2, &final_update(2));
    d.end_resume(&task);
    assert_eq!(sequences(&rx), [1, 2]);
}

/// A device whose connection was sent updates past the position its resume names (they
/// went out while the request was on its way: chaos run AK, a node that thawed from a
/// pause sent a just-connected device the frames published meanwhile, then read its
/// resume) is not sent them again; a resume from where the connection stands replays as
/// before.
#[test]
fn a_resume_behind_what_the_connection_was_sent_sends_nothing_twice() {
    let hub = Hub::default();
    let (d, rx) = device(&hub);
    let task = TaskId::parse("t1").unwrap();
    for sequence in 1..=3 {
        d.replay(&task, sequence, &update(sequence));
    }
    assert_eq!(sequences(&rx), [1, 2, 3]);
    d.begin_resume(&task, 1);
    d.skip_to(&task, 1, 1);
    d.replay(&task, 2, &update(2));
    d.replay(&task, 3, &update(3));
    d.end_resume(&task);
    d.replay(&task, 4, &final_update(4));
    assert_eq!(sequences(&rx), [4], "updates 2 and 3 were sent once");

    let (fresh, fresh_rx) = device(&hub);
    fresh.replay(&task, 1, &update(1));
    fresh.begin_resume(&task, 1);
    fresh.skip_to(&task, 1, 1);
    fresh.replay(&task, 2, &update(2));
    fresh.end_resume(&task);
    assert_eq!(sequences(&fresh_rx), [1, 2]);
}
