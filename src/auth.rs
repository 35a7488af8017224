//! Session tokens: HS256 JWTs with `sub` = user id and `exp`. Owns the token secret
//! (from config, a secret file, or generated once into the data directory with mode 0600)
//! and where a token may come from on the upgrade request (query, cookie, bearer header).

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::config::Config;

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
    #[error("no token: send ?token=, a chatd_token cookie or an Authorization: Bearer header")]
    Missing,
    #[error("token expired")]
    Expired,
    #[error("token invalid")]
    Invalid,
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

/// Where the upgrade request carried its token, tried in order: `?token=`, the
/// `chatd_token` cookie, `Authorization: Bearer`.
pub fn token_from_request<'a>(
    query_token: Option<&'a str>,
    headers: &'a axum::http::HeaderMap,
) -> Option<(&'a str, TokenSource)> {
    if let Some(t) = query_token.filter(|t| !t.is_empty()) {
        return Some((t, TokenSource::Query));
    }
    for value in headers.get_all(axum::http::header::COOKIE) {
        let Ok(value) = value.to_str() else { continue };
        for pair in value.split(';') {
            if let Some((name, v)) = pair.trim().split_once('=')
                && name == "chatd_token"
                && !v.is_empty()
            {
                return Some((v, TokenSource::Cookie));
            }
        }
    }
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| (t, TokenSource::Bearer))
}

/// Where the upgrade request's token came from. A cookie is the one a browser sends by
/// itself, to any page's request: only that one needs the origin checked against
/// cross-site use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    Query,
    Cookie,
    Bearer,
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

    #[test]
    fn token_sources_in_order() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("cookie", "a=b; chatd_token=fromcookie".parse().unwrap());
        headers.insert("authorization", "Bearer frombearer".parse().unwrap());
        assert_eq!(
            token_from_request(Some("q"), &headers),
            Some(("q", TokenSource::Query))
        );
        assert_eq!(
            token_from_request(None, &headers),
            Some(("fromcookie", TokenSource::Cookie))
        );
        headers.remove("cookie");
        assert_eq!(
            token_from_request(None, &headers),
            Some(("frombearer", TokenSource::Bearer))
        );
        assert_eq!(
            token_from_request(None, &axum::http::HeaderMap::new()),
            None
        );
    }
}
