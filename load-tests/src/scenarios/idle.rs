//! `idle`: hold K idle connections (authenticated ones for chatd) that send a WebSocket
//! ping every few seconds; the server's RSS (VmRSS of its process) is read as the
//! connections ramp up, and after holding them. Memory per connection =
//! (RSS with K connections − RSS before the first idle connection) / K.

use std::time::Duration;

use serde_json::json;
use tokio::task::JoinSet;

use super::{Servers, Until, kib, ratio, run_turns};
use crate::charts::Chart;
use crate::client::{Conn, Kind};
use crate::fake_llm::{Mode, Script};
use crate::report::Report;

pub struct Params {
    pub connections: usize,
    pub steps: usize,
    pub ping: Duration,
    pub hold: Duration,
}

/// Keeps every connection pinging and reading for `hold`; returns the survivors.
async fn hold(conns: Vec<Conn>, ping: Duration, hold: Duration) -> (Vec<Conn>, usize) {
    let end = tokio::time::Instant::now() + hold;
    let mut set = JoinSet::new();
    for (i, mut c) in conns.into_iter().enumerate() {
        // Spread the pings over the interval.
        let offset = ping.mul_f64((i % 100) as f64 / 100.0);
        set.spawn(async move {
            tokio::time::sleep(offset).await;
            while tokio::time::Instant::now() < end {
                c.ping().await?;
                let left = end.saturating_duration_since(tokio::time::Instant::now());
                c.drain(ping.min(left)).await?;
            }
            anyhow::Ok(c)
        });
    }
    let mut kept = Vec::new();
    let mut failed = 0;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(c)) => kept.push(c),
            _ => failed += 1,
        }
    }
    (kept, failed)
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    // Each connection is one descriptor here and one in the server; keep headroom.
    let limit = crate::report::open_files_limit() as usize;
    let k = p.connections.min(limit.saturating_sub(500)).max(1);
    let mut report = Report::new(
        "idle",
        json!({"connections": k, "requested": p.connections, "steps": p.steps,
            "ping_s": p.ping.as_secs_f64(), "hold_s": p.hold.as_secs_f64(),
            "open_files_limit": limit}),
    );
    report.line(format!(
        "idle: {k} idle connections per server (open-file limit {limit}), ping every {:?}, held {:?}",
        p.ping, p.hold
    ));
    let servers = Servers::start(&Script {
        mode: Mode::Instant,
        tokens: 8,
        pace: Duration::ZERO,
        think: Duration::ZERO,
        preprocess: None,
    })?;
    let mut results = serde_json::Map::new();
    let mut curves = Vec::new();
    let mut per_conn = [0.0; 2];
    for (i, kind) in [Kind::Floor, Kind::Chatd].into_iter().enumerate() {
        let server = servers.server(kind);
        // One warm turn so lazily built state (LLM client pool, caches) is in the baseline.
        let (warm, _) = servers.open(kind, 900_000, 1, 1).await;
        let (warm, _) = run_turns(warm, Until::Turns(2), Duration::from_secs(3600)).await;
        drop(warm);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let base = server.rss_bytes()?;
        let mut curve = vec![(0.0, 0.0)];
        let mut conns = Vec::new();
        let mut failed = 0;
        let step = k.div_ceil(p.steps.max(1));
        while conns.len() < k {
            let n = step.min(k - conns.len());
            let (more, errors) = servers
                .open(kind, (i * 1_000_000 + conns.len()) as u64, n, 64)
                .await;
            failed += errors;
            conns.extend(more);
            tokio::time::sleep(Duration::from_millis(200)).await;
            let rss = server.rss_bytes()?;
            curve.push((conns.len() as f64, kib(rss.saturating_sub(base) as f64)));
        }
        let opened = conns.len();
        let (conns, dropped) = hold(conns, p.ping, p.hold).await;
        let rss = server.rss_bytes()?;
        let held = conns.len().max(1);
        let per = rss.saturating_sub(base) as f64 / held as f64;
        per_conn[i] = per;
        curve.push((held as f64, kib(rss.saturating_sub(base) as f64)));
        report.line(format!(
            "  {:<6} base RSS {:>8.0} KiB  with {held} connections {:>9.0} KiB  => {:>6.2} KiB per connection  (connect errors {failed}, dropped while held {dropped})",
            kind.name(),
            kib(base as f64),
            kib(rss as f64),
            kib(per),
        ));
        results.insert(
            kind.name().into(),
            json!({"base_rss_bytes": base, "rss_bytes": rss, "opened": opened, "held": conns.len(),
                "connect_errors": failed, "dropped_while_held": dropped,
                "bytes_per_connection": per, "kib_per_connection": kib(per),
                "curve_kib": curve}),
        );
        curves.push((kind.name().to_string(), curve));
        drop(conns);
    }
    report.line(format!(
        "  chatd / floor = {:.2}; target <= 10 KiB per connection: {}",
        ratio(per_conn[1], per_conn[0]),
        if kib(per_conn[1]) <= 10.0 {
            "met"
        } else {
            "MISSED"
        }
    ));
    results.insert(
        "ratio_chatd_to_floor".into(),
        json!(ratio(per_conn[1], per_conn[0])),
    );
    report.results = serde_json::Value::Object(results);
    report.charts.push(Chart {
        name: "memory_vs_connections".into(),
        title: "Server RSS growth vs idle connections".into(),
        x_label: "connections".into(),
        y_label: "KiB above baseline".into(),
        series: curves,
    });
    report.write(out)?;
    Ok(())
}
