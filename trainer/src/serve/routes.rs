//! The HTTP routes: Vertex AI's (`AIP_PREDICT_ROUTE`, `AIP_HEALTH_ROUTE`) and SageMaker's
//! (`/invocations`, `/ping`) on one router, every answer JSON, every bad request a 4xx that
//! says why.

use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::batcher::{Job, NotQueued, Queue};
use super::predictions::prediction;
use super::request::{BodyFormat, PredictRequest, parse};
use crate::error::TrainerError;
use hptune_http::BodyReadTimeout;
use http_body_util::LengthLimitError;

/// The routes of the two services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    /// Vertex AI's prediction route (`AIP_PREDICT_ROUTE`).
    pub predict: String,
    /// Vertex AI's health route (`AIP_HEALTH_ROUTE`).
    pub health: String,
}

/// SageMaker's prediction route.
pub const INVOCATIONS: &str = "/invocations";
/// SageMaker's health route.
pub const PING: &str = "/ping";

/// What the handlers share.
pub struct Served {
    /// The model's labels, once it is loaded: until then health checks answer 503.
    pub labels: OnceLock<Vec<String>>,
    /// The inference thread's queue.
    pub queue: Queue,
    /// The largest body read, in bytes.
    pub max_body_bytes: usize,
    /// The most inputs in one request.
    pub max_instances: usize,
}

/// The router of both services' routes.
pub fn router(routes: &Routes, served: Arc<Served>) -> Router {
    let mut router = Router::new()
        .route(INVOCATIONS, post(predict))
        .route(PING, get(health));
    if routes.predict != INVOCATIONS {
        router = router.route(&routes.predict, post(predict));
    }
    if routes.health != PING {
        router = router.route(&routes.health, get(health));
    }
    router
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(served)
}

/// A refused or failed request: its status and the message of its JSON answer
/// `{"error": message}`.
struct Refusal {
    status: StatusCode,
    message: String,
    /// Seconds after which the client may try again (`Retry-After`).
    retry_after: Option<u32>,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, axum::Json(json!({"error": self.message}))).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

fn refusal(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
        retry_after: None,
    }
}

/// The answer while the queue to the model is full: 503, to be tried again in a second.
fn busy() -> Refusal {
    Refusal {
        retry_after: Some(1),
        ..refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is busy: its queue of inputs is full (--max-queued-inputs); try again later",
        )
    }
}

/// A JSON answer `{"error": message}` with `status`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    refusal(status, message).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route: predictions are POSTed to the predict route (AIP_PREDICT_ROUTE) or /invocations",
    )
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "wrong method: POST a prediction request, GET a health check",
    )
}

async fn health(State(served): State<Arc<Served>>) -> Response {
    match served.labels.get() {
        Some(_) => (StatusCode::OK, axum::Json(json!({"status": "ready"}))).into_response(),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the model is loading"),
    }
}

async fn predict(State(served): State<Arc<Served>>, headers: HeaderMap, body: Body) -> Response {
    let Some(labels) = served.labels.get() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the model is loading");
    };
    let format = match body_format(&headers) {
        Ok(format) => format,
        Err(refused) => return refused.into_response(),
    };
    // Refused before the body is read: a full queue would refuse it anyway.
    if served.queue.is_full() {
        return busy().into_response();
    }
    let limit = served.max_body_bytes;
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is over {limit} bytes (the server's --max-body-bytes): split the request"
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(e) if caused_by::<LengthLimitError>(&e) => return too_large(),
        Err(e) if caused_by::<BodyReadTimeout>(&e) => {
            return error(StatusCode::REQUEST_TIMEOUT, e.to_string());
        }
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body could not be read: {e}"),
            );
        }
    };
    let request = match parse(&bytes, format, served.max_instances) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.0),
    };
    match classify(&served, &request).await {
        Ok(probabilities) => {
            let predictions: Vec<Value> = probabilities
                .iter()
                .map(|p| prediction(labels, p, request.top_k))
                .collect();
            (
                StatusCode::OK,
                axum::Json(json!({"predictions": predictions})),
            )
                .into_response()
        }
        Err(refused) => refused.into_response(),
    }
}

/// The format of the body, from its content type: JSON (also when none is given) or CSV.
fn body_format(headers: &HeaderMap) -> Result<BodyFormat, Refusal> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(BodyFormat::Json);
    };
    let essence = value
        .to_str()
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" | "" => Ok(BodyFormat::Json),
        "text/csv" => Ok(BodyFormat::Csv),
        other => Err(refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type '{other}' is not served: send application/json or text/csv"),
        )),
    }
}

/// Whether `error` or one of its causes is an `E`.
fn caused_by<E: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| e.is::<E>())
}

/// The probabilities of the request's inputs, from the inference thread.
async fn classify(served: &Served, request: &PredictRequest) -> Result<Vec<Vec<f32>>, Refusal> {
    let (reply, answer) = oneshot::channel();
    let job = Job {
        inputs: request.inputs.clone(),
        reply,
    };
    let gone = || {
        refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model is no longer served",
        )
    };
    served.queue.push(job).map_err(|refused| match refused {
        NotQueued::Full => busy(),
        NotQueued::Closed => gone(),
    })?;
    match answer.await.map_err(|_| gone())? {
        Ok(probabilities) => Ok(probabilities),
        // The tokenizer refused an input: the input is what is wrong.
        Err(e @ TrainerError::Tokenizer { .. }) => {
            Err(refusal(StatusCode::BAD_REQUEST, e.to_string()))
        }
        Err(e) => {
            tracing::error!("prediction failed: {e}");
            Err(refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        }
    }
}
