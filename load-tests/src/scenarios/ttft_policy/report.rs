//! What `ttft-policy` prints and writes: the parameters, the header, the lane and policy
//! tables, the targets of issue 31 item 4, `report.json`'s results and the CDF chart.

use serde_json::{Value, json};

use super::figures::{FIRST_TOKEN, PolicyFigures, met, na};
use super::{FIRST_CHATD, LANES, Measured, POLICIES, Params, Setup, WARMUP_TURNS, is_chatd, ms};
use crate::charts::Chart;
use crate::prom::Scrape;
use crate::report::Report;
use crate::scenarios::ratio;
use crate::stats::{Hist, median};

/// The lanes of the direct calls and of the floor relay in [`LANES`].
const DIRECT: usize = 0;
const FLOOR: usize = 1;
/// The chatd lanes with speculation off and auto in [`LANES`].
const OFF: usize = FIRST_CHATD;
const AUTO: usize = FIRST_CHATD + 2;

/// `report.json`'s parameters.
pub(super) fn params(p: &Params, s: &Setup) -> Value {
    let w = &p.workload;
    json!({"rounds": p.rounds, "turns_per_conn_per_round": s.per_conn, "concurrency": s.c,
        "tokens": p.tokens, "preprocess_think_ms": ms(p.preprocess_think),
        "arg_pace_ms": ms(p.arg_pace), "arg_tokens": p.arg_tokens,
        "main_think_ms": ms(p.main_think), "switch_share": w.switch_share,
        "jumpy_chats": w.jumpy_chats, "jumpy_switch": w.jumpy_switch,
        "code_chats": w.code_chats, "chat_turns": w.chat_turns, "seed": w.seed,
        "postprocessing": p.postprocessing, "warmup_turns": WARMUP_TURNS,
        "chatd_env": {"CHATD__LLM__METERED": "true",
            "CHATD__PIPELINE__SPECULATIVE_MAIN_CALL": POLICIES,
            "CHATD__PIPELINE__POSTPROCESSING": p.postprocessing}})
}

/// The lines before the run: the fake LLM, the rounds and the workload.
pub(super) fn header(report: &mut Report, p: &Params, s: &Setup) {
    report.line(format!(
        "ttft-policy: two-speed fake LLM: preprocess waits P = {:.1} ms, then {}-{} argument tokens {:.1} ms apart, decision fields complete with token {} ({:.1} ms after its first byte); main calls wait M = {:.1} ms, then {} tokens at once",
        ms(p.preprocess_think),
        s.shapes.iter().map(|s| s.0).min().unwrap_or(0),
        s.shapes.iter().map(|s| s.0).max().unwrap_or(0),
        ms(p.arg_pace),
        s.decided_at,
        ms(s.decision_fields),
        ms(p.main_think),
        p.tokens
    ));
    report.line(format!(
        "  {} rounds x {} turns per connection per lane, {} connection(s) per lane, lanes interleaved (order rotating); postprocessing {}",
        p.rounds,
        s.per_conn,
        s.c,
        if p.postprocessing { "on" } else { "off" }
    ));
    report.line(workload_line(p, s));
}

fn workload_line(p: &Params, s: &Setup) -> String {
    let (w, census) = (&p.workload, &s.census);
    format!(
        "  workload (measured chatd turns, the same in every chatd lane; seed {}): {} turns, {} about code, {} change category from the chat's previous turn ({:.1}% of turns after a chat's first; {:.0}% in steady chats, {:.0}% in the {:.0}% of chats that jump), {} new chats ({} about code; {} turns per chat), expected guess misses {} ({:.1}%)",
        w.seed,
        census.turns,
        census.code,
        census.changed,
        100.0
            * ratio(
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
    )
}

/// Which of chatd's `/metrics` scrapes (per policy) were read, for `report.json`.
pub(super) fn metrics_read(before: &[Option<Scrape>], after: &[Option<Scrape>]) -> Value {
    json!({"before": before.iter().map(Option::is_some).collect::<Vec<_>>(),
        "after": after.iter().map(Option::is_some).collect::<Vec<_>>()})
}

/// The lines after the run (tables, targets, errors), the results and the chart.
pub(super) fn finish(
    report: &mut Report,
    p: &Params,
    s: &Setup,
    m: &Measured,
    figures: &[PolicyFigures],
    metrics_read: Value,
) {
    let o = Outcome::new(p, s, m, figures);
    o.lane_table(report);
    o.policy_table(report);
    report.line(o.first_token_line());
    o.target_lines(report);
    let errors: u64 = m.totals.iter().map(|b| b.errors).sum();
    if errors > 0 {
        report.line(format!(
            "  errors: {errors} (first: {})",
            m.totals
                .iter()
                .find_map(|b| b.first_error.clone())
                .unwrap_or_default()
        ));
    }
    report.results = o.results(errors, metrics_read);
    report.charts.push(o.chart());
}

/// The run's figures, per lane in [`LANES`] order and per policy in [`POLICIES`] order.
struct Outcome<'a> {
    p: &'a Params,
    s: &'a Setup,
    m: &'a Measured,
    figures: &'a [PolicyFigures],
    /// Whole TTFT per lane: the median of the exact round medians, µs.
    whole: Vec<f64>,
    /// The median of the per-round ratios to the floor.
    to_floor: Vec<f64>,
    /// The median of the per-round differences to direct, µs.
    over_direct: Vec<f64>,
    /// Target off: the bound on its whole TTFT, µs, and whether it is met.
    off_bound_us: f64,
    off_ok: Option<bool>,
    /// Target auto: whole TTFT over the floor's, and the wasted input tokens' share.
    auto_ratio: f64,
    auto_share: Option<f64>,
}

impl<'a> Outcome<'a> {
    fn new(p: &'a Params, s: &'a Setup, m: &'a Measured, figures: &'a [PolicyFigures]) -> Self {
        let per_round = |k: usize, base: usize, f: fn(f64, f64) -> f64| {
            median(
                m.round_medians[k]
                    .iter()
                    .zip(&m.round_medians[base])
                    .map(|(t, b)| f(*t, *b))
                    .collect(),
            )
        };
        let n = LANES.len();
        let whole: Vec<f64> = m.round_medians.iter().map(|r| median(r.clone())).collect();
        let to_floor: Vec<f64> = (0..n).map(|k| per_round(k, FLOOR, ratio)).collect();
        let over_direct = (0..n).map(|k| per_round(k, DIRECT, |t, d| t - d)).collect();
        let off_bound_us =
            whole[FLOOR] + (p.preprocess_think + s.decision_fields).as_secs_f64() * 1e6 + 2000.0;
        let off_ok = (whole[OFF] > 0.0).then_some(whole[OFF] <= off_bound_us);
        let auto_ratio = to_floor[AUTO];
        let auto_share = figures
            .get(AUTO - FIRST_CHATD)
            .and_then(PolicyFigures::wasted_share);
        Outcome {
            p,
            s,
            m,
            figures,
            whole,
            to_floor,
            over_direct,
            off_bound_us,
            off_ok,
            auto_ratio,
            auto_share,
        }
    }

    fn auto_ratio_met(&self) -> Option<bool> {
        self.auto_ratio
            .is_finite()
            .then_some(self.auto_ratio <= 1.05)
    }

    /// Per lane: whole TTFT, over the floor and direct, p99, and chatd's own stages.
    fn lane_table(&self, report: &mut Report) {
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
        let p50_ms = |k: usize, h: &Hist| {
            if is_chatd(k) && h.len() > 0 {
                format!("{:.1} ms", h.us(0.5) / 1e3)
            } else {
                "-".into()
            }
        };
        for (k, lane) in LANES.iter().enumerate() {
            let t = &self.m.totals[k];
            report.line(format!(
                "  {:<11} {:>11.1} ms {:>9.4} {:>10.1} ms {:>10.1} ms {:>16} {:>16}",
                lane,
                self.whole[k] / 1e3,
                self.to_floor[k],
                self.over_direct[k] / 1e3,
                t.first.us(0.99) / 1e3,
                p50_ms(k, &t.model_selected),
                p50_ms(k, &t.main_first),
            ));
        }
    }

    /// Per policy, from chatd's `/metrics`: decision latency, speculative calls, waste.
    fn policy_table(&self, report: &mut Report) {
        report.line(format!(
            "  {:<7} {:>24} {:>24} {:>42}",
            "policy",
            "decision mean / p50 (*)",
            "spec. started/used/wasted",
            "wasted input tokens / all main-call input"
        ));
        let count = |v: Option<f64>| na(v, |x| format!("{x:.0}"));
        for (policy, f) in POLICIES.iter().zip(self.figures) {
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
    }

    /// chatd's own first token per policy, mean (n) by speculation outcome.
    fn first_token_line(&self) -> String {
        let own: Vec<String> = POLICIES
            .iter()
            .zip(self.figures)
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
                if parts.is_empty() {
                    format!("{policy}: n/a")
                } else {
                    format!("{policy}: {}", parts.join(", "))
                }
            })
            .collect();
        format!(
            "  chatd's own first token ({FIRST_TOKEN}, mean (n) by speculation): {}",
            own.join(" | ")
        )
    }

    /// The targets of issue 31 item 4.
    fn target_lines(&self, report: &mut Report) {
        let p = self.p;
        report.line(format!(
            "  target off: whole TTFT <= floor + P + decision fields' tokens + 2 ms = {:.1} + {:.1} + {:.1} + 2 ms = {:.1} ms: {:.1} ms, {}",
            self.whole[FLOOR] / 1e3,
            ms(p.preprocess_think),
            ms(self.s.decision_fields),
            self.off_bound_us / 1e3,
            self.whole[OFF] / 1e3,
            met(self.off_ok)
        ));
        report.line(format!(
            "  target auto: whole TTFT <= 1.05x floor: {:.4}x, {}; wasted input tokens <= 10%: {}, {}",
            self.auto_ratio,
            met(self.auto_ratio_met()),
            na(self.auto_share, |x| format!("{:.1}%", 100.0 * x)),
            met(self.auto_share.map(|s| s <= 0.10))
        ));
    }

    /// `report.json`'s results.
    fn results(&self, errors: u64, metrics_read: Value) -> Value {
        let (p, s) = (self.p, self.s);
        let shapes = &s.shapes;
        json!({
            "fake_llm": {
                "preprocess_think_ms": ms(p.preprocess_think),
                "arg_pace_ms": ms(p.arg_pace),
                "arg_tokens": {"general_later": shapes[0].0, "general_first": shapes[1].0,
                    "code_later": shapes[2].0, "code_first": shapes[3].0},
                "decision_fields_complete_at_token": {"general_later": shapes[0].1,
                    "general_first": shapes[1].1, "code_later": shapes[2].1, "code_first": shapes[3].1},
                "decision_fields_ms_after_first_byte": ms(s.decision_fields),
                "main_think_ms": ms(p.main_think),
            },
            "workload": s.census,
            "expected_guess_misses": s.census.expected_misses(),
            "lanes": self.lanes_json(),
            "targets": {
                "off_bound_us": self.off_bound_us,
                "off_met": self.off_ok,
                "auto_ratio_to_floor": self.auto_ratio,
                "auto_ratio_met": self.auto_ratio_met(),
                "auto_wasted_share": self.auto_share,
                "auto_wasted_met": self.auto_share.map(|s| s <= 0.10),
            },
            "errors": errors,
            "metrics_read": metrics_read,
        })
    }

    fn lanes_json(&self) -> serde_json::Map<String, Value> {
        let m = self.m;
        (0..LANES.len())
            .map(|k| {
                let mut v = json!({
                    "ttft": m.totals[k].first.json(),
                    "round_medians_us": m.round_medians[k],
                    "whole_ttft_p50_us": self.whole[k],
                    "ratio_to_floor_p50": self.to_floor[k],
                    "over_direct_p50_us": self.over_direct[k],
                    "turns": m.totals[k].ok,
                    "errors": m.totals[k].errors,
                    "first_error": m.totals[k].first_error,
                });
                if is_chatd(k) {
                    v["model_selected"] = m.totals[k].model_selected.json();
                    v["typing_to_first_update"] = m.totals[k].main_first.json();
                    v["round_typing_to_first_update_p50_us"] = json!(m.round_main[k]);
                    v["metrics"] = self.figures[k - FIRST_CHATD].json();
                }
                (LANES[k].to_string(), v)
            })
            .collect()
    }

    /// The CDF of the time to first answer frame per lane, in ms, the top 1% dropped.
    fn chart(&self) -> Chart {
        let p = self.p;
        Chart {
            name: "ttft_policy_cdf".into(),
            title: format!(
                "Time to first answer frame, P = {:.0} ms, M = {:.0} ms, T = {:.1} ms",
                ms(p.preprocess_think),
                ms(p.main_think),
                ms(p.arg_pace)
            ),
            x_label: "ms".into(),
            y_label: "fraction of turns".into(),
            series: LANES
                .iter()
                .zip(&self.m.totals)
                .map(|(lane, t)| {
                    let pts = t
                        .first
                        .cdf()
                        .into_iter()
                        .filter(|(_, q)| *q <= 0.99)
                        .map(|(us, q)| (us / 1e3, q))
                        .collect();
                    (lane.to_string(), pts)
                })
                .collect(),
        }
    }
}
