//! `soak`: chatd at a steady load for a long time (30 minutes by default) with clients
//! connecting and leaving: `concurrency` workers each open a connection (a user from a
//! fixed pool, so the working set is bounded as with real users coming back), run a few
//! turns back to back over a paced fake LLM, close, and start again. Every `sample` the
//! run records chatd's RSS, its open file descriptors and the window's p50/p99 time to
//! first frame and to the final frame; charts plot them over time. "Flat" is read off the
//! least-squares slope over the second half of the run (the first half includes warm-up:
//! caches filling, the allocator growing its arenas) and the last window against the
//! median of the second half.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinSet;

use super::Servers;
use crate::charts::Chart;
use crate::client::{Conn, Kind};
use crate::fake_llm::{Mode, Script};
use crate::procs;
use crate::report::Report;
use crate::stats::Hist;

pub struct Params {
    pub duration: Duration,
    pub concurrency: usize,
    pub users: usize,
    pub max_turns: u64,
    pub pace: Duration,
    pub tokens: usize,
    pub sample: Duration,
}

#[derive(Default)]
struct Window {
    first: Hist,
    done: Hist,
    connects: u64,
    errors: u64,
    first_error: Option<String>,
}

struct Sample {
    t_s: f64,
    rss_mib: f64,
    fds: usize,
    first_p50_ms: f64,
    first_p99_ms: f64,
    done_p99_ms: f64,
    turns: u64,
    connects: u64,
    errors: u64,
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Turns for the `k`-th connection: 1..=max, spread without a random source.
fn turns_for(k: u64, max: u64) -> u64 {
    1 + (k.wrapping_mul(2_654_435_761) >> 7) % max.max(1)
}

async fn worker(
    servers: Arc<Servers>,
    w: u64,
    p: Arc<Params>,
    window: Arc<Mutex<Window>>,
    until: tokio::time::Instant,
) {
    let target = servers.target(Kind::Chatd);
    let mut k = 0u64;
    while tokio::time::Instant::now() < until {
        // Connection ids are unique (chat and message ids derive from them); users repeat.
        let id = w * 10_000_000 + k;
        // Worker w's k-th user: distinct across workers at any moment (users ≥ clients).
        let user = format!(
            "soak-user-{}",
            (w + k * p.concurrency as u64) % p.users as u64
        );
        k += 1;
        let opened = match procs::mint(&servers.keys, &user) {
            Ok(token) => Conn::open(&target, id, Some(&token)).await,
            Err(e) => Err(e),
        };
        let mut conn = match opened {
            Ok(c) => c,
            Err(e) => {
                let mut win = window.lock().unwrap_or_else(|e| e.into_inner());
                win.errors += 1;
                win.first_error
                    .get_or_insert_with(|| format!("connect: {e:#}"));
                continue;
            }
        };
        window.lock().unwrap_or_else(|e| e.into_inner()).connects += 1;
        for _ in 0..turns_for(id, p.max_turns) {
            if tokio::time::Instant::now() >= until {
                break;
            }
            let r = conn.turn().await;
            let mut win = window.lock().unwrap_or_else(|e| e.into_inner());
            match r {
                Ok(t) => {
                    win.first.record(t.first);
                    win.done.record(t.done);
                }
                Err(e) => {
                    win.errors += 1;
                    win.first_error.get_or_insert_with(|| format!("{e:#}"));
                    break;
                }
            }
        }
        drop(conn);
    }
}

/// Least-squares slope of `ys` over `xs`, per unit of x.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if var == 0.0 { 0.0 } else { cov / var }
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let mut report = Report::new(
        "soak",
        json!({"duration_s": p.duration.as_secs_f64(), "concurrency": p.concurrency,
            "users": p.users, "max_turns_per_connection": p.max_turns,
            "pace_ms": p.pace.as_millis() as u64, "tokens": p.tokens,
            "sample_s": p.sample.as_secs_f64()}),
    );
    report.line(format!(
        "soak: {} clients connecting and leaving (1-{} turns each, {} users), paced fake LLM {:?}/token x {} tokens, {:?}, sampled every {:?}",
        p.concurrency, p.max_turns, p.users, p.pace, p.tokens, p.duration, p.sample
    ));
    let servers = Arc::new(Servers::start(&Script {
        mode: Mode::Paced,
        tokens: p.tokens,
        pace: p.pace,
        think: Duration::ZERO,
        preprocess: None,
    })?);
    let pid = servers.chatd.pid();
    let window = Arc::new(Mutex::new(Window::default()));
    let p = Arc::new(p);
    let start = tokio::time::Instant::now();
    let until = start + p.duration;
    let mut workers = JoinSet::new();
    for w in 0..p.concurrency as u64 {
        workers.spawn(worker(servers.clone(), w, p.clone(), window.clone(), until));
    }
    let mut samples: Vec<Sample> = Vec::new();
    let mut first_error = None;
    let mut tick = tokio::time::interval_at(start + p.sample, p.sample);
    while tokio::time::Instant::now() < until {
        tick.tick().await;
        let win = std::mem::take(&mut *window.lock().unwrap_or_else(|e| e.into_inner()));
        if first_error.is_none() {
            first_error = win.first_error.clone();
        }
        let s = Sample {
            t_s: start.elapsed().as_secs_f64(),
            rss_mib: servers.chatd.rss_bytes().unwrap_or(0) as f64 / (1024.0 * 1024.0),
            fds: open_fds(pid),
            first_p50_ms: win.first.us(0.5) / 1000.0,
            first_p99_ms: win.first.us(0.99) / 1000.0,
            done_p99_ms: win.done.us(0.99) / 1000.0,
            turns: win.done.len(),
            connects: win.connects,
            errors: win.errors,
        };
        report.line(format!(
            "  t {:>6.0} s  rss {:>7.1} MiB  fds {:>5}  first p50 {:>7.1} ms p99 {:>7.1} ms  done p99 {:>7.1} ms  turns {:>6}  connects {:>5}  errors {}",
            s.t_s, s.rss_mib, s.fds, s.first_p50_ms, s.first_p99_ms, s.done_p99_ms, s.turns, s.connects, s.errors
        ));
        samples.push(s);
    }
    while workers.join_next().await.is_some() {}

    let half: Vec<&Sample> = samples.iter().skip(samples.len() / 2).collect();
    let per_min = |f: &dyn Fn(&Sample) -> f64| {
        slope(
            &half
                .iter()
                .map(|s| (s.t_s / 60.0, f(s)))
                .collect::<Vec<_>>(),
        )
    };
    let median =
        |f: &dyn Fn(&Sample) -> f64| crate::stats::median(half.iter().map(|s| f(s)).collect());
    let rss_slope = per_min(&|s| s.rss_mib);
    let fds_slope = per_min(&|s| s.fds as f64);
    let p99_slope = per_min(&|s| s.first_p99_ms);
    let turns: u64 = samples.iter().map(|s| s.turns).sum();
    let connects: u64 = samples.iter().map(|s| s.connects).sum();
    let errors: u64 = samples.iter().map(|s| s.errors).sum();
    report.line(format!(
        "  second half: rss median {:.1} MiB, slope {rss_slope:+.3} MiB/min; fds median {:.0}, slope {fds_slope:+.2}/min; first-frame p99 median {:.1} ms, slope {p99_slope:+.3} ms/min",
        median(&|s| s.rss_mib),
        median(&|s| s.fds as f64),
        median(&|s| s.first_p99_ms),
    ));
    report.line(format!(
        "  in all: {turns} turns, {connects} connections, {errors} errors{}",
        first_error
            .as_deref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    ));
    report.results = json!({
        "samples": samples.iter().map(|s| json!({"t_s": s.t_s, "rss_mib": s.rss_mib,
            "fds": s.fds, "first_p50_ms": s.first_p50_ms, "first_p99_ms": s.first_p99_ms,
            "done_p99_ms": s.done_p99_ms, "turns": s.turns, "connects": s.connects,
            "errors": s.errors})).collect::<Vec<_>>(),
        "second_half": {"rss_mib_per_min": rss_slope, "fds_per_min": fds_slope,
            "first_p99_ms_per_min": p99_slope, "rss_median_mib": median(&|s| s.rss_mib),
            "fds_median": median(&|s| s.fds as f64),
            "first_p99_median_ms": median(&|s| s.first_p99_ms)},
        "turns": turns, "connections": connects, "errors": errors, "first_error": first_error,
    });
    let series = |name: &str, f: &dyn Fn(&Sample) -> f64| {
        vec![(
            name.to_string(),
            samples.iter().map(|s| (s.t_s / 60.0, f(s))).collect(),
        )]
    };
    for (name, title, y, s) in [
        (
            "soak_rss",
            "chatd RSS over the soak",
            "MiB",
            series("rss", &|s| s.rss_mib),
        ),
        (
            "soak_fds",
            "chatd open file descriptors over the soak",
            "descriptors",
            series("fds", &|s| s.fds as f64),
        ),
        (
            "soak_latency",
            "Time to first frame per window over the soak",
            "ms",
            [
                series("p50", &|s| s.first_p50_ms),
                series("p99", &|s| s.first_p99_ms),
            ]
            .concat(),
        ),
    ] {
        report.charts.push(Chart {
            name: name.into(),
            title: title.into(),
            x_label: "minutes".into(),
            y_label: y.into(),
            series: s,
        });
    }
    report.write(out)?;
    Ok(())
}
