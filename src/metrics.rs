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
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("chatd");
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Open WebSocket connections",
            connections_open.clone(),
        );
        let frames_in = Family::<TypeLabel, Counter>::default();
        registry.register(
            "frames_in",
            "Frames received, by message type",
            frames_in.clone(),
        );
        let frames_out = Family::<TypeLabel, Counter>::default();
        registry.register(
            "frames_out",
            "Frames sent, by message type",
            frames_out.clone(),
        );
        let frames_coalesced = Counter::default();
        registry.register(
            "frames_coalesced",
            "Queued answer updates replaced by a newer one for a client behind the stream",
            frames_coalesced.clone(),
        );
        let history_requests = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "history_requests",
            "request_chat_history frames sent, by reason",
            history_requests.clone(),
        );
        let key_service_calls = Gauge::default();
        registry.register(
            "key_service_calls",
            "Calls made to the key service (data keys, unwraps, health)",
            key_service_calls.clone(),
        );
        let stage_failures = Family::<StageLabel, Counter>::default();
        registry.register(
            "stage_failures",
            "Pipeline stages that failed (preprocessing degrades to defaults), by stage",
            stage_failures.clone(),
        );
        let errors = Family::<CodeLabel, Counter>::default();
        registry.register("errors", "Error frames sent, by error code", errors.clone());
        let turns = Family::<OutcomeLabel, Counter>::default();
        registry.register("turns", "AI turns finished, by outcome", turns.clone());
        let lost_turns = Counter::default();
        registry.register(
            "lost_turns",
            "Turns taken over from a lost node (ended with node_lost)",
            lost_turns.clone(),
        );
        let reprocessed_answers = Counter::default();
        registry.register(
            "reprocessed_answers",
            "Answers generated again and replaced after postprocessing judged them harmful",
            reprocessed_answers.clone(),
        );
        let turn_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 16));
        registry.register(
            "turn_duration_seconds",
            "Time from a turn's start to its final frame",
            turn_seconds.clone(),
        );
        let ttft_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 18));
        registry.register(
            "turn_first_chunk_seconds",
            "Time from a turn's start to its first streamed chunk",
            ttft_seconds.clone(),
        );
        let links_checked = Counter::default();
        registry.register(
            "links_checked",
            "Links checked over the network",
            links_checked.clone(),
        );
        let links_broken = Counter::default();
        registry.register(
            "links_broken",
            "Links found broken (404/410, unresolvable name, refused connection, or malformed)",
            links_broken.clone(),
        );
        let links_temporary = Counter::default();
        registry.register(
            "links_temporary",
            "Link checks with an inconclusive result (401/403/429, other 4xx, 5xx, timeout, TLS or connection error), left alone",
            links_temporary.clone(),
        );
        let links_skipped = Counter::default();
        registry.register(
            "links_skipped_ssrf",
            "Links not checked because the address guard refused their target",
            links_skipped.clone(),
        );
        let links_replaced = Counter::default();
        registry.register(
            "links_replaced",
            "Broken links replaced by search links in answers",
            links_replaced.clone(),
        );
        let link_check_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        registry.register(
            "link_check_duration_seconds",
            "Time of one link check over the network, redirects included",
            link_check_seconds.clone(),
        );
        let speculative_main_calls = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "speculative_main_calls",
            "Main calls opened while preprocessing ran: started, then used (preprocessing decided the same request) or wasted",
            speculative_main_calls.clone(),
        );
        let speculative_wasted_input_tokens = Counter::default();
        registry.register(
            "speculative_wasted_input_tokens",
            "Estimated input tokens of speculative main calls thrown away",
            speculative_wasted_input_tokens.clone(),
        );
        let main_call_input_tokens = Counter::default();
        registry.register(
            "main_call_input_tokens",
            "Estimated input tokens of every main call sent, wasted speculative ones included",
            main_call_input_tokens.clone(),
        );
        let main_call_decision_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 18));
        registry.register(
            "main_call_decision_seconds",
            "Time from a turn's start to the moment its main request is decided (preprocessing's decision fields in)",
            main_call_decision_seconds.clone(),
        );
        let first_token_seconds = Family::<SpeculationLabel, Histogram>::new_with_constructor(
            first_token_histogram as fn() -> Histogram,
        );
        registry.register(
            "turn_first_token_seconds",
            "Time from a turn's start to its first streamed chunk, by what became of its speculative main call (used, wasted, off)",
            first_token_seconds.clone(),
        );
        Self {
            registry,
            speculative_main_calls,
            speculative_wasted_input_tokens,
            main_call_input_tokens,
            main_call_decision_seconds,
            first_token_seconds,
            links_checked,
            links_broken,
            links_temporary,
            links_skipped,
            links_replaced,
            link_check_seconds,
            connections_open,
            frames_in,
            frames_out,
            frames_coalesced,
            errors,
            turns,
            lost_turns,
            reprocessed_answers,
            turn_seconds,
            ttft_seconds,
            history_requests,
            key_service_calls,
            stage_failures,
        }
    }

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
