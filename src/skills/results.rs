//! The results of a skill call: as each request ends, its results split by the output
//! contract, external text checked for prompt injection, and child embeds sent and cached
//! at once; at the end the parent embed and the tool message for the model (results grouped
//! by request id, model-visible fields only, or "delivered").

use chatd_protocol::{EmbedId, SkillStatus};
use serde_json::{Map, Value, json};

use super::contract::{self, Split};
use super::external::Withheld;
use super::manifest::ResponseMode;
use super::runner::{Ended, Invocation};
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

impl Invocation {
    /// One request that ended: its results split by the contract, their external text
    /// checked, and (composite skills) a child embed per result sent at once, so the user
    /// sees each request's results as it finishes, not after the slowest.
    pub(super) async fn process(&self, id: Value, end: Ended) -> Processed {
        let contract = &self.skill.manifest.output;
        let mut done = Processed {
            id,
            agent: Ok(Vec::new()),
            user: Vec::new(),
            child_ids: Vec::new(),
            suggestions: Vec::new(),
            added: Vec::new(),
            withheld: None,
            flagged: false,
        };
        let output = match end {
            Ended::Results(output) => output,
            Ended::Failed(e) => {
                done.agent = Err(e);
                return done;
            }
            Ended::Cancelled => {
                done.agent = Err("cancelled".into());
                return done;
            }
        };
        done.suggestions = output.suggestions;
        let instructions: Vec<String> = output.added_instructions.into_iter().collect();
        let splits: Vec<Split> = output
            .results
            .iter()
            .map(|r| contract::split(contract, &self.skill.patterns, r))
            .collect();
        for s in &splits {
            if !s.dropped.is_empty() {
                tracing::warn!(skill = %self.skill.full_id, fields = ?s.dropped, "skill output fields dropped: not in its contract");
            }
        }
        // Every outside text in one check: each result's external text and noisy URLs' words
        // in order, then the request's added instructions.
        let outside: Vec<&str> = splits
            .iter()
            .flat_map(|s| {
                s.external
                    .iter()
                    .map(|(_, t)| t.as_str())
                    .chain(s.noisy_urls.iter().map(|u| u.words.as_str()))
            })
            .chain(instructions.iter().map(String::as_str))
            .collect();
        let checked = self.check_external(outside).await;
        done.withheld = checked.withheld;
        done.flagged = checked.flagged;
        let flagged = checked.flagged;
        let mut texts = checked.texts.into_iter();
        let mut agent_results = Vec::with_capacity(splits.len());
        for split in splits {
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
            if let Some(child_type) = &contract.child_type {
                let child_id = EmbedId::random();
                let mut content = split.user.clone();
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

    /// The end of the call: the parent embed with every request's results, the final
    /// status, and the tool message for the model (results grouped by request id).
    pub(super) async fn finish(&self, processed: Vec<Processed>) -> String {
        let contract = &self.skill.manifest.output;
        let mut suggestions: Vec<String> = Vec::new();
        for s in processed.iter().flat_map(|p| &p.suggestions) {
            if !suggestions.contains(s) {
                suggestions.push(s.clone());
            }
        }
        if !suggestions.is_empty() {
            self.sink
                .emit(&self.ctx, TurnEvent::SkillSuggestions(suggestions.clone()));
        }
        let withheld = processed.iter().find_map(|p| p.withheld);
        let flagged = processed.iter().any(|p| p.flagged);
        let child_ids: Vec<EmbedId> = processed.iter().flat_map(|p| p.child_ids.clone()).collect();
        let added: Vec<String> = processed.iter().flat_map(|p| p.added.clone()).collect();
        let errors: Vec<String> = processed
            .iter()
            .filter_map(|p| p.agent.as_ref().err().cloned())
            .collect();
        let result_count: usize = processed
            .iter()
            .filter_map(|p| p.agent.as_ref().ok())
            .map(Vec::len)
            .sum();
        let agent_groups: Vec<Value> = processed
            .iter()
            .map(|p| match &p.agent {
                Ok(results) => json!({"id": p.id, "results": results}),
                Err(e) => json!({"id": p.id, "error": e}),
            })
            .collect();
        let all_failed = errors.len() == self.requests.len();
        let status = if all_failed {
            SkillStatus::Error
        } else {
            SkillStatus::Finished
        };
        let mut parent = json!({
            "app_id": self.skill.app_id, "skill_id": self.skill.skill_id,
            "status": status.as_str(), "skill_task_id": self.skill_task_id.as_str(),
            "result_count": result_count,
            "embed_ids": child_ids.iter().map(EmbedId::as_str).collect::<Vec<_>>(),
        });
        if !suggestions.is_empty() {
            parent["suggestions_follow_up_requests"] = json!(suggestions);
        }
        if contract.child_type.is_none() {
            // A single (non-composite) result lives in the parent itself.
            let users: Vec<Value> = processed.iter().flat_map(|p| p.user.clone()).collect();
            parent["results"] = Value::Array(users);
        }
        let mut e = self.embed_event(
            self.embed_id.clone(),
            "app_skill_use",
            toon(&parent),
            status,
            2,
        );
        e.embed_ids = child_ids;
        e.injection_flagged = flagged;
        self.embed(e).await;
        let mut preview = json!({"embed_id": self.embed_id.as_str(), "result_count": result_count});
        if let Some(w) = withheld {
            preview["warning"] = json!(w.warning());
        }
        if flagged {
            preview["injection_flagged"] = json!(true);
        }
        self.status(status, preview, all_failed.then(|| errors.join("; ")));

        let mut message = match contract.mode {
            ResponseMode::Passthrough => json!({
                "status": if all_failed { "error" } else { "delivered" },
                "embed_id": self.embed_id.as_str(),
                "result_count": result_count,
                "message": "The results were shown to the user directly; refer to them, do not repeat them.",
            }),
            ResponseMode::Template => {
                let first = agent_groups
                    .iter()
                    .filter_map(|g| g["results"].as_array())
                    .flatten()
                    .next()
                    .and_then(Value::as_object);
                let mut m = json!({"results": agent_groups});
                if let Some(t) = &contract.template {
                    m["summary"] = json!(contract::fill_template(t, result_count, first));
                }
                m
            }
        };
        if let Some(p) = &self.skill.manifest.provider {
            message["provider"] = json!(p);
        }
        if !added.is_empty() && contract.mode == ResponseMode::Template {
            message["added_instructions"] = json!(added.join("\n"));
        }
        if let Some(w) = withheld {
            message["note"] = json!(w.note());
        }
        toon(&message)
    }
}
