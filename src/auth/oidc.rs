//! Tokens of an OpenID Connect provider (`auth.jwks_url`, `auth.issuer`, `auth.audience`):
//! an RS256 or ES256 signature by one of the provider's keys (see `jwks.rs`), the
//! configured issuer and audience, an `exp` in the future (no leeway: a socket closes at
//! `exp`), and the user in `auth.user_claim`. The claims are never logged.

use std::sync::Arc;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Header, Validation};
use serde_json::{Map, Value};

use super::jwks::{Jwks, JwksError, JwksSettings, Lookup};
use super::{AuthError, UserId};
use crate::config::AuthConfig;

/// Verifies the provider's tokens.
pub struct Oidc {
    jwks: Arc<Jwks>,
    issuer: String,
    audience: String,
    user_claim: String,
}

impl Oidc {
    /// `None` when `auth.jwks_url` is empty (only chatd's own tokens are accepted).
    pub fn from_config(auth: &AuthConfig) -> Result<Option<Self>, JwksError> {
        if auth.jwks_url.trim().is_empty() {
            return Ok(None);
        }
        let jwks = Jwks::new(JwksSettings {
            url: auth.jwks_url.trim().to_string(),
            refresh: auth.jwks_refresh,
            min_refetch: auth.jwks_min_refetch,
            timeout: auth.jwks_timeout,
        })?;
        Ok(Some(Self {
            jwks: Arc::new(jwks),
            issuer: auth.issuer.clone(),
            audience: auth.audience.clone(),
            user_claim: auth.user_claim.clone(),
        }))
    }

    /// The key set, for the app to run its periodic refresh.
    pub fn jwks(&self) -> &Arc<Jwks> {
        &self.jwks
    }

    /// The token's user (`auth.user_claim`) and its `exp`.
    pub async fn verify(&self, token: &str, header: &Header) -> Result<(UserId, u64), AuthError> {
        let alg = header.alg;
        if !matches!(alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(AuthError::Algorithm);
        }
        let keys = match self.jwks.keys_for(header.kid.as_deref(), alg).await {
            Lookup::Found(keys) => keys,
            Lookup::Unknown => return Err(AuthError::UnknownKey),
            Lookup::Unavailable => return Err(AuthError::KeysUnavailable),
        };
        let validation = self.validation(alg);
        let mut result = Err(AuthError::Invalid);
        // Usually one key; several only for a token without `kid` (tried in turn).
        for key in &keys {
            result = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
                .map_err(|e| refusal(e.kind()));
            if !matches!(result, Err(AuthError::Invalid)) {
                break;
            }
        }
        let claims = result?.claims;
        let exp = claims
            .get("exp")
            .and_then(Value::as_f64)
            .filter(|e| *e >= 0.0)
            .map(|e| e as u64)
            .ok_or(AuthError::Invalid)?;
        let user = match claims.get(&self.user_claim) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(AuthError::UserClaim),
        };
        Ok((UserId::parse(user)?, exp))
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.leeway = 0;
        v.validate_nbf = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        v
    }
}

fn refusal(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::InvalidIssuer => AuthError::Issuer,
        ErrorKind::InvalidAudience => AuthError::Audience,
        _ => AuthError::Invalid,
    }
}
