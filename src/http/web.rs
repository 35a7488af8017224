//! The browser side served by chatd: the demo page at `/` and its assets, the reference
//! client at `/chatd-client.js` (all compiled in from `protocol/js/`), each with a
//! Content-Security-Policy that allows no inline script; and the development sign-in
//! `POST /v1/dev/token` (`web.dev_login`), which mints a session token for a user name.

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

/// The reference client, also served when the demo page is off (frontends import it).
const CLIENT: Asset = Asset {
    path: "/chatd-client.js",
    content_type: "text/javascript; charset=utf-8",
    body: include_str!("../../protocol/js/chatd-client.js"),
};

/// The demo page and its assets (`protocol/js/demo/`).
const DEMO: [Asset; 4] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../../protocol/js/demo/index.html"),
    },
    Asset {
        path: "/demo/demo.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../protocol/js/demo/demo.js"),
    },
    Asset {
        path: "/demo/markdown.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../protocol/js/demo/markdown.js"),
    },
    Asset {
        path: "/demo/demo.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../protocol/js/demo/demo.css"),
    },
];

/// Scripts and styles from this origin only (no inline script, no `eval`), WebSocket and
/// fetch to this origin only, never framed.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// Bytes of every asset the demo page loads (the page, its scripts and styles, the client).
pub fn demo_asset_bytes() -> usize {
    DEMO.iter().map(|a| a.body.len()).sum::<usize>() + CLIENT.body.len()
}

/// The routes `[web]` turns on.
pub fn routes(app: &AppState) -> Router<Arc<AppState>> {
    let mut router = Router::new().route(CLIENT.path, get(|| async { serve(&CLIENT) }));
    if app.config.demo_enabled() {
        for asset in &DEMO {
            router = router.route(asset.path, get(move || async move { serve(asset) }));
        }
    }
    if app.config.dev_login_enabled() {
        router = router.route("/v1/dev/token", post(dev_token));
    }
    router
}

fn serve(asset: &'static Asset) -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
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
