//! The missed-turn rule: which connections count as open throughout a turn, and which are
//! excused (their node was out).

use super::*;

/// A connection open throughout that got no ending missed the turn, unless its node was
/// out (paused, or cut off Redis) meanwhile and the connection closed before the node had
/// been back for the catch-up grace.
#[test]
fn a_connection_open_throughout_that_got_nothing_missed_the_turn_unless_its_node_was_out() {
    let mut h = H::clean();
    let hello = Frame {
        kind: "active_chat_set_ack".into(),
        chat: CHAT.into(),
        ..Frame::default()
    };
    let early = Event {
        at_ms: 0,
        user: 1,
        device: 2,
        conn: 9,
        node: 2,
        what: What::Frame(hello),
    };
    h.0.insert(0, early);
    assert_eq!(h.kinds(), vec!["missed_turn"]);
    let pause = What::Fault {
        kind: "pause_node".into(),
        detail: String::new(),
        lasted_ms: 1000,
    };
    h.0.push(Event {
        at_ms: 500,
        user: 0,
        device: 0,
        conn: 0,
        node: 2,
        what: pause,
    });
    assert_eq!(
        h.kinds(),
        vec!["missed_turn"],
        "open long after the node came back"
    );
    let closed = |at_ms| Event {
        at_ms,
        user: 1,
        device: 2,
        conn: 9,
        node: 2,
        what: What::Disconnected("moving".into()),
    };
    let mut soon = H(h.0.clone());
    soon.0.push(closed(500 + CATCH_UP_GRACE_MS - 1));
    assert_eq!(
        soon.kinds(),
        Vec::<&str>::new(),
        "closed before it could catch up"
    );
    h.0.push(closed(500 + CATCH_UP_GRACE_MS + 1));
    assert_eq!(h.kinds(), vec!["missed_turn"], "closed after it could have");
}

/// A frame read just before a connection closed can be recorded after its close: the
/// connection is still closed for the turns after it (not "open throughout").
#[test]
fn a_frame_recorded_after_its_connections_close_does_not_reopen_it() {
    let mut h = H::new();
    h.push(1, 2, What::Disconnected("moving".into()));
    h.frame(
        1,
        2,
        Frame {
            kind: "error".into(),
            ..Frame::default()
        },
    );
    h.ack(0, 1, "m1").update(0, 1, "t1", 1, true);
    assert!(!h.kinds().contains(&"missed_turn"), "{:?}", h.kinds());
}

/// A turn no device saw live, replayed later to the device that sent its message, began
/// by its message's acknowledgement: a connection that opened after that (while the turn
/// ran unseen, or after it ended) was not open throughout it.
#[test]
fn a_turn_seen_only_in_a_later_replay_began_when_its_message_was_acknowledged() {
    let mut h = H::new();
    h.push(0, 1, What::Connected).ack(0, 1, "m1");
    let hello = Frame {
        kind: "active_chat_set_ack".into(),
        chat: CHAT.into(),
        ..Frame::default()
    };
    h.frame(2, 9, hello);
    h.update(0, 1, "t1", 3, true);
    assert_eq!(h.kinds(), Vec::<&str>::new());

    // Open before the acknowledgement, it was open throughout.
    let mut early = H::new();
    early.0 = h.0.clone();
    let opened = early.0.remove(2);
    early.0.insert(0, opened);
    assert_eq!(early.kinds(), vec!["missed_turn"]);
}
