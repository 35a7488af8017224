//! `stream`: throughput with an instant fake LLM. N concurrent chats each run turns back
//! to back for a fixed time; reported as completed chats/s and answer tokens/s (tokens
//! per answer × chats/s), per target, with each server's CPU time per chat. The direct
//! run is the fake LLM's own ceiling; a relay within 10% of it is flagged. Two floors:
//! the one-call relay and one making chatd's three model calls per chat (`floor3`);
//! chatd's ratio is reported against both.

use std::time::Duration;

use serde_json::json;

use super::{Servers, Until, ratio, run_turns};
use crate::charts::Chart;
use crate::client::{Kind, Target};
use crate::fake_llm::{Mode, Script};
use crate::report::Report;

pub struct Params {
    pub concurrency: Vec<usize>,
    pub duration: Duration,
    pub tokens: usize,
}

/// The lanes measured, in order: (name, client protocol).
const LANES: [(&str, Kind); 4] = [
    ("direct", Kind::Direct),
    ("floor", Kind::Floor),
    ("floor3", Kind::Floor),
    ("chatd", Kind::Chatd),
];

fn target(servers: &Servers, lane: usize) -> Target {
    let (_, kind) = LANES[lane];
    match LANES[lane].0 {
        "floor3" => Target {
            kind,
            addr: servers.floor3.addr,
        },
        _ => servers.target(kind),
    }
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let mut report = Report::new(
        "stream",
        json!({"concurrency": p.concurrency, "duration_s": p.duration.as_secs_f64(),
            "tokens": p.tokens, "llm": "instant"}),
    );
    let servers = Servers::start(&Script {
        mode: Mode::Instant,
        tokens: p.tokens,
        pace: Duration::ZERO,
        think: Duration::ZERO,
        preprocess: None,
    })?;
    report.line(format!(
        "stream: instant fake LLM, {}-token answers, {:?} per run",
        p.tokens, p.duration
    ));
    let stall = Duration::from_secs(3600);
    let mut rows = Vec::new();
    let mut curves: Vec<(String, Vec<(f64, f64)>)> = LANES
        .iter()
        .map(|(name, _)| (name.to_string(), Vec::new()))
        .collect();
    for &c in &p.concurrency {
        let mut per_kind = serde_json::Map::new();
        let mut chats_s = [0.0; LANES.len()];
        for (i, (name, _)) in LANES.iter().enumerate() {
            let target = target(&servers, i);
            let (conns, errors) = servers
                .open_at(target.clone(), (i * 100_000) as u64, c, 50)
                .await;
            anyhow::ensure!(errors == 0, "{errors} connections to {name} failed");
            let (conns, _) = run_turns(conns, Until::Turns(2), stall).await;
            let server = match *name {
                "floor3" => &servers.floor3,
                _ => servers.server(target.kind),
            };
            let (cpu0, llm0, own0) = (
                server.cpu_time(),
                servers.llm.cpu_time(),
                crate::procs::own_cpu_time(),
            );
            let start = tokio::time::Instant::now();
            let (conns, batch) = run_turns(conns, Until::Deadline(start + p.duration), stall).await;
            let elapsed = start.elapsed().as_secs_f64();
            let cpu = server.cpu_time().saturating_sub(cpu0);
            let llm_cpu = servers.llm.cpu_time().saturating_sub(llm0);
            let client_cpu = crate::procs::own_cpu_time().saturating_sub(own0);
            drop(conns);
            let rate = batch.ok as f64 / elapsed;
            chats_s[i] = rate;
            curves[i].1.push((c as f64, rate));
            let per_chat = |d: Duration| {
                if batch.ok > 0 {
                    d.as_secs_f64() * 1e6 / batch.ok as f64
                } else {
                    0.0
                }
            };
            let cpu_per_chat_us = per_chat(cpu);
            let client_cpu_us = per_chat(client_cpu);
            per_kind.insert(
                (*name).into(),
                json!({
                    "chats": batch.ok, "errors": batch.errors, "elapsed_s": elapsed,
                    "chats_per_s": rate, "tokens_per_s": rate * p.tokens as f64,
                    "server_cpu_us_per_chat": cpu_per_chat_us,
                    "fake_llm_cpu_us_per_chat": per_chat(llm_cpu),
                    // The load clients share the box: their cost per chat differs by lane
                    // (chatd's frames are parsed, the floor's only matched).
                    "client_cpu_us_per_chat": client_cpu_us,
                    "turn_latency": batch.done.json(),
                    "first_error": batch.first_error,
                }),
            );
            report.line(format!(
                "  {c:>4} chats  {name:<6} {rate:>9.0} chats/s {:>11.0} tokens/s  p50 turn {:>8.1} µs  p99 {:>9.1} µs  cpu/chat {cpu_per_chat_us:>7.0} µs  client {client_cpu_us:>5.0} µs  errors {}",
                rate * p.tokens as f64,
                batch.done.us(0.5),
                batch.done.us(0.99),
                batch.errors
            ));
        }
        let near = |k: usize| chats_s[k] >= 0.9 * chats_s[0];
        for (k, (name, _)) in LANES.iter().enumerate().skip(1) {
            if near(k) {
                report.line(format!(
                    "        note: {name} is within 10% of the fake LLM's ceiling; the figure is capped by it"
                ));
            }
        }
        report.line(format!(
            "        chatd / floor = {:.2}   chatd / floor3 (three model calls per chat) = {:.2}",
            ratio(chats_s[3], chats_s[1]),
            ratio(chats_s[3], chats_s[2])
        ));
        per_kind.insert("concurrency".into(), json!(c));
        per_kind.insert(
            "ratio_chatd_to_floor".into(),
            json!(ratio(chats_s[3], chats_s[1])),
        );
        per_kind.insert(
            "ratio_chatd_to_floor3".into(),
            json!(ratio(chats_s[3], chats_s[2])),
        );
        per_kind.insert("fake_llm_ceiling_chats_per_s".into(), json!(chats_s[0]));
        per_kind.insert("floor_near_ceiling".into(), json!(near(1)));
        per_kind.insert("floor3_near_ceiling".into(), json!(near(2)));
        per_kind.insert("chatd_near_ceiling".into(), json!(near(3)));
        rows.push(serde_json::Value::Object(per_kind));
    }
    report.results = json!({ "runs": rows });
    report.charts.push(Chart {
        name: "throughput_vs_concurrency".into(),
        title: format!(
            "Chats/s vs concurrent chats, instant LLM, {} tokens",
            p.tokens
        ),
        x_label: "concurrent chats".into(),
        y_label: "chats/s".into(),
        series: curves,
    });
    report.write(out)?;
    Ok(())
}
