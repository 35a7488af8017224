//! The HTTP surface: `/v1/ws` (WebSocket), `/healthz` (process up), `/readyz`
//! (dependencies reachable), `/metrics` (Prometheus text), `/v1/focus-modes` (the focus
//! modes the apps declare: public configuration); the browser side (`/`,
//! `/chatd-client.js`, `/v1/dev/token`) comes from [`web`].

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::state::AppState;

pub mod web;

pub fn router(app: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/ws", get(crate::ws::upgrade))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/v1/focus-modes", get(focus_modes))
        .merge(web::routes(&app))
        .with_state(app)
}

async fn healthz() -> &'static str {
    "ok"
}

/// 200 when every dependency answers, else 503 naming what is down.
async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    let checks = app.readiness().await;
    let down: Vec<&str> = checks
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(name, _)| *name)
        .collect();
    let body = json!({
        "status": if down.is_empty() { "ready" } else { "unavailable" },
        "down": down,
        "checks": checks
            .iter()
            .map(|(name, r)| (name.to_string(), match r {
                Ok(()) => json!("ok"),
                Err(e) => json!(e),
            }))
            .collect::<serde_json::Map<_, _>>(),
    });
    let status = if down.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

/// Every focus mode a user may start (`chat_focus_mode_activate`): id, app and title.
async fn focus_modes(State(app): State<Arc<AppState>>) -> Response {
    let modes: Vec<_> = app
        .focus
        .all()
        .iter()
        .map(|m| json!({"id": m.id, "app_id": m.app_id, "title": m.title}))
        .collect();
    (
        [(header::CACHE_CONTROL, "no-cache")],
        axum::Json(json!({ "focus_modes": modes })),
    )
        .into_response()
}

async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let calls = app.ai_cache.keyring().provider().calls();
    app.metrics
        .key_service_calls
        .set(i64::try_from(calls).unwrap_or(i64::MAX));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.render(),
    )
        .into_response()
}
