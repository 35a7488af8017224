//! A fake OpenID Connect provider: a real HTTP server publishing a JWK set
//! (`GET /.well-known/jwks.json`) that a test can change (key rotation), counting the
//! fetches so a test can await one; and signing keys that mint the provider's tokens.
//! The keys (three RSA 2048, one P-256) are test fixtures in `fixtures/idp/`, generated
//! with openssl for these tests only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use base64::Engine;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long `wait_for_fetches` waits before failing the test.
const WAIT: Duration = Duration::from_secs(15);

/// The audience the provider's tokens carry unless a test says otherwise.
pub const AUDIENCE: &str = "chatd-test-client";

/// A provider's signing key, with its key id.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    encoding: EncodingKey,
}

/// The fixture keys.
#[derive(Debug, Clone, Copy)]
pub enum Fixture {
    Rsa1,
    Rsa2,
    /// An RSA key the provider never publishes (a forger's).
    RsaForeign,
    Ec1,
}

impl SigningKey {
    pub fn new(fixture: Fixture, kid: &str) -> anyhow::Result<Self> {
        let (pem, alg) = match fixture {
            Fixture::Rsa1 => (include_str!("../fixtures/idp/rsa-1.pem"), Algorithm::RS256),
            Fixture::Rsa2 => (include_str!("../fixtures/idp/rsa-2.pem"), Algorithm::RS256),
            Fixture::RsaForeign => (
                include_str!("../fixtures/idp/rsa-foreign.pem"),
                Algorithm::RS256,
            ),
            Fixture::Ec1 => (include_str!("../fixtures/idp/ec-1.pem"), Algorithm::ES256),
        };
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .context("fixture key is not base64")?;
        // RSA fixtures are PKCS#1, the EC one PKCS#8: what jsonwebtoken's DER loaders take.
        let encoding = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_der(&der),
            _ => EncodingKey::from_rsa_der(&der),
        };
        Ok(Self {
            kid: kid.to_string(),
            alg,
            encoding,
        })
    }

    /// The public half, as the provider publishes it.
    pub fn jwk(&self) -> anyhow::Result<Jwk> {
        let mut jwk = Jwk::from_encoding_key(&self.encoding, self.alg)?;
        jwk.common.key_id = Some(self.kid.clone());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        Ok(jwk)
    }

    /// A token with these claims, its header naming this key.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding)
            .unwrap_or_else(|e| panic!("signing a test token: {e}"))
    }
}

/// Unix seconds now.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

struct Shared {
    set: Mutex<JwkSet>,
    fetches: watch::Sender<usize>,
}

pub struct FakeIdp {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FakeIdp {
    /// Serves the given keys' JWK set on a free port.
    pub async fn start(keys: &[&SigningKey]) -> anyhow::Result<FakeIdp> {
        let shared = Arc::new(Shared {
            set: Mutex::new(JwkSet::default()),
            fetches: watch::Sender::new(0),
        });
        let app = Router::new()
            .route("/.well-known/jwks.json", get(jwks))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
        });
        let idp = FakeIdp { addr, shared, stop };
        idp.publish(keys)?;
        Ok(idp)
    }

    /// The provider's issuer (`iss`).
    pub fn issuer(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn jwks_url(&self) -> String {
        format!("http://{}/.well-known/jwks.json", self.addr)
    }

    /// Publishes exactly these keys from now on (a rotation drops the old ones).
    pub fn publish(&self, keys: &[&SigningKey]) -> anyhow::Result<()> {
        let keys = keys
            .iter()
            .map(|k| k.jwk())
            .collect::<anyhow::Result<_>>()?;
        *self
            .shared
            .set
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = JwkSet { keys };
        Ok(())
    }

    /// How many times the key set was fetched.
    pub fn fetches(&self) -> usize {
        *self.shared.fetches.borrow()
    }

    /// Waits until the key set was fetched at least `n` times in all.
    pub async fn wait_for_fetches(&self, n: usize) {
        let mut rx = self.shared.fetches.subscribe();
        tokio::time::timeout(WAIT, rx.wait_for(|f| *f >= n))
            .await
            .unwrap_or_else(|_| panic!("the key set was not fetched {n} times within {WAIT:?}"))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Standard claims for `user` (as `sub`), valid for `ttl`, this issuer, [`AUDIENCE`].
    pub fn claims(&self, user: &str, ttl: Duration) -> Value {
        let now = now();
        json!({
            "iss": self.issuer(),
            "aud": AUDIENCE,
            "sub": user,
            "iat": now,
            "exp": now + ttl.as_secs(),
        })
    }
}

/// Counts the fetch before reading the set: a fetch counted after a `publish` serves the
/// published keys.
async fn jwks(State(shared): State<Arc<Shared>>) -> axum::Json<JwkSet> {
    shared.fetches.send_modify(|f| *f += 1);
    let set = shared
        .set
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    axum::Json(set)
}

impl Drop for FakeIdp {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
