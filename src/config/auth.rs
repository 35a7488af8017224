//! `[auth]`: chatd's own HS256 token secret and lifetime, the session cookie's name, and
//! sign-in with an OpenID Connect provider (its JWKS, issuer, audience, user claim), with
//! the rules serde cannot check.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub secret: Option<SecretString>,
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    #[serde(with = "humantime_serde")]
    pub token_ttl: Duration,
    /// The cookie a browser signs in with (an ambient credential: origin-checked).
    pub cookie_name: String,
    /// The identity provider's JWK set; empty: only chatd's own tokens are accepted.
    pub jwks_url: String,
    /// The provider's tokens must carry exactly this `iss`...
    pub issuer: String,
    /// ...and this value in `aud`.
    pub audience: String,
    /// The claim that holds the chatd user id.
    pub user_claim: String,
    /// How often the key set is fetched again.
    #[serde(with = "humantime_serde")]
    pub jwks_refresh: Duration,
    /// An unknown `kid` refetches the key set at most this often.
    #[serde(with = "humantime_serde")]
    pub jwks_min_refetch: Duration,
    /// Deadline of one key-set fetch.
    #[serde(with = "humantime_serde")]
    pub jwks_timeout: Duration,
    /// The client id the demo page signs in with at the provider (authorization code with
    /// PKCE, a public client: no secret). Its ID token is then the session token, so it
    /// must equal `audience`. Empty: the page offers no provider sign-in.
    pub page_client_id: String,
    /// The scopes the page asks the provider for.
    pub page_scopes: String,
}

impl AuthConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, reason: &str| {
            Err(ConfigError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        if self.token_ttl.is_zero() {
            return invalid("auth.token_ttl", "must be longer than zero");
        }
        if !is_cookie_name(&self.cookie_name) {
            return invalid(
                "auth.cookie_name",
                "must be 1-64 characters of [A-Za-z0-9_.-]",
            );
        }
        if self.user_claim.trim().is_empty() {
            return invalid("auth.user_claim", "must not be empty");
        }
        let url = self.jwks_url.trim();
        if url.is_empty() {
            if !self.issuer.is_empty()
                || !self.audience.is_empty()
                || !self.page_client_id.is_empty()
            {
                return invalid(
                    "auth.jwks_url",
                    "auth.issuer, auth.audience and auth.page_client_id take effect only with auth.jwks_url: set it, or leave them empty",
                );
            }
            return Ok(());
        }
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return invalid("auth.jwks_url", "must start with https:// or http://");
        }
        // Without an issuer, any tenant of a shared provider (one key set, many issuers)
        // could sign in; without an audience, a token the provider issued to any other
        // application would open a chatd socket.
        if self.issuer.trim().is_empty() {
            return invalid(
                "auth.issuer",
                "required with auth.jwks_url: the provider's `iss`, so other tenants' tokens are refused",
            );
        }
        if self.audience.trim().is_empty() {
            return invalid(
                "auth.audience",
                "required with auth.jwks_url: chatd's client id at the provider, so tokens issued to other applications are refused",
            );
        }
        if !self.page_client_id.is_empty() && self.page_client_id != self.audience {
            return invalid(
                "auth.page_client_id",
                "must equal auth.audience: the page's ID token (its `aud` is the page's client id) is its session token",
            );
        }
        if !self.page_scopes.split_whitespace().any(|s| s == "openid") {
            return invalid("auth.page_scopes", "must include `openid`");
        }
        if self.jwks_refresh < Duration::from_secs(1) {
            return invalid("auth.jwks_refresh", "must be at least 1s");
        }
        if self.jwks_timeout.is_zero() {
            return invalid("auth.jwks_timeout", "must be longer than zero");
        }
        Ok(())
    }
}

fn is_cookie_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
