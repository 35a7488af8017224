//! `ttft`: added time to first token. Send → first answer frame through the floor relay
//! and through chatd, minus the same measured directly against the fake LLM (instant).
//! Rounds interleave the three targets (the order rotates each round); the headline
//! figure is the median of the per-round differences of medians. For chatd both the
//! whole pipeline (its preprocessing stage is a model round trip of its own) and the
//! main call's part (`ai_typing_started` → first `ai_message_update`) are reported, and
//! the whole time to first token of chatd over the floor's. Round medians are exact (from
//! the raw samples): at 200 ms the histograms' 3 significant digits step by 131 µs.

use std::time::Duration;

use serde_json::json;

use super::{Batch, Servers, Until, ratio, run_turns};
use crate::charts::Chart;
use crate::client::{Conn, Kind};
use crate::fake_llm::{Mode, Script};
use crate::report::Report;
use crate::stats::median;

pub struct Params {
    pub rounds: usize,
    /// Turns per connection per round.
    pub turns: usize,
    pub concurrency: Vec<usize>,
    pub tokens: usize,
    /// The fake LLM's time to first byte (0: instant).
    pub think: Duration,
}

const KINDS: [Kind; 3] = [Kind::Direct, Kind::Floor, Kind::Chatd];

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let mut report = Report::new(
        "ttft",
        json!({"rounds": p.rounds, "turns_per_conn_per_round": p.turns,
            "concurrency": p.concurrency, "tokens": p.tokens, "llm": "instant",
            "think_ms": p.think.as_millis() as u64}),
    );
    let servers = Servers::start(&Script {
        mode: Mode::Instant,
        tokens: p.tokens,
        pace: Duration::ZERO,
        think: p.think,
        preprocess: None,
    })?;
    let stall = Duration::from_secs(3600);
    let mut results = serde_json::Map::new();
    let mut cdf = Vec::new();
    report.line(format!(
        "ttft: instant fake LLM (think time {:?}), {} tokens; {} rounds x {} turns per target (at least 5 per connection)",
        p.think, p.tokens, p.rounds, p.turns
    ));
    for &c in &p.concurrency {
        let mut pools: Vec<Vec<Conn>> = Vec::new();
        for (i, kind) in KINDS.iter().enumerate() {
            let (conns, errors) = servers.open(*kind, (i * 100_000) as u64, c, 50).await;
            anyhow::ensure!(errors == 0, "{errors} connections to {kind:?} failed");
            // Warm-up: connections, pools, caches, allocator.
            let (conns, _) = run_turns(conns, Until::Turns(3), stall).await;
            pools.push(conns);
        }
        let mut totals = vec![Batch::default(); 3];
        let mut round_medians = vec![Vec::new(); 3];
        let mut round_main = Vec::new();
        for r in 0..p.rounds {
            let mut medians = [0.0; 3];
            for step in 0..3 {
                let k = (r + step) % 3;
                let conns = std::mem::take(&mut pools[k]);
                let per_conn = (p.turns / c).max(5);
                let (conns, batch) = run_turns(conns, Until::Turns(per_conn), stall).await;
                pools[k] = conns;
                medians[k] = batch.first_median_us();
                if k == 2 {
                    round_main.push(batch.main_first.us(0.5));
                }
                totals[k].merge(&batch);
            }
            for k in 0..3 {
                round_medians[k].push(medians[k]);
            }
        }
        let added = |k: usize| {
            median(
                round_medians[k]
                    .iter()
                    .zip(&round_medians[0])
                    .map(|(t, d)| t - d)
                    .collect(),
            )
        };
        let main_added = median(
            round_main
                .iter()
                .zip(&round_medians[0])
                .map(|(t, d)| t - d)
                .collect(),
        );
        let (floor_added, chatd_added) = (added(1), added(2));
        // The whole time to first token, chatd's over the floor's (what a user waits for):
        // the median of the per-round ratios of exact medians.
        let whole_ratio = median(
            round_medians[2]
                .iter()
                .zip(&round_medians[1])
                .map(|(c, f)| ratio(*c, *f))
                .collect(),
        );
        let p99_added = |k: usize| totals[k].first.us(0.99) - totals[0].first.us(0.99);
        let errors: u64 = totals.iter().map(|b| b.errors).sum();
        results.insert(
            format!("c{c}"),
            json!({
                "concurrency": c,
                "direct": totals[0].first.json(),
                "floor": totals[1].first.json(),
                "chatd": totals[2].first.json(),
                "chatd_model_selected": totals[2].model_selected.json(),
                "chatd_main_call": totals[2].main_first.json(),
                "round_medians_us": {"direct": round_medians[0], "floor": round_medians[1],
                    "chatd": round_medians[2], "chatd_main_call": round_main},
                "added_p50_us": {"floor": floor_added, "chatd": chatd_added, "chatd_main_call": main_added},
                "added_p99_us": {"floor": p99_added(1), "chatd": p99_added(2),
                    "chatd_main_call": totals[2].main_first.us(0.99) - totals[0].first.us(0.99)},
                "whole_ttft_ratio_chatd_to_floor_p50": whole_ratio,
                "ratio_chatd_to_floor": {"p50": ratio(chatd_added, floor_added),
                    "main_call_p50": ratio(main_added, floor_added),
                    "p99": ratio(p99_added(2), p99_added(1))},
                "errors": errors,
                "first_error": totals.iter().find_map(|b| b.first_error.clone()),
            }),
        );
        report.line(format!(
            "  {c:>4} chats  direct p50 {:>8.1} µs p99 {:>8.1} µs (the fake LLM's own TTFT)",
            totals[0].first.us(0.5),
            totals[0].first.us(0.99)
        ));
        report.line(format!(
            "        added  floor p50 {floor_added:>8.1} µs p99 {:>8.1} µs",
            p99_added(1)
        ));
        report.line(format!(
            "        added  chatd p50 {chatd_added:>8.1} µs p99 {:>8.1} µs  ({:.1}x floor; whole pipeline incl. preprocessing call)",
            p99_added(2),
            ratio(chatd_added, floor_added)
        ));
        report.line(format!(
            "        whole TTFT p50 (exact, median of rounds)  direct {:>10.1} µs  floor {:>10.1} µs  chatd {:>10.1} µs  chatd/floor {whole_ratio:.4}",
            median(round_medians[0].clone()),
            median(round_medians[1].clone()),
            median(round_medians[2].clone())
        ));
        // With the speculative main call (on for a local model) the main call runs beside
        // preprocessing, so its first token is often there when typing starts: the gap is
        // shown as it is, not as an "added" time (which would be negative).
        report.line(format!(
            "        chatd ai_typing_started -> first ai_message_update p50 {:>8.1} µs (minus the direct TTFT: {main_added:.1} µs)",
            totals[2].main_first.us(0.5)
        ));
        if errors > 0 {
            report.line(format!("        errors: {errors}"));
        }
        if c == p.concurrency[0] {
            for (k, kind) in KINDS.iter().enumerate() {
                cdf.push((kind.name().to_string(), totals[k].first.cdf()));
            }
            cdf.push(("chatd main call".into(), totals[2].main_first.cdf()));
        }
    }
    report.results = serde_json::Value::Object(results);
    let first_c = p.concurrency.first().copied().unwrap_or(1);
    report.charts.push(Chart {
        name: "ttft_cdf".into(),
        title: format!("Time to first answer frame, {first_c} chat(s), instant LLM"),
        x_label: "µs".into(),
        y_label: "fraction of turns".into(),
        series: cdf.into_iter().map(|(n, pts)| (n, clip_cdf(pts))).collect(),
    });
    report.write(out)?;
    Ok(())
}

/// Drops the top 1% so one outlier does not squash the chart.
fn clip_cdf(pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    pts.into_iter().filter(|(_, q)| *q <= 0.99).collect()
}
