//! A headless Chromium for browser tests of the web pages the gateway serves, always stopped.
//!
//! [`Browser::start`] starts `chromedriver` on a free loopback port (in a process group of its
//! own), waits until its `/status` says it is ready, and opens a WebDriver session with headless
//! Chromium (`--headless=new`, a temporary profile, `--no-sandbox` when running as root) through
//! [`fantoccini`]. The helpers cover what a page test does: go to a URL, read an element's
//! text, type into an input, submit a form, wait until an element's text satisfies a predicate,
//! evaluate JavaScript, read cookies and the console log, resize the viewport, take a
//! screenshot. Everything else is on [`Browser::client`].
//!
//! Dropping the [`Browser`] ends the session (chromedriver quits Chromium and reaps it), kills
//! the process group (chromedriver and any Chromium process left in it), then kills whatever
//! process still names the temporary profile on its command line: no process outlives it, also
//! when a failing test unwinds (and then the tail of chromedriver's log is printed).
//!
//! The binaries are `$CHROMEDRIVER` and `$CHROMIUM` when set, otherwise `chromedriver` and the
//! first of `chromium`, `chromium-browser`, `google-chrome` on `PATH`. Where they are missing,
//! [`Browser::start`] fails and says how to install them (`.ci/run` does): browser tests fail,
//! they never skip.
//!
//! ```no_run
//! # async fn demo() -> Result<(), harness::browser::BrowserError> {
//! use std::time::Duration;
//! use harness::browser::{Browser, PHONE};
//! let browser = Browser::start().await?;
//! browser.goto("http://127.0.0.1:8080/").await?;
//! let title = browser.text("h1").await?;
//! browser.set_window_size(PHONE.0, PHONE.1).await?;
//! browser.wait_for_text("h1", Duration::from_secs(10), |text| !text.is_empty()).await?;
//! browser.screenshot_to(&harness::browser::screens_dir()?.join("landing.png")).await?;
//! browser.close().await?;
//! # let _ = title; Ok(()) }
//! ```

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use fantoccini;
use fantoccini::cookies::Cookie;
use fantoccini::elements::Element;
use fantoccini::error::{CmdError, NewSessionError};
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, geteuid};
use serde_json::{Value, json};
use tempfile::TempDir;

/// A desktop window: the default size, in CSS pixels of the viewport.
pub const DESKTOP: (u32, u32) = (1280, 900);
/// A phone's viewport (an iPhone 12 to 15's, in CSS pixels).
pub const PHONE: (u32, u32) = (390, 844);

/// Overrides the `chromedriver` binary.
pub const CHROMEDRIVER_ENV: &str = "CHROMEDRIVER";
/// Overrides the Chromium binary.
pub const CHROMIUM_ENV: &str = "CHROMIUM";

const INSTALL_HINT: &str = "install Debian's packages with `sudo apt-get install -y chromium chromium-driver` (.ci/run does), or set CHROMEDRIVER and CHROMIUM";
/// Browsers looked for on `PATH`, in this order, when `$CHROMIUM` is not set.
const CHROMIUM_NAMES: &[&str] = &[
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];
/// Startup attempts with a fresh port when the chosen one was taken meanwhile.
const PORT_ATTEMPTS: u32 = 5;
/// Bound on chromedriver's start and on opening the session (Chromium's first start on a
/// loaded two-core machine takes a few seconds).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Between two looks at something being polled for.
const POLL: Duration = Duration::from_millis(50);
/// Bound on ending the session from `Drop` (chromedriver closes Chromium, then kills it).
const QUIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long Chromium may take to exit once its session ended, before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(2);
/// How much of the page's text a timeout error carries.
const PAGE_TEXT_LIMIT: usize = 4000;
/// Lines of chromedriver's log shown in errors and on test failure.
const LOG_TAIL_LINES: usize = 40;

const DRIVER_LOG: &str = "chromedriver.log";
const DRIVER_OUTPUT: &str = "chromedriver.out";
const PROFILE_DIR: &str = "profile";

/// Everything that can go wrong while driving the browser. Its `Debug` is its message: a test
/// that returns it prints `Debug`, and the message (install hint, page text) is what helps.
#[derive(thiserror::Error)]
pub enum BrowserError {
    /// chromedriver or Chromium is not installed.
    #[error("{what} not found ({detail}): {INSTALL_HINT}")]
    NotInstalled {
        /// Which binary.
        what: &'static str,
        /// Where the harness looked.
        detail: String,
    },
    /// A file system or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// chromedriver did not become ready, or the session could not be opened.
    #[error("{message}; chromedriver log tail:\n{log_tail}")]
    Startup {
        /// What happened.
        message: String,
        /// Last lines of chromedriver's log and output.
        log_tail: String,
    },
    /// A WebDriver command failed.
    #[error("{context}: {source}")]
    WebDriver {
        /// What the harness was doing.
        context: String,
        /// The underlying error (boxed: it is large, and results carry it).
        #[source]
        source: Box<CmdError>,
    },
    /// A wait ran out of time.
    #[error("{what} within {timeout:?} (last seen: {last_seen}); page {url} reads:\n{page_text}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The bound that was exceeded.
        timeout: Duration,
        /// What the wait saw last: the element's text, or why there was none.
        last_seen: String,
        /// The page's address when the wait gave up.
        url: String,
        /// The page's visible text when the wait gave up (truncated).
        page_text: String,
    },
    /// The page or chromedriver answered something the harness does not understand.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

impl std::fmt::Debug for BrowserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

impl BrowserError {
    fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Adds what the harness was doing to a fantoccini error.
trait Context<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, BrowserError>;
}

impl<T> Context<T> for Result<T, CmdError> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, BrowserError> {
        self.map_err(|source| BrowserError::WebDriver {
            context: context(),
            source: Box::new(source),
        })
    }
}

/// How to start a [`Browser`]; `BrowserOptions::default()` is what [`Browser::start`] uses.
#[derive(Debug, Clone)]
pub struct BrowserOptions {
    /// The viewport's size in CSS pixels, [`DESKTOP`] by default.
    pub window: (u32, u32),
    /// Extra Chromium arguments, after the harness' own (`--lang=de`, say).
    pub args: Vec<String>,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        Self {
            window: DESKTOP,
            args: Vec::new(),
        }
    }
}

impl BrowserOptions {
    /// Sets [`BrowserOptions::window`].
    #[must_use]
    pub fn window(mut self, width: u32, height: u32) -> Self {
        self.window = (width, height);
        self
    }

    /// Appends one Chromium argument.
    #[must_use]
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }
}

/// One entry of the browser's console log: `console.*` calls, uncaught exceptions (level
/// `SEVERE`, source `javascript`), failed loads (source `network`), CSP violations.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct ConsoleEntry {
    /// `DEBUG`, `INFO`, `WARNING` or `SEVERE`.
    pub level: String,
    /// The text, prefixed by the script's URL and line.
    pub message: String,
    /// `console-api`, `javascript`, `network`, `security`, ...
    #[serde(default)]
    pub source: String,
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    pub timestamp: u64,
}

/// A headless Chromium driven through a private chromedriver; both stopped on drop.
pub struct Browser {
    client: Client,
    session_id: String,
    driver: Option<Child>,
    port: u16,
    http: reqwest::Client,
    /// The session was ended by [`Browser::close`]: `Drop` need not end it.
    closed: bool,
    // Declared last: removed only after `Drop::drop` has stopped the processes.
    dir: TempDir,
}

impl Browser {
    /// Starts a browser with a [`DESKTOP`] viewport.
    pub async fn start() -> Result<Self, BrowserError> {
        Self::start_with(BrowserOptions::default()).await
    }

    /// Starts a browser with the given options.
    pub async fn start_with(options: BrowserOptions) -> Result<Self, BrowserError> {
        let driver_binary = find_binary(CHROMEDRIVER_ENV, &["chromedriver"], "chromedriver")?;
        let chromium_binary = find_binary(CHROMIUM_ENV, CHROMIUM_NAMES, "chromium")?;
        let dir = tempfile::Builder::new()
            .prefix("browser-harness-")
            .tempdir()
            .map_err(|err| BrowserError::io("creating the browser's directory", err))?;
        let profile = dir.path().join(PROFILE_DIR);
        fs::create_dir(&profile)
            .map_err(|err| BrowserError::io("creating the browser's profile directory", err))?;
        // For chromedriver's `/status` and its log endpoint; bounded, so that a stuck
        // chromedriver fails the call (with its log) rather than hanging the test.
        let http = reqwest::Client::builder()
            .timeout(STARTUP_TIMEOUT)
            .build()
            .map_err(|err| BrowserError::Protocol(format!("building an HTTP client: {err}")))?;

        let (driver, port) = start_driver(&driver_binary, dir.path(), &http).await?;
        // From here on a failure must stop chromedriver: the half-built browser does.
        let mut browser = HalfStarted {
            driver: Some(driver),
            dir: Some(dir),
        };
        let capabilities = capabilities(&chromium_binary, &profile, &options);
        let session = tokio::time::timeout(
            STARTUP_TIMEOUT,
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities)
                .connect(&format!("http://127.0.0.1:{port}")),
        )
        .await;
        let client = match session {
            Ok(Ok(client)) => client,
            Ok(Err(err)) => return Err(browser.failed(session_error(&err))),
            Err(_) => {
                return Err(browser.failed(format!(
                    "chromedriver did not open a Chromium session within {STARTUP_TIMEOUT:?}"
                )));
            }
        };
        let session_id = match client.session_id().await {
            Ok(Some(id)) => id,
            Ok(None) => return Err(browser.failed("the new session has no id".into())),
            Err(err) => return Err(browser.failed(format!("reading the session id: {err}"))),
        };
        let (Some(driver), Some(dir)) = (browser.driver.take(), browser.dir.take()) else {
            // Both were put there above and only this line takes them.
            return Err(BrowserError::Protocol(
                "the half-started browser lost its chromedriver".into(),
            ));
        };
        let browser = Browser {
            client,
            session_id,
            driver: Some(driver),
            port,
            http,
            closed: false,
            dir,
        };
        // `--window-size` sizes the window, not the viewport: make the viewport the size asked.
        browser
            .set_window_size(options.window.0, options.window.1)
            .await?;
        Ok(browser)
    }

    /// The fantoccini client, for what the helpers do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// chromedriver's address, `http://127.0.0.1:<port>`.
    pub fn webdriver_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The browser's temporary directory: chromedriver's log and Chromium's profile. Every
    /// Chromium process names it on its command line.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The id of chromedriver's process group, which the Chromium it starts inherits (to check
    /// that nothing of it is left once the browser is gone).
    pub fn process_group(&self) -> Option<u32> {
        self.driver.as_ref().map(Child::id)
    }

    /// The tail of chromedriver's log (its commands, and Chromium's own output).
    pub fn driver_log(&self) -> String {
        log_tail(self.dir.path())
    }

    /// Loads `url` and waits for its `load` event.
    pub async fn goto(&self, url: &str) -> Result<(), BrowserError> {
        self.client
            .goto(url)
            .await
            .context(|| format!("loading {url}"))
    }

    /// The page's current address.
    pub async fn current_url(&self) -> Result<String, BrowserError> {
        self.client
            .current_url()
            .await
            .map(String::from)
            .context(|| "reading the current URL".into())
    }

    /// The page's title.
    pub async fn title(&self) -> Result<String, BrowserError> {
        self.client
            .title()
            .await
            .context(|| "reading the title".into())
    }

    /// The first element matching the CSS selector `css`.
    pub async fn find(&self, css: &str) -> Result<Element, BrowserError> {
        self.client
            .find(Locator::Css(css))
            .await
            .context(|| format!("finding {css:?}"))
    }

    /// Every element matching the CSS selector `css` (none is no error).
    pub async fn find_all(&self, css: &str) -> Result<Vec<Element>, BrowserError> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .context(|| format!("finding all {css:?}"))
    }

    /// The rendered (visible) text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> Result<String, BrowserError> {
        self.find(css)
            .await?
            .text()
            .await
            .context(|| format!("reading the text of {css:?}"))
    }

    /// The rendered text of every element matching `css`, in document order.
    pub async fn texts(&self, css: &str) -> Result<Vec<String>, BrowserError> {
        let mut texts = Vec::new();
        for element in self.find_all(css).await? {
            texts.push(
                element
                    .text()
                    .await
                    .context(|| format!("reading the text of {css:?}"))?,
            );
        }
        Ok(texts)
    }

    /// An attribute of the first element matching `css`, `None` when it has none.
    pub async fn attr(&self, css: &str, name: &str) -> Result<Option<String>, BrowserError> {
        self.find(css)
            .await?
            .attr(name)
            .await
            .context(|| format!("reading the attribute {name} of {css:?}"))
    }

    /// The whole page's visible text (`document.body.innerText`).
    pub async fn page_text(&self) -> Result<String, BrowserError> {
        let text = self
            .eval(
                "return document.body ? document.body.innerText : '';",
                vec![],
            )
            .await?;
        Ok(text.as_str().unwrap_or_default().to_owned())
    }

    /// Clicks the first element matching `css`.
    pub async fn click(&self, css: &str) -> Result<(), BrowserError> {
        self.find(css)
            .await?
            .click()
            .await
            .context(|| format!("clicking {css:?}"))
    }

    /// Replaces the value of the input matching `css` with `text`, typed key by key (so the
    /// page sees `input` events).
    pub async fn type_into(&self, css: &str, text: &str) -> Result<(), BrowserError> {
        let input = self.find(css).await?;
        input
            .clear()
            .await
            .context(|| format!("clearing {css:?}"))?;
        input
            .send_keys(text)
            .await
            .context(|| format!("typing into {css:?}"))
    }

    /// Submits the form matching `css` as a person would: clicks its submit button when it has
    /// one, otherwise calls `requestSubmit()` (which, unlike `submit()`, runs the page's
    /// `submit` handlers and the form's validation).
    pub async fn submit(&self, css: &str) -> Result<(), BrowserError> {
        let form = self.find(css).await?;
        let buttons = form
            .find_all(Locator::Css(
                "button[type=submit],input[type=submit],button:not([type])",
            ))
            .await
            .context(|| format!("finding the submit button of {css:?}"))?;
        if let Some(button) = buttons.first() {
            return button
                .click()
                .await
                .context(|| format!("clicking the submit button of {css:?}"));
        }
        let form = serde_json::to_value(&form)
            .map_err(|err| BrowserError::Protocol(format!("serializing an element: {err}")))?;
        self.eval("arguments[0].requestSubmit();", vec![form])
            .await
            .map(drop)
    }

    /// Polls the text of the first element matching `css` until `ready` accepts it, and
    /// returns that text. On timeout the error carries the last text seen (or why there was
    /// none), the page's address and its visible text.
    pub async fn wait_for_text(
        &self,
        css: &str,
        timeout: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> Result<String, BrowserError> {
        let start = Instant::now();
        let mut last_seen;
        loop {
            match self.client.find(Locator::Css(css)).await {
                Ok(element) => match element.text().await {
                    Ok(text) if ready(&text) => return Ok(text),
                    Ok(text) => last_seen = format!("{text:?}"),
                    // The page replaced the element between the find and the read.
                    Err(err) => last_seen = format!("its text could not be read: {err}"),
                },
                Err(err) if err.is_no_such_element() => {
                    last_seen = "no element matched".into();
                }
                Err(err) => {
                    return Err(BrowserError::WebDriver {
                        context: format!("finding {css:?}"),
                        source: Box::new(err),
                    });
                }
            }
            if start.elapsed() >= timeout {
                return Err(self
                    .timeout(
                        format!("the text of {css:?} did not become ready"),
                        timeout,
                        last_seen,
                    )
                    .await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until an element matches `css`, and returns it.
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> Result<Element, BrowserError> {
        self.wait_for_text(css, timeout, |_| true).await?;
        self.find(css).await
    }

    /// A [`BrowserError::Timeout`] with the page's address and text as they are now.
    async fn timeout(&self, what: String, timeout: Duration, last_seen: String) -> BrowserError {
        let url = self
            .current_url()
            .await
            .unwrap_or_else(|err| format!("(unknown: {err})"));
        let mut page_text = self
            .page_text()
            .await
            .unwrap_or_else(|err| format!("(unreadable: {err})"));
        if page_text.len() > PAGE_TEXT_LIMIT {
            let mut end = PAGE_TEXT_LIMIT;
            while !page_text.is_char_boundary(end) {
                end -= 1;
            }
            page_text.truncate(end);
            page_text.push_str("\n[...]");
        }
        BrowserError::Timeout {
            what,
            timeout,
            last_seen,
            url,
            page_text,
        }
    }

    /// Runs `script` as the body of a function called with `args` (`arguments[0]`, ...) and
    /// returns what it returns (`return ...;`), as JSON.
    pub async fn eval(&self, script: &str, args: Vec<Value>) -> Result<Value, BrowserError> {
        self.client
            .execute(script, args)
            .await
            .context(|| format!("running the script {script:?}"))
    }

    /// Every cookie the page can see.
    pub async fn cookies(&self) -> Result<Vec<Cookie<'static>>, BrowserError> {
        self.client
            .get_all_cookies()
            .await
            .context(|| "reading the cookies".into())
    }

    /// The cookie named `name`, `None` when there is none.
    pub async fn cookie(&self, name: &str) -> Result<Option<Cookie<'static>>, BrowserError> {
        Ok(self
            .cookies()
            .await?
            .into_iter()
            .find(|cookie| cookie.name() == name))
    }

    /// Makes the viewport (`innerWidth` by `innerHeight`, in CSS pixels) `width` by `height`:
    /// WebDriver sizes the whole window, so the difference is measured and added.
    pub async fn set_window_size(&self, width: u32, height: u32) -> Result<(), BrowserError> {
        let (mut outer_width, mut outer_height) = (width, height);
        // Two rounds: the first measures the window's frame, the second confirms.
        for _ in 0..2 {
            self.client
                .set_window_size(outer_width, outer_height)
                .await
                .context(|| format!("resizing the window to {outer_width}x{outer_height}"))?;
            let (inner_width, inner_height) = self.viewport_size().await?;
            if (inner_width, inner_height) == (width, height) {
                return Ok(());
            }
            outer_width = (outer_width + width).saturating_sub(inner_width);
            outer_height = (outer_height + height).saturating_sub(inner_height);
        }
        let actual = self.viewport_size().await?;
        Err(BrowserError::Protocol(format!(
            "asked for a {width}x{height} viewport, got {}x{}",
            actual.0, actual.1
        )))
    }

    /// The viewport's size in CSS pixels (`innerWidth`, `innerHeight`).
    pub async fn viewport_size(&self) -> Result<(u32, u32), BrowserError> {
        let size = self
            .eval("return [window.innerWidth, window.innerHeight];", vec![])
            .await?;
        let dimension = |index: usize| {
            size[index]
                .as_u64()
                .and_then(|value| u32::try_from(value).ok())
                .ok_or_else(|| BrowserError::Protocol(format!("viewport size {size}")))
        };
        Ok((dimension(0)?, dimension(1)?))
    }

    /// Writes a PNG of the viewport to `path` (its folder is created), and returns its size in
    /// bytes.
    pub async fn screenshot_to(&self, path: &Path) -> Result<u64, BrowserError> {
        let png = self
            .client
            .screenshot()
            .await
            .context(|| "taking a screenshot".into())?;
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)
                .map_err(|err| BrowserError::io(format!("creating {}", parent.display()), err))?;
        }
        fs::write(path, &png)
            .map_err(|err| BrowserError::io(format!("writing {}", path.display()), err))?;
        Ok(png.len() as u64)
    }

    /// The console log entries since the last call (chromedriver hands each entry out once):
    /// `console.*` output, uncaught exceptions, failed loads, CSP violations. Read through
    /// chromedriver's `se/log` endpoint, which the session's `goog:loggingPrefs` enables;
    /// W3C WebDriver has no command for it.
    pub async fn console_log(&self) -> Result<Vec<ConsoleEntry>, BrowserError> {
        let url = format!(
            "{}/session/{}/se/log",
            self.webdriver_url(),
            self.session_id
        );
        let answer: Value = self
            .http
            .post(&url)
            .json(&json!({ "type": "browser" }))
            .send()
            .await
            .map_err(|err| BrowserError::Protocol(format!("POST {url}: {err}")))?
            .json()
            .await
            .map_err(|err| BrowserError::Protocol(format!("POST {url}: {err}")))?;
        serde_json::from_value(answer["value"].clone())
            .map_err(|err| BrowserError::Protocol(format!("console log {answer}: {err}")))
    }

    /// The console entries of level `SEVERE` since the last read: uncaught exceptions,
    /// `console.error`, failed loads. Reading drains the whole log (see [`Self::console_log`]).
    pub async fn page_errors(&self) -> Result<Vec<ConsoleEntry>, BrowserError> {
        Ok(self
            .console_log()
            .await?
            .into_iter()
            .filter(|entry| entry.level == "SEVERE")
            .collect())
    }

    /// Ends the session (chromedriver quits Chromium and waits for it) and stops chromedriver.
    /// Dropping the browser does the same; this one says when the session could not be ended.
    pub async fn close(mut self) -> Result<(), BrowserError> {
        let closed = self
            .client
            .clone()
            .close()
            .await
            .context(|| "ending the session".into());
        self.closed = closed.is_ok();
        // Drop stops chromedriver and anything left in its process group.
        drop(self);
        closed
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.closed {
            // Synchronous: Drop cannot await, and fantoccini's own shutdown of a dropped client
            // is a task that may never run (the test's runtime is ending). Chromium killed
            // without it would leave its processes unreaped, so the session is ended first.
            let _ = delete_session(self.port, &self.session_id);
        }
        if std::thread::panicking() {
            eprintln!(
                "--- chromedriver log tail ({}) ---\n{}",
                self.dir.path().display(),
                log_tail(self.dir.path())
            );
        }
        stop(&mut self.driver, self.dir.path());
    }
}

/// chromedriver started, no session yet: stopped on drop unless taken.
struct HalfStarted {
    driver: Option<Child>,
    dir: Option<TempDir>,
}

impl HalfStarted {
    /// The startup error for `message`, with chromedriver's log tail.
    fn failed(&mut self, message: String) -> BrowserError {
        let log_tail = self
            .dir
            .as_ref()
            .map(|dir| log_tail(dir.path()))
            .unwrap_or_default();
        BrowserError::Startup { message, log_tail }
    }
}

impl Drop for HalfStarted {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            stop(&mut self.driver, dir.path());
        }
    }
}

/// The folder for screenshots, `<target>/browser-screens` (created): beside the test binaries,
/// so a CI run can keep them.
pub fn screens_dir() -> Result<PathBuf, BrowserError> {
    let exe =
        std::env::current_exe().map_err(|err| BrowserError::io("finding the test binary", err))?;
    // target/<profile>/deps/<test>, or target/<profile>/<binary>.
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().and_then(|name| name.to_str()) == Some("deps") {
        dir.pop();
    }
    dir.pop();
    let dir = dir.join("browser-screens");
    fs::create_dir_all(&dir)
        .map_err(|err| BrowserError::io(format!("creating {}", dir.display()), err))?;
    Ok(dir)
}

/// `$env` when set, otherwise the first of `names` on `PATH`.
fn find_binary(env: &str, names: &[&str], what: &'static str) -> Result<PathBuf, BrowserError> {
    if let Some(path) = std::env::var_os(env).filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(BrowserError::NotInstalled {
                what,
                detail: format!("${env} is {}, not an executable", path.display()),
            })
        };
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    for dir in std::env::split_paths(&search) {
        for name in names {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
    }
    Err(BrowserError::NotInstalled {
        what,
        detail: format!("looked for ${env}, then {} on PATH", names.join(", ")),
    })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Starts chromedriver on a free loopback port and waits until its `/status` says ready;
/// retries on a fresh port when another process took the chosen one meanwhile.
async fn start_driver(
    binary: &Path,
    dir: &Path,
    http: &reqwest::Client,
) -> Result<(Child, u16), BrowserError> {
    let mut last_problem = String::new();
    for _ in 0..PORT_ATTEMPTS {
        let port = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .and_then(|listener| listener.local_addr())
            .map_err(|err| BrowserError::io("finding a free loopback port", err))?
            .port();
        let output = File::create(dir.join(DRIVER_OUTPUT))
            .map_err(|err| BrowserError::io("creating chromedriver's output file", err))?;
        let errors = output
            .try_clone()
            .map_err(|err| BrowserError::io("sharing chromedriver's output file", err))?;
        let log = dir.join(DRIVER_LOG);
        let mut child = Command::new(binary)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            // Chromium's own stderr goes to the log too.
            .arg("--enable-chrome-logs")
            // Chromium's crash handler leaves the process group (it daemonizes) and keeps its
            // database in $XDG_CONFIG_HOME/chromium, not in the profile: in the browser's
            // directory it names that directory, so `kill_strays` finds it, and nothing is
            // written to the home directory. (`--disable-crashpad-for-testing` would keep it
            // from starting, but that flag shows an infobar and hung the renderer in tests.)
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            // A process group of its own, which the Chromium it starts inherits: Drop kills
            // the group, so no renderer or helper process outlives the test.
            .process_group(0)
            .spawn()
            .map_err(|err| BrowserError::io(format!("starting {}", binary.display()), err))?;
        match wait_ready(&mut child, port, http).await {
            Ok(()) => return Ok((child, port)),
            Err(problem) => {
                let mut child = Some(child);
                stop(&mut child, dir);
                let tail = log_tail(dir);
                if !tail.contains("Address already in use") && !tail.contains("bind() failed") {
                    return Err(BrowserError::Startup {
                        message: format!(
                            "chromedriver ({}) did not start: {problem}",
                            binary.display()
                        ),
                        log_tail: tail,
                    });
                }
                last_problem = problem;
            }
        }
    }
    Err(BrowserError::Startup {
        message: format!(
            "chromedriver found no free loopback port in {PORT_ATTEMPTS} attempts: {last_problem}"
        ),
        log_tail: log_tail(dir),
    })
}

/// Polls chromedriver's `/status` until it says ready; fails when the process exits first (on
/// a taken port it does) or the startup bound passes.
async fn wait_ready(child: &mut Child, port: u16, http: &reqwest::Client) -> Result<(), String> {
    let start = Instant::now();
    let url = format!("http://127.0.0.1:{port}/status");
    let mut last_problem: String;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(format!("it exited ({status})")),
            Ok(None) => {}
            Err(err) => return Err(format!("waiting for it: {err}")),
        }
        match http.get(&url).timeout(Duration::from_secs(2)).send().await {
            Ok(response) => match response.json::<Value>().await {
                // Only ours answers: another process on the port would have made ours exit,
                // which the check above sees on the next round first.
                Ok(status) if status["value"]["ready"] == true => {
                    return match child.try_wait() {
                        Ok(None) => Ok(()),
                        _ => Err("it exited while another process answered its port".into()),
                    };
                }
                Ok(status) => last_problem = format!("not ready: {status}"),
                Err(err) => last_problem = format!("unreadable /status: {err}"),
            },
            Err(err) => last_problem = err.to_string(),
        }
        if start.elapsed() > STARTUP_TIMEOUT {
            return Err(format!(
                "no ready /status within {STARTUP_TIMEOUT:?} ({last_problem})"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The session's capabilities: headless Chromium at `binary` with the temporary `profile`,
/// its console log kept for [`Browser::console_log`].
fn capabilities(binary: &Path, profile: &Path, options: &BrowserOptions) -> Capabilities {
    let mut args = vec![
        "--headless=new".to_owned(),
        "--disable-gpu".to_owned(),
        // /dev/shm in containers is often 64 MiB, which Chromium outgrows and then crashes.
        "--disable-dev-shm-usage".to_owned(),
        format!("--user-data-dir={}", profile.display()),
        format!("--window-size={},{}", options.window.0, options.window.1),
        "--no-first-run".to_owned(),
        "--no-default-browser-check".to_owned(),
        // No updates, safe-browsing lists or field trials fetched while a test runs.
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--password-store=basic".to_owned(),
        "--use-mock-keychain".to_owned(),
    ];
    if geteuid().is_root() {
        // Chromium refuses to run as root with its sandbox (CI containers run as root).
        args.push("--no-sandbox".to_owned());
    }
    args.extend(options.args.iter().cloned());
    let mut capabilities = Capabilities::new();
    capabilities.insert("browserName".into(), json!("chrome"));
    capabilities.insert(
        "goog:chromeOptions".into(),
        json!({ "binary": binary.display().to_string(), "args": args }),
    );
    capabilities.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
    capabilities
}

/// What a failed session start says, with chromedriver's reason when it gave one.
fn session_error(err: &NewSessionError) -> String {
    match err {
        NewSessionError::SessionNotCreated(webdriver) => {
            format!("chromedriver could not start Chromium: {webdriver}")
        }
        other => format!("opening the session: {other}"),
    }
}

/// Ends session `id` with a plain blocking `DELETE` (usable in `Drop`): chromedriver quits
/// Chromium and reaps it before it answers.
fn delete_session(port: u16, id: &str) -> std::io::Result<()> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(QUIT_TIMEOUT))?;
    stream.set_write_timeout(Some(QUIT_TIMEOUT))?;
    write!(
        stream,
        "DELETE /session/{id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    // The answer only matters as the sign that Chromium is gone. chromedriver keeps the
    // connection open after it, `Connection: close` or not: read up to the end of its body.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let read = stream.read(&mut chunk)?;
        if read == 0 {
            return Ok(());
        }
        answer.extend_from_slice(&chunk[..read]);
        if let Some(end) = answer.windows(4).position(|window| window == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|length| length.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if answer.len() >= end + 4 + length {
                return Ok(());
            }
        }
    }
}

/// Lets Chromium finish quitting (chromedriver answers the session's end before its last
/// process is gone), then kills chromedriver's process group, reaps chromedriver, and kills any
/// process still naming the browser's directory (`dir`) on its command line: a Chromium helper
/// that left the group (the crash handler does).
fn stop(driver: &mut Option<Child>, dir: &Path) {
    if let Some(mut child) = driver.take() {
        let group = child.id();
        let start = Instant::now();
        while start.elapsed() < QUIT_GRACE
            && leftover_processes(group, dir)
                .iter()
                .any(|process| process.pid != group && !process.is_zombie())
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Ok(pid) = i32::try_from(group) {
            // The group's id is chromedriver's pid (`process_group(0)`); it outlives
            // chromedriver while a member lives, and is unused once none does.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    kill_strays(dir);
}

/// SIGKILLs every process whose command line contains `dir` (Chromium names its profile, so its
/// helpers carry it); the temporary directory's random name is in no one else's.
fn kill_strays(dir: &Path) {
    let Some(needle) = dir.to_str().filter(|needle| !needle.is_empty()) else {
        return;
    };
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains(needle)
            && let Ok(pid) = i32::try_from(pid)
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// A process of a browser's, found by [`leftover_processes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pid: u32,
    /// The kernel's name for it (`chromium`, `chrome_crashpad`, ...).
    pub name: String,
    /// `R`, `S`, ...; `Z` for a zombie: dead, waiting for its parent to reap it.
    pub state: char,
    /// Its parent's pid: 1 (or a subreaper) once its own parent died.
    pub parent: u32,
}

impl Leftover {
    /// Dead, not yet reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

impl std::fmt::Display for Leftover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}) state {} parent {}",
            self.pid, self.name, self.state, self.parent
        )
    }
}

/// The processes in process group `group` (zombies too) or naming `dir` on their command line:
/// once a [`Browser`] is gone ([`Browser::process_group`], [`Browser::dir`]) no live one should
/// be, and its zombies go when their parent reaps them (init, for the orphans of a browser).
pub fn leftover_processes(group: u32, dir: &Path) -> Vec<Leftover> {
    let needle = dir.to_str().unwrap_or_default();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut left = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses, so the fields
        // are counted from its last closing parenthesis.
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let mut fields = stat.get(close + 1..).unwrap_or_default().split_whitespace();
        let state = fields.next().and_then(|state| state.chars().next());
        let parent = fields.next().and_then(|ppid| ppid.parse::<u32>().ok());
        let pgrp = fields.next().and_then(|pgrp| pgrp.parse::<u32>().ok());
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let names_dir = !needle.is_empty() && String::from_utf8_lossy(&cmdline).contains(needle);
        if pgrp == Some(group) || names_dir {
            left.push(Leftover {
                pid,
                name: stat.get(open + 1..close).unwrap_or_default().to_owned(),
                state: state.unwrap_or('?'),
                parent: parent.unwrap_or(0),
            });
        }
    }
    left
}

/// The last lines of chromedriver's log and output in `dir`.
fn log_tail(dir: &Path) -> String {
    let mut tail = String::new();
    for name in [DRIVER_OUTPUT, DRIVER_LOG] {
        let text = fs::read_to_string(dir.join(name)).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(LOG_TAIL_LINES);
        if from < lines.len() {
            tail.push_str(&format!("[{name}]\n"));
            for line in &lines[from..] {
                tail.push_str(line);
                tail.push('\n');
            }
        }
    }
    tail
}
