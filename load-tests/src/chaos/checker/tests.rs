//! The checker over small synthetic histories: a clean one passes, and each rule catches
//! the defect it is for. No timing decides anything here.

use super::check;
use super::turns::CATCH_UP_GRACE_MS;
use crate::chaos::history::{Event, Frame, What};

const CHAT: &str = "chaos-u1-c0";

struct H(Vec<Event>);

impl H {
    fn new() -> H {
        H(Vec::new())
    }
    fn push(&mut self, device: u32, conn: u64, what: What) -> &mut H {
        let at_ms = self.0.len() as u64 * 10;
        self.0.push(Event {
            at_ms,
            user: 1,
            device,
            conn,
            node: 0,
            what,
        });
        self
    }
    fn frame(&mut self, device: u32, conn: u64, f: Frame) -> &mut H {
        self.push(device, conn, What::Frame(f))
    }
    fn ack(&mut self, device: u32, conn: u64, message: &str) -> &mut H {
        let f = Frame {
            kind: "chat_message_confirmed".into(),
            chat: CHAT.into(),
            message: message.into(),
            ..Frame::default()
        };
        self.frame(device, conn, f)
    }
    fn update(&mut self, device: u32, conn: u64, task: &str, seq: u64, last: bool) -> &mut H {
        let f = Frame {
            kind: "ai_message_update".into(),
            chat: CHAT.into(),
            task: task.into(),
            user_message: "m1".into(),
            sequence: seq,
            is_final: last,
            text: format!("text up to {seq}"),
            ..Frame::default()
        };
        self.frame(device, conn, f)
    }
    fn lost(&mut self, device: u32, conn: u64, task: &str, seq: u64) -> &mut H {
        let f = Frame {
            kind: "ai_message_update".into(),
            chat: CHAT.into(),
            task: task.into(),
            user_message: "m1".into(),
            sequence: seq,
            is_final: true,
            error_code: "node_lost".into(),
            text: format!("text up to {}", seq - 1),
            ..Frame::default()
        };
        self.frame(device, conn, f)
    }
    /// Two devices on connections 1 and 2 see `m1` answered by `t1` in three frames.
    fn clean() -> H {
        let mut h = H::new();
        h.push(0, 1, What::Connected).push(1, 2, What::Connected);
        let hello = Frame {
            kind: "active_chat_set_ack".into(),
            chat: CHAT.into(),
            ..Frame::default()
        };
        h.frame(0, 1, hello.clone()).frame(1, 2, hello);
        h.push(
            0,
            1,
            What::Sent {
                chat: CHAT.into(),
                message: "m1".into(),
                resend: false,
            },
        );
        h.ack(0, 1, "m1").ack(1, 2, "m1");
        for seq in 1..=3 {
            h.update(0, 1, "t1", seq, seq == 3)
                .update(1, 2, "t1", seq, seq == 3);
        }
        h
    }
    fn kinds(&self) -> Vec<&'static str> {
        check(&self.0).violations.iter().map(|v| v.kind).collect()
    }
}

#[test]
fn a_clean_history_passes_with_its_figures() {
    let h = H::clean();
    let v = check(&h.0);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!((v.messages_sent, v.messages_acked, v.turns), (1, 1, 1));
    assert_eq!(v.endings.get("answered"), Some(&1));
    assert_eq!(v.frames, 10);
}

#[test]
fn gaps_duplicates_and_frames_after_the_final_one_are_caught() {
    let mut h = H::clean();
    h.update(0, 1, "t2", 1, false).update(0, 1, "t2", 3, false);
    h.update(0, 1, "t2", 3, true).update(0, 1, "t2", 4, false);
    let kinds = h.kinds();
    for k in ["sequence_gap", "duplicate_sequence", "frame_after_final"] {
        assert!(kinds.contains(&k), "{k} not in {kinds:?}");
    }
}

#[test]
fn a_resume_continues_from_its_position_and_a_skipped_frame_is_a_gap() {
    let mut h = H::clean();
    h.push(1, 3, What::Connected);
    h.push(
        1,
        3,
        What::ResumeSent {
            chat: CHAT.into(),
            task: "t1".into(),
            last_sequence: 1,
        },
    );
    let resumed = Frame {
        kind: "ai_task_resumed".into(),
        chat: CHAT.into(),
        task: "t1".into(),
        recovered: true,
        ..Frame::default()
    };
    h.frame(1, 3, resumed.clone());
    h.update(1, 3, "t1", 2, false).update(1, 3, "t1", 3, true);
    assert_eq!(h.kinds(), Vec::<&str>::new());
    h.push(
        1,
        4,
        What::ResumeSent {
            chat: CHAT.into(),
            task: "t1".into(),
            last_sequence: 1,
        },
    );
    h.frame(1, 4, resumed).update(1, 4, "t1", 3, true);
    assert_eq!(h.kinds(), vec!["sequence_gap"]);
}

#[test]
fn a_node_lost_ending_on_one_device_and_the_answer_on_another_diverge() {
    let mut h = H::new();
    h.push(
        0,
        1,
        What::Sent {
            chat: CHAT.into(),
            message: "m1".into(),
            resend: false,
        },
    );
    h.ack(0, 1, "m1").ack(1, 2, "m1");
    h.update(0, 1, "t1", 1, false).update(1, 2, "t1", 1, false);
    h.update(0, 1, "t1", 2, true).lost(1, 2, "t1", 2);
    let v = check(&h.0);
    assert_eq!(
        v.by_kind().get("divergent_ending"),
        Some(&1),
        "{:?}",
        v.violations
    );
}

#[test]
fn messages_answered_twice_or_never_are_caught_and_typed_errors_count_as_endings() {
    let mut h = H::clean();
    h.update(0, 1, "t9", 1, true);
    assert!(h.kinds().contains(&"answered_twice"));

    let mut h = H::new();
    h.ack(0, 1, "m1");
    assert_eq!(h.kinds(), vec!["unanswered"]);
    let err = Frame {
        kind: "error".into(),
        chat: CHAT.into(),
        message: "m1".into(),
        error_code: "cache_unavailable".into(),
        ..Frame::default()
    };
    h.frame(0, 1, err);
    let v = check(&h.0);
    assert!(v.violations.is_empty());
    assert_eq!(v.endings.get("cache_unavailable"), Some(&1));
}

#[test]
fn a_device_that_showed_a_turn_needs_its_ending_unless_told_it_is_not_recovered() {
    let mut h = H::new();
    h.ack(0, 1, "m1")
        .update(0, 1, "t1", 1, false)
        .update(1, 2, "t1", 1, false);
    h.update(0, 1, "t1", 2, true);
    h.push(1, 2, What::Disconnected("cut".into()));
    assert_eq!(h.kinds(), vec!["unfinished_on_device"]);
    let gave_up = Frame {
        kind: "ai_task_resumed".into(),
        chat: CHAT.into(),
        task: "t1".into(),
        recovered: false,
        ..Frame::default()
    };
    h.frame(1, 3, gave_up);
    assert_eq!(h.kinds(), Vec::<&str>::new());
}

#[test]
fn a_turn_no_device_saw_end_and_another_users_chat_are_caught() {
    let mut h = H::new();
    h.ack(0, 1, "m1").update(0, 1, "t1", 1, false);
    h.push(0, 1, What::Disconnected("killed".into()));
    let kinds = h.kinds();
    assert!(
        kinds.contains(&"no_ending") && kinds.contains(&"unfinished_on_device"),
        "{kinds:?}"
    );

    let mut h = H::clean();
    let foreign = Frame {
        kind: "ai_message_update".into(),
        chat: "chaos-u2-c0".into(),
        task: "tx".into(),
        sequence: 1,
        is_final: true,
        ..Frame::default()
    };
    h.frame(0, 1, foreign);
    assert!(h.kinds().contains(&"foreign_chat"));
}

#[test]
fn acknowledged_store_writes_must_read_back_byte_equal() {
    let mut h = H::clean();
    let store = |m: &str| What::StoreSent {
        chat: CHAT.into(),
        message: m.into(),
        content: format!("ct-{m}"),
    };
    let confirmed = |m: &str| Frame {
        kind: "ai_response_storage_confirmed".into(),
        chat: CHAT.into(),
        message: m.into(),
        stored: true,
        ..Frame::default()
    };
    h.push(0, 1, store("t1")).frame(0, 1, confirmed("t1"));
    h.push(0, 1, store("t2")).frame(0, 1, confirmed("t2"));
    h.push(0, 1, store("t3")).frame(0, 1, confirmed("t3"));
    let messages = vec![
        ("t1".to_string(), "ct-t1".to_string()),
        ("t2".to_string(), "other".to_string()),
    ];
    h.push(
        0,
        5,
        What::Readback {
            chat: CHAT.into(),
            messages,
        },
    );
    let v = check(&h.0);
    assert_eq!(v.stores_acked, 3);
    assert_eq!(h.kinds(), vec!["store_differs", "store_lost"]);
}

#[test]
fn frames_after_the_end_or_after_recovered_false_are_reported_once_per_connection() {
    let mut h = H::clean();
    h.update(0, 1, "t1", 4, false).update(0, 1, "t1", 5, false);
    assert_eq!(h.kinds(), vec!["frame_after_final"]);

    let mut h = H::clean();
    let gave_up = Frame {
        kind: "ai_task_resumed".into(),
        chat: CHAT.into(),
        task: "t1".into(),
        recovered: false,
        ..Frame::default()
    };
    h.frame(1, 3, gave_up);
    h.update(1, 3, "t1", 1, false).update(1, 3, "t1", 3, true);
    assert_eq!(h.kinds(), vec!["frames_after_unrecovered", "sequence_gap"]);
}

#[test]
fn a_pending_answer_agrees_with_any_outcome_of_the_same_text_only() {
    let pending = |text: &str| Frame {
        kind: "pending_ai_response".into(),
        chat: CHAT.into(),
        task: "t1".into(),
        user_message: "m1".into(),
        text: text.into(),
        ..Frame::default()
    };
    let mut h = H::clean();
    h.frame(1, 3, pending("text up to 3"));
    assert_eq!(h.kinds(), Vec::<&str>::new());
    h.frame(1, 3, pending("the whole answer"));
    assert_eq!(h.kinds(), vec!["divergent_ending"]);
}

mod missed;
