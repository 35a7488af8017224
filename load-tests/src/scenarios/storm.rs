//! `storm`: N clients connect at an open-loop arrival rate (connect i is scheduled at
//! i / rate whether or not earlier ones finished; its latency counts from the scheduled
//! time, so a slow server cannot hide queueing), chatd's with a token (authentication
//! before the upgrade); once all are connected, every client sends a message at once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Barrier;
use tokio::task::JoinSet;

use super::{Batch, Servers, connect};
use crate::client::Kind;
use crate::fake_llm::{Mode, Script};
use crate::report::Report;
use crate::stats::Hist;

pub struct Params {
    pub connections: usize,
    pub rate: f64,
    pub tokens: usize,
    pub kinds: Vec<Kind>,
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let limit = crate::report::open_files_limit() as usize;
    let n = p.connections.min(limit.saturating_sub(500)).max(1);
    let mut report = Report::new(
        "storm",
        json!({"connections": n, "rate_per_s": p.rate, "tokens": p.tokens,
            "kinds": p.kinds.iter().map(|k| k.name()).collect::<Vec<_>>()}),
    );
    report.line(format!(
        "storm: {n} connects at {} /s (open loop), then all send one message; instant LLM, {} tokens",
        p.rate, p.tokens
    ));
    let servers = Arc::new(Servers::start(&Script {
        mode: Mode::Instant,
        tokens: p.tokens,
        pace: Duration::ZERO,
        think: Duration::ZERO,
        preprocess: None,
    })?);
    let mut results = serde_json::Map::new();
    for (ki, kind) in p.kinds.iter().copied().enumerate() {
        let barrier = Arc::new(Barrier::new(n + 1));
        let t0 = tokio::time::Instant::now() + Duration::from_millis(100);
        let mut set = JoinSet::new();
        for i in 0..n {
            let (servers, barrier) = (servers.clone(), barrier.clone());
            let at = t0 + Duration::from_secs_f64(i as f64 / p.rate);
            set.spawn(async move {
                tokio::time::sleep_until(at).await;
                let target = servers.target(kind);
                let conn = connect(&target, &servers.keys, (ki * 1_000_000 + i) as u64).await;
                let connected = at.elapsed();
                let connected_at = tokio::time::Instant::now();
                barrier.wait().await;
                let turn = match conn {
                    Ok(mut c) => Some(c.turn().await),
                    Err(e) => return (Err(e), connected, connected_at),
                };
                (Ok(turn), connected, connected_at)
            });
        }
        barrier.wait().await;
        let all_connected = t0.elapsed();
        let mut connect = Hist::new();
        let mut connect_errors = 0u64;
        let mut batch = Batch::default();
        let mut last_connect = t0;
        while let Some(r) = set.join_next().await {
            let Ok((res, took, at)) = r else {
                connect_errors += 1;
                continue;
            };
            last_connect = last_connect.max(at);
            match res {
                Err(e) => {
                    connect_errors += 1;
                    batch
                        .first_error
                        .get_or_insert_with(|| format!("connect: {e:#}"));
                }
                Ok(turn) => {
                    connect.record(took);
                    match turn {
                        Some(Ok(t)) => batch.add_turn(&t, Duration::from_secs(3600)),
                        Some(Err(e)) => {
                            batch.errors += 1;
                            batch.first_error.get_or_insert_with(|| format!("{e:#}"));
                        }
                        None => {}
                    }
                }
            }
        }
        let achieved = n as f64 / (last_connect - t0).as_secs_f64().max(1e-9);
        report.line(format!(
            "  {:<6} connects: {:>6.0}/s achieved, latency p50 {:>7.2} ms p99 {:>7.2} ms max {:>7.2} ms, errors {connect_errors}",
            kind.name(),
            achieved,
            connect.us(0.5) / 1000.0,
            connect.us(0.99) / 1000.0,
            connect.us(1.0) / 1000.0,
        ));
        report.line(format!(
            "  {:<6} burst of {} messages: first frame p50 {:>8.1} ms p99 {:>8.1} ms, answer done p99 {:>8.1} ms, errors {}",
            kind.name(),
            batch.ok + batch.errors,
            batch.first.us(0.5) / 1000.0,
            batch.first.us(0.99) / 1000.0,
            batch.done.us(0.99) / 1000.0,
            batch.errors
        ));
        results.insert(
            kind.name().into(),
            json!({"connects_per_s_achieved": achieved, "connect_latency": connect.json(),
                "connect_errors": connect_errors, "all_connected_s": all_connected.as_secs_f64(),
                "turns_ok": batch.ok, "turn_errors": batch.errors,
                "first_frame": batch.first.json(), "answer_done": batch.done.json(),
                "first_error": batch.first_error}),
        );
    }
    report.results = serde_json::Value::Object(results);
    report.write(out)?;
    Ok(())
}
