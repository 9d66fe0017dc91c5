//! Dapr's lock API over HTTP/JSON, its health endpoints, and `/metrics`:
//!
//! | Method and path | Body | Answer |
//! |---|---|---|
//! | `POST /v1.0-alpha1/lock/{store}` | `{"resourceId","lockOwner","expiryInSeconds"}` | `{"success":bool}` |
//! | `POST /v1.0-alpha1/unlock/{store}` | `{"resourceId","lockOwner"}` | `{"status":0..3}` |
//! | `GET /v1.0/healthz`, `/v1.0/healthz/outbound` | | 204 ready, 503 not |
//! | `GET /metrics` | | Prometheus text |
//! | `POST /v1/locks/{acquire,extend,release,inspect,list}` | the own API's messages | the answer's message |
//! | `POST /v1/locks/{keep-alive,campaign,observe}` | the own API's messages | a line of JSON an event, while the stream lasts |
//!
//! An error is Dapr's shape, `{"errorCode":"ERR_…","message":"…"}`, with
//! Dapr's status (400 bad input, 500 undecided; 401, 429 and 503 for this
//! service's token, bounds and shutdown). Unknown fields are bad input.

pub(crate) mod serve;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};

use crate::auth::ApiToken;
use crate::error::ServeError;
use crate::health::Health;
use crate::locks::{LockService, TryLock, Unlock};

/// What the HTTP handlers share.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) locks: Arc<LockService>,
    pub(crate) health: Arc<Health>,
    pub(crate) token: Option<ApiToken>,
    pub(crate) metrics: metrics_exporter_prometheus::PrometheusHandle,
}

/// The router: every path above; anything else answers 404.
pub(crate) fn router(shared: Shared) -> Router {
    let mut api = Router::new()
        .route("/v1.0-alpha1/lock/{store}", post(try_lock))
        .route("/v1.0-alpha1/unlock/{store}", post(unlock))
        .route("/metrics", get(scrape))
        .route("/v1/locks/acquire", post(native_acquire))
        .route("/v1/locks/extend", post(native_extend))
        .route("/v1/locks/release", post(native_release))
        .route("/v1/locks/inspect", post(native_inspect))
        .route("/v1/locks/list", post(native_list))
        .route("/v1/locks/keep-alive", post(native_keep_alive))
        .route("/v1/locks/campaign", post(native_campaign))
        .route("/v1/locks/observe", post(native_observe));
    if shared.token.is_some() {
        api = api.route_layer(middleware::from_fn_with_state(shared.clone(), authorize));
    }
    Router::new()
        .route("/v1.0/healthz", get(healthz))
        .route("/v1.0/healthz/outbound", get(healthz))
        .merge(api)
        .with_state(shared)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TryLockBody {
    #[serde(default)]
    resource_id: String,
    #[serde(default)]
    lock_owner: String,
    #[serde(default)]
    expiry_in_seconds: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct UnlockBody {
    #[serde(default)]
    resource_id: String,
    #[serde(default)]
    lock_owner: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorBody<'a> {
    error_code: &'a str,
    message: String,
}

async fn try_lock(State(shared): State<Shared>, Path(store): Path<String>, body: Body) -> Response {
    let answer = async {
        let body: TryLockBody = json(body, &shared).await?;
        let req = TryLock {
            store_name: store,
            resource_id: body.resource_id,
            lock_owner: body.lock_owner,
            expiry_in_seconds: body.expiry_in_seconds,
        };
        shared.locks.try_lock(&req).await
    };
    match answer.await {
        Ok(true) => json_answer(r#"{"success":true}"#),
        Ok(false) => json_answer(r#"{"success":false}"#),
        Err(e) => error(&e),
    }
}

async fn unlock(State(shared): State<Shared>, Path(store): Path<String>, body: Body) -> Response {
    let answer = async {
        let body: UnlockBody = json(body, &shared).await?;
        let req = Unlock {
            store_name: store,
            resource_id: body.resource_id,
            lock_owner: body.lock_owner,
        };
        shared.locks.unlock(&req).await
    };
    match answer.await {
        Ok(status) => json_answer(format!(r#"{{"status":{}}}"#, status as i32)),
        Err(e) => error(&e),
    }
}

/// Reads at most the request bound, within the idle timeout (a caller
/// that announces a body and sends nothing does not keep its connection),
/// and parses it.
async fn json<T: serde::de::DeserializeOwned>(
    body: Body,
    shared: &Shared,
) -> Result<T, ServeError> {
    let limits = shared.locks.limits();
    let limit = limits.max_request_bytes;
    let read = tokio::time::timeout(limits.idle_timeout, axum::body::to_bytes(body, limit));
    let bytes: Bytes = match read.await {
        Ok(read) => {
            read.map_err(|_| ServeError::Malformed(format!("the body is over {limit} bytes")))?
        }
        Err(_) => {
            return Err(ServeError::Malformed(format!(
                "the body did not arrive within {:?} (--idle-timeout)",
                limits.idle_timeout
            )));
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| ServeError::Malformed(e.to_string()))
}

/// The own API over HTTP/JSON: the proto's messages as bodies; a failure
/// is `{"error": Failure}` with its kind's status.
macro_rules! native {
    ($name:ident, $request:ty, $method:ident) => {
        async fn $name(State(shared): State<Shared>, body: Body) -> Response {
            let answer = async {
                let request: $request = json(body, &shared).await?;
                shared.locks.$method(&request).await
            };
            match answer.await {
                Ok(value) => json_answer(serde_json::to_string(&value).unwrap_or_default()),
                Err(failure) => native_error(&failure),
            }
        }
    };
}

native!(native_acquire, crate::grpc::v1::AcquireRequest, acquire);
native!(native_extend, crate::grpc::v1::ExtendRequest, extend);
native!(native_release, crate::grpc::v1::ReleaseRequest, release);
native!(native_inspect, crate::grpc::v1::InspectRequest, inspect);
native!(native_list, crate::grpc::v1::ListRequest, list);

/// The own API's streams over HTTP: the answer's body is a line of JSON
/// for each event (`application/x-ndjson`), for as long as the stream
/// lasts; closing the connection ends it (the lease released, the
/// leadership resigned), as closing a gRPC stream does.
macro_rules! native_stream {
    ($name:ident, $request:ty, $method:ident $(. $wait:ident)?) => {
        async fn $name(State(shared): State<Shared>, body: Body) -> Response {
            let answer = async {
                let request: $request = json(body, &shared).await?;
                shared.locks.$method(&request) $(. $wait)?
            };
            match answer.await {
                Ok(events) => ndjson(events),
                Err(failure) => native_error(&failure),
            }
        }
    };
}

native_stream!(
    native_keep_alive,
    crate::grpc::v1::AcquireRequest,
    keep_alive_events.await
);
native_stream!(
    native_campaign,
    crate::grpc::v1::CampaignRequest,
    campaign_events.await
);
native_stream!(native_observe, crate::grpc::v1::ObserveRequest, observe);

/// A 200 answer streaming `items`, a line of JSON each.
fn ndjson<T: Serialize>(items: impl futures::Stream<Item = T> + Send + 'static) -> Response {
    use futures::StreamExt;
    let lines = items.map(|item| {
        let mut line = serde_json::to_vec(&item).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(Bytes::from(line))
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )],
        Body::from_stream(lines),
    )
        .into_response()
}

fn native_error(failure: &crate::native::Failure) -> Response {
    let status =
        StatusCode::from_u16(failure.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::json!({ "error": failure });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn healthz(State(shared): State<Shared>) -> Response {
    match shared.health.check().await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
    }
}

async fn scrape(State(shared): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        shared.metrics.render(),
    )
        .into_response()
}

/// Lets a request through when it carries the token (a layer only when
/// one is required).
async fn authorize(State(shared): State<Shared>, request: Request, next: Next) -> Response {
    match &shared.token {
        Some(token)
            if !token.admits(|name| request.headers().get(name).and_then(|v| v.to_str().ok())) =>
        {
            error(&ServeError::Unauthorized)
        }
        _ => next.run(request).await,
    }
}

/// A 200 answer with a JSON body.
fn json_answer(body: impl Into<Body>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.into(),
    )
        .into_response()
}

fn error(e: &ServeError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = ErrorBody {
        error_code: e.code(),
        message: e.to_string(),
    };
    let text = serde_json::to_string(&body).unwrap_or_default();
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}
