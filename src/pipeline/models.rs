//! The model catalog: which models exist (from `models.catalog`, or one entry made from the
//! single-provider `llm.*` settings), the client that reaches each, the default model of
//! each stage, and the main-model choice for a turn.

use std::collections::HashMap;
use std::sync::Arc;

use secrecy::SecretString;

use crate::config::{Capability, Config, LlmProvider, ModelEntry};
use crate::llm::{self, LlmClient, LlmError};
use crate::privacy::{ChatPrivacy, PrivateClient};

#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub id: String,
    /// The provider's name for it (sent as `model`).
    pub name: String,
    pub context_window: u32,
    pub capabilities: Vec<Capability>,
    pub cost_tier: u8,
}

impl ModelSpec {
    pub fn can(&self, c: Capability) -> bool {
        self.capabilities.contains(&c)
    }
}

/// A model and the client that reaches it.
#[derive(Clone)]
pub struct Model {
    pub spec: Arc<ModelSpec>,
    pub client: Arc<dyn LlmClient>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("spec", &self.spec).finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Complexity {
    Simple,
    Complex,
}

/// What the main model must be able to do for this turn.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    pub capabilities: Vec<Capability>,
}

#[derive(Debug, Clone)]
pub struct Choice {
    pub model: Model,
    pub reason: String,
}

/// The catalog as configured (shared by every [`Models`] view).
struct Catalog {
    by_id: HashMap<String, Model>,
    /// Catalog order (ties in selection go to the earlier entry).
    order: Vec<String>,
    preprocessing: String,
    main: String,
    postprocessing: String,
}

/// The model catalog and each stage's default model, as one chat's turn reaches them: in a
/// [`Models::private`] view every model's client is the chat's [`PrivateClient`] (its
/// personal data never reaches a provider).
#[derive(Clone)]
pub struct Models {
    catalog: Arc<Catalog>,
    private: Option<Arc<ChatPrivacy>>,
}

impl Models {
    /// Builds the catalog; `default_client` reaches `llm.base_url` with `llm.api_key`.
    pub fn from_config(
        config: &Config,
        default_client: Arc<dyn LlmClient>,
    ) -> Result<Models, LlmError> {
        Ok(Models {
            catalog: Arc::new(Catalog::from_config(config, default_client)?),
            private: None,
        })
    }

    /// The same catalog whose models reach their providers through `privacy`.
    pub fn private(&self, privacy: Arc<ChatPrivacy>) -> Models {
        Models {
            catalog: self.catalog.clone(),
            private: Some(privacy),
        }
    }

    fn wrap(&self, model: Model) -> Model {
        match &self.private {
            Some(p) => Model {
                client: PrivateClient::wrap(model.client, p.clone()),
                spec: model.spec,
            },
            None => model,
        }
    }

    pub fn get(&self, id: &str) -> Option<Model> {
        self.catalog.get(id).map(|m| self.wrap(m.clone()))
    }

    pub fn preprocessing(&self) -> Model {
        self.wrap(self.catalog.preprocessing())
    }

    /// The model `id` names (a catalog id), or the preprocessing model when it is empty.
    pub fn or_preprocessing(&self, id: &str) -> Model {
        self.wrap(self.catalog.or_preprocessing(id))
    }

    pub fn main(&self) -> Model {
        self.wrap(self.catalog.main())
    }

    pub fn postprocessing(&self) -> Model {
        self.wrap(self.catalog.postprocessing())
    }

    /// The main model for a turn (see [`Catalog::choose`]).
    pub fn choose(&self, complexity: Complexity, needs: &Needs, pinned: Option<&str>) -> Choice {
        let choice = self.catalog.choose(complexity, needs, pinned);
        Choice {
            model: self.wrap(choice.model),
            reason: choice.reason,
        }
    }
}

/// Clients of the catalog's entries by endpoint and key source (`vault:…`, `env:…`).
type Clients = HashMap<(String, Option<String>), Arc<dyn LlmClient>>;

/// The one model of an empty catalog, from the single-provider `llm.*` settings.
fn single_provider_spec(config: &Config) -> ModelSpec {
    // The simulated provider answers to any name; clients see it for what it is.
    let id = match config.llm.provider {
        LlmProvider::Simulated => "chatd-simulated".to_string(),
        LlmProvider::OpenaiCompatible => config.llm.model.clone(),
    };
    ModelSpec {
        id: id.clone(),
        name: id,
        context_window: config.llm.context_window,
        capabilities: vec![Capability::Tools],
        cost_tier: 1,
    }
}

/// The client that reaches a catalog entry: the default one unless the entry names an
/// endpoint or a key of its own; entries with the same endpoint and key share one.
fn entry_client(
    config: &Config,
    entry: &ModelEntry,
    default_client: &Arc<dyn LlmClient>,
    clients: &mut Clients,
) -> Result<Arc<dyn LlmClient>, LlmError> {
    // Where the entry's key comes from: Vault (read at start-up) wins over the env.
    let key_source = match (&entry.api_key_vault, &entry.api_key_env) {
        (Some(r), _) => Some(format!("vault:{r}")),
        (None, Some(var)) => Some(format!("env:{var}")),
        (None, None) => None,
    };
    if config.llm.provider == LlmProvider::Simulated
        || (entry.base_url.is_none() && key_source.is_none())
    {
        return Ok(default_client.clone());
    }
    let key = (
        entry
            .base_url
            .clone()
            .unwrap_or_else(|| config.llm.base_url.clone()),
        key_source,
    );
    if let Some(c) = clients.get(&key) {
        return Ok(c.clone());
    }
    let mut llm_config = config.llm.clone();
    llm_config.base_url = key.0.clone();
    if entry.api_key.is_some() {
        llm_config.api_key = entry.api_key.clone();
    } else if let Some(var) = &entry.api_key_env {
        llm_config.api_key = std::env::var(var).ok().map(SecretString::from);
    }
    let c = llm::from_config(&llm_config)?;
    clients.insert(key, c.clone());
    Ok(c)
}

impl Catalog {
    /// Builds the catalog; `default_client` reaches `llm.base_url` with `llm.api_key`.
    fn from_config(
        config: &Config,
        default_client: Arc<dyn LlmClient>,
    ) -> Result<Catalog, LlmError> {
        let m = &config.models;
        let mut by_id = HashMap::new();
        let mut order = Vec::new();
        let mut add = |spec: ModelSpec, client: Arc<dyn LlmClient>| {
            order.push(spec.id.clone());
            by_id.insert(
                spec.id.clone(),
                Model {
                    spec: Arc::new(spec),
                    client,
                },
            );
        };
        if m.catalog.is_empty() {
            add(single_provider_spec(config), default_client.clone());
        }
        // One client per distinct endpoint and key.
        let mut clients = HashMap::new();
        for entry in &m.catalog {
            let client = entry_client(config, entry, &default_client, &mut clients)?;
            let spec = ModelSpec {
                id: entry.id.clone(),
                name: entry.name.clone().unwrap_or_else(|| entry.id.clone()),
                context_window: entry.context_window,
                capabilities: entry.capabilities.clone(),
                cost_tier: entry.cost_tier,
            };
            add(spec, client);
        }
        let first = order.first().cloned().unwrap_or_default();
        let pick = |s: &String| {
            if s.is_empty() {
                first.clone()
            } else {
                s.clone()
            }
        };
        Ok(Catalog {
            preprocessing: pick(&m.preprocessing),
            main: pick(&m.main),
            postprocessing: pick(&m.postprocessing),
            by_id,
            order,
        })
    }

    fn get(&self, id: &str) -> Option<&Model> {
        self.by_id.get(id)
    }

    fn stage(&self, id: &str) -> Model {
        match self.by_id.get(id) {
            Some(m) => m.clone(),
            // Validated at start-up; the first entry is a safe answer regardless.
            None => self.all().next().cloned().unwrap_or_else(unreachable_model),
        }
    }

    fn preprocessing(&self) -> Model {
        self.stage(&self.preprocessing)
    }

    /// The model `id` names (a catalog id), or the preprocessing model when it is empty.
    fn or_preprocessing(&self, id: &str) -> Model {
        if id.is_empty() {
            self.preprocessing()
        } else {
            self.stage(id)
        }
    }

    fn main(&self) -> Model {
        self.stage(&self.main)
    }

    fn postprocessing(&self) -> Model {
        self.stage(&self.postprocessing)
    }

    fn all(&self) -> impl Iterator<Item = &Model> {
        self.order.iter().filter_map(|id| self.by_id.get(id))
    }

    /// The main model for a turn: a pinned model (if it exists) wins; otherwise the models
    /// with every needed capability, the most capable tier for complex requests and the
    /// configured main model (or else the cheapest) for simple ones.
    fn choose(&self, complexity: Complexity, needs: &Needs, pinned: Option<&str>) -> Choice {
        if let Some(id) = pinned
            && let Some(model) = self.by_id.get(id)
        {
            return Choice {
                model: model.clone(),
                reason: format!("pinned by the user: {id}"),
            };
        }
        let default = self.main();
        let able: Vec<&Model> = self
            .all()
            .filter(|m| needs.capabilities.iter().all(|c| m.spec.can(*c)))
            .collect();
        let needs_text = if needs.capabilities.is_empty() {
            "no special capabilities".to_string()
        } else {
            format!("{:?}", needs.capabilities).to_lowercase()
        };
        let pinned_note = match pinned {
            Some(id) if !self.by_id.contains_key(id) => {
                format!("pinned model {id} is not configured; ")
            }
            _ => String::new(),
        };
        let chosen = match complexity {
            Complexity::Complex => able
                .iter()
                .copied()
                .reduce(|best, m| {
                    if m.spec.cost_tier > best.spec.cost_tier {
                        m
                    } else {
                        best
                    }
                })
                .map(|m| {
                    (
                        m,
                        format!("complex request needing {needs_text}: most capable tier"),
                    )
                }),
            Complexity::Simple => {
                if able.iter().any(|m| m.spec.id == default.spec.id) {
                    Some((
                        &default,
                        format!("simple request needing {needs_text}: default model"),
                    ))
                } else {
                    able.iter()
                        .copied()
                        .reduce(|best, m| {
                            if m.spec.cost_tier < best.spec.cost_tier {
                                m
                            } else {
                                best
                            }
                        })
                        .map(|m| {
                            (
                                m,
                                format!("simple request needing {needs_text}: cheapest able model"),
                            )
                        })
                }
            }
        };
        match chosen {
            Some((m, reason)) => Choice {
                model: m.clone(),
                reason: format!("{pinned_note}{reason}"),
            },
            None => Choice {
                reason: format!("{pinned_note}no configured model has {needs_text}; default model"),
                model: default,
            },
        }
    }
}

/// Only reachable with an empty catalog, which configuration validation rules out.
fn unreachable_model() -> Model {
    Model {
        spec: Arc::new(ModelSpec {
            id: "none".into(),
            name: "none".into(),
            context_window: 4096,
            capabilities: Vec::new(),
            cost_tier: 1,
        }),
        client: Arc::new(llm::SimulatedClient::new(std::time::Duration::ZERO)),
    }
}

#[cfg(test)]
mod tests;
