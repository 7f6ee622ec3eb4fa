//! The headless Chromium harness (`harness::browser`) against a real embedded-mode gateway:
//!
//! - the landing page `/` shows the agent's name and its `echo` entrypoint, a cookie set by a
//!   script reads back, its console has no error, and a phone-sized screenshot is a real PNG
//!   (kept in `target/browser-screens/`);
//! - on a page of its own: typing into an input, submitting the form (its `submit` handler
//!   runs), waiting for the text the handler writes, reading the console log, and a wait that
//!   times out naming the selector and quoting the page;
//! - once closed, or only dropped (as when a test fails), no chromedriver or Chromium process is
//!   left running, and their zombies are reaped.
//!
//! chromium and chromedriver must be installed (`.ci/run` installs them); without them the
//! tests fail and say how to install them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::TestResult;
use harness::browser::{
    Browser, BrowserError, BrowserOptions, Leftover, PHONE, leftover_processes,
};
use harness::cluster::{self, wait_for_skill};

const PATIENCE: Duration = Duration::from_secs(30);
const AGENT_NAME: &str = "Browser Smoke Agent";
/// A PNG starts with these eight bytes.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Closes `browser` and checks that none of its processes is left.
async fn close_and_check_gone(browser: Browser) -> TestResult {
    let group = browser
        .process_group()
        .ok_or("the browser has no chromedriver process")?;
    let dir = browser.dir().to_path_buf();
    browser.close().await?;
    check_gone(group, &dir).await
}

/// No process of the browser with process group `group` and directory `dir` is alive; its
/// zombies (Chromium's orphans, which init reaps) are gone within seconds. Where init leaves
/// them (a container whose first process reaps nothing), those it holds are only reported:
/// nothing in this process can reap them.
async fn check_gone(group: u32, dir: &Path) -> TestResult {
    let left = leftover_processes(group, dir);
    let alive: Vec<String> = left
        .iter()
        .filter(|process| !process.is_zombie())
        .map(ToString::to_string)
        .collect();
    if !alive.is_empty() {
        return Err(format!("processes still running: {alive:?}").into());
    }
    let start = Instant::now();
    loop {
        let left = leftover_processes(group, dir);
        if left.is_empty() {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            let (init, ours): (Vec<Leftover>, Vec<Leftover>) =
                left.into_iter().partition(|process| process.parent == 1);
            if !ours.is_empty() {
                let ours: Vec<String> = ours.iter().map(ToString::to_string).collect();
                return Err(format!("zombies nobody reaped: {ours:?}").into());
            }
            let init: Vec<String> = init.iter().map(ToString::to_string).collect();
            eprintln!("note: init has not reaped these zombies: {init:?}");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_landing_page_renders_on_a_phone() -> TestResult {
    // An embedded-mode gateway (no REDIS_URL) named AGENT_NAME whose card lists `echo`.
    let gateway =
        cluster::gateway("gateway", &[], &[("AGENT_NAME", AGENT_NAME.to_owned())]).await?;
    wait_for_skill(&gateway.process, &gateway.base, "echo").await?;
    let base = &gateway.base;
    let browser = Browser::start().await?;

    browser.goto(&format!("{base}/")).await?;
    assert_eq!(browser.title().await?, AGENT_NAME);
    assert_eq!(browser.text("h1").await?, AGENT_NAME);
    let headings = browser.texts("section h2").await?;
    assert!(
        headings.iter().any(|heading| heading == "Start a task")
            && headings.iter().any(|heading| heading.starts_with("echo")),
        "section headings: {headings:?}"
    );
    let page = browser.page_text().await?;
    assert!(
        page.contains(&format!("{base}/tasks")),
        "page text:\n{page}"
    );
    assert_eq!(
        browser
            .eval("return document.documentElement.lang;", vec![])
            .await?,
        "en"
    );

    // A cookie set by a script is one the browser then reports.
    browser
        .eval(
            "document.cookie = 'smoke=1; path=/; SameSite=Strict';",
            vec![],
        )
        .await?;
    let cookie = browser.cookie("smoke").await?.ok_or("no cookie `smoke`")?;
    assert_eq!(cookie.value(), "1");

    // The page loads its favicon and runs no script: nothing on its console is an error.
    let errors = browser.page_errors().await?;
    assert!(errors.is_empty(), "console errors: {errors:?}");

    browser.set_window_size(PHONE.0, PHONE.1).await?;
    assert_eq!(browser.viewport_size().await?, PHONE);
    // The page is laid out for the phone: nothing wider than the viewport but its code blocks,
    // which scroll inside themselves.
    let page_width = browser
        .eval(
            "return document.body.getBoundingClientRect().width;",
            vec![],
        )
        .await?;
    assert!(
        page_width
            .as_f64()
            .is_some_and(|width| width <= f64::from(PHONE.0)),
        "body width {page_width} on a {}px viewport",
        PHONE.0
    );
    let path = screen("landing-phone.png")?;
    let _ = std::fs::remove_file(&path);
    let written = browser.screenshot_to(&path).await?;
    let png = std::fs::read(&path)?;
    assert_eq!(png.len() as u64, written);
    assert!(
        png.starts_with(PNG_SIGNATURE),
        "{} is no PNG",
        path.display()
    );
    // A blank 390x844 PNG compresses to about a kilobyte; the rendered page is far larger.
    assert!(
        png.len() > 10_000,
        "{} has {} bytes",
        path.display(),
        png.len()
    );
    // The image is the viewport, in device pixels (scale 1 in headless Chromium).
    assert_eq!(png_size(&png), Some(PHONE));

    close_and_check_gone(browser).await
}

#[tokio::test(flavor = "multi_thread")]
async fn forms_waits_and_the_console_log_work() -> TestResult {
    let browser = Browser::start_with(BrowserOptions::default().window(800, 600)).await?;
    assert_eq!(browser.viewport_size().await?, (800, 600));
    // The page answers its form's submit event after a moment, as a console would after a
    // request.
    let page = r#"<!doctype html><html><body>
        <form id="login"><input id="name" name="name" value="old"><button type="submit">Go</button></form>
        <p id="out">waiting</p>
        <script>
        document.getElementById('login').addEventListener('submit', (event) => {
            event.preventDefault();
            const name = document.getElementById('name').value;
            console.log('submitted ' + name);
            setTimeout(() => { document.getElementById('out').textContent = 'hello ' + name; }, 200);
        });
        console.error('a deliberate error');
        </script></body></html>"#;
    browser.goto(&data_url(page)).await?;

    browser.type_into("#name", "ada").await?;
    browser.submit("#login").await?;
    let text = browser
        .wait_for_text("#out", PATIENCE, |text| text.starts_with("hello"))
        .await?;
    assert_eq!(text, "hello ada");

    let log = browser.console_log().await?;
    assert!(
        log.iter()
            .any(|entry| entry.level == "SEVERE" && entry.message.contains("a deliberate error")),
        "console log: {log:?}"
    );
    assert!(
        log.iter()
            .any(|entry| entry.level == "INFO" && entry.message.contains("submitted ada")),
        "console log: {log:?}"
    );

    // A wait that cannot succeed names what it waited for and quotes the page.
    let err = browser
        .wait_for_text("#out", Duration::from_millis(300), |text| text == "never")
        .await
        .err()
        .ok_or("the wait for a text that never comes succeeded")?;
    let BrowserError::Timeout {
        last_seen,
        page_text,
        ..
    } = &err
    else {
        return Err(format!("not a timeout: {err}").into());
    };
    assert_eq!(last_seen, "\"hello ada\"");
    assert!(page_text.contains("hello ada"), "{err}");
    let missing = browser
        .wait_for("#absent", Duration::from_millis(200))
        .await
        .err()
        .ok_or("found an element that is not there")?;
    assert!(
        missing.to_string().contains("no element matched"),
        "{missing}"
    );

    close_and_check_gone(browser).await
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_browser_leaves_no_process() -> TestResult {
    let browser = Browser::start().await?;
    browser
        .goto(&data_url("<!doctype html><p id=here>here</p>"))
        .await?;
    assert_eq!(browser.text("#here").await?, "here");
    let group = browser
        .process_group()
        .ok_or("the browser has no chromedriver process")?;
    let dir = browser.dir().to_path_buf();
    let running = leftover_processes(group, &dir);
    // chromedriver, Chromium's browser process and at least one renderer.
    assert!(running.len() >= 3, "the browser's processes: {running:?}");
    // As when a test fails: no close, only the drop.
    drop(browser);
    assert!(!dir.exists(), "{} is left", dir.display());
    check_gone(group, &dir).await
}

/// `name` in the screenshots folder, `target/browser-screens/`.
fn screen(name: &str) -> Result<PathBuf, BrowserError> {
    Ok(harness::browser::screens_dir()?.join(name))
}

/// A `data:` URL of `html`, percent-encoded.
fn data_url(html: &str) -> String {
    let mut url = String::from("data:text/html;charset=utf-8,");
    for byte in html.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

/// A PNG's width and height, from its IHDR chunk (bytes 16 to 24).
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    let word = |at: usize| {
        png.get(at..at + 4)
            .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
            .map(u32::from_be_bytes)
    };
    Some((word(16)?, word(20)?))
}
