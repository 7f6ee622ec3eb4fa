//! The live operator console at `{BASE_PATH}/console`: off (every path 404) unless an operator
//! token is configured ([`auth`]).
//!
//! - `GET /console`: the console page for an operator session, else `401` with the login form
//!   (which holds no data);
//! - `POST /console/session`: the login form's token (a form body, never a URL) for a session
//!   cookie; `POST /console/logout` ends it (see [`logout`] for what it asks);
//! - `GET /console/api/overview`: the [`overview::Overview`] as JSON;
//! - `GET /console/api/events`: the overview again every [`REFRESH`] as SSE `overview` events;
//! - `POST /console/api/entrypoints/{key}/pause|resume`, `GET /console/api/audit`: see
//!   [`operate`];
//! - `POST /console/api/workers/{id}/drain`: see [`drain`];
//! - `GET /console/api/tasks/{id}`, `POST /console/api/tasks/{id}/cancel|rerun`: see
//!   [`tasks`];
//! - `GET /console/api/failed`, `POST /console/api/failed/rerun|remove`: the failed tasks
//!   (dead-letter view), see [`failed`];
//! - `GET /console/assets/*`: the page's scripts and style sheet (static, public, no data).
//!
//! Actions by console session carry the page's token ([`actor`]).
//!
//! The page is plain HTML, CSS and JavaScript compiled into the binary: no build step, no CDN,
//! and a Content-Security-Policy that allows only this origin's own script and style.
//! Overviews are built at most once per [`REFRESH`] per gateway however many consoles watch,
//! and at most [`MAX_STREAMS`] event streams are open at once.

pub mod actor;
pub mod auth;
pub mod drain;
pub mod failed;
pub mod operate;
pub mod overview;
pub mod settlements;
pub mod tasks;

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
use crate::core::state::AppState;
use store::stats::{ClusterStats, MemoryStats};

/// How often a watching console gets a fresh overview.
pub const REFRESH: Duration = Duration::from_secs(2);
/// Event streams open at once on one gateway.
pub const MAX_STREAMS: usize = 32;
/// The largest login form accepted.
const MAX_LOGIN_BYTES: usize = 4 * 1024;

const PAGE: &str = include_str!("assets/console.html");
const LOGIN: &str = include_str!("assets/login.html");
const SCRIPT: &str = include_str!("assets/console.js");
const ACTIONS_SCRIPT: &str = include_str!("assets/actions.js");
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
    /// [`OperatorKey::key_id`], computed once.
    key_id: Arc<str>,
    /// Where the sessions are recorded: the store's (shared by every gateway), or this
    /// process's own when the store keeps no console state.
    sessions: Arc<dyn ClusterStats>,
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
    let sessions = app
        .store
        .cluster_stats()
        .unwrap_or_else(|| Arc::new(MemoryStats::new()));
    let console = Console {
        app: app.clone(),
        key_id: key.key_id().into(),
        key: Arc::new(key),
        sessions,
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
            .route("/console/api/settlements", get(settlements::list))
            .route("/console/api/settlements/{task_id}", post(settlements::act))
            .route("/console/api/entrypoints/{key}/pause", post(operate::pause))
            .route(
                "/console/api/entrypoints/{key}/resume",
                post(operate::resume),
            )
            .route("/console/api/workers/{id}/drain", post(drain::drain))
            .route("/console/api/audit", get(operate::audit_log))
            .route("/console/api/failed", get(failed::list))
            .route("/console/api/failed/rerun", post(failed::rerun))
            .route("/console/api/failed/remove", post(failed::remove))
            .route("/console/api/tasks/{id}", get(tasks::view))
            .route("/console/api/tasks/{id}/cancel", post(tasks::cancel))
            .route("/console/api/tasks/{id}/rerun", post(tasks::rerun))
            .route("/console/assets/console.js", get(script))
            .route("/console/assets/actions.js", get(actions_script))
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
    let key = OperatorKey::from_config(&app.config)?;
    let serves = key.is_some();
    if let Some(stats) = app.store.cluster_stats() {
        if let Some(key) = key {
            background.spawn(end_sessions_of_other_keys(stats.clone(), key.key_id()));
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

/// Ends the sessions made with another operator token: rotating the token signs every
/// operator out, on every gateway (their cookies would no longer verify here anyway; this also
/// ends them should the old token come back).
async fn end_sessions_of_other_keys(sessions: Arc<dyn ClusterStats>, key_id: String) {
    match sessions.close_sessions_of_other_keys(&key_id).await {
        Ok(0) => {}
        Ok(ended) => tracing::info!(ended, "console: sessions of another operator token ended"),
        Err(err) => {
            tracing::warn!(error = %err, "console: could not end the sessions of another operator token")
        }
    }
}

/// Who a console request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Caller {
    /// The operator token as a bearer credential.
    Bearer,
    /// A standing session, by id.
    Session(String),
    Nobody,
}

/// How often a gateway serving the console renews its announcement (well within its TTL).
const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);

impl Console {
    /// Who sent `headers`: the bearer token if one is sent (right or wrong), else the first
    /// signed session cookie whose record stands. A store that cannot answer lets nobody in.
    async fn caller(&self, headers: &HeaderMap) -> Caller {
        match self.key.bearer(headers) {
            Some(true) => return Caller::Bearer,
            Some(false) => return Caller::Nobody,
            None => {}
        }
        let now = protocol::Timestamp::now().as_millis();
        for id in self.key.session_ids(headers) {
            if self.is_open(&id, now).await {
                return Caller::Session(id);
            }
        }
        Caller::Nobody
    }

    async fn is_open(&self, id: &str, now_ms: u64) -> bool {
        match self.sessions.session_open(&self.key_id, id, now_ms).await {
            Ok(open) => open,
            Err(err) => {
                tracing::warn!(error = %err, "console: could not look a session up");
                false
            }
        }
    }

    /// Whether `caller` still may read (a session may have ended since it was checked).
    async fn still(&self, caller: &Caller) -> bool {
        match caller {
            Caller::Bearer => true,
            Caller::Session(id) => {
                self.is_open(id, protocol::Timestamp::now().as_millis())
                    .await
            }
            Caller::Nobody => false,
        }
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
/// An API error of a console route, never cached.
fn answer(err: crate::http::error::ApiError) -> Response {
    hardened(err.into_response(), "no-store")
}

/// A JSON answer of a console route, never cached.
fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    hardened(
        (
            status,
            [(CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response(),
        "no-store",
    )
}

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
    let csrf = match console.caller(&headers).await {
        Caller::Session(id) => console.key.csrf(&id),
        // A page read with the bearer token has no session to end.
        Caller::Bearer => String::new(),
        Caller::Nobody => return html(StatusCode::UNAUTHORIZED, login_page(&console, "")),
    };
    html(
        StatusCode::OK,
        with_base(PAGE, &console.base()).replace("{{CSRF}}", &csrf),
    )
}

async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !same_origin(&console, &headers) {
        return cross_site();
    }
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
        // Only the token's holder makes the store keep a session: a failed login holds nothing.
        Some(token) if console.key.is_token(&token) => {
            let now = protocol::Timestamp::now().as_millis();
            let expires = now
                .saturating_add(u64::try_from(auth::SESSION_TTL.as_millis()).unwrap_or(u64::MAX));
            let (session, id) = console.key.new_session();
            // Sessions of an older token end first (this gateway's start did it too, unless
            // the store was away then).
            let opened = match console
                .sessions
                .close_sessions_of_other_keys(&console.key_id)
                .await
            {
                Ok(_) => {
                    console
                        .sessions
                        .open_session(&console.key_id, &id, expires, now)
                        .await
                }
                Err(err) => Err(err),
            };
            if let Err(err) = opened {
                tracing::warn!(error = %err, "console: could not record a session");
                return html(
                    StatusCode::SERVICE_UNAVAILABLE,
                    login_page(&console, "The store cannot record a session now; retry."),
                );
            }
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

/// Ends the caller's session, on every gateway. It asks for proof that the request comes from
/// the console's own page, not another site: a `Sec-Fetch-Site` or `Origin` header naming
/// another site is refused (`403`, nothing changed), and so is a form without the session's
/// own sign-out token (`csrf`, only in the page served to that session). A sign-out without a
/// standing session changes nothing and clears no cookie: it only leads back to the form.
async fn logout(
    State(console): State<Console>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !same_origin(&console, &headers) || body.len() > MAX_LOGIN_BYTES {
        return cross_site();
    }
    let Caller::Session(id) = console.caller(&headers).await else {
        return redirect_to_console(&console, None);
    };
    let csrf = form_urlencoded::parse(&body)
        .find(|(name, _)| name == "csrf")
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default();
    if !console.key.is_csrf(&id, &csrf) {
        tracing::info!("console: sign-out refused (no sign-out token of the session)");
        return cross_site();
    }
    if let Err(err) = console.sessions.close_session(&console.key_id, &id).await {
        tracing::warn!(error = %err, "console: could not end a session");
        return hardened(
            crate::http::error::ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                protocol::ErrorCode::ServiceUnavailable,
                "The session could not be ended now; retry",
            )
            .retry_after(1)
            .into_response(),
            "no-store",
        );
    }
    tracing::info!("console: operator signed out");
    let path = format!("{}/console", console.base());
    let cookie = auth::set_cookie(None, &path, console.secure());
    redirect_to_console(&console, Some(cookie))
}

/// Whether a form post may come from the console's own page: a browser says where a request
/// comes from in `Sec-Fetch-Site` (it must be `same-origin`) or, older ones, `Origin` (it must
/// be this gateway's public origin, or the origin of the `Host` the request was sent to). A
/// client that sends neither (a script, not a browser) passes this check; the sign-out token
/// still binds it to a session.
fn same_origin(console: &Console, headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        return site.eq_ignore_ascii_case("same-origin");
    }
    let Some(origin) = header("origin") else {
        return true;
    };
    if let Some(public) = &console.app.config.public_url
        && public.origin().eq_ignore_ascii_case(origin)
    {
        return true;
    }
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    matches!((authority, header("host")), (Some(authority), Some(host)) if authority.eq_ignore_ascii_case(host))
}

fn cross_site() -> Response {
    hardened(
        crate::http::error::ApiError::new(
            StatusCode::FORBIDDEN,
            protocol::ErrorCode::AuthorizationFailed,
            "Sign-in and sign-out take a form of the console's own page",
        )
        .into_response(),
        "no-store",
    )
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
        crate::http::error::ApiError::new(
            StatusCode::UNAUTHORIZED,
            protocol::ErrorCode::AuthRequired,
            "The console needs an operator session or the operator token as a bearer token",
        )
        .into_response(),
        "no-store",
    )
}

async fn overview_json(State(console): State<Console>, headers: HeaderMap) -> Response {
    if console.caller(&headers).await == Caller::Nobody {
        return unauthorized();
    }
    let json = console.overview().await;
    hardened(
        ([(CONTENT_TYPE, "application/json")], json.as_ref().clone()).into_response(),
        "no-store",
    )
}

async fn events(State(console): State<Console>, headers: HeaderMap) -> Response {
    let caller = console.caller(&headers).await;
    if caller == Caller::Nobody {
        return unauthorized();
    }
    let Ok(permit) = console.streams.clone().try_acquire_owned() else {
        return hardened(
            crate::http::error::ApiError::new(
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
    // A session that ends (signed out, on any gateway) ends its streams at their next tick.
    let frames = ticks
        .then(move |_| {
            let console = console.clone();
            let caller = caller.clone();
            async move {
                if console.still(&caller).await {
                    Some(console.overview().await)
                } else {
                    None
                }
            }
        })
        .take_while(|json| std::future::ready(json.is_some()))
        .filter_map(std::future::ready)
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
    javascript(SCRIPT)
}

async fn actions_script() -> Response {
    javascript(ACTIONS_SCRIPT)
}

fn javascript(source: &'static str) -> Response {
    hardened(
        ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], source).into_response(),
        "public, max-age=300",
    )
}

async fn style() -> Response {
    hardened(
        ([(CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response(),
        "public, max-age=300",
    )
}
