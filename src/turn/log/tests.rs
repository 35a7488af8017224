use chatd_protocol::{AiMessageUpdate, AiTypingStarted, ChatId, MessageId, ServerMessage, TaskId};

use super::*;

fn chat() -> ChatId {
    ChatId::parse("c").unwrap()
}

fn update(text: &str, sequence: u64, is_final_chunk: bool) -> ServerMessage {
    let task = TaskId::parse("t").unwrap();
    ServerMessage::AiMessageUpdate(AiMessageUpdate::new(
        task,
        chat(),
        MessageId::parse("m").unwrap(),
        text.into(),
        sequence,
        is_final_chunk,
    ))
}

fn typing() -> ServerMessage {
    ServerMessage::AiTypingStarted(AiTypingStarted {
        chat_id: chat(),
        message_id: MessageId::parse("t").unwrap(),
        user_message_id: MessageId::parse("m").unwrap(),
        model_name: "model".into(),
        category: None,
        title: None,
        icon_names: Vec::new(),
        is_continuation: false,
        encrypted_chat_key: None,
    })
}

/// A turn as the writer logs it: typing, three chunks, a link repair (whole text), the
/// final frame, the background frame, and a frame for one device only.
fn log() -> Logged {
    let showing = Audience::Showing(chat());
    let frames = [
        (
            Audience::Only(vec![7]),
            ServerMessage::Pong(chatd_protocol::Empty {}),
        ),
        (Audience::All, typing()),
        (showing.clone(), update("A", 1, false)),
        (showing.clone(), update("A\n\nB", 2, false)),
        (showing.clone(), update("A\n\nB\n\nC", 3, false)),
        (showing.clone(), update("A\n\nX\n\nC", 4, false)),
        (showing.clone(), update("A\n\nX\n\nC", 5, true)),
        (
            Audience::NotShowing(chat()),
            ServerMessage::Pong(chatd_protocol::Empty {}),
        ),
    ];
    let mut text = String::new();
    let mut entries = Vec::new();
    for (i, (audience, frame)) in frames.iter().enumerate() {
        // Entries go through their stored form, the frame's wire JSON embedded as it is.
        let stored = LogEntry::encode(audience, frame, &frame.to_json(), &text);
        let entry: LogEntry = serde_json::from_slice(&stored).unwrap();
        assert_eq!(entry, LogEntry::of(audience, frame, &text));
        entries.push((i as u64 + 1, entry));
        if let ServerMessage::AiMessageUpdate(u) = frame {
            text = u.full_content_so_far.clone();
        }
    }
    Logged {
        entries,
        first: Some(1),
        ended: true,
    }
}

fn texts(frames: &[(u64, ServerMessage)]) -> Vec<(u64, String)> {
    frames
        .iter()
        .map(|(i, f)| match f {
            ServerMessage::AiMessageUpdate(u) => {
                (*i, format!("{}:{}", u.sequence, u.full_content_so_far))
            }
            other => (*i, other.type_name().to_string()),
        })
        .collect()
}

#[test]
fn chunks_are_logged_as_what_they_add() {
    let log = log();
    let chunks: Vec<(bool, String)> = log
        .entries
        .iter()
        .filter_map(|(_, e)| match e {
            LogEntry::Chunk { append, update } => {
                Some((*append, update.full_content_so_far.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        chunks,
        [
            (true, "A".to_string()),
            (true, "\n\nB".into()),
            (true, "\n\nC".into()),
            (false, "A\n\nX\n\nC".into()),
        ]
    );
}

#[test]
fn replay_table() {
    let full = log();
    let mut trimmed = log();
    trimmed.first = Some(3);
    trimmed.entries.drain(..2);
    let all = vec![
        (2, "ai_typing_started".to_string()),
        (3, "1:A".into()),
        (4, "2:A\n\nB".into()),
        (5, "3:A\n\nB\n\nC".into()),
        (6, "4:A\n\nX\n\nC".into()),
        (7, "5:A\n\nX\n\nC".into()),
    ];
    type Case<'a> = (&'a str, &'a Logged, u64, Option<Vec<(u64, String)>>);
    let cases: Vec<Case> = vec![
        ("from 0", &full, 0, Some(all.clone())),
        ("from the middle", &full, 2, Some(all[3..].to_vec())),
        ("from the last chunk", &full, 4, Some(all[5..].to_vec())),
        ("from the final frame", &full, 5, Some(Vec::new())),
        ("ahead of the log", &full, 9, None),
        ("trimmed log", &trimmed, 3, None),
    ];
    for (name, log, position, expected) in cases {
        assert_eq!(
            replay(log, position).map(|r| texts(&r.frames)),
            expected,
            "{name}"
        );
    }
    // Where the device's position is in the log (what it had counts as sent).
    for (position, after) in [(0, 0), (2, 4), (4, 6), (5, 7)] {
        assert_eq!(
            replay(&full, position).map(|r| r.after),
            Some(after),
            "{position}"
        );
    }
}

#[test]
fn latest_is_typing_and_the_newest_cumulative_update() {
    let mut log = log();
    log.entries.truncate(5);
    let (frames, last) = latest(&log);
    assert_eq!(
        texts(&frames),
        [
            (2, "ai_typing_started".to_string()),
            (5, "3:A\n\nB\n\nC".into())
        ]
    );
    assert_eq!(last, 5);
}

#[test]
fn a_position_ahead_of_a_running_turns_log_is_behind_only_until_the_log_reaches_it() {
    let mut running = log();
    running.ended = false;
    // The log holds chunks 1-5.
    assert!(behind(&running, 6), "one frame ahead of the log");
    assert!(!behind(&running, 5));
    assert!(!behind(&running, 0));
    let mut ended = log();
    ended.ended = true;
    assert!(!behind(&ended, 6), "an ended turn's log will not grow");
    let mut empty = log();
    empty.ended = false;
    empty.entries.clear();
    assert!(!behind(&empty, 0), "from the start is never ahead");
    let mut trimmed = running;
    trimmed.first = Some(3);
    assert!(!behind(&trimmed, 9), "a trimmed log will not bring it back");
}
