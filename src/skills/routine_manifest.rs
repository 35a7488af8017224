//! The `routines` section of an app manifest: each routine's name, description, argument
//! schema and model. Its body is a Rhai script next to the manifests
//! (`<apps_dir>/<app_id>/<name>.rhai`); `crate::routines` loads, compiles and runs it.

use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutineManifest {
    /// `[a-z0-9_]`; the routine is `app_id.name`, its tool `app_id-name`.
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema); default: no arguments.
    #[serde(default = "no_arguments")]
    pub arguments: Value,
    /// A catalog model id for the script's `model()` calls; default: the main model.
    #[serde(default)]
    pub model: Option<String>,
    /// Offered to the model whatever preprocessing chose (else only when it picks it).
    #[serde(default)]
    pub always_include: bool,
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}
