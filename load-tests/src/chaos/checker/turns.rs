//! Messages and turns: exactly one answer turn or a typed ending per acknowledged message,
//! never two turns for one message; every turn ends on some device, the same way on every
//! device; a device that showed a turn got its ending; a connection open across a whole
//! turn got it; no frame of another user's chat.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::{Verdict, Violation};
use crate::chaos::history::{Ending, Event, Frame, What, chat_owner};

/// After a fault, this long counts as "right after" it for the share of typed endings.
const WINDOW_MS: u64 = 10_000;

#[derive(Default)]
struct Task {
    user: u32,
    chat: String,
    first: usize,
    first_ms: u64,
    last_ms: u64,
    endings: Vec<(u32, u64, Ending, String, usize)>,
    gave_up: HashSet<u32>,
    shown: HashMap<u32, usize>,
}

#[derive(Default)]
struct Message {
    /// The first acknowledgement: event and ms.
    acked: Option<(usize, u64)>,
    tasks: BTreeSet<String>,
    typed: Option<String>,
    queued: Option<(usize, String)>,
}

/// A connection: its user and node, its first frame, where it closed (event and ms).
struct Link {
    user: u32,
    node: usize,
    open: usize,
    close: Option<(usize, u64)>,
}

/// How long a node must have been reachable again after an outage (paused, or cut off
/// Redis) before its devices are expected to have what was published meanwhile (it
/// subscribes again and catches them up from the turn logs).
pub(super) const CATCH_UP_GRACE_MS: u64 = 3_000;

#[derive(Default)]
struct Seen {
    tasks: HashMap<String, Task>,
    messages: HashMap<(u32, String, String), Message>,
    conns: HashMap<u64, Link>,
    windows: Vec<(u64, u64)>,
    /// Node, from, to (ms) of every outage of one node: a pause, or a cut from Redis.
    outages: Vec<(usize, u64, u64)>,
    out: Vec<Violation>,
}

const TURN_FRAMES: [&str; 5] = [
    "ai_task_initiated",
    "ai_typing_started",
    "ai_message_update",
    "ai_background_response_completed",
    "pending_ai_response",
];

pub fn check(events: &[Event], verdict: &mut Verdict) {
    let mut seen = Seen::default();
    for (at, e) in events.iter().enumerate() {
        match &e.what {
            What::Disconnected(_) => {
                // A frame read before the close can be recorded after it: the connection
                // stays closed from here, whenever its first frame is recorded.
                let link = Link {
                    user: e.user,
                    node: e.node,
                    open: at,
                    close: None,
                };
                let c = seen.conns.entry(e.conn).or_insert(link);
                c.close.get_or_insert((at, e.at_ms));
            }
            What::Fault {
                lasted_ms, kind, ..
            } => {
                let from = e.at_ms.saturating_sub(*lasted_ms);
                seen.windows.push((from, e.at_ms + WINDOW_MS));
                if kind == "pause_node" || kind == "cut_redis" {
                    seen.outages.push((e.node, from, e.at_ms));
                }
            }
            What::Frame(f) => {
                // A connection counts from its first frame (chatd had registered it).
                let link = Link {
                    user: e.user,
                    node: e.node,
                    open: at,
                    close: None,
                };
                seen.conns.entry(e.conn).or_insert(link);
                seen.frame(at, e, f);
            }
            _ => {}
        }
    }
    seen.messages_rule(verdict);
    seen.tasks_rule(verdict);
    verdict.violations.append(&mut seen.out);
}

impl Seen {
    fn frame(&mut self, at: usize, e: &Event, f: &Frame) {
        if !f.chat.is_empty() && chat_owner(&f.chat) != Some(e.user) {
            self.violation(
                "foreign_chat",
                at,
                format!("chat {} to user {}", f.chat, e.user),
            );
        }
        let key = |m: &str| (e.user, f.chat.clone(), m.to_string());
        match f.kind.as_str() {
            "chat_message_confirmed" => {
                let m = self.messages.entry(key(&f.message)).or_default();
                m.acked.get_or_insert((at, e.at_ms));
            }
            "message_queued" => {
                let m = self.messages.entry(key(&f.user_message)).or_default();
                m.queued.get_or_insert((at, f.task.clone()));
            }
            "error" if !f.message.is_empty() => {
                let m = self.messages.entry(key(&f.message)).or_default();
                m.typed.get_or_insert(f.error_code.clone());
            }
            _ => {}
        }
        if f.task.is_empty()
            || !(TURN_FRAMES.contains(&f.kind.as_str()) || f.kind == "ai_task_resumed")
        {
            return;
        }
        let task = self.tasks.entry(f.task.clone()).or_insert_with(|| Task {
            user: e.user,
            chat: f.chat.clone(),
            first: at,
            first_ms: e.at_ms,
            ..Task::default()
        });
        if task.user != e.user {
            let detail = format!(
                "task {} of user {} sent to user {}",
                f.task, task.user, e.user
            );
            self.violation("foreign_task", at, detail);
            return;
        }
        if f.kind == "ai_task_resumed" {
            if !f.recovered {
                task.gave_up.insert(e.device);
            }
            return;
        }
        if f.kind == "ai_message_update" {
            task.shown.entry(e.device).or_insert(at);
        }
        if let Some(ending) = f.ending() {
            task.last_ms = task.last_ms.max(e.at_ms);
            task.endings
                .push((e.device, e.conn, ending, f.text.clone(), at));
        }
        if !f.user_message.is_empty() {
            let m = self.messages.entry(key(&f.user_message)).or_default();
            m.tasks.insert(f.task.clone());
        }
    }

    fn violation(&mut self, kind: &'static str, at: usize, detail: String) {
        self.out.push(Violation { kind, at, detail });
    }

    /// The turn's span overlaps a fault or the ten seconds after it.
    fn near_fault(&self, from: u64, to: u64) -> bool {
        self.windows
            .iter()
            .any(|(a, b)| *a <= to.max(from) && *b >= from)
    }

    fn messages_rule(&mut self, verdict: &mut Verdict) {
        let mut found = Vec::new();
        for ((user, chat, message), m) in &self.messages {
            let Some((acked, _)) = m.acked else { continue };
            verdict.messages_acked += 1;
            if m.tasks.len() > 1 {
                let detail = format!("message {message} of user {user} answered by {:?}", m.tasks);
                found.push(("answered_twice", acked, detail));
            } else if m.tasks.is_empty() {
                if let Some(code) = &m.typed {
                    *verdict.endings.entry(code.clone()).or_insert(0) += 1;
                } else if !self.covered(*user, chat, m.queued.as_ref()) {
                    let detail = format!("message {message} in {chat}: no turn and no typed error");
                    found.push(("unanswered", acked, detail));
                }
            }
        }
        for (kind, at, detail) in found {
            self.violation(kind, at, detail);
        }
    }

    /// A queued message is answered by the chat's next turn (with what else was queued).
    fn covered(&self, user: u32, chat: &str, queued: Option<&(usize, String)>) -> bool {
        let Some((at, behind)) = queued else {
            return false;
        };
        self.tasks
            .iter()
            .any(|(id, t)| t.user == user && t.chat == chat && t.first > *at && id != behind)
    }

    /// Where each turn began at the latest: its message's first acknowledgement (a turn
    /// no device saw live, only replayed later to a device that sent a copy of its message,
    /// is first recorded at that replay, long after it ran).
    fn begun(&self) -> HashMap<&str, (usize, u64)> {
        let mut begun: HashMap<&str, (usize, u64)> = HashMap::new();
        for m in self.messages.values() {
            let Some(acked) = m.acked else { continue };
            for task in &m.tasks {
                let b = begun.entry(task.as_str()).or_insert(acked);
                *b = (*b).min(acked);
            }
        }
        begun
    }

    fn tasks_rule(&mut self, verdict: &mut Verdict) {
        verdict.turns += self.tasks.len();
        let begun = self.begun();
        let mut found = Vec::new();
        for (id, t) in &self.tasks {
            let first = t
                .endings
                .iter()
                .map(|x| x.2.clone())
                .find(|e| *e != Ending::Pending)
                .or_else(|| t.endings.first().map(|x| x.2.clone()));
            let name = first.as_ref().map_or("no_ending".to_string(), Ending::name);
            *verdict.endings.entry(name).or_insert(0) += 1;
            if !self.near_fault(t.first_ms, t.last_ms) {
                verdict.turns_calm += 1;
                if matches!(first, Some(Ending::Error(_) | Ending::Shutdown)) {
                    verdict.typed_calm += 1;
                }
            }
            found.extend(ending_rules(id, t));
            let first = (t.first, t.first_ms);
            let begun = begun.get(id.as_str()).map_or(first, |b| first.min(*b));
            found.extend(self.missed(id, t, begun));
        }
        for (kind, at, detail) in found {
            self.violation(kind, at, detail);
        }
    }

    /// Connections of the user open from before the turn began (`begun`: event and ms) to
    /// after it ended on every device that ended it, which got no ending of it. Excused: a connection whose
    /// node was out (paused, or cut off Redis) while the turn ran, and that closed before
    /// the node had been back for [`CATCH_UP_GRACE_MS`] (nothing comes through a frozen or
    /// cut-off node; once back, it catches its devices up).
    fn missed(
        &self,
        id: &str,
        t: &Task,
        begun: (usize, u64),
    ) -> Vec<(&'static str, usize, String)> {
        let Some(last) = t.endings.iter().map(|x| x.4).max() else {
            return Vec::new();
        };
        let ended_on: HashSet<u64> = t.endings.iter().map(|x| x.1).collect();
        let mut out = Vec::new();
        for (conn, link) in &self.conns {
            let across = link.open < begun.0 && link.close.is_none_or(|c| c.0 > last);
            if link.user != t.user || !across || ended_on.contains(conn) {
                continue;
            }
            let back = self.back_at(link.node, begun.1, t.last_ms);
            let excused =
                back.is_some_and(|b| link.close.is_some_and(|c| c.1 < b + CATCH_UP_GRACE_MS));
            if !excused {
                let detail = format!(
                    "turn {id} in {}: connection {conn} (node {}) open throughout got no ending",
                    t.chat, link.node
                );
                out.push(("missed_turn", last, detail));
            }
        }
        out
    }

    /// When `node` was back for good after the outages that overlapped `[from, to]` (an
    /// outage starting within the grace after the one before continues it); `None` when
    /// none overlapped.
    fn back_at(&self, node: usize, from: u64, to: u64) -> Option<u64> {
        let mine = || self.outages.iter().filter(move |o| o.0 == node);
        let mut back = mine()
            .filter(|o| o.1 <= to && o.2 >= from)
            .map(|o| o.2)
            .max()?;
        while let Some(next) = mine()
            .filter(|o| o.1 <= back + CATCH_UP_GRACE_MS && o.2 > back)
            .map(|o| o.2)
            .max()
        {
            back = next;
        }
        Some(back)
    }
}

/// No ending anywhere; different endings on different devices; a device that showed the
/// turn without its ending.
fn ending_rules(id: &str, t: &Task) -> Vec<(&'static str, usize, String)> {
    let mut out = Vec::new();
    if t.endings.is_empty() && t.gave_up.is_empty() {
        out.push((
            "no_ending",
            t.first,
            format!("turn {id} in {} ended on no device", t.chat),
        ));
    }
    if let Some(detail) = divergence(id, t) {
        out.push(("divergent_ending", detail.0, detail.1));
    }
    for (device, shown) in &t.shown {
        let ended = t.endings.iter().any(|x| x.0 == *device && x.4 >= *shown);
        if !ended && !t.gave_up.contains(device) {
            let detail = format!("device {device} showed turn {id} and never got its ending");
            out.push(("unfinished_on_device", *shown, detail));
        }
    }
    out
}

/// Two endings of one turn that differ: in outcome (a pending answer has none), or in text.
fn divergence(id: &str, t: &Task) -> Option<(usize, String)> {
    let same = |a: &(u32, u64, Ending, String, usize), b: &(u32, u64, Ending, String, usize)| {
        let pending = a.2 == Ending::Pending || b.2 == Ending::Pending;
        a.3 == b.3 && (pending || a.2 == b.2)
    };
    for (i, a) in t.endings.iter().enumerate() {
        if let Some(b) = t.endings[i + 1..].iter().find(|b| !same(a, b)) {
            let detail = format!(
                "turn {id}: device {} got {} ({} chars), device {} got {} ({} chars)",
                a.0,
                a.2.name(),
                a.3.len(),
                b.0,
                b.2.name(),
                b.3.len()
            );
            return Some((b.4, detail));
        }
    }
    None
}
