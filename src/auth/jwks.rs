//! The identity provider's signing keys (`auth.jwks_url`): fetched once, refreshed
//! periodically (`auth.jwks_refresh`) by a task the app owns, and refetched when a token
//! names an unknown `kid` (at most once per `auth.jwks_min_refetch`, so forged kids cannot
//! make chatd hammer the provider). A failed fetch keeps the keys it had. Only RS256 and
//! ES256 keys are kept; verifying claims is `oidc.rs`'s job.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Largest JWKS document read (a real one is a few KiB).
const MAX_JWKS_BYTES: usize = 1 << 20;

/// Why the key set could not be fetched (logged; the key set stays as it was).
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("request failed: {0}")]
    Http(#[from] reqwest::Error),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("document larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge,
    #[error("not a JWK set: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("no RS256 or ES256 signing key in the set")]
    NoUsableKey,
}

/// One usable verification key.
#[derive(Clone)]
pub struct Key {
    pub alg: Algorithm,
    pub decoding: DecodingKey,
}

/// The keys of one fetch, by `kid` (keys without one are tried for tokens without one).
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Key>,
    without_kid: Vec<Key>,
    fetched_at: Option<Instant>,
}

impl KeySet {
    fn matching(&self, kid: Option<&str>, alg: Algorithm) -> Vec<Key> {
        let keys: Vec<&Key> = match kid {
            Some(kid) => self.by_kid.get(kid).into_iter().collect(),
            None => self.without_kid.iter().collect(),
        };
        keys.into_iter().filter(|k| k.alg == alg).cloned().collect()
    }
}

/// How often a sign-in may fetch the key set again while there are no keys at all.
const RETRY_WITHOUT_KEYS: Duration = Duration::from_secs(1);

/// Settings of [`Jwks`] (from `[auth]`).
#[derive(Debug, Clone)]
pub struct JwksSettings {
    pub url: String,
    pub refresh: Duration,
    pub min_refetch: Duration,
    pub timeout: Duration,
}

/// The provider's current keys and the one way to update them.
pub struct Jwks {
    settings: JwksSettings,
    http: reqwest::Client,
    /// Replaced whole after each successful fetch. A std lock: held only to clone a key
    /// out or swap the set, never across an await.
    keys: RwLock<Arc<KeySet>>,
    /// One fetch at a time; holds when the last fetch was tried (the refetch rate limit).
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

/// What a key lookup found.
pub enum Lookup {
    Found(Vec<Key>),
    /// No such key, and a refetch is not allowed yet or did not bring it.
    Unknown,
    /// There are no keys at all: the provider could not be reached.
    Unavailable,
}

impl Jwks {
    pub fn new(settings: JwksSettings) -> Result<Self, JwksError> {
        let http = reqwest::Client::builder()
            .timeout(settings.timeout)
            .build()?;
        Ok(Self {
            settings,
            http,
            keys: RwLock::default(),
            fetching: tokio::sync::Mutex::new(None),
        })
    }

    fn current(&self) -> Arc<KeySet> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The keys that may have signed a token with this `kid` and `alg`; an unknown kid
    /// triggers one refetch unless the last fetch was less than `min_refetch` ago.
    pub async fn keys_for(&self, kid: Option<&str>, alg: Algorithm) -> Lookup {
        let found = self.current().matching(kid, alg);
        if !found.is_empty() {
            return Lookup::Found(found);
        }
        let mut last = self.fetching.lock().await;
        // Another task may have fetched while this one waited.
        let found = self.current().matching(kid, alg);
        if !found.is_empty() {
            return Lookup::Found(found);
        }
        let recent = last.is_some_and(|t| t.elapsed() < self.refetch_limit());
        if !recent {
            *last = Some(Instant::now());
            self.fetch_and_store().await;
        }
        let set = self.current();
        let found = set.matching(kid, alg);
        if !found.is_empty() {
            Lookup::Found(found)
        } else if set.fetched_at.is_none() {
            Lookup::Unavailable
        } else {
            Lookup::Unknown
        }
    }

    /// How soon a lookup may fetch again: `min_refetch`, but while chatd has no keys at all
    /// (the provider was down when it started) at most [`RETRY_WITHOUT_KEYS`], so sign-ins
    /// work again soon after the provider is back.
    fn refetch_limit(&self) -> Duration {
        match self.current().fetched_at {
            Some(_) => self.settings.min_refetch,
            None => self.settings.min_refetch.min(RETRY_WITHOUT_KEYS),
        }
    }

    /// Fetches now unless a fetch succeeded less than `max_age` ago; returns when the
    /// keys are `max_age` old (or, after a failed fetch, when to try again: after
    /// `min_refetch` while there are no keys at all, else `max_age` from now).
    async fn refresh_if_older_than(&self, max_age: Duration) -> Instant {
        let mut last = self.fetching.lock().await;
        if let Some(at) = self.current().fetched_at
            && at.elapsed() < max_age
        {
            return at + max_age;
        }
        *last = Some(Instant::now());
        self.fetch_and_store().await;
        let set = self.current();
        match set.fetched_at {
            Some(at) if at.elapsed() < max_age => at + max_age,
            Some(_) => Instant::now() + max_age,
            None => Instant::now() + max_age.min(self.settings.min_refetch.max(RETRY_WITHOUT_KEYS)),
        }
    }

    async fn fetch_and_store(&self) {
        match self.fetch().await {
            Ok(set) => {
                tracing::debug!(
                    keys = set.by_kid.len() + set.without_kid.len(),
                    "JWKS fetched"
                );
                *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
            }
            Err(e) => {
                tracing::warn!(url = %self.settings.url, error = %e, "JWKS fetch failed; keeping the keys we have");
            }
        }
    }

    async fn fetch(&self) -> Result<KeySet, JwksError> {
        let mut resp = self.http.get(&self.settings.url).send().await?;
        if !resp.status().is_success() {
            return Err(JwksError::Status(resp.status().as_u16()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(JwksError::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        key_set(serde_json::from_slice(&body)?)
    }

    /// Refreshes the keys every `jwks_refresh` (the first time at once) until `stop`.
    pub async fn run_refresher(self: Arc<Self>, stop: CancellationToken) {
        let every = self.settings.refresh;
        loop {
            let due = self.refresh_if_older_than(every).await;
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = stop.cancelled() => return,
            }
        }
    }
}

/// The usable signing keys of a JWK set.
fn key_set(set: JwkSet) -> Result<KeySet, JwksError> {
    let mut out = KeySet {
        fetched_at: Some(Instant::now()),
        ..KeySet::default()
    };
    for jwk in &set.keys {
        let Some(key) = usable(jwk) else { continue };
        match &jwk.common.key_id {
            Some(kid) => {
                out.by_kid.insert(kid.clone(), key);
            }
            None => out.without_kid.push(key),
        }
    }
    if out.by_kid.is_empty() && out.without_kid.is_empty() {
        return Err(JwksError::NoUsableKey);
    }
    Ok(out)
}

/// An RS256 or ES256 signing key; anything else (encryption keys, other algorithms and
/// curves, symmetric keys) is skipped.
fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let alg = match (&jwk.algorithm, jwk.common.key_algorithm) {
        (AlgorithmParameters::RSA(_), None | Some(KeyAlgorithm::RS256)) => Algorithm::RS256,
        (AlgorithmParameters::EllipticCurve(ec), None | Some(KeyAlgorithm::ES256))
            if ec.curve == EllipticCurve::P256 =>
        {
            Algorithm::ES256
        }
        _ => return None,
    };
    let decoding = DecodingKey::from_jwk(jwk).ok()?;
    Some(Key { alg, decoding })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rs256_and_es256_signing_keys_are_kept() {
        let set: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
            {"kty": "RSA", "kid": "r", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw", "e": "AQAB"}
        ]}))
        .unwrap();
        let set = key_set(set).unwrap();
        assert_eq!(set.by_kid.keys().collect::<Vec<_>>(), vec!["r"]);
        assert_eq!(set.matching(Some("r"), Algorithm::RS256).len(), 1);
        // A key is used only with its own algorithm (no RS256 key for an ES256 token).
        assert!(set.matching(Some("r"), Algorithm::ES256).is_empty());
        assert!(set.matching(None, Algorithm::RS256).is_empty());
        let none: JwkSet = serde_json::from_value(serde_json::json!({"keys": [
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}
        ]}))
        .unwrap();
        assert!(matches!(key_set(none), Err(JwksError::NoUsableKey)));
    }
}
