//! The early decision. The `preprocess` function's schema lists first the fields the main
//! call depends on ([`DECISION_FIELDS`]: the harm and misuse scores, the injection chance,
//! language, category, complexity and needs that choose the model, the preselected skills,
//! focus modes and settings/memories categories). A block's answer is *decided* once each
//! of them arrived complete and valid, whatever order the model wrote them in; the turn's
//! decision is taken when every block is decided or ended, or at once when a block's score
//! already refuses the message. The title, icons, tags and the rest keep streaming beside
//! the answer. A block that never gets all of them (a model that leaves one out, a malformed
//! reply, a provider that sends the arguments only at the end) is simply decided when it
//! ends: the decision then waits for the whole reply, as before.

use std::sync::{Mutex, MutexGuard, PoisonError};

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::{Input, Preprocessed, Raw, Stage};

/// The `preprocess` arguments the main call depends on.
pub const DECISION_FIELDS: [&str; 11] = [
    "harmful_or_illegal_score",
    "misuse_risk_score",
    "prompt_injection_chance",
    "language",
    "category",
    "complexity",
    "needs_vision",
    "needs_reasoning",
    "relevant_app_skills",
    "relevant_focus_modes",
    "relevant_app_settings_and_memories",
];

/// What each block's call has brought so far, and the decision until it is sent.
pub(super) struct Progress {
    blocks: Vec<Block>,
    decided: Option<oneshot::Sender<Preprocessed>>,
    /// The decision as sent, while nothing arrived after it (it is then the whole answer).
    sent: Option<Preprocessed>,
}

#[derive(Default)]
struct Block {
    /// Valid members, the first of each name.
    fields: Map<String, Value>,
    ended: Option<bool>,
}

impl Block {
    fn has_decision(&self) -> bool {
        DECISION_FIELDS.iter().all(|k| self.fields.contains_key(*k))
    }

    fn raw(&self) -> Raw {
        serde_json::from_value(Value::Object(self.fields.clone())).unwrap_or_default()
    }
}

impl Progress {
    pub(super) fn new(blocks: usize, decided: oneshot::Sender<Preprocessed>) -> Self {
        Self {
            blocks: (0..blocks).map(|_| Block::default()).collect(),
            decided: Some(decided),
            sent: None,
        }
    }

    /// A member of block `i`'s arguments; one that does not fit its field's type is left out.
    pub(super) fn add(&mut self, i: usize, key: String, value: Value) {
        let Some(block) = self.blocks.get_mut(i) else {
            return;
        };
        if block.fields.contains_key(&key) {
            return;
        }
        let alone = Value::Object(Map::from_iter([(key.clone(), value.clone())]));
        if serde_json::from_value::<Raw>(alone).is_err() {
            return;
        }
        block.fields.insert(key, value);
        self.sent = None;
    }

    /// Block `i`'s call ended, with a well-formed answer or not.
    pub(super) fn end(&mut self, i: usize, ok: bool) {
        if let Some(block) = self.blocks.get_mut(i) {
            block.ended = Some(ok);
        }
        self.sent = None;
    }

    /// The decision, when nothing arrived after it (it is then the whole answer).
    pub(super) fn take_unchanged(&mut self) -> Option<Preprocessed> {
        self.sent.take()
    }
}

impl Stage<'_> {
    /// Sends the decision once it is settled: every block decided or ended, or a score that
    /// refuses the message whatever the other blocks say.
    pub(super) fn settle(&self, p: &mut Progress, input: &Input<'_>) {
        if p.decided.is_none() {
            return;
        }
        let settled = p
            .blocks
            .iter()
            .all(|b| b.ended.is_some() || b.has_decision())
            || p.blocks.iter().any(|b| self.refuses(b));
        if settled && let Some(decided) = p.decided.take() {
            let decision = self.outcome(p, input);
            p.sent = Some(decision.clone());
            // The turn may have stopped waiting (cancelled): nothing to tell then.
            let _ = decided.send(decision);
        }
    }

    /// The merged answer of the blocks that count: ended well, decided, or refusing.
    pub(super) fn outcome(&self, p: &Progress, input: &Input<'_>) -> Preprocessed {
        let raws: Vec<Raw> = p
            .blocks
            .iter()
            .filter(|b| b.ended == Some(true) || b.has_decision() || self.refuses(b))
            .map(Block::raw)
            .collect();
        let mut out = if raws.is_empty() {
            self.defaults(input)
        } else {
            self.merge(raws, input)
        };
        out.blocks = p.blocks.len();
        out
    }

    /// A block whose harm or misuse score alone refuses the message.
    fn refuses(&self, b: &Block) -> bool {
        let score = |key: &str| {
            b.fields
                .get(key)
                .and_then(Value::as_f64)
                .map_or(0, |s| s.clamp(0.0, 10.0).round() as u8)
        };
        score("harmful_or_illegal_score") >= self.config.harm_threshold
            || score("misuse_risk_score") >= self.config.misuse_threshold
    }
}

/// Preprocessing under way.
pub struct Running<'a> {
    whole: BoxFuture<'a, Preprocessed>,
    decision: oneshot::Receiver<Preprocessed>,
}

/// What [`Running::decide`] returns: the decision, and how the rest arrives.
pub enum Decided<'a> {
    /// The whole answer was in when the decision was taken.
    Whole(Preprocessed),
    /// The decision came first; `rest` gives the whole answer.
    Early {
        decision: Preprocessed,
        rest: BoxFuture<'a, Preprocessed>,
    },
}

impl<'a> Running<'a> {
    pub(super) fn new(
        whole: BoxFuture<'a, Preprocessed>,
        decision: oneshot::Receiver<Preprocessed>,
    ) -> Self {
        Self { whole, decision }
    }

    /// Waits for the decision (at the latest, the whole answer).
    pub async fn decide(mut self) -> Decided<'a> {
        tokio::select! {
            biased;
            whole = &mut self.whole => Decided::Whole(whole),
            Ok(decision) = &mut self.decision => Decided::Early { decision, rest: self.whole },
        }
    }
}

pub(super) fn lock(p: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::DECISION_FIELDS;
    use crate::pipeline::instructions::{DEFAULT_YAML, Instructions};

    #[test]
    fn the_schema_asks_for_the_decision_first_and_requires_it() {
        let i = Instructions::parse(DEFAULT_YAML).unwrap_or_else(|e| unreachable!("{e}"));
        for first in [true, false] {
            let tool = i.preprocess_tool(first);
            let names: Vec<&String> = tool.parameters["properties"]
                .as_object()
                .map(|p| p.keys().collect())
                .unwrap_or_default();
            assert_eq!(
                names[..DECISION_FIELDS.len()],
                DECISION_FIELDS,
                "first: {first}"
            );
            let required = tool.parameters["required"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for field in DECISION_FIELDS {
                assert!(required.iter().any(|r| r == field), "{field} required");
            }
        }
    }
}
