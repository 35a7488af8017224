//! Provider API keys kept in Vault/OpenBao KV v2 instead of the environment: a reference
//! `MOUNT/PATH#FIELD` (`llm.api_key_vault`, `models.catalog[].api_key_vault`) is read once at
//! start-up with the same address and token as the key service (through
//! `crypto::read_secrets`), and held as a `SecretString` (never logged).

use crate::config::Config;

pub use crate::crypto::SecretReadError as SecretError;

/// Reads every configured `api_key_vault` into the config (`llm.api_key`, and each catalog
/// entry's `api_key`). Nothing is read when no reference is configured.
pub async fn resolve(config: &mut Config) -> Result<(), SecretError> {
    let mut wanted: Vec<String> = config.llm.api_key_vault.iter().cloned().collect();
    wanted.extend(
        config
            .models
            .catalog
            .iter()
            .filter_map(|e| e.api_key_vault.clone()),
    );
    if wanted.is_empty() {
        return Ok(());
    }
    let read = crate::crypto::read_secrets(&config.keys, &wanted).await?;
    if let Some(r) = &config.llm.api_key_vault {
        config.llm.api_key = read.get(r).cloned();
    }
    for entry in &mut config.models.catalog {
        if let Some(r) = &entry.api_key_vault {
            entry.api_key = read.get(r).cloned();
        }
    }
    Ok(())
}
