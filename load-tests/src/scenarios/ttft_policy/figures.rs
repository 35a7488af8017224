//! What one chatd policy's `/metrics` say about `ttft-policy`'s measured rounds (the
//! difference of two scrapes): speculative calls started, used and wasted, wasted and all
//! main-call input tokens, the decision latency and the first token by speculation outcome.

use serde_json::{Value, json};

use crate::prom::{self, Scrape};

const SPECULATIVE: &str = "chatd_speculative_main_calls_total";
const WASTED_TOKENS: &str = "chatd_speculative_wasted_input_tokens_total";
const MAIN_TOKENS: &str = "chatd_main_call_input_tokens_total";
const DECISION: &str = "chatd_main_call_decision_seconds";
pub(super) const FIRST_TOKEN: &str = "chatd_turn_first_token_seconds";

pub(super) fn na(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    match v {
        Some(x) if x.is_finite() => f(x),
        _ => "n/a".into(),
    }
}

pub(super) fn met(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "NOT met",
        None => "n/a",
    }
}

/// What one chatd policy's metrics say about the measured rounds.
pub(super) struct PolicyFigures {
    pub(super) started: Option<f64>,
    pub(super) used: Option<f64>,
    pub(super) wasted: Option<f64>,
    pub(super) wasted_tokens: Option<f64>,
    pub(super) main_tokens: Option<f64>,
    pub(super) decision: Option<prom::Histogram>,
    pub(super) first_token: Vec<(&'static str, Option<prom::Histogram>)>,
}

impl PolicyFigures {
    pub(super) fn read(before: Option<&Scrape>, after: Option<&Scrape>) -> Self {
        // A labelled family is not exported at all before its first use (prometheus_client):
        // where the other speculation metrics are there, a missing outcome is 0.
        let exported = after.is_some_and(|a| a.value(WASTED_TOKENS, &[]).is_some());
        let outcome = |o| {
            prom::delta(before, after, SPECULATIVE, &[("outcome", o)]).or(exported.then_some(0.0))
        };
        PolicyFigures {
            started: outcome("started"),
            used: outcome("used"),
            wasted: outcome("wasted"),
            wasted_tokens: prom::delta(before, after, WASTED_TOKENS, &[]),
            main_tokens: prom::delta(before, after, MAIN_TOKENS, &[]),
            decision: prom::histogram_delta(before, after, DECISION, &[]),
            first_token: ["used", "wasted", "off"]
                .into_iter()
                .map(|s| {
                    (
                        s,
                        prom::histogram_delta(before, after, FIRST_TOKEN, &[("speculation", s)]),
                    )
                })
                .collect(),
        }
    }

    pub(super) fn wasted_share(&self) -> Option<f64> {
        match (self.wasted_tokens, self.main_tokens) {
            (Some(w), Some(m)) if m > 0.0 => Some(w / m),
            _ => None,
        }
    }

    pub(super) fn decision_mean_ms(&self) -> Option<f64> {
        self.decision.as_ref()?.mean().map(|s| s * 1e3)
    }

    pub(super) fn decision_p50_ms(&self) -> Option<f64> {
        self.decision.as_ref()?.quantile(0.5).map(|s| s * 1e3)
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "speculative_main_calls": {"started": self.started, "used": self.used,
                "wasted": self.wasted},
            "wasted_input_tokens": self.wasted_tokens,
            "main_call_input_tokens": self.main_tokens,
            "wasted_input_token_share": self.wasted_share(),
            "decision_mean_ms": self.decision_mean_ms(),
            "decision_p50_ms_from_buckets": self.decision_p50_ms(),
            "decisions": self.decision.as_ref().map(|h| h.count),
            "first_token_by_speculation": self.first_token.iter().map(|(s, h)| {
                ((*s).to_string(), json!({
                    "n": h.as_ref().map(|h| h.count),
                    "mean_ms": h.as_ref().and_then(prom::Histogram::mean).map(|s| s * 1e3),
                    "p50_ms_from_buckets": h.as_ref().and_then(|h| h.quantile(0.5)).map(|s| s * 1e3),
                }))
            }).collect::<serde_json::Map<_, _>>(),
        })
    }
}
