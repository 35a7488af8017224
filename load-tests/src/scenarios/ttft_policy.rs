//! `ttft-policy`: time to first token with a two-speed model, speculation off / on / auto
//! side by side (issue 31 item 4). The fake LLM answers chatd's preprocessing call after
//! `P` with a realistic arguments object streamed one token-sized fragment every `T` (the
//! eleven decision fields first), and main calls after `M`. Five lanes run against the same
//! fake LLM, interleaved per round with the order rotating: direct (the fake LLM's own
//! main-call TTFT), the one-call floor relay, and three chatd children with
//! `pipeline.speculative_main_call` = off / on / auto (all with `llm.metered = true`, so
//! `auto` treats the loopback model as a paid one). The chatd lanes run a mixed workload
//! ([`crate::workload`]): chats that keep their topic, with a share of turns switching
//! category, which a guess from the chat's previous plan misses.
//!
//! Per lane: the whole TTFT (median of exact round medians) and its ratio to the floor's
//! (median of the per-round ratios). Per policy, from chatd's `/metrics` (the difference
//! between a scrape after the warm-up and one after the measured rounds): the decision
//! latency (`chatd_main_call_decision_seconds`: mean, and a median estimated from the
//! buckets) and the wasted input tokens as a share of all main-call input tokens
//! (`chatd_speculative_wasted_input_tokens_total` / `chatd_main_call_input_tokens_total`).
//! A metric chatd does not export prints "n/a". The metrics are read in [`figures`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Batch, Until, open_pool, ratio, run_turns};
use crate::charts::Chart;
use crate::client::{Conn, Kind, Target};
use crate::fake_llm::{self, Mode, Preprocess, Script};
use crate::procs::{self, Server};
use crate::prom;
use crate::report::Report;
use crate::stats::median;
use crate::workload::Workload;
use figures::{FIRST_TOKEN, PolicyFigures, met, na};

mod figures;

pub struct Params {
    pub rounds: usize,
    /// Turns per connection per round (at least 5 per connection).
    pub turns: usize,
    pub concurrency: usize,
    /// Tokens of a main call's answer.
    pub tokens: usize,
    /// P: the preprocessing call's wait before its first byte.
    pub preprocess_think: Duration,
    /// T: between two fragments of the preprocessing arguments.
    pub arg_pace: Duration,
    /// About how many fragments (tokens) the preprocessing arguments have.
    pub arg_tokens: usize,
    /// M: a main call's wait before its first byte.
    pub main_think: Duration,
    pub workload: Workload,
    /// Leave chatd's postprocessing on (off by default: it is no part of the TTFT and its
    /// model call would run beside the next turn).
    pub postprocessing: bool,
}

/// The chatd policies, in lane order after direct and floor.
const POLICIES: [&str; 3] = ["off", "on", "auto"];
const LANES: [&str; 5] = ["direct", "floor", "chatd-off", "chatd-on", "chatd-auto"];
const WARMUP_TURNS: usize = 3;

fn chatd_env(policy: &str, postprocessing: bool) -> Vec<(String, String)> {
    [
        ("CHATD__PIPELINE__SPECULATIVE_MAIN_CALL", policy),
        ("CHATD__LLM__METERED", "true"),
        (
            "CHATD__PIPELINE__POSTPROCESSING",
            if postprocessing { "true" } else { "false" },
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub async fn run(p: Params, out: &std::path::Path) -> anyhow::Result<()> {
    let c = p.concurrency.max(1);
    let per_conn = (p.turns / c).max(5);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // How the fake LLM cuts its arguments, (fragments, the fragment that completes the
    // decision fields): [general, code] × [a later message, a chat's first].
    let shapes = [0, 1, 2, 3].map(|v| fake_llm::preprocess_shape(v >= 2, v % 2 == 1, p.arg_tokens));
    let decided_at = shapes.iter().map(|s| s.1).max().unwrap_or(0);
    // The decision fields are complete this long after the preprocessing call's first byte
    // (its first fragment comes with it, then one every T).
    let decision_fields = p.arg_pace * decided_at.saturating_sub(1) as u32;
    let w = p.workload;
    let measured_from = WARMUP_TURNS as u64;
    let measured_to = measured_from + (p.rounds * per_conn) as u64;
    let census = w.census(c as u64, measured_from, measured_to);

    let mut report = Report::new(
        "ttft-policy",
        json!({"rounds": p.rounds, "turns_per_conn_per_round": per_conn, "concurrency": c,
            "tokens": p.tokens, "preprocess_think_ms": ms(p.preprocess_think),
            "arg_pace_ms": ms(p.arg_pace), "arg_tokens": p.arg_tokens,
            "main_think_ms": ms(p.main_think), "switch_share": w.switch_share,
            "jumpy_chats": w.jumpy_chats, "jumpy_switch": w.jumpy_switch,
            "code_chats": w.code_chats, "chat_turns": w.chat_turns, "seed": w.seed,
            "postprocessing": p.postprocessing, "warmup_turns": WARMUP_TURNS,
            "chatd_env": {"CHATD__LLM__METERED": "true",
                "CHATD__PIPELINE__SPECULATIVE_MAIN_CALL": POLICIES,
                "CHATD__PIPELINE__POSTPROCESSING": p.postprocessing}}),
    );
    report.line(format!(
        "ttft-policy: two-speed fake LLM: preprocess waits P = {:.1} ms, then {}-{} argument tokens {:.1} ms apart, decision fields complete with token {decided_at} ({:.1} ms after its first byte); main calls wait M = {:.1} ms, then {} tokens at once",
        ms(p.preprocess_think),
        shapes.iter().map(|s| s.0).min().unwrap_or(0),
        shapes.iter().map(|s| s.0).max().unwrap_or(0),
        ms(p.arg_pace),
        ms(decision_fields),
        ms(p.main_think),
        p.tokens
    ));
    report.line(format!(
        "  {} rounds x {per_conn} turns per connection per lane, {c} connection(s) per lane, lanes interleaved (order rotating); postprocessing {}",
        p.rounds,
        if p.postprocessing { "on" } else { "off" }
    ));
    report.line(format!(
        "  workload (measured chatd turns, the same in every chatd lane; seed {}): {} turns, {} about code, {} change category from the chat's previous turn ({:.1}% of turns after a chat's first; {:.0}% in steady chats, {:.0}% in the {:.0}% of chats that jump), {} new chats ({} about code; {} turns per chat), expected guess misses {} ({:.1}%)",
        w.seed,
        census.turns,
        census.code,
        census.changed,
        100.0 * ratio(
            census.changed as f64,
            (census.turns - census.new_chats) as f64
        ),
        100.0 * w.switch_share,
        100.0 * w.jumpy_switch,
        100.0 * w.jumpy_chats,
        census.new_chats,
        census.new_code_chats,
        if w.chat_turns == 0 {
            "all".to_string()
        } else {
            w.chat_turns.to_string()
        },
        census.expected_misses(),
        100.0 * ratio(census.expected_misses() as f64, census.turns as f64)
    ));

    let llm = Server::fake_llm(&Script {
        mode: Mode::Instant,
        tokens: p.tokens,
        pace: Duration::ZERO,
        think: p.main_think,
        preprocess: Some(Preprocess {
            think: p.preprocess_think,
            pace: p.arg_pace,
            tokens: p.arg_tokens,
        }),
    })?;
    let floor = Server::floor(&llm)?;
    let mut chatds = Vec::new();
    for policy in POLICIES {
        chatds.push(Server::chatd_with(
            &llm,
            &chatd_env(policy, p.postprocessing),
        )?);
    }
    let keys = Arc::new(procs::token_keys());
    let mut targets = vec![
        Target {
            kind: Kind::Direct,
            addr: llm.addr,
        },
        Target {
            kind: Kind::Floor,
            addr: floor.addr,
        },
    ];
    targets.extend(chatds.iter().map(|s| Target {
        kind: Kind::Chatd,
        addr: s.addr,
    }));

    let stall = Duration::from_secs(3600);
    let workload = Arc::new(w);
    let mut pools: Vec<Vec<Conn>> = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let first_id = (i * 100_000) as u64;
        let (mut conns, errors) = open_pool(target.clone(), keys.clone(), first_id, c, 50).await;
        anyhow::ensure!(errors == 0, "{errors} connections to {} failed", LANES[i]);
        for conn in &mut conns {
            let slot = conn.id() - first_id;
            conn.follow(workload.clone(), slot);
        }
        // Warm-up: connections, pools, caches, allocator (and each chat's first plan).
        let (conns, warm) = run_turns(conns, Until::Turns(WARMUP_TURNS), stall).await;
        anyhow::ensure!(
            warm.errors == 0,
            "warm-up of {} failed: {}",
            LANES[i],
            warm.first_error.unwrap_or_default()
        );
        pools.push(conns);
    }
    // Counters before the measured rounds (warm-up excluded).
    let mut before = Vec::new();
    for s in &chatds {
        before.push(prom::scrape(s.addr).await);
    }

    let n = LANES.len();
    let mut totals = vec![Batch::default(); n];
    let mut round_medians = vec![Vec::new(); n];
    let mut round_main = vec![Vec::new(); n];
    for r in 0..p.rounds {
        for step in 0..n {
            let k = (r + step) % n;
            let conns = std::mem::take(&mut pools[k]);
            let (conns, batch) = run_turns(conns, Until::Turns(per_conn), stall).await;
            pools[k] = conns;
            round_medians[k].push(batch.first_median_us());
            if k >= 2 {
                round_main[k].push(batch.main_first.us(0.5));
            }
            totals[k].merge(&batch);
        }
    }
    let mut after = Vec::new();
    for s in &chatds {
        after.push(prom::scrape(s.addr).await);
    }
    let figures: Vec<PolicyFigures> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| PolicyFigures::read(b.as_ref(), a.as_ref()))
        .collect();

    // Whole TTFT per lane (median of the exact round medians) and per-round ratios to the
    // floor and differences to direct.
    let whole: Vec<f64> = round_medians.iter().map(|m| median(m.clone())).collect();
    let to_floor: Vec<f64> = (0..n)
        .map(|k| {
            median(
                round_medians[k]
                    .iter()
                    .zip(&round_medians[1])
                    .map(|(t, f)| ratio(*t, *f))
                    .collect(),
            )
        })
        .collect();
    let over_direct: Vec<f64> = (0..n)
        .map(|k| {
            median(
                round_medians[k]
                    .iter()
                    .zip(&round_medians[0])
                    .map(|(t, d)| t - d)
                    .collect(),
            )
        })
        .collect();

    report.line(format!(
        "  {:<11} {:>14} {:>9} {:>13} {:>13} {:>16} {:>16}",
        "lane",
        "whole TTFT p50",
        "/ floor",
        "over direct",
        "p99",
        "send->model_sel.",
        "typing->1st upd."
    ));
    for k in 0..n {
        let chatd = k >= 2;
        report.line(format!(
            "  {:<11} {:>11.1} ms {:>9.4} {:>10.1} ms {:>10.1} ms {:>16} {:>16}",
            LANES[k],
            whole[k] / 1e3,
            to_floor[k],
            over_direct[k] / 1e3,
            totals[k].first.us(0.99) / 1e3,
            if chatd && totals[k].model_selected.len() > 0 {
                format!("{:.1} ms", totals[k].model_selected.us(0.5) / 1e3)
            } else {
                "-".into()
            },
            if chatd && totals[k].main_first.len() > 0 {
                format!("{:.1} ms", totals[k].main_first.us(0.5) / 1e3)
            } else {
                "-".into()
            },
        ));
    }
    report.line(format!(
        "  {:<7} {:>24} {:>24} {:>42}",
        "policy",
        "decision mean / p50 (*)",
        "spec. started/used/wasted",
        "wasted input tokens / all main-call input"
    ));
    let count = |v: Option<f64>| na(v, |x| format!("{x:.0}"));
    for (policy, f) in POLICIES.iter().zip(&figures) {
        report.line(format!(
            "  {:<7} {:>24} {:>24} {:>42}",
            policy,
            format!(
                "{} / {}",
                na(f.decision_mean_ms(), |x| format!("{x:.1} ms")),
                na(f.decision_p50_ms(), |x| format!("{x:.1} ms"))
            ),
            format!("{}/{}/{}", count(f.started), count(f.used), count(f.wasted)),
            format!(
                "{} / {} = {}",
                count(f.wasted_tokens),
                count(f.main_tokens),
                na(f.wasted_share(), |x| format!("{:.1}%", 100.0 * x))
            ),
        ));
    }
    report.line(
        "  (*) from chatd's /metrics, measured rounds only: turn start -> main request decided/sent; p50 interpolated in the histogram's (power-of-two) buckets",
    );
    let own: Vec<String> = POLICIES
        .iter()
        .zip(&figures)
        .map(|(policy, f)| {
            let parts: Vec<String> = f
                .first_token
                .iter()
                .filter_map(|(label, h)| {
                    let h = h.as_ref()?;
                    (h.count > 0.0).then(|| {
                        format!(
                            "{label} {} ({:.0})",
                            na(h.mean(), |s| format!("{:.1} ms", s * 1e3)),
                            h.count
                        )
                    })
                })
                .collect();
            format!(
                "{policy}: {}",
                if parts.is_empty() {
                    "n/a".to_string()
                } else {
                    parts.join(", ")
                }
            )
        })
        .collect();
    report.line(format!(
        "  chatd's own first token ({FIRST_TOKEN}, mean (n) by speculation): {}",
        own.join(" | ")
    ));

    // The targets of issue 31 item 4.
    let floor_whole = whole[1];
    let off_bound_us =
        floor_whole + (p.preprocess_think + decision_fields).as_secs_f64() * 1e6 + 2000.0;
    let off_ok = (whole[2] > 0.0).then_some(whole[2] <= off_bound_us);
    let auto_ratio = to_floor[4];
    let auto_share = figures.get(2).and_then(PolicyFigures::wasted_share);
    report.line(format!(
        "  target off: whole TTFT <= floor + P + decision fields' tokens + 2 ms = {:.1} + {:.1} + {:.1} + 2 ms = {:.1} ms: {:.1} ms, {}",
        floor_whole / 1e3,
        ms(p.preprocess_think),
        ms(decision_fields),
        off_bound_us / 1e3,
        whole[2] / 1e3,
        met(off_ok)
    ));
    report.line(format!(
        "  target auto: whole TTFT <= 1.05x floor: {auto_ratio:.4}x, {}; wasted input tokens <= 10%: {}, {}",
        met(auto_ratio.is_finite().then_some(auto_ratio <= 1.05)),
        na(auto_share, |x| format!("{:.1}%", 100.0 * x)),
        met(auto_share.map(|s| s <= 0.10))
    ));
    let errors: u64 = totals.iter().map(|b| b.errors).sum();
    if errors > 0 {
        report.line(format!(
            "  errors: {errors} (first: {})",
            totals
                .iter()
                .find_map(|b| b.first_error.clone())
                .unwrap_or_default()
        ));
    }

    let lanes: serde_json::Map<String, Value> = (0..n)
        .map(|k| {
            let mut v = json!({
                "ttft": totals[k].first.json(),
                "round_medians_us": round_medians[k],
                "whole_ttft_p50_us": whole[k],
                "ratio_to_floor_p50": to_floor[k],
                "over_direct_p50_us": over_direct[k],
                "turns": totals[k].ok,
                "errors": totals[k].errors,
                "first_error": totals[k].first_error,
            });
            if k >= 2 {
                v["model_selected"] = totals[k].model_selected.json();
                v["typing_to_first_update"] = totals[k].main_first.json();
                v["round_typing_to_first_update_p50_us"] = json!(round_main[k]);
                v["metrics"] = figures[k - 2].json();
            }
            (LANES[k].to_string(), v)
        })
        .collect();
    report.results = json!({
        "fake_llm": {
            "preprocess_think_ms": ms(p.preprocess_think),
            "arg_pace_ms": ms(p.arg_pace),
            "arg_tokens": {"general_later": shapes[0].0, "general_first": shapes[1].0,
                "code_later": shapes[2].0, "code_first": shapes[3].0},
            "decision_fields_complete_at_token": {"general_later": shapes[0].1,
                "general_first": shapes[1].1, "code_later": shapes[2].1, "code_first": shapes[3].1},
            "decision_fields_ms_after_first_byte": ms(decision_fields),
            "main_think_ms": ms(p.main_think),
        },
        "workload": census,
        "expected_guess_misses": census.expected_misses(),
        "lanes": lanes,
        "targets": {
            "off_bound_us": off_bound_us,
            "off_met": off_ok,
            "auto_ratio_to_floor": auto_ratio,
            "auto_ratio_met": auto_ratio.is_finite().then_some(auto_ratio <= 1.05),
            "auto_wasted_share": auto_share,
            "auto_wasted_met": auto_share.map(|s| s <= 0.10),
        },
        "errors": errors,
        "metrics_read": {"before": before.iter().map(Option::is_some).collect::<Vec<_>>(),
            "after": after.iter().map(Option::is_some).collect::<Vec<_>>()},
    });
    report.charts.push(Chart {
        name: "ttft_policy_cdf".into(),
        title: format!(
            "Time to first answer frame, P = {:.0} ms, M = {:.0} ms, T = {:.1} ms",
            ms(p.preprocess_think),
            ms(p.main_think),
            ms(p.arg_pace)
        ),
        x_label: "ms".into(),
        y_label: "fraction of turns".into(),
        series: (0..n)
            .map(|k| {
                let pts = totals[k]
                    .first
                    .cdf()
                    .into_iter()
                    .filter(|(_, q)| *q <= 0.99)
                    .map(|(us, q)| (us / 1e3, q))
                    .collect();
                (LANES[k].to_string(), pts)
            })
            .collect(),
    });
    report.write(out)?;
    drop(chatds);
    Ok(())
}
