//! The results of a skill call: as each request ends, its results split by the output
//! contract, external text checked for prompt injection, and child embeds sent and cached
//! at once; at the end the parent embed and the tool message for the model (results grouped
//! by request id, model-visible fields only, or "delivered").

use chatd_protocol::{EmbedId, SkillStatus};
use serde_json::{Map, Value, json};

use super::contract::{self, Split};
use super::external::Withheld;
use super::invocation::{Ended, Invocation};
use super::manifest::ResponseMode;
use super::sanitize::Cleaned;
use crate::pipeline::TurnEvent;
use crate::pipeline::tools::toon;

/// One request's results once processed (split, checked, its child embeds sent).
pub(super) struct Processed {
    id: Value,
    /// The model's view of each result, or why the request failed.
    agent: Result<Vec<Value>, String>,
    /// The user's view of each result (kept in the parent embed of a non-composite skill).
    user: Vec<Value>,
    child_ids: Vec<EmbedId>,
    suggestions: Vec<String>,
    /// The request's added instructions, checked.
    added: Vec<String>,
    withheld: Option<Withheld>,
    flagged: bool,
}

impl Processed {
    /// A request that produced no results (failed or cancelled), and why.
    fn failed(id: Value, reason: String) -> Processed {
        Processed {
            id,
            agent: Err(reason),
            user: Vec::new(),
            child_ids: Vec::new(),
            suggestions: Vec::new(),
            added: Vec::new(),
            withheld: None,
            flagged: false,
        }
    }
}

/// The whole call's results, gathered from its processed requests.
struct Outcome {
    /// Every request's follow-up suggestions, first occurrence kept.
    suggestions: Vec<String>,
    /// Why outside text was withheld (the first request's reason that had any).
    withheld: Option<Withheld>,
    flagged: bool,
    child_ids: Vec<EmbedId>,
    added: Vec<String>,
    errors: Vec<String>,
    result_count: usize,
    /// The model's view: per request, its results or its error, under its id.
    agent_groups: Vec<Value>,
    /// The user's view of every result (a non-composite skill keeps it in the parent).
    users: Vec<Value>,
    /// Every request failed.
    all_failed: bool,
    status: SkillStatus,
}

impl Outcome {
    fn gather(processed: Vec<Processed>, request_count: usize) -> Outcome {
        let mut suggestions: Vec<String> = Vec::new();
        for s in processed.iter().flat_map(|p| &p.suggestions) {
            if !suggestions.contains(s) {
                suggestions.push(s.clone());
            }
        }
        let errors: Vec<String> = processed
            .iter()
            .filter_map(|p| p.agent.as_ref().err().cloned())
            .collect();
        let all_failed = errors.len() == request_count;
        Outcome {
            suggestions,
            withheld: processed.iter().find_map(|p| p.withheld),
            flagged: processed.iter().any(|p| p.flagged),
            child_ids: processed.iter().flat_map(|p| p.child_ids.clone()).collect(),
            added: processed.iter().flat_map(|p| p.added.clone()).collect(),
            errors,
            result_count: processed
                .iter()
                .filter_map(|p| p.agent.as_ref().ok())
                .map(Vec::len)
                .sum(),
            agent_groups: processed
                .iter()
                .map(|p| match &p.agent {
                    Ok(results) => json!({"id": p.id, "results": results}),
                    Err(e) => json!({"id": p.id, "error": e}),
                })
                .collect(),
            users: processed.into_iter().flat_map(|p| p.user).collect(),
            all_failed,
            status: if all_failed {
                SkillStatus::Error
            } else {
                SkillStatus::Finished
            },
        }
    }
}

impl Invocation {
    /// One request that ended: its results split by the contract, their external text
    /// checked, and (composite skills) a child embed per result sent at once, so the user
    /// sees each request's results as it finishes, not after the slowest.
    pub(super) async fn process(&self, id: Value, end: Ended) -> Processed {
        let output = match end {
            Ended::Results(output) => output,
            Ended::Failed(e) => return Processed::failed(id, e),
            Ended::Cancelled => return Processed::failed(id, "cancelled".into()),
        };
        let instructions: Vec<String> = output.added_instructions.into_iter().collect();
        let splits = self.split_results(&output.results);
        let checked = self
            .check_external(outside_texts(&splits, &instructions))
            .await;
        let flagged = checked.flagged;
        let mut texts = checked.texts.into_iter();
        let mut done = Processed {
            id,
            agent: Ok(Vec::new()),
            user: Vec::with_capacity(splits.len()),
            child_ids: Vec::new(),
            suggestions: output.suggestions,
            added: Vec::new(),
            withheld: checked.withheld,
            flagged,
        };
        let mut agent_results = Vec::with_capacity(splits.len());
        for split in splits {
            let mut agent = agent_view(&split, &mut texts);
            if let Some(child_type) = &self.skill.manifest.output.child_type {
                let child_id = self.send_child(child_type, &split.user, flagged).await;
                agent.insert("embed_id".into(), json!(child_id.as_str()));
                done.child_ids.push(child_id);
            }
            done.user.push(Value::Object(split.user));
            agent_results.push(Value::Object(agent));
        }
        // What is left of the checked texts are the request's added instructions.
        done.added = texts.map(|c| c.text).collect();
        done.agent = Ok(agent_results);
        done
    }

    /// Each result split by the output contract; dropped fields are logged.
    fn split_results(&self, results: &[Value]) -> Vec<Split> {
        let splits: Vec<Split> = results
            .iter()
            .map(|r| contract::split(&self.skill.manifest.output, &self.skill.patterns, r))
            .collect();
        for s in &splits {
            if !s.dropped.is_empty() {
                tracing::warn!(skill = %self.skill.full_id, fields = ?s.dropped, "skill output fields dropped: not in its contract");
            }
        }
        splits
    }

    /// Sends (and caches) one result's child embed under the parent; returns its id.
    async fn send_child(
        &self,
        child_type: &str,
        user: &Map<String, Value>,
        flagged: bool,
    ) -> EmbedId {
        let child_id = EmbedId::random();
        let mut content = user.clone();
        content.insert("app_id".into(), json!(self.skill.app_id));
        content.insert("skill_id".into(), json!(self.skill.skill_id));
        let mut e = self.embed_event(
            child_id.clone(),
            child_type,
            toon(&Value::Object(content)),
            SkillStatus::Finished,
            1,
        );
        e.parent_embed_id = Some(self.embed_id.clone());
        e.injection_flagged = flagged;
        self.embed(e).await;
        child_id
    }

    /// The end of the call: the parent embed with every request's results, the final
    /// status, and the tool message for the model (results grouped by request id).
    pub(super) async fn finish(&self, processed: Vec<Processed>) -> String {
        let outcome = Outcome::gather(processed, self.requests.len());
        if !outcome.suggestions.is_empty() {
            self.sink.emit(
                &self.ctx,
                TurnEvent::SkillSuggestions(outcome.suggestions.clone()),
            );
        }
        self.send_parent(&outcome).await;
        self.final_status(&outcome);
        self.model_message(&outcome)
    }

    /// Sends (and caches) the parent embed's final version: every child's id, and the
    /// results themselves for a non-composite skill.
    async fn send_parent(&self, outcome: &Outcome) {
        let mut parent = json!({
            "app_id": self.skill.app_id, "skill_id": self.skill.skill_id,
            "status": outcome.status.as_str(), "skill_task_id": self.skill_task_id.as_str(),
            "result_count": outcome.result_count,
            "embed_ids": outcome.child_ids.iter().map(EmbedId::as_str).collect::<Vec<_>>(),
        });
        if !outcome.suggestions.is_empty() {
            parent["suggestions_follow_up_requests"] = json!(outcome.suggestions);
        }
        if self.skill.manifest.output.child_type.is_none() {
            // A single (non-composite) result lives in the parent itself.
            parent["results"] = Value::Array(outcome.users.clone());
        }
        let mut e = self.embed_event(
            self.embed_id.clone(),
            "app_skill_use",
            toon(&parent),
            outcome.status,
            2,
        );
        e.embed_ids = outcome.child_ids.clone();
        e.injection_flagged = outcome.flagged;
        self.embed(e).await;
    }

    /// The call's final `skill_execution_status` (with the errors when every request failed).
    fn final_status(&self, outcome: &Outcome) {
        let mut preview =
            json!({"embed_id": self.embed_id.as_str(), "result_count": outcome.result_count});
        if let Some(w) = outcome.withheld {
            preview["warning"] = json!(w.warning());
        }
        if outcome.flagged {
            preview["injection_flagged"] = json!(true);
        }
        self.status(
            outcome.status,
            preview,
            outcome.all_failed.then(|| outcome.errors.join("; ")),
        );
    }

    /// The tool message for the model: "delivered" (passthrough), or the results grouped by
    /// request id with the filled template (template).
    fn model_message(&self, outcome: &Outcome) -> String {
        let contract = &self.skill.manifest.output;
        let mut message = match contract.mode {
            ResponseMode::Passthrough => json!({
                "status": if outcome.all_failed { "error" } else { "delivered" },
                "embed_id": self.embed_id.as_str(),
                "result_count": outcome.result_count,
                "message": "The results were shown to the user directly; refer to them, do not repeat them.",
            }),
            ResponseMode::Template => {
                let first = outcome
                    .agent_groups
                    .iter()
                    .filter_map(|g| g["results"].as_array())
                    .flatten()
                    .next()
                    .and_then(Value::as_object);
                let mut m = json!({"results": outcome.agent_groups});
                if let Some(t) = &contract.template {
                    m["summary"] = json!(contract::fill_template(t, outcome.result_count, first));
                }
                m
            }
        };
        if let Some(p) = &self.skill.manifest.provider {
            message["provider"] = json!(p);
        }
        if !outcome.added.is_empty() && contract.mode == ResponseMode::Template {
            message["added_instructions"] = json!(outcome.added.join("\n"));
        }
        if let Some(w) = outcome.withheld {
            message["note"] = json!(w.note());
        }
        toon(&message)
    }
}

/// Every outside text of one request, for one check: each result's external text and noisy
/// URLs' words in order, then the request's added instructions.
fn outside_texts<'a>(splits: &'a [Split], instructions: &'a [String]) -> Vec<&'a str> {
    splits
        .iter()
        .flat_map(|s| {
            s.external
                .iter()
                .map(|(_, t)| t.as_str())
                .chain(s.noisy_urls.iter().map(|u| u.words.as_str()))
        })
        .chain(instructions.iter().map(String::as_str))
        .collect()
}

/// The model's view of one result: its conforming `agent_data`, its external text as
/// checked, and each noisy URL whole or cut (taking this result's texts, in
/// [`outside_texts`]'s order, from `texts`).
fn agent_view(split: &Split, texts: &mut impl Iterator<Item = Cleaned>) -> Map<String, Value> {
    let mut agent: Map<String, Value> = split.agent.clone();
    for (name, _) in &split.external {
        if let Some(Cleaned { text, .. }) = texts.next() {
            agent.insert(name.clone(), Value::String(text));
        }
    }
    for url in &split.noisy_urls {
        let removed = texts.next().is_none_or(|c| c.removed);
        if let Some(u) = url.for_model(removed) {
            agent.insert(url.name.clone(), Value::String(u));
        }
    }
    agent
}
