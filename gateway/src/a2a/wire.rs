//! What both bindings write: JSON bodies, SSE streams and the payment receipt.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;

use crate::core::pay::receipt::Receipt;

/// `body` as `application/json` with `status`; a value that does not serialize (none of ours)
/// is a bare 500.
pub fn json(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut response = (status, bytes).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Each item as one SSE `data:` line, with keep-alive comments while the stream is idle.
pub fn sse(frames: BoxStream<'static, String>) -> Response {
    crate::http::sse::data_lines(frames)
}

/// A paid answer carries its receipt, whatever it says.
pub fn with_receipt(mut response: Response, receipt: Option<Receipt>) -> Response {
    if let Some(receipt) = receipt {
        receipt.attach(&mut response);
    }
    response
}
