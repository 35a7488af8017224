//! Per connection and turn: `ai_message_update` sequences go up by one from the first frame
//! the connection got (or from the position it resumed at, once `ai_task_resumed` said
//! `recovered: true`) to one final frame; nothing of the turn comes after it, nor after
//! `recovered: false` ("nothing more: sync instead"). A frame after the end is reported
//! once per connection and turn; the frames after `recovered: false` are then checked as
//! a fresh start.

use std::collections::HashMap;

use super::Violation;
use crate::chaos::history::{Event, What};

#[derive(Default)]
struct Track {
    last: Option<u64>,
    ended: bool,
    resumed_from: Option<u64>,
    /// `recovered: false` came (and nothing since).
    unrecovered: bool,
    /// A frame after the end was reported already.
    reported: bool,
}

pub fn check(events: &[Event]) -> Vec<Violation> {
    let mut tracks: HashMap<(u64, &str), Track> = HashMap::new();
    let mut out = Vec::new();
    for (at, e) in events.iter().enumerate() {
        match &e.what {
            What::ResumeSent {
                task,
                last_sequence,
                ..
            } => {
                tracks
                    .entry((e.conn, task.as_str()))
                    .or_default()
                    .resumed_from = Some(*last_sequence);
            }
            What::Frame(f) if f.kind == "ai_task_resumed" => {
                let t = tracks.entry((e.conn, f.task.as_str())).or_default();
                if f.recovered {
                    if t.last.is_none() {
                        t.last = t.resumed_from;
                    }
                } else {
                    t.unrecovered = true;
                }
            }
            What::Frame(f) if f.kind == "ai_message_update" => {
                let t = tracks.entry((e.conn, f.task.as_str())).or_default();
                if let Some(v) = step(t, f.sequence, f.is_final, at) {
                    out.push(v);
                }
            }
            _ => {}
        }
    }
    out
}

fn step(t: &mut Track, seq: u64, is_final: bool, at: usize) -> Option<Violation> {
    let found = if std::mem::take(&mut t.unrecovered) {
        t.last = None;
        let detail = format!("sequence {seq} after `recovered: false` (\"nothing more\")");
        let first = !std::mem::replace(&mut t.reported, true);
        first.then_some(("frames_after_unrecovered", detail))
    } else if t.ended {
        let detail = format!("sequence {seq} after the final frame");
        let first = !std::mem::replace(&mut t.reported, true);
        first.then_some(("frame_after_final", detail))
    } else {
        match t.last {
            Some(l) if seq == l + 1 => None,
            Some(l) if seq <= l => Some((
                "duplicate_sequence",
                format!("sequence {seq} after {l} (repeated or backwards)"),
            )),
            Some(l) => Some(("sequence_gap", format!("sequence {seq} after {l}"))),
            None => None,
        }
    };
    t.last = Some(t.last.map_or(seq, |l| l.max(seq)));
    t.ended |= is_final;
    found.map(|(kind, detail)| Violation { kind, at, detail })
}
