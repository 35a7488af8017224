//! The end of a skill call: each result split by its output contract, external text checked
//! for prompt injection, child and parent embeds sent and cached, and the tool message for the
//! model (results grouped by request id, model-visible fields only, or "delivered").

use chatd_protocol::{EmbedId, SkillStatus};
use serde_json::{Map, Value, json};

use super::contract::{self, Split};
use super::manifest::ResponseMode;
use super::prefilter;
use super::runner::{Ended, Invocation};
use super::sanitize::Cleaned;
use crate::pipeline::TurnEvent;
use crate::pipeline::tools::toon;

impl Invocation {
    pub(super) async fn finish(&self, ended: Vec<Ended>) -> String {
        let contract = &self.skill.manifest.output;
        // Split every result; collect the external texts for one injection check.
        let mut groups: Vec<(Value, Result<Vec<Split>, String>)> = Vec::new();
        let mut suggestions: Vec<String> = Vec::new();
        let mut instructions: Vec<String> = Vec::new();
        for (request, end) in self.requests.iter().zip(ended) {
            let group = match end {
                Ended::Results(output) => Ok({
                    for s in output.suggestions {
                        if !suggestions.contains(&s) {
                            suggestions.push(s);
                        }
                    }
                    instructions.extend(output.added_instructions);
                    output.results
                }
                .iter()
                .map(|r| contract::split(contract, &self.skill.patterns, r))
                .collect::<Vec<_>>()),
                Ended::Failed(e) => Err(e),
                Ended::Cancelled => Err("cancelled".into()),
            };
            groups.push((request.id.clone(), group));
        }
        for (_, group) in &groups {
            for s in group.iter().flatten() {
                if !s.dropped.is_empty() {
                    tracing::warn!(skill = %self.skill.full_id, fields = ?s.dropped, "skill output fields dropped: not in its contract");
                }
            }
        }
        if !suggestions.is_empty() {
            self.sink
                .emit(&self.ctx, TurnEvent::SkillSuggestions(suggestions.clone()));
        }
        let (checked, withheld, flagged) = self.check_external(&groups, &instructions).await;

        // Child embeds (composite skills) and the parent.
        let mut child_ids = Vec::new();
        let mut agent_groups = Vec::new();
        let mut result_count = 0usize;
        let mut errors = Vec::new();
        let mut texts = checked.into_iter();
        for (id, group) in &groups {
            let splits = match group {
                Ok(s) => s,
                Err(e) => {
                    errors.push(e.clone());
                    agent_groups.push(json!({"id": id, "error": e}));
                    continue;
                }
            };
            let mut agent_results = Vec::new();
            for split in splits {
                result_count += 1;
                let mut agent: Map<String, Value> = split.agent.clone();
                for (name, _) in &split.external {
                    if let Some(Cleaned { text, .. }) = texts.next() {
                        agent.insert(name.clone(), Value::String(text));
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
                    child_ids.push(child_id);
                }
                agent_results.push(Value::Object(agent));
            }
            agent_groups.push(json!({"id": id, "results": agent_results}));
        }
        // What is left of the checked texts are the skills' added instructions.
        let added: Vec<String> = texts.map(|c| c.text).collect();
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
            let users: Vec<Value> = groups
                .iter()
                .filter_map(|(_, g)| g.as_ref().ok())
                .flatten()
                .map(|s| Value::Object(s.user.clone()))
                .collect();
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
        if withheld {
            preview["warning"] = json!(
                "external text was withheld from the assistant: the safety check is unavailable"
            );
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
        if withheld {
            message["note"] = json!(
                "external text from this tool was withheld: it could not be checked for prompt injection"
            );
        }
        toon(&message)
    }

    /// Cleans every external text of the call in two layers: the deterministic pre-filter
    /// ([`super::prefilter`]: invisible characters, template tokens, instruction overrides),
    /// then the detector model on all of them as one document (split into chunks). Returns
    /// the cleaned texts in order, whether they were withheld (detector failure: fail
    /// closed), and whether the user should review them (either layer found something).
    async fn check_external(
        &self,
        groups: &[(Value, Result<Vec<Split>, String>)],
        extra: &[String],
    ) -> (Vec<Cleaned>, bool, bool) {
        let filtered: Vec<prefilter::Prefiltered> = groups
            .iter()
            .filter_map(|(_, g)| g.as_ref().ok())
            .flatten()
            .flat_map(|s| s.external.iter().map(|(_, t)| prefilter::prefilter(t)))
            .chain(extra.iter().map(|t| prefilter::prefilter(t)))
            .collect();
        if filtered.is_empty() {
            return (Vec::new(), false, false);
        }
        let suspicious = filtered.iter().any(prefilter::Prefiltered::suspicious);
        if suspicious {
            let removed: usize = filtered.iter().map(|f| f.removed).sum();
            tracing::warn!(skill = %self.skill.full_id, removed, "prompt injection removed by the pre-filter");
        }
        let texts: Vec<String> = filtered.into_iter().map(|f| f.text).collect();
        let document = texts.join("\n\n");
        match self.deps.detector.check(&document, &self.cancel).await {
            Ok(verdict) => {
                let cleaned: Vec<Cleaned> = texts
                    .iter()
                    .map(|t| self.deps.detector.apply(&verdict, t))
                    .collect();
                let flagged = suspicious || cleaned.iter().any(|c| c.flagged);
                if verdict.score > self.deps.config.injection_block_score {
                    tracing::warn!(skill = %self.skill.full_id, score = verdict.score, "prompt injection removed from skill output");
                }
                (cleaned, false, flagged)
            }
            Err(e) => {
                tracing::warn!(skill = %self.skill.full_id, error = %e, "prompt-injection check unavailable; external text withheld");
                let withheld = texts
                    .iter()
                    .map(|_| Cleaned {
                        text: "[withheld: could not be checked for prompt injection]".into(),
                        flagged: false,
                    })
                    .collect();
                (withheld, true, false)
            }
        }
    }
}
