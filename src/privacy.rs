//! Pseudonymisation before any model request leaves chatd: personal data in the text of a
//! request (e-mail addresses, phone numbers, IBANs, card numbers, IP addresses, configured
//! names; `privacy.pseudonymize` says which) is replaced by a placeholder per chat
//! (`[EMAIL_1]`, `[PHONE_2]`…), and the placeholders in what the model streams back are
//! restored before anything above sees it. The chat's table ([`Pseudonyms`]) lives sealed in
//! the AI cache, so a value keeps its placeholder across turns and nodes (and the request's
//! prefix stays the same for the provider's prompt cache).
//!
//! [`PrivateClient`] wraps a model's client for one chat: every stage, the skills' and
//! routines' model calls reach the provider through it (see [`crate::pipeline::models`]).

mod client;
pub mod detect;
mod restore;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use client::PrivateClient;
pub use detect::Detector;
pub use restore::Restorer;

use crate::config::PersonalData;

/// The most names a user may mark private in one chat, and the longest.
const MAX_MARKED: usize = 50;
const MAX_MARKED_BYTES: usize = 100;

/// The names of a message's `private_names` a chat takes: the first [`MAX_MARKED`]
/// non-empty ones of at most [`MAX_MARKED_BYTES`], trimmed.
pub fn marked_names(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty() && n.len() <= MAX_MARKED_BYTES)
        .take(MAX_MARKED)
        .map(str::to_string)
        .collect()
}

/// The newest entries a chat's table keeps (older values get a new placeholder if they
/// come back).
const MAX_ENTRIES: usize = 2000;

/// One value and its placeholder number.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    kind: PersonalData,
    /// The normal form (see [`detect::Found::key`]).
    key: String,
    /// As the user first wrote it: what a placeholder is restored to.
    value: String,
    n: u32,
}

/// A chat's placeholders: value ↔ `[KIND_n]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Pseudonyms {
    entries: Vec<Entry>,
    /// Names the user marked private in this chat (hidden like `privacy.names`).
    #[serde(default)]
    marked: Vec<String>,
    #[serde(skip)]
    by_key: HashMap<(PersonalData, String), usize>,
    #[serde(skip)]
    by_number: HashMap<(PersonalData, u32), usize>,
    #[serde(skip)]
    changed: bool,
}

impl Pseudonyms {
    /// The table of its serialised form (an unreadable one counts as empty).
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut table: Self = serde_json::from_slice(bytes).unwrap_or_default();
        table.index();
        table
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let skip = self.entries.len().saturating_sub(MAX_ENTRIES);
        let kept = Pseudonyms {
            entries: self.entries[skip..].to_vec(),
            marked: self.marked.clone(),
            ..Default::default()
        };
        serde_json::to_vec(&kept).unwrap_or_default()
    }

    fn index(&mut self) {
        self.by_key.clear();
        self.by_number.clear();
        for (i, e) in self.entries.iter().enumerate() {
            self.by_key.insert((e.kind, e.key.clone()), i);
            self.by_number.insert((e.kind, e.n), i);
        }
    }

    /// Whether a value was added since the table was read.
    pub fn changed(&self) -> bool {
        self.changed
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the user marked names private in this chat.
    pub fn has_marked(&self) -> bool {
        !self.marked.is_empty()
    }

    /// `text` with every piece of personal data `detector` finds replaced by its
    /// placeholder (new values get the next number of their kind); `None` when it holds
    /// none.
    pub fn replace(&mut self, detector: &Detector, text: &str) -> Option<String> {
        let found = detector.find(text, &self.marked);
        if found.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for f in found {
            out.push_str(&text[at..f.start]);
            let n = self.number(f.kind, f.key, &text[f.start..f.end]);
            push_placeholder(&mut out, f.kind, n);
            at = f.end;
        }
        out.push_str(&text[at..]);
        Some(out)
    }

    fn number(&mut self, kind: PersonalData, key: String, value: &str) -> u32 {
        if let Some(&i) = self.by_key.get(&(kind, key.clone())) {
            return self.entries[i].n;
        }
        let n = self
            .entries
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.n)
            .max()
            .unwrap_or(0)
            + 1;
        let i = self.entries.len();
        self.by_key.insert((kind, key.clone()), i);
        self.by_number.insert((kind, n), i);
        self.entries.push(Entry {
            kind,
            key,
            value: value.to_string(),
            n,
        });
        self.changed = true;
        n
    }

    /// Adds names the user marked private (longest first, like the configured ones).
    pub fn mark(&mut self, names: &[String]) {
        for name in names {
            if self.marked.len() < MAX_MARKED && !self.marked.contains(name) {
                self.marked.push(name.clone());
                self.changed = true;
            }
        }
        self.marked.sort_by_key(|n| std::cmp::Reverse(n.len()));
    }

    /// The value a placeholder stands for.
    pub fn value(&self, kind: PersonalData, n: u32) -> Option<&str> {
        let i = self.by_number.get(&(kind, n))?;
        Some(self.entries[*i].value.as_str())
    }

    /// `text` with the table's placeholders replaced by their values (as JSON string
    /// content when `json`: inside a function call's arguments). Unknown placeholders stay.
    pub fn restore<'t>(&self, text: &'t str, json: bool) -> Cow<'t, str> {
        if self.entries.is_empty() || !text.contains('[') {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(open) = rest.find('[') {
            out.push_str(&rest[..open]);
            let tail = &rest[open..];
            match self.placeholder_at(tail) {
                Some((value, len)) => {
                    if json {
                        let quoted = serde_json::to_string(value).unwrap_or_default();
                        out.push_str(quoted.trim_matches('"'));
                    } else {
                        out.push_str(value);
                    }
                    rest = &tail[len..];
                }
                None => {
                    out.push('[');
                    rest = &tail[1..];
                }
            }
        }
        out.push_str(rest);
        Cow::Owned(out)
    }

    /// The value of the placeholder `tail` starts with, and the placeholder's length.
    fn placeholder_at(&self, tail: &str) -> Option<(&str, usize)> {
        let close = tail[..tail.len().min(MAX_PLACEHOLDER)].find(']')?;
        let (label, n) = tail[1..close].rsplit_once('_')?;
        let kind = PersonalData::from_label(label)?;
        let n: u32 = n.parse().ok()?;
        Some((self.value(kind, n)?, close + 1))
    }
}

/// Writes the chat's table back to the AI cache when a value was added to it.
pub async fn save(
    cache: &crate::cache::ai::AiCache,
    owner: &crate::crypto::UserHash,
    chat: &chatd_protocol::ChatId,
    privacy: Option<&ChatPrivacy>,
) {
    let Some(table) = privacy.and_then(ChatPrivacy::changed_table) else {
        return;
    };
    if let Err(e) = cache.set_pseudonyms(owner, chat, &table).await {
        tracing::warn!(error = %e, "cannot save the pseudonym table");
    }
}

/// `client` as a chat with `privacy` reaches it (itself when pseudonymisation is off).
pub fn through(
    client: &Arc<dyn crate::llm::LlmClient>,
    privacy: Option<&Arc<ChatPrivacy>>,
) -> Arc<dyn crate::llm::LlmClient> {
    match privacy {
        Some(p) => PrivateClient::wrap(client.clone(), p.clone()),
        None => client.clone(),
    }
}

/// The longest placeholder (`[EMAIL_4294967295]`).
pub(crate) const MAX_PLACEHOLDER: usize = 20;

fn push_placeholder(out: &mut String, kind: PersonalData, n: u32) {
    use std::fmt::Write;
    let _ = write!(out, "[{}_{n}]", kind.label());
}

/// One chat's pseudonymisation, shared by the model calls of its turn: the detectors and
/// the chat's table.
pub struct ChatPrivacy {
    detector: Arc<Detector>,
    table: Mutex<Pseudonyms>,
    /// Texts hidden before, and how: a turn's requests repeat the history (preprocessing,
    /// the main call, its tool rounds), each message is scanned once. Valid for the turn:
    /// the table only grows, so a value keeps its placeholder.
    seen: Mutex<HashMap<String, Option<String>>>,
    /// The chat has names the user marked (every text must be scanned for them).
    marked: AtomicBool,
}

/// The most texts a turn remembers hiding.
const MAX_SEEN: usize = 512;

impl std::fmt::Debug for ChatPrivacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.write_str("ChatPrivacy")
    }
}

impl ChatPrivacy {
    pub fn new(detector: Arc<Detector>, table: Pseudonyms) -> Arc<Self> {
        let marked = AtomicBool::new(table.has_marked());
        Arc::new(Self {
            detector,
            table: Mutex::new(table),
            seen: Mutex::new(HashMap::new()),
            marked,
        })
    }

    /// `text` hidden: the remembered result, or a new scan (remembered).
    fn hidden(&self, text: &str) -> Option<String> {
        // Most texts cannot hold anything the detectors look for: no scan, nothing kept.
        if !self.detector.may_hold(text) && !self.marked.load(Ordering::Relaxed) {
            return None;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(known) = seen.get(text) {
            return known.clone();
        }
        let hidden = self.lock().replace(&self.detector, text);
        if seen.len() < MAX_SEEN {
            seen.insert(text.to_string(), hidden.clone());
        }
        hidden
    }

    /// `text` with its personal data replaced (borrowed when it holds none).
    pub fn hide<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.hidden(text) {
            Some(hidden) => Cow::Owned(hidden),
            None => Cow::Borrowed(text),
        }
    }

    /// In place: `text` with its personal data replaced.
    pub fn hide_in(&self, text: &mut String) {
        if let Some(hidden) = self.hidden(text) {
            *text = hidden;
        }
    }

    /// `text` with the chat's placeholders restored.
    pub fn reveal(&self, text: &str, json: bool) -> String {
        self.lock().restore(text, json).into_owned()
    }

    /// Adds names the user marked private in this chat.
    pub fn mark(&self, names: &[String]) {
        if !names.is_empty() {
            self.lock().mark(names);
            self.marked.store(true, Ordering::Relaxed);
            // Texts scanned before the marks may hold them.
            self.seen.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Whether the chat's table holds no value yet (nothing to restore).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The table to save when a value was added since it was read.
    pub fn changed_table(&self) -> Option<Vec<u8>> {
        let table = self.lock();
        table.changed().then(|| table.to_bytes())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pseudonyms> {
        // A panic while holding the lock leaves a consistent table (every write is one push).
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
