//! Session tokens: chatd's own HS256 JWTs with `sub` = user id and `exp`, and, when
//! `auth.jwks_url` is set, an OpenID Connect provider's RS256/ES256 tokens (`oidc.rs`, its
//! keys in `jwks.rs`). Owns the token secret (from config, a secret file, or generated once
//! into the data directory with mode 0600) and the [`Authenticator`] that picks the
//! verifier by the token's algorithm. Where a token comes from is `source.rs`.

pub mod jwks;
pub mod oidc;
pub mod source;

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::config::Config;

pub use source::{TokenSource, token_from_request};

/// An authenticated user's id (the token's `sub`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(String);

impl UserId {
    /// Validates a user id: 1..=128 bytes of `[A-Za-z0-9_.@:-]`.
    pub fn parse(s: impl Into<String>) -> Result<Self, AuthError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@' | b':')
            });
        if ok {
            Ok(Self(s))
        } else {
            Err(AuthError::BadUserId)
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserId({})", self.0)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error(
        "no token: send ?token=, the subprotocols `chatd` and `bearer.<token>`, the session cookie or an Authorization: Bearer header"
    )]
    Missing,
    #[error("token expired")]
    Expired,
    #[error("token invalid")]
    Invalid,
    #[error("token algorithm not accepted")]
    Algorithm,
    #[error("token signed by an unknown key")]
    UnknownKey,
    #[error("token issuer not accepted")]
    Issuer,
    #[error("token audience not accepted")]
    Audience,
    #[error("token lacks the configured user claim")]
    UserClaim,
    #[error("the identity provider's keys cannot be fetched; try again")]
    KeysUnavailable,
    #[error("user id must be 1-128 characters of [A-Za-z0-9_.@:-]")]
    BadUserId,
    #[error("token secret: {0}")]
    Secret(String),
}

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    iat: u64,
}

/// Mints and verifies tokens with one HS256 secret.
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenKeys([redacted])")
    }
}

const SECRET_FILE: &str = "token_secret";

impl TokenKeys {
    pub fn from_secret(secret: &[u8]) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    /// The secret the configuration names: `auth.secret`, else `auth.secret_file`, else
    /// `<data_dir>/token_secret`, created with 32 random bytes (mode 0600) if missing.
    pub fn load(config: &Config) -> Result<Self, AuthError> {
        if let Some(secret) = &config.auth.secret {
            return Ok(Self::from_secret(secret.expose_secret().as_bytes()));
        }
        if let Some(path) = &config.auth.secret_file {
            let secret = std::fs::read(path)
                .map_err(|e| AuthError::Secret(format!("{}: {e}", path.display())))?;
            return Ok(Self::from_secret(trim_ascii(&secret)));
        }
        let secret = load_or_create_secret(&config.server.data_dir.join(SECRET_FILE))?;
        Ok(Self::from_secret(&secret))
    }

    pub fn mint(&self, user: &UserId, ttl: Duration) -> Result<String, AuthError> {
        let now = unix_now();
        let claims = Claims {
            sub: user.as_str().to_string(),
            iat: now,
            exp: now.saturating_add(ttl.as_secs().max(1)),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| AuthError::Secret(e.to_string()))
    }

    pub fn verify(&self, token: &str) -> Result<UserId, AuthError> {
        self.verify_until(token).map(|(user, _)| user)
    }

    /// The token's user and its `exp` (unix seconds).
    pub fn verify_until(&self, token: &str) -> Result<(UserId, u64), AuthError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation).map_err(
            |e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => AuthError::Expired,
                _ => AuthError::Invalid,
            },
        )?;
        Ok((UserId::parse(data.claims.sub)?, data.claims.exp))
    }
}

/// Verifies a token of either kind: HS256 with chatd's secret, RS256/ES256 with the
/// identity provider's keys (when configured). Anything else is invalid.
pub struct Authenticator {
    own: TokenKeys,
    oidc: Option<oidc::Oidc>,
}

impl Authenticator {
    pub fn new(own: TokenKeys, oidc: Option<oidc::Oidc>) -> Self {
        Self { own, oidc }
    }

    /// Mints one of chatd's own session tokens (the development sign-in, `chatd token`).
    pub fn mint(&self, user: &UserId, ttl: Duration) -> Result<String, AuthError> {
        self.own.mint(user, ttl)
    }

    /// The identity provider's key set, when one is configured (its refresh task).
    pub fn jwks(&self) -> Option<&std::sync::Arc<jwks::Jwks>> {
        self.oidc.as_ref().map(oidc::Oidc::jwks)
    }

    /// The token's user and its `exp` (unix seconds).
    pub async fn verify(&self, token: &str) -> Result<(UserId, u64), AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthError::Invalid)?;
        match (header.alg, &self.oidc) {
            (Algorithm::HS256, _) => self.own.verify_until(token),
            (_, Some(oidc)) => oidc.verify(token, &header).await,
            (_, None) => Err(AuthError::Algorithm),
        }
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Reads a secret file, or creates it (parent directories too) with fresh random bytes and
/// mode 0600. Creation uses `create_new`, so two processes racing agree on one secret.
pub fn load_or_create_secret(path: &Path) -> Result<Vec<u8>, AuthError> {
    let err = |e: std::io::Error| AuthError::Secret(format!("{}: {e}", path.display()));
    match std::fs::read(path) {
        Ok(bytes) if !bytes.is_empty() => return Ok(bytes),
        Ok(_) => return Err(AuthError::Secret(format!("{} is empty", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let secret: [u8; 32] = rand::random();
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(mut file) => {
            file.write_all(hex.as_bytes()).map_err(err)?;
            file.sync_all().map_err(err)?;
            Ok(hex.into_bytes())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => std::fs::read(path).map_err(err),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mint_verify_roundtrip_and_tamper() {
        let keys = TokenKeys::from_secret(b"secret");
        let user = UserId::parse("alice").unwrap();
        let token = keys.mint(&user, Duration::from_secs(60)).unwrap();
        assert_eq!(keys.verify(&token).unwrap(), user);
        let other = TokenKeys::from_secret(b"other");
        assert!(matches!(other.verify(&token), Err(AuthError::Invalid)));
        assert!(matches!(keys.verify("garbage"), Err(AuthError::Invalid)));
    }

    #[test]
    fn secret_file_is_created_once_with_0600() {
        let dir = std::env::temp_dir().join(format!("chatd-auth-{}", std::process::id()));
        let path = dir.join("nested").join(SECRET_FILE);
        let a = load_or_create_secret(&path).unwrap();
        let b = load_or_create_secret(&path).unwrap();
        assert_eq!(a, b);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
