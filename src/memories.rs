//! App settings and memories (seed 002): what each app declares it may remember about the
//! user (categories, each with a JSON Schema of one entry), the chat-scoped sealed cache of
//! the entries the user allowed in a chat, the requests for missing ones, and the model's
//! proposed changes (which the client decides, since only it can write the user's
//! client-encrypted entries).
//!
//! - [`Categories`]: the declared categories of every app (`app_id:category` keys).
//! - [`store::MemoryStore`]: sealed entries, pending requests and proposals in the cache.
//! - [`recall`]: a turn's cache-first read and the request for what is missing.
//! - [`tools::ProposalTools`]: the per-turn `add`/`update`/`delete` tools of relevant apps.
//! - [`suggest`]: two-phase suggestions of new entries after an answer.

pub mod recall;
pub mod store;
pub mod suggest;
pub mod tools;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

/// The `settings_memories` section of an app manifest.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsMemoriesSection {
    pub categories: Vec<CategorySpec>,
}

/// One category of an app's settings and memories.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CategorySpec {
    pub id: String,
    pub title: String,
    /// What the category holds, for the model (preprocessing chooses by it).
    pub description: String,
    /// JSON Schema of one entry (checked with [`crate::schema`]).
    pub schema: Value,
}

/// Checks one app's section: ids, descriptions and schemas.
pub fn lint_section(section: &SettingsMemoriesSection) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    if section.categories.is_empty() {
        return Err("settings_memories declares no categories".into());
    }
    for c in &section.categories {
        let slug = !c.id.is_empty()
            && c.id.len() <= 40
            && c.id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !slug {
            return Err(format!(
                "settings_memories category id `{}` must be 1-40 of [a-z0-9_]",
                c.id
            ));
        }
        if !seen.insert(c.id.as_str()) {
            return Err(format!(
                "settings_memories category `{}` is defined twice",
                c.id
            ));
        }
        if c.title.trim().is_empty() || c.description.trim().is_empty() {
            return Err(format!(
                "settings_memories category `{}` needs a title and a description",
                c.id
            ));
        }
        crate::schema::lint(&c.schema)
            .map_err(|e| format!("settings_memories category `{}`: schema {e}", c.id))?;
    }
    Ok(())
}

/// A category as chatd uses it.
#[derive(Debug, Clone)]
pub struct Category {
    pub app_id: String,
    pub spec: CategorySpec,
}

impl Category {
    /// `app_id:category`.
    pub fn key(&self) -> String {
        format!("{}:{}", self.app_id, self.spec.id)
    }
}

/// Every declared category, by `app_id:category`.
#[derive(Debug, Clone, Default)]
pub struct Categories {
    by_key: BTreeMap<String, Arc<Category>>,
}

impl Categories {
    /// From `(app_id, section)` pairs (manifests already linted).
    pub fn new<'a>(apps: impl IntoIterator<Item = (&'a str, &'a SettingsMemoriesSection)>) -> Self {
        let mut by_key = BTreeMap::new();
        for (app_id, section) in apps {
            for spec in &section.categories {
                let c = Category {
                    app_id: app_id.to_string(),
                    spec: spec.clone(),
                };
                by_key.insert(c.key(), Arc::new(c));
            }
        }
        Self { by_key }
    }

    /// The category of an `app_id:category` key (also accepts `app_id-category` and
    /// `app_id.category`, as models write them).
    pub fn get(&self, key: &str) -> Option<&Arc<Category>> {
        self.by_key.get(&canonical_key(key))
    }

    pub fn by_parts(&self, app_id: &str, category: &str) -> Option<&Arc<Category>> {
        self.by_key.get(&format!("{app_id}:{category}"))
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.by_key.keys().cloned().collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Category>> {
        self.by_key.values()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// `app:category` from `app:category`, `app-category` or `app.category`.
pub fn canonical_key(key: &str) -> String {
    match key.trim().split_once([':', '-', '.', '|']) {
        Some((app, cat)) => format!("{app}:{cat}"),
        None => key.trim().to_string(),
    }
}

/// What the turn and the session use: the categories and the sealed store.
pub struct Memories {
    pub categories: Categories,
    pub store: store::MemoryStore,
    /// The permanent store: each chat's rejected suggestion hashes.
    pub chats: Arc<dyn crate::store::Store>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn section(schema: Value) -> SettingsMemoriesSection {
        SettingsMemoriesSection {
            categories: vec![CategorySpec {
                id: "trips".into(),
                title: "Trips".into(),
                description: "Planned trips".into(),
                schema,
            }],
        }
    }

    #[test]
    fn sections_lint_and_keys_are_canonical() {
        let ok = section(json!({"type": "object", "properties": {"to": {"type": "string"}}}));
        lint_section(&ok).unwrap();
        let err = lint_section(&section(json!({"type": "frog"}))).unwrap_err();
        assert!(err.contains("trips") && err.contains("frog"), "{err}");
        let cats = Categories::new([("travel", &ok)]);
        assert!(cats.get("travel-trips").is_some());
        assert!(cats.get("travel.trips").is_some());
        assert!(cats.get("travel:diet").is_none());
        assert_eq!(cats.keys(), vec!["travel:trips"]);
    }
}
