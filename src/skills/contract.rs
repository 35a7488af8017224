//! Applying a skill's output contract to one result at run time: what the model may see
//! (`agent_data` fields that conform, and `external_text` to be checked), and what goes to
//! the user's embed (every declared field). Anything undeclared or non-conforming is dropped,
//! and so is a constrained string that carries free text ([`super::free_text`]); a URL
//! carrying words is checked like `external_text` before the model sees it whole.

use std::collections::HashMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::free_text;
use super::manifest::{FieldKind, FieldSpec, OutputContract, StringFormat, anchored};

/// Compiled `agent_data` patterns of one skill.
#[derive(Debug, Default)]
pub struct Patterns(HashMap<String, Regex>);

impl Patterns {
    pub fn compile(contract: &OutputContract) -> Patterns {
        Patterns(
            contract
                .agent_data
                .iter()
                .filter_map(|(name, spec)| {
                    let p = spec.pattern.as_ref()?;
                    Regex::new(&anchored(p)).ok().map(|r| (name.clone(), r))
                })
                .collect(),
        )
    }
}

/// One result split by audience.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    /// Conforming `agent_data` fields.
    pub agent: Map<String, Value>,
    /// `external_text` fields (strings), still to be checked before the model sees them.
    pub external: Vec<(String, String)>,
    /// `format: url` fields whose URL carries words: the model sees them whole only if
    /// their words pass the check.
    pub noisy_urls: Vec<NoisyUrl>,
    /// Every declared field that is present, for the user's embed.
    pub user: Map<String, Value>,
    /// Fields dropped for not conforming (for the log).
    pub dropped: Vec<String>,
}

/// A URL field to check before the model sees it ([`free_text::agent_url`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NoisyUrl {
    pub name: String,
    /// Without user info and fragment.
    pub url: String,
    /// Its host, path and query as text, for the check.
    pub words: String,
}

impl NoisyUrl {
    /// What the model sees: the whole URL when its check removed nothing, else the URL cut
    /// to its quiet prefix (`None`: not even the host is quiet).
    pub fn for_model(&self, removed: bool) -> Option<String> {
        if removed {
            free_text::reduced(&self.url)
        } else {
            Some(self.url.clone())
        }
    }
}

pub fn split(contract: &OutputContract, patterns: &Patterns, result: &Value) -> Split {
    let mut out = Split::default();
    let Some(obj) = result.as_object() else {
        out.dropped.push("(not an object)".into());
        return out;
    };
    for (name, spec) in &contract.agent_data {
        let Some(v) = obj.get(name).filter(|v| !v.is_null()) else {
            continue;
        };
        if !conforms(spec, patterns.0.get(name), v) {
            out.dropped.push(name.clone());
            continue;
        }
        out.user.insert(name.clone(), v.clone());
        match (spec.format, v.as_str()) {
            (Some(StringFormat::Url), Some(s)) => match free_text::agent_url(s) {
                Some(u) if u.quiet => {
                    out.agent.insert(name.clone(), Value::String(u.url));
                }
                Some(u) => out.noisy_urls.push(NoisyUrl {
                    name: name.clone(),
                    url: u.url,
                    words: u.words,
                }),
                None => out.dropped.push(name.clone()),
            },
            _ => {
                out.agent.insert(name.clone(), v.clone());
            }
        }
    }
    for name in &contract.external_text {
        match obj.get(name) {
            Some(Value::String(s)) => {
                out.external.push((name.clone(), s.clone()));
                out.user.insert(name.clone(), Value::String(s.clone()));
            }
            Some(Value::Null) | None => {}
            Some(_) => out.dropped.push(name.clone()),
        }
    }
    for name in &contract.user_content {
        if let Some(v) = obj.get(name).filter(|v| !v.is_null()) {
            out.user.insert(name.clone(), v.clone());
        }
    }
    out
}

fn conforms(spec: &FieldSpec, pattern: Option<&Regex>, v: &Value) -> bool {
    match spec.kind {
        FieldKind::Integer => v.is_i64() || v.is_u64(),
        FieldKind::Number => v.is_number(),
        FieldKind::Boolean => v.is_boolean(),
        FieldKind::String => {
            let Some(s) = v.as_str() else { return false };
            if !spec.allowed.is_empty() && !spec.allowed.iter().any(|a| a == s) {
                return false;
            }
            if spec.pattern.is_some() && !pattern.is_some_and(|p| p.is_match(s)) {
                return false;
            }
            // An enum value is the manifest's own text; any other string must not carry
            // free text (a URL's words are checked instead).
            if spec.allowed.is_empty()
                && spec.format != Some(StringFormat::Url)
                && !free_text::quiet(s)
            {
                return false;
            }
            match spec.format {
                None => true,
                Some(StringFormat::Url) => free_text::agent_url(s).is_some(),
                Some(StringFormat::Date) => {
                    s.len() == 10
                        && s.bytes().enumerate().all(|(i, b)| {
                            if i == 4 || i == 7 {
                                b == b'-'
                            } else {
                                b.is_ascii_digit()
                            }
                        })
                }
                Some(StringFormat::Id) => chatd_protocol::EmbedId::parse(s).is_ok(),
                Some(StringFormat::Language) => {
                    (2..=8).contains(&s.len())
                        && s.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-')
                }
            }
        }
    }
}

/// `{count}` and the first result's agent fields filled into the template.
pub fn fill_template(template: &str, count: usize, first: Option<&Map<String, Value>>) -> String {
    let mut out = template.replace("{count}", &count.to_string());
    if let Some(first) = first {
        for (k, v) in first {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            out = out.replace(&format!("{{{k}}}"), &text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn contract() -> OutputContract {
        serde_yaml_ng::from_str(
            r#"
mode: template
agent_data:
  url: {type: string, format: url}
  rank: {type: integer}
  kind: {type: string, enum: [a, b]}
  code: {type: string, pattern: "[A-Z]{3}"}
external_text: [title]
user_content: [body]
"#,
        )
        .unwrap()
    }

    #[test]
    fn only_conforming_declared_fields_reach_the_model() {
        let c = contract();
        let p = Patterns::compile(&c);
        let s = split(
            &c,
            &p,
            &json!({"url": "https://example.com/x", "rank": 2, "kind": "zzz", "code": "ABCD",
                    "title": "T", "body": "free text", "secret": "drop me"}),
        );
        assert_eq!(
            s.agent,
            json!({"url": "https://example.com/x", "rank": 2})
                .as_object()
                .unwrap()
                .clone()
        );
        assert_eq!(s.external, vec![("title".to_string(), "T".to_string())]);
        assert_eq!(s.user["body"], "free text");
        assert!(s.user.get("secret").is_none());
        assert_eq!(s.dropped, vec!["code".to_string(), "kind".to_string()]);
        let bad = split(&c, &p, &json!({"url": "javascript:alert(1)", "rank": "2"}));
        assert!(bad.agent.is_empty());
    }

    #[test]
    fn templates_fill_count_and_fields() {
        let first = json!({"url": "https://x.org"});
        assert_eq!(
            fill_template("{count} results, first {url}", 3, first.as_object()),
            "3 results, first https://x.org"
        );
    }
}
