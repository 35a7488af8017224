//! Vault/OpenBao transit key provider (the only module that imports `vaultrs`).
//! One derived `aes256-gcm96` key per user, named from a hash of the user id and created on
//! first use; data keys from `transit/datakey/plaintext/{key}`; unwrap through
//! `transit/decrypt/{key}`; context = base64(key name). Every call has a deadline: the
//! HTTP client's timeout and a `tokio::time::timeout` around each call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use dashmap::DashSet;
use futures_util::future::BoxFuture;
use vaultrs::api::transit::requests::{
    CreateKeyRequest, DecryptDataRequest, GenerateDataKeyRequest,
};
use vaultrs::api::transit::{KeyType, requests::DataKeyType};
use vaultrs::client::{VaultClient, VaultClientSettingsBuilder};
use vaultrs::error::ClientError;
use zeroize::Zeroizing;

use std::collections::HashMap;

use secrecy::SecretString;

use super::{KeyError, KeyProvider, NewDataKey, SecretKey, UserHash};
use crate::config::KeysConfig;

pub struct VaultKeyProvider {
    client: VaultClient,
    mount: String,
    timeout: Duration,
    /// Key names known to exist (created or seen), so creation is tried once per user.
    known: DashSet<String>,
    calls: AtomicU64,
}

impl VaultKeyProvider {
    pub fn new(addr: &str, token: &str, mount: &str, timeout: Duration) -> Result<Self, KeyError> {
        let url = reqwest::Url::parse(addr)
            .map_err(|e| KeyError::Unavailable(format!("keys.vault_addr: {e}")))?;
        let settings = VaultClientSettingsBuilder::default()
            .address(url.as_str())
            .token(token)
            // A backstop only: `call` enforces `timeout` itself and reports it clearly.
            .timeout(Some(timeout + Duration::from_secs(1)))
            .build()
            .map_err(|e| KeyError::Unavailable(format!("vault settings: {e}")))?;
        let client =
            VaultClient::new(settings).map_err(|e| KeyError::Unavailable(e.to_string()))?;
        Ok(Self {
            client,
            mount: mount.to_string(),
            timeout,
            known: DashSet::new(),
            calls: AtomicU64::new(0),
        })
    }

    async fn call<T>(
        &self,
        f: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, KeyError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.timeout, f).await {
            Err(_) => Err(KeyError::Unavailable(format!(
                "no answer within {:?}",
                self.timeout
            ))),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.classify(e)),
        }
    }

    fn classify(&self, e: ClientError) -> KeyError {
        match e {
            ClientError::APIError { code, errors } => {
                let text = errors.join("; ");
                match code {
                    400 => KeyError::Rejected(text),
                    404 if text.contains("no handler") || text.is_empty() => {
                        KeyError::MountMissing(self.mount.clone())
                    }
                    _ => KeyError::Unavailable(format!("HTTP {code}: {text}")),
                }
            }
            other => KeyError::Unavailable(other.to_string()),
        }
    }

    async fn ensure_key(&self, name: &str) -> Result<(), KeyError> {
        if self.known.contains(name) {
            return Ok(());
        }
        let mut opts = CreateKeyRequest::builder();
        opts.key_type(KeyType::Aes256Gcm96).derived(true);
        // Creating an existing key is a no-op in transit, so this is safe to repeat.
        self.call(vaultrs::transit::key::create(
            &self.client,
            &self.mount,
            name,
            Some(&mut opts),
        ))
        .await?;
        self.known.insert(name.to_string());
        Ok(())
    }
}

fn context(name: &str) -> String {
    B64.encode(name.as_bytes())
}

fn decode_key(plaintext_b64: &str) -> Result<SecretKey, KeyError> {
    let bytes = Zeroizing::new(
        B64.decode(plaintext_b64)
            .map_err(|_| KeyError::Rejected("data key is not base64".into()))?,
    );
    if bytes.len() != 32 {
        return Err(KeyError::Rejected("data key has the wrong length".into()));
    }
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(&bytes);
    Ok(key)
}

impl KeyProvider for VaultKeyProvider {
    fn new_data_key<'a>(
        &'a self,
        user: &'a UserHash,
    ) -> BoxFuture<'a, Result<NewDataKey, KeyError>> {
        Box::pin(async move {
            let name = user.key_name();
            self.ensure_key(&name).await?;
            let mut opts = GenerateDataKeyRequest::builder();
            opts.context(context(&name)).bits(256u16);
            let resp = self
                .call(vaultrs::transit::generate::data_key(
                    &self.client,
                    &self.mount,
                    &name,
                    DataKeyType::Plaintext,
                    Some(&mut opts),
                ))
                .await?;
            let plaintext =
                Zeroizing::new(resp.plaintext.ok_or_else(|| {
                    KeyError::Unavailable("no plaintext data key returned".into())
                })?);
            Ok(NewDataKey {
                key: decode_key(&plaintext)?,
                wrapped: resp.ciphertext,
            })
        })
    }

    fn unwrap_data_key<'a>(
        &'a self,
        user: &'a UserHash,
        wrapped: &'a str,
    ) -> BoxFuture<'a, Result<SecretKey, KeyError>> {
        Box::pin(async move {
            if !wrapped.starts_with("vault:v") {
                return Err(KeyError::Rejected("not a transit ciphertext".into()));
            }
            let name = user.key_name();
            let mut opts = DecryptDataRequest::builder();
            opts.context(context(&name));
            let resp = self
                .call(vaultrs::transit::data::decrypt(
                    &self.client,
                    &self.mount,
                    &name,
                    wrapped,
                    Some(&mut opts),
                ))
                .await?;
            decode_key(&Zeroizing::new(resp.plaintext))
        })
    }

    fn check(&self) -> BoxFuture<'_, Result<(), KeyError>> {
        // Reading the transit cache configuration needs the engine mounted, unsealed and the
        // token valid, and nothing else: a cheap end-to-end probe.
        Box::pin(async move {
            self.call(vaultrs::transit::cache::read(&self.client, &self.mount))
                .await
                .map(|_| ())
        })
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretReadError {
    #[error("vault: {0}")]
    Client(String),
    #[error("API key {reference}: {reason}")]
    Read { reference: String, reason: String },
}

/// Reads `MOUNT/PATH#FIELD` secrets from KV v2 with the key service's address and token,
/// each reference once.
pub async fn read_secrets(
    keys: &KeysConfig,
    references: &[String],
) -> Result<HashMap<String, SecretString>, SecretReadError> {
    let client = kv_client(keys)?;
    let mut read = HashMap::new();
    for reference in references {
        if read.contains_key(reference) {
            continue;
        }
        let value = read_one(&client, reference, keys.vault_timeout).await?;
        read.insert(reference.clone(), value);
    }
    Ok(read)
}

/// The Vault/OpenBao token: `keys.vault_token`, or the contents of `keys.vault_token_file`.
pub fn vault_token(k: &KeysConfig) -> Result<zeroize::Zeroizing<String>, KeyError> {
    use secrecy::ExposeSecret;
    match (&k.vault_token, &k.vault_token_file) {
        (Some(t), _) => Ok(zeroize::Zeroizing::new(t.expose_secret().to_string())),
        (None, Some(path)) => Ok(zeroize::Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| {
                    KeyError::Unavailable(format!("keys.vault_token_file {}: {e}", path.display()))
                })?
                .trim()
                .to_string(),
        )),
        (None, None) => Err(KeyError::Unavailable(
            "keys.vault_token or keys.vault_token_file is required".into(),
        )),
    }
}

fn kv_client(keys: &KeysConfig) -> Result<VaultClient, SecretReadError> {
    let token = vault_token(keys).map_err(|e| SecretReadError::Client(e.to_string()))?;
    let settings = VaultClientSettingsBuilder::default()
        .address(keys.vault_addr.as_str())
        .token(token.as_str())
        .timeout(Some(keys.vault_timeout + Duration::from_secs(1)))
        .build()
        .map_err(|e| SecretReadError::Client(e.to_string()))?;
    VaultClient::new(settings).map_err(|e| SecretReadError::Client(e.to_string()))
}

async fn read_one(
    client: &VaultClient,
    reference: &str,
    timeout: Duration,
) -> Result<SecretString, SecretReadError> {
    let fail = |reason: String| SecretReadError::Read {
        reference: reference.to_string(),
        reason,
    };
    let r = crate::config::KvRef::parse(reference).map_err(fail)?;
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
