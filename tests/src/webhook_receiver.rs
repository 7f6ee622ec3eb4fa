//! A webhook receiver for push notification tests: an HTTP server on a free loopback port that
//! records every request it gets (headers and JSON body, in arrival order) and answers as the
//! test tells it: `200`, a status of its choosing, or not at all (a hang, until told
//! otherwise). Tests await what they expect with [`WebhookReceiver::wait_for`] instead of
//! sleeping. Stops when dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::TestResult;

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    Status(u16),
    /// Holds the request open until the mode changes.
    Hang,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
    /// When it arrived.
    pub at: std::time::Instant,
}

#[derive(Default)]
struct Log {
    requests: Vec<Received>,
    /// Requests being answered now, and the most there ever were, by path.
    open: HashMap<String, usize>,
    most_open: HashMap<String, usize>,
    /// Paths answered otherwise than the receiver's answer.
    overrides: HashMap<String, Answer>,
}

#[derive(Clone)]
struct Shared {
    log: Arc<Mutex<Log>>,
    changed: Arc<Notify>,
    answer: watch::Receiver<Answer>,
}

pub struct WebhookReceiver {
    addr: SocketAddr,
    shared: Shared,
    answer: watch::Sender<Answer>,
    stop: CancellationToken,
}

impl WebhookReceiver {
    /// Listens on 127.0.0.1 (a free port), answering `answer`.
    pub async fn start(answer: Answer) -> TestResult<WebhookReceiver> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (sender, receiver) = watch::channel(answer);
        let shared = Shared {
            log: Arc::default(),
            changed: Arc::new(Notify::new()),
            answer: receiver,
        };
        let app = Router::new()
            .route("/{*path}", post(receive))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Ok(WebhookReceiver {
            addr,
            shared,
            answer: sender,
            stop,
        })
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port())
    }

    /// `http://localhost:{port}{path}`: a host name that resolves to a loopback address.
    pub fn localhost_url(&self, path: &str) -> String {
        format!("http://localhost:{}{path}", self.port())
    }

    /// From now on, answer `answer` (hung requests are answered by it too).
    pub fn answer(&self, answer: Answer) {
        let _ = self.answer.send(answer);
    }

    /// From now on, answer requests to `path` with `answer`, whatever the receiver's answer.
    pub fn answer_path(&self, path: &str, answer: Answer) {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .overrides
            .insert(path.to_owned(), answer);
    }

    /// The most requests to `path` that were ever open at once (received, not yet answered,
    /// their sender still connected).
    pub fn most_open(&self, path: &str) -> usize {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .most_open
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requests
            .clone()
    }

    /// The requests to `path`, in arrival order.
    pub fn requests_to(&self, path: &str) -> Vec<Received> {
        self.requests()
            .into_iter()
            .filter(|request| request.path == path)
            .collect()
    }

    /// Waits (at most `patience`) until `done` holds for the requests received so far.
    pub async fn wait_for(
        &self,
        patience: Duration,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> TestResult<Vec<Received>> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let changed = self.shared.changed.notified();
            // Judged under the lock, copied only once done: a receiver of thousands of
            // requests is not copied whole on each one.
            {
                let log = self
                    .shared
                    .log
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if done(&log.requests) {
                    return Ok(log.requests.clone());
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                let requests = self.requests();
                return Err(format!(
                    "the webhook receiver never saw {what}; it got {} requests: {:#?}",
                    requests.len(),
                    requests.iter().map(|r| &r.body).collect::<Vec<_>>()
                )
                .into());
            }
        }
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn receive(
    State(shared): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let received = Received {
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    value.to_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: std::time::Instant::now(),
    };
    let path = received.path.clone();
    let forced = {
        let mut log = shared.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.requests.push(received);
        let open = log.open.entry(path.clone()).or_default();
        *open += 1;
        let now = *open;
        let most = log.most_open.entry(path.clone()).or_default();
        *most = (*most).max(now);
        log.overrides.get(&path).copied()
    };
    // Counts the request as open until it is answered or its sender goes away (the
    // handler's future is dropped then).
    let _open = OpenGuard {
        log: shared.log.clone(),
        path,
    };
    shared.changed.notify_waiters();
    // The path's own answer, else the receiver's as it stands (a hang lasts until it changes).
    let mut answer = shared.answer.clone();
    loop {
        match forced.unwrap_or_else(|| *answer.borrow_and_update()) {
            Answer::Ok => return StatusCode::OK,
            Answer::Status(code) => {
                return StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            }
            Answer::Hang if forced.is_some() => std::future::pending::<()>().await,
            Answer::Hang => {
                if answer.changed().await.is_err() {
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
            }
        }
    }
}

/// Decrements a path's open count when a request ends, however it ends.
struct OpenGuard {
    log: Arc<Mutex<Log>>,
    path: String,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = log.open.get_mut(&self.path) {
            *open = open.saturating_sub(1);
        }
    }
}
