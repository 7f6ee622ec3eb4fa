//! Who may act from the console (pause, resume, drain, cancel, re-run, settle), and the name the
//! audit log records for them.
//!
//! Two kinds of operator act:
//! - a script, with the operator token as a bearer credential (`taskctl admin ...`);
//! - the console page, with its session cookie. A cookie rides along with any request a browser
//!   makes, a forged one from another site included, so an action by session also needs proof
//!   that the console's own page sent it: a same-origin request (`Sec-Fetch-Site: same-origin`,
//!   or an `Origin` naming this gateway) carrying the session's own token in
//!   [`CSRF_HEADER`]. The page gets that token inside its HTML (`{{CSRF}}`), which another site
//!   cannot read, and a custom header cannot be set by a cross-site form at all.
//!
//! A session that has ended (signed out on any gateway, expired, or ended by a token rotation)
//! is refused as no session: `401`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{Caller, Console, hardened, same_origin, unauthorized};

/// The header the console page sends its session's token in with every action.
pub const CSRF_HEADER: &str = "x-console-csrf";

/// An operator allowed to act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// The operator token as a bearer credential.
    Token,
    /// A console session, by id (the hash of its cookie's secret: naming it reveals nothing).
    Session(String),
}

impl Console {
    /// The operator behind an action request, or the answer that refuses it: `401` without the
    /// operator token or a standing session, `403` for a session request that does not prove
    /// it comes from the console's own page.
    pub(super) async fn actor(&self, headers: &HeaderMap) -> Result<Actor, Response> {
        match self.caller(headers).await {
            Caller::Bearer => Ok(Actor::Token),
            Caller::Nobody => Err(unauthorized()),
            Caller::Session(id) => {
                let token = headers
                    .get(CSRF_HEADER)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                if same_origin(self, headers) && self.key.is_csrf(&id, token) {
                    Ok(Actor::Session(id))
                } else {
                    tracing::info!("console: an action by session refused (no page token)");
                    Err(not_from_the_page())
                }
            }
        }
    }

    /// How the audit log names `actor`: the operator key's fingerprint, and for a session the
    /// start of its id, so that two operators' sessions can be told apart.
    pub(super) fn audit_name(&self, actor: &Actor) -> String {
        match actor {
            Actor::Token => format!("operator token {}", self.key_id),
            Actor::Session(id) => format!(
                "console session {} (operator token {})",
                id.get(..12).unwrap_or(id),
                self.key_id
            ),
        }
    }
}

/// An action route takes `actor: Actor` among its arguments: the request is refused (with
/// [`Console::actor`]'s answer) before the handler runs.
impl FromRequestParts<Console> for Actor {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        console.actor(&parts.headers).await
    }
}

fn not_from_the_page() -> Response {
    hardened(
        crate::http::error::ApiError::new(
            StatusCode::FORBIDDEN,
            protocol::ErrorCode::AuthorizationFailed,
            format!(
                "An action by console session takes the console page's own request: same origin, \
                 with the session's token in {CSRF_HEADER}"
            ),
        )
        .into_response(),
        "no-store",
    )
}
