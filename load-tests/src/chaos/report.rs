//! What a run prints: each violation with the frames around it (the same user's events
//! just before and after), then the summary table.

use std::fmt::Write;

use super::checker::Verdict;
use super::history::{Event, What};

/// Events of the violation's user printed before and after it.
const AROUND: usize = 6;
/// Violations printed in full per kind on the terminal (the file has every one).
pub const SHOWN_PER_KIND: usize = 5;

pub fn line(e: &Event) -> String {
    let who = format!(
        "{:>7}ms u{} d{} c{} n{}",
        e.at_ms, e.user, e.device, e.conn, e.node
    );
    let what = match &e.what {
        What::Frame(f) => {
            let mut s = format!("<- {}", f.kind);
            for (k, v) in [
                ("chat", &f.chat),
                ("task", &f.task),
                ("msg", &f.message),
                ("for", &f.user_message),
            ] {
                if !v.is_empty() {
                    let _ = write!(s, " {k}={v}");
                }
            }
            if f.kind == "ai_message_update" {
                let _ = write!(s, " seq={} final={}", f.sequence, f.is_final);
            }
            if !f.error_code.is_empty() {
                let _ = write!(s, " error={}", f.error_code);
            }
            if f.revoked {
                s.push_str(" revoked");
            }
            if f.kind == "ai_task_resumed" {
                let _ = write!(s, " recovered={}", f.recovered);
            }
            if f.is_final || f.kind.ends_with("completed") {
                let _ = write!(s, " text={}ch", f.text.len());
            }
            s
        }
        other => format!("-- {other:?}"),
    };
    format!("{who} {what}")
}

/// The violation's neighbourhood in its user's events (and the faults in between).
pub fn context(events: &[Event], at: usize) -> String {
    let Some(user) = events.get(at).map(|e| e.user) else {
        return String::new();
    };
    let mine = |e: &Event| e.user == user || matches!(e.what, What::Fault { .. });
    let before: Vec<usize> = (0..at)
        .rev()
        .filter(|i| mine(&events[*i]))
        .take(AROUND)
        .collect();
    let after: Vec<usize> = (at + 1..events.len())
        .filter(|i| mine(&events[*i]))
        .take(AROUND)
        .collect();
    let mut out = String::new();
    for i in before.into_iter().rev().chain([at]).chain(after) {
        let mark = if i == at { ">>" } else { "  " };
        let _ = writeln!(out, "    {mark} {}", line(&events[i]));
    }
    out
}

pub fn violations(events: &[Event], verdict: &Verdict, per_kind: usize) -> String {
    let mut out = String::new();
    let mut shown = std::collections::HashMap::new();
    for v in &verdict.violations {
        let n = shown.entry(v.kind).or_insert(0usize);
        *n += 1;
        if *n > per_kind {
            continue;
        }
        let _ = writeln!(out, "VIOLATION {}: {}", v.kind, v.detail);
        out.push_str(&context(events, v.at));
    }
    out
}

pub struct Extra {
    pub seed: u64,
    pub seconds: u64,
    pub users: usize,
    pub devices: usize,
    pub redis_keys: usize,
    pub redis_hits: Vec<String>,
    pub pg_hits: Vec<String>,
    /// Each surviving node's descriptors and memory, at its start and after the run.
    pub held: Vec<super::resources::Held>,
    /// When the run started (wall clock; history times count from here, node logs use it).
    pub started: String,
}

pub fn summary(verdict: &Verdict, x: &Extra) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "chaos: seed {}, {} s, {} users, {} devices, 3 nodes, started {} (node logs: nodes/)",
        x.seed, x.seconds, x.users, x.devices, x.started
    );
    let _ = writeln!(s, "| figure | value |\n| --- | --- |");
    let row = |s: &mut String, k: &str, v: String| {
        let _ = writeln!(s, "| {k} | {v} |");
    };
    for (kind, n) in &verdict.faults {
        row(&mut s, &format!("faults: {kind}"), n.to_string());
    }
    row(
        &mut s,
        "messages sent / acknowledged",
        format!("{} / {}", verdict.messages_sent, verdict.messages_acked),
    );
    row(&mut s, "turns", verdict.turns.to_string());
    row(&mut s, "frames checked", verdict.frames.to_string());
    row(
        &mut s,
        "store writes acknowledged",
        verdict.stores_acked.to_string(),
    );
    for (ending, n) in &verdict.endings {
        row(&mut s, &format!("endings: {ending}"), n.to_string());
    }
    let share = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    let typed: usize = verdict
        .endings
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "answered" | "cancelled"))
        .map(|(_, n)| n)
        .sum();
    let all: usize = verdict.endings.values().sum();
    row(
        &mut s,
        "typed endings, all turns",
        format!("{:.1}% ({typed} of {all})", share(typed, all)),
    );
    row(
        &mut s,
        "typed endings, turns > 10 s after a fault",
        format!(
            "{:.1}% ({} of {})",
            share(verdict.typed_calm, verdict.turns_calm),
            verdict.typed_calm,
            verdict.turns_calm
        ),
    );
    row(
        &mut s,
        "Redis keys scanned / holding the marker",
        format!("{} / {}", x.redis_keys, x.redis_hits.len()),
    );
    row(
        &mut s,
        "PostgreSQL tables holding the marker",
        x.pg_hits.len().to_string(),
    );
    for (k, v) in super::resources::report(&x.held).0 {
        row(&mut s, &k, v);
    }
    for (kind, n) in verdict.by_kind() {
        row(&mut s, &format!("violations: {kind}"), n.to_string());
    }
    let total = verdict.violations.len()
        + x.redis_hits.len()
        + x.pg_hits.len()
        + x.held.iter().filter(|h| !h.ok()).count();
    row(&mut s, "violations", total.to_string());
    s
}
