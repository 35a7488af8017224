//! `active`: a paced fake LLM (N ms per token), concurrency ramped level by level; at
//! each level every chat streams answers back to back for a fixed time. A turn stalls
//! when a gap between its frames (or before its first) exceeds the stall threshold; a
//! level passes with no stalls and < 0.1% errors. Reported: the highest passing level.

use std::time::Duration;

use serde_json::json;

use super::{Servers, Until, run_turns};
use crate::charts::Chart;
use crate::client::{Conn, Kind};
use crate::fake_llm::{Mode, Script};
use crate::report::Report;

pub struct Params {
    pub levels: Vec<usize>,
    pub duration: Duration,
    pub pace: Duration,
    pub tokens: usize,
    pub stall: Duration,
    pub kinds: Vec<Kind>,
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let mut report = Report::new(
        "active",
        json!({"levels": p.levels, "duration_s": p.duration.as_secs_f64(),
            "pace_ms": p.pace.as_millis() as u64, "tokens": p.tokens,
            "stall_ms": p.stall.as_millis() as u64,
            "kinds": p.kinds.iter().map(|k| k.name()).collect::<Vec<_>>()}),
    );
    report.line(format!(
        "active: paced fake LLM {:?}/token x {} tokens; stall = gap > {:?}; {:?} per level",
        p.pace, p.tokens, p.stall, p.duration
    ));
    let servers = Servers::start(&Script {
        mode: Mode::Paced,
        tokens: p.tokens,
        pace: p.pace,
        think: Duration::ZERO,
        preprocess: None,
    })?;
    let mut results = serde_json::Map::new();
    let mut curves = Vec::new();
    for (ki, kind) in p.kinds.iter().copied().enumerate() {
        let mut pool: Vec<Conn> = Vec::new();
        let mut next_id = (ki * 1_000_000) as u64;
        let mut levels = Vec::new();
        let mut best = 0usize;
        let mut curve = Vec::new();
        for &level in &p.levels {
            if pool.len() < level {
                let n = level - pool.len();
                let (more, errors) = servers.open(kind, next_id, n, 100).await;
                next_id += n as u64;
                pool.extend(more);
                if errors > 0 {
                    report.line(format!(
                        "  {:<6} {level:>6} chats: {errors} connections failed",
                        kind.name()
                    ));
                }
            }
            let active: Vec<Conn> = pool.drain(..level.min(pool.len())).collect();
            let start = tokio::time::Instant::now();
            let (back, batch) =
                run_turns(active, Until::Deadline(start + p.duration), p.stall).await;
            let elapsed = start.elapsed().as_secs_f64();
            pool.extend(back);
            // A failed turn drops its connection (and counts once).
            let errors = batch.errors;
            let all = batch.ok + errors;
            let error_rate = if all == 0 {
                1.0
            } else {
                errors as f64 / all as f64
            };
            let pass = batch.stalls == 0 && error_rate < 0.001 && batch.ok > 0;
            if pass {
                best = level;
            }
            curve.push((level as f64, batch.ok as f64 / elapsed));
            report.line(format!(
                "  {:<6} {level:>6} chats: {:>7.0} chats/s  first frame p50 {:>8.1} ms p99 {:>8.1} ms  max gap p99 {:>7.1} ms  stalls {}  errors {} ({:.3}%)  {}",
                kind.name(),
                batch.ok as f64 / elapsed,
                batch.first.us(0.5) / 1000.0,
                batch.first.us(0.99) / 1000.0,
                batch.max_gap.us(0.99) / 1000.0,
                batch.stalls,
                errors,
                error_rate * 100.0,
                if pass { "ok" } else { "FAIL" }
            ));
            levels.push(
                json!({"concurrency": level, "chats": batch.ok, "errors": errors,
                "stalls": batch.stalls, "error_rate": error_rate, "pass": pass,
                "chats_per_s": batch.ok as f64 / elapsed,
                "first_frame": batch.first.json(), "max_gap": batch.max_gap.json(),
                "turn": batch.done.json(), "first_error": batch.first_error}),
            );
            if !pass {
                break;
            }
        }
        report.line(format!(
            "  {:<6} highest concurrency with no stalls and < 0.1% errors: {best}",
            kind.name()
        ));
        results.insert(
            kind.name().into(),
            json!({"levels": levels, "highest_passing": best}),
        );
        curves.push((kind.name().to_string(), curve));
    }
    report.results = serde_json::Value::Object(results);
    report.charts.push(Chart {
        name: "active_throughput_vs_concurrency".into(),
        title: format!(
            "Completed chats/s vs concurrent streaming chats ({:?}/token)",
            p.pace
        ),
        x_label: "concurrent chats".into(),
        y_label: "chats/s".into(),
        series: curves,
    });
    report.write(out)?;
    Ok(())
}
