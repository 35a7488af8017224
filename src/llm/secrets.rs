//! Provider API keys kept in Vault/OpenBao KV v2 instead of the environment: a reference
//! `MOUNT/PATH#FIELD` (`llm.api_key_vault`, `models.catalog[].api_key_vault`) is read once at
//! start-up with the same address and token as the key service, and held as a
//! [`SecretString`] (never logged).

use std::collections::HashMap;
use std::time::Duration;

use secrecy::SecretString;
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};

use crate::config::Config;

/// A parsed `MOUNT/PATH#FIELD` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvRef {
    pub mount: String,
    pub path: String,
    pub field: String,
}

impl KvRef {
    pub fn parse(reference: &str) -> Result<KvRef, String> {
        let bad =
            || format!("`{reference}` is not MOUNT/PATH#FIELD (e.g. secret/llm/openai#api_key)");
        let (location, field) = reference.split_once('#').ok_or_else(bad)?;
        let (mount, path) = location.trim_matches('/').split_once('/').ok_or_else(bad)?;
        if mount.is_empty() || path.is_empty() || field.is_empty() {
            return Err(bad());
        }
        Ok(KvRef {
            mount: mount.into(),
            path: path.into(),
            field: field.into(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("vault: {0}")]
    Client(String),
    #[error("API key {reference}: {reason}")]
    Read { reference: String, reason: String },
}

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
    let client = client(config)?;
    let timeout = config.keys.vault_timeout;
    let mut read: HashMap<String, SecretString> = HashMap::new();
    for reference in wanted {
        if read.contains_key(&reference) {
            continue;
        }
        let value = read_one(&client, &reference, timeout).await?;
        read.insert(reference, value);
    }
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

fn client(config: &Config) -> Result<VaultClient, SecretError> {
    let token =
        crate::app::vault_token(&config.keys).map_err(|e| SecretError::Client(e.to_string()))?;
    let settings = VaultClientSettingsBuilder::default()
        .address(config.keys.vault_addr.as_str())
        .token(token.as_str())
        .timeout(Some(config.keys.vault_timeout + Duration::from_secs(1)))
        .build()
        .map_err(|e| SecretError::Client(e.to_string()))?;
    VaultClient::new(settings).map_err(|e| SecretError::Client(e.to_string()))
}

async fn read_one(
    client: &VaultClient,
    reference: &str,
    timeout: Duration,
) -> Result<SecretString, SecretError> {
    let fail = |reason: String| SecretError::Read {
        reference: reference.to_string(),
        reason,
    };
    let r = KvRef::parse(reference).map_err(fail)?;
    let call = vaultrs::kv2::read::<HashMap<String, String>>(client, &r.mount, &r.path);
    let data = tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| fail(format!("no answer within {timeout:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    data.get(&r.field)
        .filter(|v| !v.is_empty())
        .map(|v| SecretString::from(v.clone()))
        .ok_or_else(|| fail(format!("the secret has no field `{}`", r.field)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_strictly() {
        assert_eq!(
            KvRef::parse("secret/llm/openai#api_key").unwrap(),
            KvRef {
                mount: "secret".into(),
                path: "llm/openai".into(),
                field: "api_key".into()
            }
        );
        for bad in ["secret/llm", "secret#key", "/x#k", "secret/llm#"] {
            assert!(KvRef::parse(bad).is_err(), "{bad}");
        }
    }
}
