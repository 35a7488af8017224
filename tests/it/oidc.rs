//! Sign-in with an OpenID Connect provider: the harness's fake provider serves a real JWK
//! set over HTTP (RSA and P-256 fixture keys) and signs tokens; chatd verifies them by
//! `auth.jwks_url`, `auth.issuer`, `auth.audience` and `auth.user_claim`, takes them from
//! the query, the session cookie or the `bearer.<token>` subprotocol, follows key rotation,
//! and closes a socket with 4002 when its provider token expires.

use std::time::Duration;

use chatd::auth::UserId;
use chatd::config::Config;
use chatd::crypto::UserHash;
use chatd_protocol::{ErrorCode, ServerMessage};
use chatd_test_harness::fake_idp::{AUDIENCE, FakeIdp, Fixture, SigningKey, now};
use chatd_test_harness::ws_client::{Refused, WsClient};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;

use crate::support::{TestApp, spawn_app};

const TEN_MINUTES: Duration = Duration::from_secs(600);

fn key(fixture: Fixture, kid: &str) -> SigningKey {
    SigningKey::new(fixture, kid).unwrap()
}

/// Points chatd at the provider.
fn use_idp(c: &mut Config, idp: &FakeIdp) {
    c.auth.jwks_url = idp.jwks_url();
    c.auth.issuer = idp.issuer();
    c.auth.audience = AUDIENCE.to_string();
}

async fn expect_pong(ws: &mut WsClient) {
    ws.send_json(json!({"type": "ping"})).await;
    ws.recv_until(|m| matches!(m, ServerMessage::Pong(_)).then_some(()))
        .await;
}

/// Connects with `?token=` and shows the socket works.
async fn connect(app: &TestApp, token: &str) -> WsClient {
    let mut ws = WsClient::connect(&app.ws_url(&format!("token={token}")))
        .await
        .unwrap();
    expect_pong(&mut ws).await;
    ws
}

async fn status_of(request: Request) -> u16 {
    match WsClient::connect_request(request).await {
        Err(Refused::Http(status)) => status,
        Err(Refused::Other(e)) => panic!("refused without an HTTP status: {e}"),
        Ok(_) => 101,
    }
}

async fn query_status(app: &TestApp, token: &str) -> u16 {
    query_refusal(app, token).await.0
}

/// The status and reason chatd refuses a `?token=` with.
async fn query_refusal(app: &TestApp, token: &str) -> (u16, String) {
    let request = app
        .ws_url(&format!("token={token}"))
        .into_client_request()
        .unwrap();
    WsClient::refusal(request).await.unwrap()
}

/// The ids of the user's connected devices (after a pong, the socket is registered).
fn devices_of(app: &TestApp, user: &str) -> Vec<String> {
    let hash = UserHash::of(&UserId::parse(user).unwrap());
    app.state
        .delivery
        .hub
        .devices(&hash)
        .iter()
        .map(|d| d.session_id.clone())
        .collect()
}

#[tokio::test]
async fn rs256_and_es256_tokens_sign_in_as_the_configured_claim() {
    let rsa = key(Fixture::Rsa1, "rsa-1");
    let ec = key(Fixture::Ec1, "ec-1");
    let idp = FakeIdp::start(&[&rsa, &ec]).await.unwrap();
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        c.auth.user_claim = "email".into();
    })
    .await;
    let with_email = |user: &str, email: &str| {
        let mut claims = idp.claims(user, TEN_MINUTES);
        claims["email"] = json!(email);
        claims
    };

    let _alice = connect(&app, &rsa.sign(&with_email("idp-1", "alice@example.com"))).await;
    let _bob = connect(&app, &ec.sign(&with_email("idp-2", "bob@example.com"))).await;
    assert_eq!(devices_of(&app, "alice@example.com").len(), 1);
    assert_eq!(devices_of(&app, "bob@example.com").len(), 1);
    assert!(
        devices_of(&app, "idp-1").is_empty(),
        "the user is `email`, not `sub`"
    );
    // The provider's user and chatd's own token of the same id are one user.
    let _also_alice = app.connect("alice@example.com").await;
    let mut own = app.connect("carol").await;
    expect_pong(&mut own).await;
    assert_eq!(devices_of(&app, "alice@example.com").len(), 2);

    // No `email` claim, or one outside the user id rules: refused.
    assert_eq!(
        query_status(&app, &rsa.sign(&idp.claims("idp-3", TEN_MINUTES))).await,
        401
    );
    assert_eq!(
        query_status(&app, &rsa.sign(&with_email("idp-4", "a b@example.com"))).await,
        401
    );
}

#[tokio::test]
async fn wrong_issuer_audience_signature_key_and_expired_tokens_are_refused() {
    let rsa = key(Fixture::Rsa1, "rsa-1");
    let ec = key(Fixture::Ec1, "ec-1");
    let idp = FakeIdp::start(&[&rsa, &ec]).await.unwrap();
    let app = spawn_app(|c| use_idp(c, &idp)).await;
    let good = idp.claims("dana", TEN_MINUTES);
    let edited = |field: &str, value: Value| {
        let mut claims = good.clone();
        claims[field] = value;
        claims
    };
    // The baseline every refused token differs from in one thing.
    let _dana = connect(&app, &rsa.sign(&good)).await;
    let _dana_ec = connect(&app, &ec.sign(&good)).await;

    let forger_as_rsa1 = key(Fixture::RsaForeign, "rsa-1");
    let forger_unknown = key(Fixture::RsaForeign, "forged");
    let ec_as_rsa1 = key(Fixture::Ec1, "rsa-1");
    let hs256_other_secret = chatd::auth::TokenKeys::from_secret(b"not chatd's secret")
        .mint(&UserId::parse("dana").unwrap(), TEN_MINUTES)
        .unwrap();
    let refused = [
        (
            "wrong issuer",
            rsa.sign(&edited("iss", json!("https://evil.example"))),
            "issuer",
        ),
        (
            "wrong audience",
            rsa.sign(&edited("aud", json!("another-app"))),
            "audience",
        ),
        (
            "audience list without chatd",
            ec.sign(&edited("aud", json!(["a", "b"]))),
            "audience",
        ),
        (
            "expired",
            rsa.sign(&edited("exp", json!(now() - 5))),
            "expired",
        ),
        (
            "not yet valid",
            rsa.sign(&edited("nbf", json!(now() + 600))),
            "invalid",
        ),
        (
            "no exp",
            {
                let mut claims = good.clone();
                claims.as_object_mut().unwrap().remove("exp");
                rsa.sign(&claims)
            },
            "invalid",
        ),
        (
            "signed by another key under a known kid",
            forger_as_rsa1.sign(&good),
            "invalid",
        ),
        (
            "signed by an unknown key",
            forger_unknown.sign(&good),
            "unknown key",
        ),
        (
            "ES256 under an RSA key's kid",
            ec_as_rsa1.sign(&good),
            "unknown key",
        ),
        (
            "tampered payload",
            {
                let token = rsa.sign(&good);
                let other = rsa.sign(&edited("sub", json!("mallory")));
                let parts: Vec<&str> = token.split('.').collect();
                let forged: Vec<&str> = other.split('.').collect();
                format!("{}.{}.{}", parts[0], forged[1], parts[2])
            },
            "invalid",
        ),
        ("HS256 with another secret", hs256_other_secret, "invalid"),
    ];
    for (what, token, reason) in refused {
        let (status, body) = query_refusal(&app, &token).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body.contains(reason), "{what}: {body}");
        assert!(!body.contains(&token), "the token is never echoed");
    }
    // An audience list that names chatd is fine.
    let _listed = connect(&app, &ec.sign(&edited("aud", json!(["other", AUDIENCE])))).await;
}

#[tokio::test]
async fn a_rotated_key_is_picked_up_by_refetch_and_the_retired_one_refused() {
    let old = key(Fixture::Rsa1, "2026-a");
    let new = key(Fixture::Rsa2, "2026-b");
    let idp = FakeIdp::start(&[&old]).await.unwrap();
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        // Every unknown kid refetches (the rate limit has a test of its own).
        c.auth.jwks_min_refetch = Duration::ZERO;
        c.auth.jwks_refresh = Duration::from_secs(3600);
    })
    .await;
    let old_token = old.sign(&idp.claims("erin", TEN_MINUTES));
    let _erin = connect(&app, &old_token).await;

    idp.publish(&[&new]).unwrap();
    let before = idp.fetches();
    let _rotated = connect(&app, &new.sign(&idp.claims("erin", TEN_MINUTES))).await;
    assert!(
        idp.fetches() > before,
        "the unknown kid fetched the set again"
    );
    assert_eq!(devices_of(&app, "erin").len(), 2);
    // The set no longer holds the old key: its tokens are refused from now on.
    assert_eq!(query_status(&app, &old_token).await, 401);
}

#[tokio::test]
async fn unknown_kids_refetch_at_most_once_per_min_refetch() {
    let old = key(Fixture::Rsa1, "2026-a");
    let new = key(Fixture::Rsa2, "2026-b");
    let idp = FakeIdp::start(&[&old]).await.unwrap();
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        c.auth.jwks_min_refetch = Duration::from_secs(3600);
        c.auth.jwks_refresh = Duration::from_secs(3600);
    })
    .await;
    let _frank = connect(&app, &old.sign(&idp.claims("frank", TEN_MINUTES))).await;
    let fetched = idp.fetches();
    assert!(fetched >= 1);

    idp.publish(&[&new]).unwrap();
    for i in 0..5 {
        let forged = key(Fixture::RsaForeign, &format!("forged-{i}"));
        assert_eq!(
            query_status(&app, &forged.sign(&idp.claims("frank", TEN_MINUTES))).await,
            401
        );
    }
    // Within the interval even the real new key waits for the periodic refresh.
    assert_eq!(
        query_status(&app, &new.sign(&idp.claims("frank", TEN_MINUTES))).await,
        401
    );
    assert_eq!(idp.fetches(), fetched, "no fetch within jwks_min_refetch");
}

#[tokio::test]
async fn the_key_set_is_refreshed_periodically() {
    let old = key(Fixture::Rsa1, "2026-a");
    let new = key(Fixture::Rsa2, "2026-b");
    let idp = FakeIdp::start(&[&old]).await.unwrap();
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        c.auth.jwks_min_refetch = Duration::from_secs(3600);
        c.auth.jwks_refresh = Duration::from_secs(1);
    })
    .await;
    let _gina = connect(&app, &old.sign(&idp.claims("gina", TEN_MINUTES))).await;

    idp.publish(&[&new]).unwrap();
    // A fetch counted after `publish` serves the new set; once the next one is counted,
    // the refresher (one fetch at a time) has stored it.
    let after_publish = idp.fetches() + 1;
    idp.wait_for_fetches(after_publish + 1).await;
    let _rotated = connect(&app, &new.sign(&idp.claims("gina", TEN_MINUTES))).await;
}

#[tokio::test]
async fn a_provider_token_comes_by_query_cookie_or_subprotocol() {
    let rsa = key(Fixture::Rsa1, "rsa-1");
    let idp = FakeIdp::start(&[&rsa]).await.unwrap();
    // A deployment with its own frontend on another origin: no demo page (with the demo on
    // and no `allowed_origins`, every browser must come from the server's own origin).
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        c.auth.cookie_name = "idp_session".into();
        c.web.demo = chatd::config::Toggle::Off;
    })
    .await;
    let token = rsa.sign(&idp.claims("hana", TEN_MINUTES));
    let request = |query: &str, headers: &[(&'static str, String)]| {
        let mut req = app.ws_url(query).into_client_request().unwrap();
        for (name, value) in headers {
            req.headers_mut().insert(*name, value.parse().unwrap());
        }
        req
    };
    let cookie = ("cookie", format!("theme=dark; idp_session={token}"));
    let evil = ("origin", "https://evil.example".to_string());
    let subprotocol = ("sec-websocket-protocol", format!("chatd, bearer.{token}"));

    // Query.
    let _query = connect(&app, &token).await;
    // The configured cookie; the default name is not read any more.
    let mut ws =
        WsClient::connect_request(request("sessionId=laptop", std::slice::from_ref(&cookie)))
            .await
            .unwrap();
    expect_pong(&mut ws).await;
    assert_eq!(
        status_of(request("", &[("cookie", format!("chatd_token={token}"))])).await,
        401
    );
    // A cookie is ambient: from another site's page it is refused (403), whatever its name.
    assert_eq!(
        status_of(request("", &[cookie.clone(), evil.clone()])).await,
        403
    );

    // The subprotocol: the answer selects `chatd` (a browser fails the connection
    // otherwise), `sessionId` names the device, and any origin may send it (a page's
    // script sets it; it is no ambient credential).
    let (mut ws, protocol) = WsClient::connect_with_protocol(request(
        "sessionId=phone",
        &[subprotocol.clone(), evil.clone()],
    ))
    .await
    .unwrap();
    assert_eq!(protocol.as_deref(), Some("chatd"));
    expect_pong(&mut ws).await;
    let mut sessions = devices_of(&app, "hana");
    sessions.sort();
    assert_eq!(sessions.len(), 3);
    assert!(sessions.contains(&"laptop".to_string()) && sessions.contains(&"phone".to_string()));
    // A token subprotocol without `chatd` beside it is a client bug: 400, said plainly.
    assert_eq!(
        status_of(request(
            "",
            &[("sec-websocket-protocol", format!("bearer.{token}"))]
        ))
        .await,
        400
    );
    // `Origin: null` stays refused for every source.
    assert_eq!(
        status_of(request("", &[subprotocol, ("origin", "null".into())])).await,
        403
    );
}

/// A provider token expires like chatd's own: at `exp` the socket closes with 4002, unless
/// `refresh_token` brought a fresh token of the same user (here the provider's too).
#[tokio::test]
async fn a_socket_closes_with_4002_when_its_provider_token_expires_unless_refreshed() {
    let rsa = key(Fixture::Rsa1, "rsa-1");
    let ec = key(Fixture::Ec1, "ec-1");
    let idp = FakeIdp::start(&[&rsa, &ec]).await.unwrap();
    let app = spawn_app(|c| use_idp(c, &idp)).await;
    let short = rsa.sign(&idp.claims("ines", Duration::from_secs(2)));
    let mut expiring = connect(&app, &short).await;
    let mut refreshed = connect(&app, &short).await;

    let refresh = |token: String| json!({"type": "refresh_token", "payload": {"token": token}});
    refreshed
        .send_json(refresh(ec.sign(&idp.claims("jules", TEN_MINUTES))))
        .await;
    let e = refreshed
        .recv_until(|m| match m {
            ServerMessage::Error(e) => Some(e.clone()),
            _ => None,
        })
        .await;
    assert_eq!(e.code, ErrorCode::InvalidToken, "another user's token");
    let long = ec.sign(&idp.claims("ines", TEN_MINUTES));
    refreshed.send_json(refresh(long)).await;
    let ok = refreshed
        .recv_until(|m| match m {
            ServerMessage::TokenRefreshed(t) => Some(t.clone()),
            _ => None,
        })
        .await;
    assert!(
        ok.expires_at > now() + 500,
        "the new exp: {}",
        ok.expires_at
    );

    let (code, reason) = expiring.expect_close().await;
    assert_eq!(code, 4002);
    assert!(reason.contains("token expired"), "{reason}");
    expect_pong(&mut refreshed).await;
}

/// A provider that cannot be reached is not the token's fault: 503 (try again), while
/// chatd's own tokens keep working.
#[tokio::test]
async fn an_unreachable_provider_answers_503_and_own_tokens_still_work() {
    let rsa = key(Fixture::Rsa1, "rsa-1");
    let idp = FakeIdp::start(&[&rsa]).await.unwrap();
    let token = rsa.sign(&idp.claims("kim", TEN_MINUTES));
    let port = chatd_test_harness::free_port();
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        c.auth.jwks_url = format!("http://127.0.0.1:{port}/.well-known/jwks.json");
    })
    .await;
    let (status, reason) = query_refusal(&app, &token).await;
    assert_eq!(status, 503, "{reason}");
    assert!(reason.contains("cannot be fetched"), "{reason}");
    let mut own = app.connect("kim").await;
    expect_pong(&mut own).await;
}

/// A provider that was down when chatd started (no keys at all) is asked again at the next
/// sign-in a second later, not only after `jwks_min_refetch`: sign-ins work again as soon as
/// it is back.
#[tokio::test]
async fn a_provider_back_after_chatd_started_signs_in_again_within_seconds() {
    let rsa = key(Fixture::Rsa1, "rsa-1");
    let idp = FakeIdp::start(&[]).await.unwrap();
    let token = rsa.sign(&idp.claims("kim", TEN_MINUTES));
    let app = spawn_app(|c| {
        use_idp(c, &idp);
        c.auth.jwks_min_refetch = Duration::from_secs(3600);
        c.auth.jwks_refresh = Duration::from_secs(3600);
    })
    .await;
    let (status, reason) = query_refusal(&app, &token).await;
    assert_eq!(status, 503, "no usable keys yet: {reason}");
    idp.publish(&[&rsa]).unwrap();
    chatd_test_harness::process::wait_until("a sign-in once the provider is back", || async {
        WsClient::connect(&app.ws_url(&format!("token={token}")))
            .await
            .is_ok()
    })
    .await
    .unwrap();
}
