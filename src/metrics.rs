//! Prometheus metrics: one registry per running app (so tests can run several apps in
//! one process), rendered as text at `GET /metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TypeLabel {
    pub r#type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabel {
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// Every metric chatd exports. Cloning shares the underlying values.
pub struct Metrics {
    registry: Registry,
    pub connections_open: Gauge,
    pub frames_in: Family<TypeLabel, Counter>,
    pub frames_out: Family<TypeLabel, Counter>,
    /// Queued `ai_message_update` frames replaced by a newer one of their task (a client
    /// behind the stream gets only the newest text).
    pub frames_coalesced: Counter,
    pub errors: Family<CodeLabel, Counter>,
    pub turns: Family<OutcomeLabel, Counter>,
    /// Turns this node took over from a node that stopped renewing their lease.
    pub lost_turns: Counter,
    /// Answers generated again after postprocessing judged them harmful.
    pub reprocessed_answers: Counter,
    /// Logs of turns ended here appended again after the store lost them.
    pub turn_logs_refilled: Counter,
    /// Logs of turns ended here kept to append again (see `turn::writer::ended`).
    pub turn_logs_kept: Gauge,
    pub turn_seconds: Histogram,
    pub ttft_seconds: Histogram,
    pub history_requests: Family<ReasonLabel, Counter>,
    /// Calls made to the key service (Vault transit or the local provider), total.
    pub key_service_calls: Gauge,
    /// Preprocessing that fell back to defaults, postprocessing that failed.
    pub stage_failures: Family<StageLabel, Counter>,
    /// Link checks that reached the network (cache hits and guard refusals excluded).
    pub links_checked: Counter,
    /// Links found broken (4xx, malformed), temporary (5xx, timeouts, connection errors),
    /// refused by the SSRF guard, and replaced in answers.
    pub links_broken: Counter,
    pub links_temporary: Counter,
    pub links_skipped: Counter,
    pub links_replaced: Counter,
    pub link_check_seconds: Histogram,
    /// Main calls opened while preprocessing ran, by outcome (`started`, `used`, `wasted`).
    pub speculative_main_calls: Family<OutcomeLabel, Counter>,
    /// Estimated input tokens of speculative main calls thrown away.
    pub speculative_wasted_input_tokens: Counter,
    /// Estimated input tokens of every main call sent (wasted speculative ones included).
    pub main_call_input_tokens: Counter,
    /// From a turn's start to the moment its main request is decided.
    pub main_call_decision_seconds: Histogram,
    /// `turn_first_chunk_seconds` by what became of the speculative main call.
    pub first_token_seconds: Family<SpeculationLabel, Histogram>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpeculationLabel {
    pub speculation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    pub stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

impl Metrics {
    /// Every metric, registered under the `chatd` prefix.
    pub fn new() -> Self {
        let mut metrics = Self {
            registry: Registry::with_prefix("chatd"),
            connections_open: Gauge::default(),
            frames_in: Family::default(),
            frames_out: Family::default(),
            frames_coalesced: Counter::default(),
            errors: Family::default(),
            turns: Family::default(),
            lost_turns: Counter::default(),
            reprocessed_answers: Counter::default(),
            turn_logs_refilled: Counter::default(),
            turn_logs_kept: Gauge::default(),
            turn_seconds: Histogram::new(exponential_buckets(0.005, 2.0, 16)),
            ttft_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            history_requests: Family::default(),
            key_service_calls: Gauge::default(),
            stage_failures: Family::default(),
            links_checked: Counter::default(),
            links_broken: Counter::default(),
            links_temporary: Counter::default(),
            links_skipped: Counter::default(),
            links_replaced: Counter::default(),
            link_check_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            speculative_main_calls: Family::default(),
            speculative_wasted_input_tokens: Counter::default(),
            main_call_input_tokens: Counter::default(),
            main_call_decision_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 18)),
            first_token_seconds: Family::new_with_constructor(
                first_token_histogram as fn() -> Histogram,
            ),
        };
        // Registration order is the order of `GET /metrics`.
        metrics.register_connections();
        metrics.register_turns();
        metrics.register_links();
        metrics.register_speculation();
        metrics
    }

    /// Connections and the frames they carry.
    fn register_connections(&mut self) {
        let r = &mut self.registry;
        r.register(
            "connections_open",
            "Open WebSocket connections",
            self.connections_open.clone(),
        );
        r.register(
            "frames_in",
            "Frames received, by message type",
            self.frames_in.clone(),
        );
        r.register(
            "frames_out",
            "Frames sent, by message type",
            self.frames_out.clone(),
        );
        r.register(
            "frames_coalesced",
            "Queued answer updates replaced by a newer one for a client behind the stream",
            self.frames_coalesced.clone(),
        );
    }

    /// Turns and what they depend on: history requests, the key service, pipeline stages,
    /// error frames, outcomes and timings.
    fn register_turns(&mut self) {
        let r = &mut self.registry;
        r.register(
            "history_requests",
            "request_chat_history frames sent, by reason",
            self.history_requests.clone(),
        );
        r.register(
            "key_service_calls",
            "Calls made to the key service (data keys, unwraps, health)",
            self.key_service_calls.clone(),
        );
        r.register(
            "stage_failures",
            "Pipeline stages that failed (preprocessing degrades to defaults), by stage",
            self.stage_failures.clone(),
        );
        r.register(
            "errors",
            "Error frames sent, by error code",
            self.errors.clone(),
        );
        r.register("turns", "AI turns finished, by outcome", self.turns.clone());
        r.register(
            "lost_turns",
            "Turns taken over from a lost node (ended with node_lost)",
            self.lost_turns.clone(),
        );
        r.register(
            "reprocessed_answers",
            "Answers generated again and replaced after postprocessing judged them harmful",
            self.reprocessed_answers.clone(),
        );
        r.register(
            "turn_logs_refilled",
            "Logs of turns ended here appended again after the store lost them",
            self.turn_logs_refilled.clone(),
        );
        r.register(
            "turn_logs_kept",
            "Logs of turns ended here kept to append again if the store loses them",
            self.turn_logs_kept.clone(),
        );
        r.register(
            "turn_duration_seconds",
            "Time from a turn's start to its final frame",
            self.turn_seconds.clone(),
        );
        r.register(
            "turn_first_chunk_seconds",
            "Time from a turn's start to its first streamed chunk",
            self.ttft_seconds.clone(),
        );
    }

    /// Link checking.
    fn register_links(&mut self) {
        let r = &mut self.registry;
        r.register(
            "links_checked",
            "Links checked over the network",
            self.links_checked.clone(),
        );
        r.register(
            "links_broken",
            "Links found broken (404/410, unresolvable name, refused connection, or malformed)",
            self.links_broken.clone(),
        );
        r.register(
            "links_temporary",
            "Link checks with an inconclusive result (401/403/429, other 4xx, 5xx, timeout, TLS or connection error), left alone",
            self.links_temporary.clone(),
        );
        r.register(
            "links_skipped_ssrf",
            "Links not checked because the address guard refused their target",
            self.links_skipped.clone(),
        );
        r.register(
            "links_replaced",
            "Broken links replaced by search links in answers",
            self.links_replaced.clone(),
        );
        r.register(
            "link_check_duration_seconds",
            "Time of one link check over the network, redirects included",
            self.link_check_seconds.clone(),
        );
    }

    /// Speculative main calls and what the main calls cost.
    fn register_speculation(&mut self) {
        let r = &mut self.registry;
        r.register(
            "speculative_main_calls",
            "Main calls opened while preprocessing ran: started, then used (preprocessing decided the same request) or wasted",
            self.speculative_main_calls.clone(),
        );
        r.register(
            "speculative_wasted_input_tokens",
            "Estimated input tokens of speculative main calls thrown away",
            self.speculative_wasted_input_tokens.clone(),
        );
        r.register(
            "main_call_input_tokens",
            "Estimated input tokens of every main call sent, wasted speculative ones included",
            self.main_call_input_tokens.clone(),
        );
        r.register(
            "main_call_decision_seconds",
            "Time from a turn's start to the moment its main request is decided (preprocessing's decision fields in)",
            self.main_call_decision_seconds.clone(),
        );
        r.register(
            "turn_first_token_seconds",
            "Time from a turn's start to its first streamed chunk, by what became of its speculative main call (used, wasted, off)",
            self.first_token_seconds.clone(),
        );
    }

    /// The registry in the Prometheus text format (empty if it does not encode).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn first_token_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}
