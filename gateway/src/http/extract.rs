//! Extractors whose rejections are [`ApiError`]s, so bad input always gets the profile's body.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use protocol::ErrorCode;
use protocol::token::AccessToken;
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;

pub const TASK_ACCESS_TOKEN: &str = "task-access-token";

/// A JSON body. Malformed JSON, invalid UTF-8 and a wrong shape are `400 invalid_request`; a
/// body over the limit is `413`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        ErrorCode::InvalidRequest,
                        "Request body is too large",
                    )
                } else {
                    ApiError::bad_request(
                        ErrorCode::InvalidRequest,
                        "Could not read the request body",
                    )
                }
            })?;
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|_| ApiError::bad_request(ErrorCode::InvalidRequest, "Invalid JSON"))?;
        serde_json::from_value(value).map(JsonBody).map_err(|err| {
            ApiError::bad_request(
                ErrorCode::InvalidRequest,
                format!("Invalid request body: {err}"),
            )
        })
    }
}

fn token_error(status: StatusCode) -> ApiError {
    ApiError::new(
        status,
        ErrorCode::TaskAccessRequired,
        "Task-Access-Token must contain 20 to 256 characters",
    )
}

/// Reads `Task-Access-Token`: `None` when absent, `400 task_access_required` when malformed.
fn read_token(parts: &Parts) -> Result<Option<AccessToken>, ApiError> {
    let Some(value) = parts.headers.get(TASK_ACCESS_TOKEN) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| token_error(StatusCode::BAD_REQUEST))?;
    AccessToken::parse(text)
        .map(Some)
        .map_err(|_| token_error(StatusCode::BAD_REQUEST))
}

/// A required access token: missing is `401`, malformed `400`, both `task_access_required`.
pub struct TaskAccess(pub AccessToken);

impl<S: Send + Sync> FromRequestParts<S> for TaskAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        read_token(parts)?
            .map(TaskAccess)
            .ok_or_else(|| token_error(StatusCode::UNAUTHORIZED))
    }
}

/// An optional access token (free task creation generates one when absent).
pub struct OptionalTaskAccess(pub Option<AccessToken>);

impl<S: Send + Sync> FromRequestParts<S> for OptionalTaskAccess {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        read_token(parts).map(OptionalTaskAccess)
    }
}
