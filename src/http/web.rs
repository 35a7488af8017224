//! The browser side served by chatd: the demo page at `/` and its assets, the reference
//! client at `/chatd-client.js` with the modules it imports under `/chatd-client/` (all
//! compiled in from `protocol/js/`), each with a Content-Security-Policy that allows no
//! inline script; the ways in the page may offer, `GET /v1/auth/config` (public: the
//! development sign-in's switch and the identity provider's issuer, the page's client id and
//! scopes); and the development sign-in `POST /v1/dev/token` (`web.dev_login`), which mints
//! a session token for a user name.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::auth::UserId;
use crate::state::AppState;

/// One compiled-in file: its path, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// A JavaScript module of `protocol/js/`, served at its path there.
macro_rules! script {
    ($file:literal) => {
        Asset {
            path: concat!("/", $file),
            content_type: "text/javascript; charset=utf-8",
            body: include_str!(concat!("../../protocol/js/", $file)),
        }
    };
}

/// The reference client, also served when the demo page is off (frontends import it): the
/// entry module and the parts it imports (`protocol/js/chatd-client/`).
const CLIENT: [Asset; 9] = [
    script!("chatd-client.js"),
    script!("chatd-client/crypto.js"),
    script!("chatd-client/store.js"),
    script!("chatd-client/keys.js"),
    script!("chatd-client/connection.js"),
    script!("chatd-client/local.js"),
    script!("chatd-client/sync.js"),
    script!("chatd-client/answers.js"),
    script!("chatd-client/capabilities.js"),
];

/// The demo page and its assets (`protocol/js/demo/`).
const DEMO: [Asset; 8] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../../protocol/js/demo/index.html"),
    },
    script!("demo/demo.js"),
    script!("demo/page.js"),
    script!("demo/messages.js"),
    script!("demo/panels.js"),
    script!("demo/markdown.js"),
    script!("demo/sign-in.js"),
    Asset {
        path: "/demo/demo.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../protocol/js/demo/demo.css"),
    },
];

/// Scripts and styles from this origin only (no inline script, no `eval`), WebSocket and
/// fetch to this origin only (and to the identity provider the page signs in with), never
/// framed.
pub fn csp(provider: Option<&str>) -> String {
    let connect = match provider {
        Some(origin) => format!("'self' {origin}"),
        None => "'self'".to_string(),
    };
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src {connect}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
}

/// The origin (`scheme://host[:port]`) of the provider the page signs in with, when it
/// offers one: the page fetches its discovery document and token endpoint.
fn provider_origin(app: &AppState) -> Option<String> {
    let auth = &app.config.auth;
    if auth.page_client_id.is_empty() {
        return None;
    }
    let url = url::Url::parse(auth.issuer.trim()).ok()?;
    Some(url.origin().ascii_serialization())
}

/// Bytes of every asset the demo page loads (the page, its scripts and styles, the client).
pub fn demo_asset_bytes() -> usize {
    DEMO.iter().chain(&CLIENT).map(|a| a.body.len()).sum()
}

/// The routes `[web]` turns on.
pub fn routes(app: &AppState) -> Router<Arc<AppState>> {
    let policy = HeaderValue::from_str(&csp(provider_origin(app).as_deref()))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"));
    let mut router = Router::new().route("/v1/auth/config", get(auth_config));
    for asset in &CLIENT {
        let policy = policy.clone();
        router = router.route(asset.path, get(move || async move { serve(asset, policy) }));
    }
    if app.config.demo_enabled() {
        for asset in &DEMO {
            let policy = policy.clone();
            router = router.route(asset.path, get(move || async move { serve(asset, policy) }));
        }
    }
    if app.config.dev_login_enabled() {
        router = router.route("/v1/dev/token", post(dev_token));
    }
    router
}

fn serve(asset: &'static Asset, policy: HeaderValue) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (header::CONTENT_SECURITY_POLICY, policy),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        asset.body,
    )
        .into_response()
}

/// What the page may offer to sign in with: the development sign-in, the identity provider
/// (its issuer, the page's public client id and scopes, the claim that names the user), and
/// always pasting a token from `chatd token`. Nothing here is secret.
async fn auth_config(State(app): State<Arc<AppState>>) -> Response {
    let auth = &app.config.auth;
    let provider = (!auth.page_client_id.is_empty()).then(|| {
        json!({
            "issuer": auth.issuer.trim(),
            "client_id": auth.page_client_id,
            "scopes": auth.page_scopes,
            "user_claim": auth.user_claim,
        })
    });
    (
        [(header::CACHE_CONTROL, "no-cache")],
        axum::Json(json!({
            "dev_login": app.config.dev_login_enabled(),
            "oidc": provider,
        })),
    )
        .into_response()
}

#[derive(Deserialize)]
struct DevLogin {
    user: String,
}

/// Mints a token for the named user (development only). The JSON body forces a CORS
/// preflight on cross-site requests (which this server never grants), and a browser
/// request must come from an origin the WebSocket would accept too.
async fn dev_token(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::Json<DevLogin>,
) -> Response {
    if let Err(reason) = crate::ws::origin_allowed(&app.config, &headers, true) {
        tracing::info!(status = 403, reason, "development sign-in refused");
        return (StatusCode::FORBIDDEN, reason).into_response();
    }
    let user = match UserId::parse(body.0.user.trim()) {
        Ok(u) => u,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let ttl = app.config.auth.token_ttl;
    match app.auth.mint(&user, ttl) {
        Ok(token) => (
            [(header::CACHE_CONTROL, "no-store")],
            axum::Json(json!({
                "user": user.as_str(),
                "token": token,
                "expires_at": crate::clock::unix_now()
                    .saturating_add(i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX)),
            })),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot mint a development token");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response()
        }
    }
}
