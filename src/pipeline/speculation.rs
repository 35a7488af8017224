//! The speculative main call. Preprocessing is a model round trip of its own that the main
//! call must wait for (it picks the model, the tools and the prompt, and may refuse). While it
//! runs, the main call it most likely leads to is already sent: the chat's previous plan, or,
//! for a chat this process has not answered yet, what preprocessing decides when the model
//! reports nothing notable. Once preprocessing is done, the early stream is kept only when
//! the decided plan is the same (so the request is byte-identical); otherwise, and on a
//! refusal or a cancel, it is dropped unread and the provider sees the hang-up. Nothing of it
//! reaches a client before preprocessing accepted the message: the harm gate stays in front.
//! The cost is a wasted main request per wrong guess (`chatd_speculative_main_calls_total`
//! counts the calls started, used and wasted; `chatd_speculative_wasted_input_tokens_total`
//! what the wasted ones cost). `pipeline.speculative_main_call`: `"auto"` (the default)
//! opens it always for models whose requests cost nothing and, for metered ones, for the
//! chats whose guesses are expected to miss least: a chat speculates while its expected
//! share of missed guesses (its own record of hits and misses, drawn towards the node's
//! while it has few) is at most a threshold, and the threshold follows the node's recent
//! waste (the share of turns whose speculative call was thrown away): the budget itself
//! when the waste is at `pipeline.speculation_budget`, higher while the node wastes less
//! (chats a little less sure of their guess may speculate too), lower, down to none, while
//! it wastes more. So the waste stays near the budget and the chats that jump between
//! topics stop first. Guesses are scored also when no call was opened for them, so a chat
//! starts again once its guesses hit. `"on"` speculates for every model, `"off"` never.

use std::future::Future;
use std::sync::Mutex;

use chatd_protocol::ChatId;
use dashmap::DashMap;
use futures_util::future::BoxFuture;

use super::context::MainPlan;
use super::models::Model;
use crate::llm::{LlmError, LlmStream};

/// Plans remembered per chat, with how often each chat's guesses (and this node's) hit; a
/// hint only, so the map is simply cleared when it grows past its bound.
pub struct Predictions {
    last: DashMap<ChatId, Record>,
    /// Every guess this node made (for chats with few of their own), and its recent waste.
    node: Mutex<Node>,
    max_entries: usize,
}

#[derive(Clone, Copy, Default, Debug)]
struct Node {
    rate: Rate,
    /// The share of recent turns whose speculative call was thrown away (a moving average).
    waste: f32,
}

impl Node {
    /// Weight of the newest turn in `waste` (about the last 20 turns count).
    const ALPHA: f32 = 0.05;
    /// How fast the threshold moves away from the budget as the waste does.
    const GAIN: f32 = 4.0;

    /// The expected miss share up to which a chat speculates.
    fn threshold(&self, budget: f32) -> f32 {
        (budget + Self::GAIN * (budget - self.waste)).clamp(0.0, 1.0)
    }
}

#[derive(Clone)]
struct Record {
    plan: MainPlan,
    rate: Rate,
}

/// Hits and misses of guesses, the older ones weighing less (halved past a window).
#[derive(Clone, Copy, Default, Debug)]
struct Rate {
    hits: f32,
    misses: f32,
}

impl Rate {
    /// Observations before the older half is forgotten.
    const WINDOW: f32 = 32.0;

    fn record(&mut self, hit: bool) {
        if self.hits + self.misses >= Self::WINDOW {
            self.hits /= 2.0;
            self.misses /= 2.0;
        }
        match hit {
            true => self.hits += 1.0,
            false => self.misses += 1.0,
        }
    }

    /// The share of guesses expected to miss: this rate's, drawn towards `prior` while it
    /// has few observations (`weight` of them count for the prior).
    fn expected_miss(&self, prior: f32, weight: f32) -> f32 {
        (self.misses + weight * prior) / (self.hits + self.misses + weight)
    }
}

impl Default for Predictions {
    fn default() -> Self {
        Self::with_capacity(50_000)
    }
}

impl Predictions {
    pub fn with_capacity(max_entries: usize) -> Self {
        Self {
            last: DashMap::new(),
            node: Mutex::new(Node::default()),
            max_entries,
        }
    }

    /// The plan to open the early call with: the chat's last one, taking what this turn
    /// fixes already (a pinned model, the active focus mode), else `fallback()`.
    pub fn guess(
        &self,
        chat: &ChatId,
        pinned: Option<&Model>,
        active_focus: Option<&str>,
        fallback: impl FnOnce() -> MainPlan,
    ) -> MainPlan {
        let Some(mut plan) = self.last.get(chat).map(|r| r.plan.clone()) else {
            return fallback();
        };
        if let Some(m) = pinned {
            plan.model = m.clone();
        }
        // The turn's focus mode is known before preprocessing (the chat's record).
        plan.focus_mode = active_focus.map(str::to_string);
        plan
    }

    /// The share of this chat's guesses expected to miss: its own record, drawn towards the
    /// node's while it has few turns (a new chat takes the node's).
    pub fn expected_miss(&self, chat: &ChatId) -> f32 {
        let node = lock(&self.node).rate;
        let prior = node.expected_miss(0.0, 1.0);
        match self.last.get(chat) {
            Some(r) => r.rate.expected_miss(prior, 2.0),
            None => prior,
        }
    }

    /// Whether a speculative call for this chat is worth it when a miss throws away one
    /// main call's input and the node may waste `budget` of the main calls' input tokens:
    /// its expected miss share within the node's threshold (see the module doc).
    pub fn worth_it(&self, chat: &ChatId, budget: f64) -> bool {
        if budget <= 0.0 {
            return false;
        }
        let threshold = lock(&self.node).threshold(budget as f32);
        self.expected_miss(chat) <= threshold
    }

    /// The plan the turn decided, whether the guess made for it was right (`None`: no guess
    /// was made, or the turn decided nothing to compare) and whether a call was opened for
    /// it (a wrong guess then wasted one).
    pub fn remember(&self, chat: &ChatId, plan: MainPlan, hit: Option<bool>, speculated: bool) {
        if let Some(hit) = hit {
            let mut node = lock(&self.node);
            node.rate.record(hit);
            let wasted = if speculated && !hit { 1.0 } else { 0.0 };
            node.waste += Node::ALPHA * (wasted - node.waste);
        }
        if self.last.len() >= self.max_entries && !self.last.contains_key(chat) {
            self.last.clear();
        }
        let mut record = self.last.entry(chat.clone()).or_insert_with(|| Record {
            plan: plan.clone(),
            rate: Rate::default(),
        });
        record.plan = plan;
        if let Some(hit) = hit {
            record.rate.record(hit);
        }
    }

    pub fn forget(&self, chat: &ChatId) {
        self.last.remove(chat);
    }
}

fn lock(node: &Mutex<Node>) -> std::sync::MutexGuard<'_, Node> {
    node.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A main call opened ahead of time: still connecting, or connected (or failed).
pub enum Early<'a> {
    Pending(BoxFuture<'a, Result<LlmStream, LlmError>>),
    Ready(Result<LlmStream, LlmError>),
}

impl Early<'_> {
    /// The opened stream, once the provider answered.
    pub async fn opened(self) -> Result<LlmStream, LlmError> {
        match self {
            Early::Pending(f) => f.await,
            Early::Ready(r) => r,
        }
    }
}

/// Runs `main` to completion while driving `side` (opening the early call) alongside; returns
/// `main`'s output and the side call in whatever state it reached.
pub async fn alongside<'a, T>(
    main: impl Future<Output = T>,
    side: Option<BoxFuture<'a, Result<LlmStream, LlmError>>>,
) -> (T, Option<Early<'a>>) {
    let Some(mut side) = side else {
        return (main.await, None);
    };
    tokio::pin!(main);
    tokio::select! {
        biased;
        out = &mut main => (out, Some(Early::Pending(side))),
        opened = &mut side => (main.await, Some(Early::Ready(opened))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::pipeline::models::ModelSpec;

    fn plan(category: &str) -> MainPlan {
        MainPlan {
            model: Model {
                spec: Arc::new(ModelSpec {
                    id: "m".into(),
                    name: "m".into(),
                    context_window: 1000,
                    capabilities: Vec::new(),
                    cost_tier: 1,
                }),
                client: Arc::new(crate::llm::SimulatedClient::new(std::time::Duration::ZERO)),
            },
            category: category.into(),
            language: "en".into(),
            skills: Vec::new(),
            focus_mode: None,
            injection_caution: false,
        }
    }

    fn chat(id: &str) -> ChatId {
        ChatId::parse(id).unwrap_or_else(|_| unreachable!())
    }

    #[test]
    fn chats_whose_guesses_miss_stop_speculating_and_start_again_when_they_hit() {
        let p = Predictions::default();
        let (steady, jumpy) = (chat("steady"), chat("jumpy"));
        // Nothing known: the node's record is empty, so a new chat speculates.
        assert!(p.worth_it(&steady, 0.1));
        for _ in 0..10 {
            p.remember(&steady, plan("a"), Some(true), false);
        }
        for i in 0..10 {
            p.remember(
                &jumpy,
                plan(if i % 2 == 0 { "a" } else { "b" }),
                Some(false),
                false,
            );
        }
        assert!(p.worth_it(&steady, 0.1), "{}", p.expected_miss(&steady));
        assert!(!p.worth_it(&jumpy, 0.1), "{}", p.expected_miss(&jumpy));
        // A new chat takes the node's record: half of the guesses missed.
        let fresh = chat("fresh");
        assert!((p.expected_miss(&fresh) - 10.0 / 21.0).abs() < 1e-6);
        // Guesses are scored while not speculating; once they hit, the chat speculates again.
        for _ in 0..100 {
            p.remember(&jumpy, plan("a"), Some(true), false);
        }
        assert!(p.worth_it(&jumpy, 0.1), "{}", p.expected_miss(&jumpy));
        // The sticky guess is the chat's last plan.
        assert_eq!(p.guess(&jumpy, None, None, || plan("z")).category, "a");
        assert_eq!(p.guess(&fresh, None, None, || plan("z")).category, "z");
    }

    #[test]
    fn the_threshold_follows_the_nodes_recent_waste() {
        let p = Predictions::default();
        let c = chat("unsure");
        // Four of ten guesses missed, none of them with a call opened: nothing was wasted,
        // so a chat this unsure may speculate (the threshold is 5x the budget).
        for i in 0..10 {
            p.remember(&c, plan("a"), Some(i % 3 != 0), false);
        }
        let expected = p.expected_miss(&c);
        assert!(expected > 0.1 && expected < 0.5, "{expected}");
        assert!(p.worth_it(&c, 0.1));
        // Speculative calls thrown away raise the node's waste: the threshold falls to none.
        let other = chat("jumping");
        for _ in 0..20 {
            p.remember(&other, plan("b"), Some(false), true);
        }
        assert!(!p.worth_it(&c, 0.1));
        assert!(!p.worth_it(&chat("new"), 0.1));
        assert!(!p.worth_it(&c, 0.0), "a budget of 0 never speculates");
    }
}
