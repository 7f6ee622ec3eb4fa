//! The live operator console at `{BASE_PATH}/console`: off (every path 404) unless an operator
//! token is configured ([`auth`]).
//!
//! - `GET /console`: the console page for an operator session, else `401` with the login form
//!   (which holds no data);
//! - `POST /console/session`: the login form's token (a form body, never a URL) for a session
//!   cookie; `POST /console/logout` ends it;
//! - `GET /console/api/overview`: the [`overview::Overview`] as JSON;
//! - `GET /console/api/events`: the overview again every [`REFRESH`] as SSE `overview` events;
//! - `GET /console/assets/*`: the page's script and style sheet (static, public, no data).
//!
//! The page is plain HTML, CSS and JavaScript compiled into the binary: no build step, no CDN,
//! and a Content-Security-Policy that allows only this origin's own script and style.
//! Overviews are built at most once per [`REFRESH`] per gateway however many consoles watch,
//! and at most [`MAX_STREAMS`] event streams are open at once.

pub mod auth;
pub mod overview;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use tokio::sync::{Mutex, Semaphore};

use self::auth::OperatorKey;
use crate::state::AppState;

/// How often a watching console gets a fresh overview.
pub const REFRESH: Duration = Duration::from_secs(2);
/// Event streams open at once on one gateway.
pub const MAX_STREAMS: usize = 32;
/// The largest login form accepted.
const MAX_LOGIN_BYTES: usize = 4 * 1024;

const PAGE: &str = include_str!("assets/console.html");
const LOGIN: &str = include_str!("assets/login.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// Only this origin's own script, style and connections; never framed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The latest overview (as JSON) and when it was built.
type Cached = Option<(tokio::time::Instant, Arc<String>)>;

#[derive(Clone)]
pub struct Console {
    app: AppState,
    key: Arc<OperatorKey>,
    /// The latest overview and when it was built.
    latest: Arc<Mutex<Cached>>,
    streams: Arc<Semaphore>,
}

/// The console's routes (relative to the base path), or `None` when no operator token is
/// configured or it cannot be read (`main` refuses to start then).
pub fn router(app: &AppState) -> Option<Router> {
    let key = match OperatorKey::from_config(&app.config) {
        Ok(Some(key)) => key,
        Ok(None) => return None,
        Err(err) => {
            tracing::error!(error = %err, "no console: the operator token cannot be used");
            return None;
        }
    };
    let console = Console {
        app: app.clone(),
        key: Arc::new(key),
        latest: Arc::default(),
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
    };
    Some(
        Router::new()
            .route("/console", get(page))
            .route("/console/session", post(login))
            .route("/console/logout", post(logout))
            .route("/console/api/overview", get(overview_json))
            .route("/console/api/events", get(events))
            .route("/console/assets/console.js", get(script))
            .route("/console/assets/console.css", get(style))
            .with_state(console),
    )
}

/// Starts this gateway's part of the console's stats on `background` until `shutdown`: it
/// publishes its own tally (admissions, settlements) while any console of the cluster is on,
/// and, when it serves a console itself, keeps the console announced. An operator token that
/// is set but unusable is an error (the gateway refuses to start).
pub fn start(
    app: &AppState,
    background: &tokio_util::task::TaskTracker,
) -> Result<bool, auth::OperatorTokenError> {
    let serves = OperatorKey::from_config(&app.config)?.is_some();
    if let Some(stats) = app.store.cluster_stats() {
        if serves {
            background.spawn(store::stats::announce_loop(
                stats.clone(),
                ANNOUNCE_EVERY,
                app.shutdown.clone(),
            ));
        }
        background.spawn(store::stats::publish_loop(
            stats,
            REFRESH,
            || None,
            app.shutdown.clone(),
        ));
    }
    Ok(serves)
}

/// How often a gateway serving the console renews its announcement (well within its TTL).
const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);

impl Console {
    fn authorized(&self, headers: &HeaderMap) -> bool {
        self.key
            .authorizes(headers, protocol::Timestamp::now().as_millis())
    }

    fn base(&self) -> String {
        self.app.config.base_path()
    }

    /// Session cookies are `Secure` when the gateway's public origin is https.
    fn secure(&self) -> bool {
        self.app
            .config
            .public_url
            .as_ref()
            .is_some_and(|url| url.origin().starts_with("https://"))
    }

    /// The overview as JSON, rebuilt when the cached one is older than [`REFRESH`]; concurrent
    /// callers wait for one build.
    async fn overview(&self) -> Arc<String> {
        let mut latest = self.latest.lock().await;
        if let Some((at, json)) = latest.as_ref()
            && at.elapsed() < REFRESH
        {
            return json.clone();
        }
        let overview = overview::build(&self.app).await;
        let json = Arc::new(serde_json::to_string(&overview).unwrap_or_else(|err| {
            tracing::warn!(error = %err, "console: could not encode the overview");
            "{}".to_owned()
        }));
        *latest = Some((tokio::time::Instant::now(), json.clone()));
        json
    }
}

/// Headers every console response carries.
fn hardened(mut response: Response, cache: &'static str) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        HeaderName::from_static("content-security-policy"),
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        HeaderName::from_static("x-content-type-options"),
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        HeaderName::from_static("referrer-policy"),
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        HeaderName::from_static("x-frame-options"),
        HeaderValue::from_static("DENY"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

fn html(status: StatusCode, body: String) -> Response {
    hardened(
        (status, [(CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response(),
        "no-store",
    )
}

/// `{{BASE}}` in a page is the base path (an operator's setting, HTML-escaped anyway).
fn with_base(page: &str, base: &str) -> String {
    page.replace("{{BASE}}", &crate::http::document::escape(base))
}

fn login_page(console: &Console, message: &str) -> String {
    with_base(LOGIN, &console.base()).replace("{{MESSAGE}}", message)
}

async fn page(State(console): State<Console>, headers: HeaderMap) -> Response {
    if console.authorized(&headers) {
        html(StatusCode::OK, with_base(PAGE, &console.base()))
    } else {
        html(StatusCode::UNAUTHORIZED, login_page(&console, ""))
    }
}

async fn login(State(console): State<Console>, body: axum::body::Bytes) -> Response {
    if body.len() > MAX_LOGIN_BYTES {
        return html(
            StatusCode::PAYLOAD_TOO_LARGE,
            login_page(&console, "That form was too large."),
        );
    }
    let token = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "token")
        .map(|(_, value)| value.into_owned());
    match token {
        Some(token) if console.key.is_token(&token) => {
            let expires =
                protocol::Timestamp::now().as_millis() + auth::SESSION_TTL.as_millis() as u64;
            let session = console.key.session(expires);
            let path = format!("{}/console", console.base());
            let cookie = auth::set_cookie(Some(&session), &path, console.secure());
            tracing::info!("console: operator signed in");
            redirect_to_console(&console, Some(cookie))
        }
        _ => {
            tracing::info!("console: sign-in refused");
            html(
                StatusCode::UNAUTHORIZED,
                login_page(&console, "That is not the operator token."),
            )
        }
    }
}

async fn logout(State(console): State<Console>) -> Response {
    let path = format!("{}/console", console.base());
    let cookie = auth::set_cookie(None, &path, console.secure());
    redirect_to_console(&console, Some(cookie))
}

fn redirect_to_console(console: &Console, cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let location = format!("{}/console", console.base());
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(LOCATION, location);
    }
    if let Some(cookie) = cookie.and_then(|cookie| HeaderValue::from_str(&cookie).ok()) {
        response.headers_mut().insert(SET_COOKIE, cookie);
    }
    hardened(response, "no-store")
}

fn unauthorized() -> Response {
    hardened(
        crate::error::ApiError::new(
            StatusCode::UNAUTHORIZED,
            protocol::ErrorCode::AuthRequired,
            "The console needs an operator session or the operator token as a bearer token",
        )
        .into_response(),
        "no-store",
    )
}

async fn overview_json(State(console): State<Console>, headers: HeaderMap) -> Response {
    if !console.authorized(&headers) {
        return unauthorized();
    }
    let json = console.overview().await;
    hardened(
        ([(CONTENT_TYPE, "application/json")], json.as_ref().clone()).into_response(),
        "no-store",
    )
}

async fn events(State(console): State<Console>, headers: HeaderMap) -> Response {
    if !console.authorized(&headers) {
        return unauthorized();
    }
    let Ok(permit) = console.streams.clone().try_acquire_owned() else {
        return hardened(
            crate::error::ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                protocol::ErrorCode::ServiceUnavailable,
                "Too many console streams are open on this gateway; retry later",
            )
            .retry_after(5)
            .into_response(),
            "no-store",
        );
    };
    let shutdown = console.app.shutdown.clone();
    let lifetime = Duration::from_millis(console.app.config.max_stream_ms);
    let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(REFRESH));
    let frames = ticks
        .then(move |_| {
            let console = console.clone();
            async move { console.overview().await }
        })
        .map(move |json| {
            // The permit lives as long as the stream.
            let _held = &permit;
            Ok::<_, Infallible>(Event::default().event("overview").data(json.as_str()))
        })
        .take_until(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(lifetime) => {}
            }
        });
    hardened(
        Sse::new(frames)
            .keep_alive(crate::http::sse::keep_alive())
            .into_response(),
        "no-store",
    )
}

async fn script() -> Response {
    hardened(
        ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response(),
        "public, max-age=300",
    )
}

async fn style() -> Response {
    hardened(
        ([(CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response(),
        "public, max-age=300",
    )
}
