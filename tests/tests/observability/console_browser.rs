//! The operator console in headless Chromium against a live cluster (Redis, real gateway and
//! worker processes): the sign-in form, sign-out (which ends the session: its cookie no
//! longer reads the API), the figures against the store (queued and running
//! tasks, a failure with its code, a killed worker leaving), the page on a phone, and
//! screenshots (`target/browser-screens/console-desktop.png`, `console-phone.png`; the one in
//! `docs/console.png` is a copy of the desktop one).
//!
//! chromium and chromedriver must be installed (`.ci/run` installs them).

use std::time::Duration;

use harness::TestResult;
use harness::browser::{Browser, BrowserOptions, DESKTOP, PHONE, screens_dir};
use harness::cluster::Cluster;
use nix::sys::signal::Signal;
use protocol::TaskStatus;
use serde_json::json;
use store::{RedisStore, RedisStoreConfig, TaskStore};

const OPERATOR_TOKEN: &str = "browser-test-operator-token-0123456789";
const OWNER_TOKEN: &str = "browser-test-owner-token-0123";
const PATIENCE: Duration = Duration::from_secs(30);

/// A cluster whose `sleep` runs one at a time on w1 (so further sleeps queue), with w2 hosting
/// `echo`, `fail` and `count`, dropping out of the registry two seconds after it dies.
async fn cluster() -> TestResult<Cluster> {
    Cluster::builder()
        .worker(
            "w1",
            &[
                ("WORKER_ENTRYPOINTS", "sleep"),
                ("WORKER_CONCURRENCY", "1"),
                ("WORKER_ENTRYPOINT_SHARE", "100"),
            ],
        )
        .worker(
            "w2",
            &[
                ("WORKER_ENTRYPOINTS", "echo,fail,count"),
                ("WORKER_LEASE_TTL_MS", "2000"),
            ],
        )
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["sleep", "echo", "fail", "count"])
        .start()
        .await
}

async fn sign_in(browser: &Browser, base: &str) -> TestResult {
    browser.goto(&format!("{base}/console")).await?;
    browser.wait_for("#token", PATIENCE).await?;
    assert!(
        browser.find_all("#live").await?.is_empty(),
        "figures before signing in"
    );
    browser.type_into("#token", OPERATOR_TOKEN).await?;
    browser.submit("#login").await?;
    // Rendered: a figure replaced the placeholder.
    browser
        .wait_for_text("#capacity", PATIENCE, |text| {
            text != "–" && !text.is_empty()
        })
        .await?;
    let url = browser.current_url().await?;
    assert!(
        !url.contains(OPERATOR_TOKEN),
        "the token is in the URL {url}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_the_cluster_as_the_store_sees_it() -> TestResult {
    let cluster = cluster().await?;
    let base = cluster.base().to_owned();
    let http = reqwest::Client::new();
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let browser =
        Browser::start_with(BrowserOptions::default().window(DESKTOP.0, DESKTOP.1)).await?;

    // A wrong token keeps the form up and says so.
    browser.goto(&format!("{base}/console")).await?;
    browser.wait_for("#token", PATIENCE).await?;
    browser
        .type_into("#token", "not-the-operator-token-at-all-0000")
        .await?;
    browser.submit("#login").await?;
    browser
        .wait_for_text("#message", PATIENCE, |text| {
            text.contains("not the operator token")
        })
        .await?;
    sign_in(&browser, &base).await?;
    let cookie = browser
        .cookie("tc_console")
        .await?
        .ok_or("no session cookie")?;
    assert_eq!(cookie.http_only(), Some(true));
    assert!(!cookie.value().contains(OPERATOR_TOKEN));

    // Some traffic for the charts, then three sleeps: one runs, two queue.
    for n in 0..20 {
        let response = http
            .post(format!("{base}/entrypoints/echo/invoke"))
            .json(&json!({"input": {"n": n}}))
            .send()
            .await?;
        assert!(response.status().is_success());
    }
    for _ in 0..3 {
        let response = http
            .post(format!("{base}/tasks"))
            .header("Task-Access-Token", OWNER_TOKEN)
            .json(&json!({"skillId": "sleep", "message": {"role": "user", "content": {"text": "{\"ms\": 60000}"}}}))
            .send()
            .await?;
        assert!(response.status().is_success(), "{}", response.text().await?);
    }
    let queued_cell = "#entrypoints tr[data-key=\"sleep\"] td.queued";
    let running_cell = "#entrypoints tr[data-key=\"sleep\"] td.running";
    browser
        .wait_for_text(queued_cell, PATIENCE, |text| text == "2")
        .await?;
    browser
        .wait_for_text(running_cell, PATIENCE, |text| text == "1")
        .await?;
    // The same figures as the store's.
    assert_eq!(store.queue_depth("sleep").await?, 2);
    let leases = browser
        .text("#workers tr[data-key=\"w1\"] td.leases")
        .await?;
    assert_eq!(leases, "1");
    assert_eq!(store.lease_count().await?, 1);
    browser
        .wait_for_text("#completed", PATIENCE, |text| {
            text.parse::<u64>().is_ok_and(|n| n >= 20)
        })
        .await?;

    // A failure shows with its code.
    let failed = http
        .post(format!("{base}/entrypoints/fail/invoke"))
        .json(&json!({"input": {"code": "browser_probe_failure"}}))
        .send()
        .await?;
    assert!(!failed.status().is_success());
    browser
        .wait_for_text("#failures tbody", PATIENCE, |text| {
            text.contains("browser_probe_failure") && text.contains("fail")
        })
        .await?;

    let desktop = screens_dir()?.join("console-desktop.png");
    assert!(browser.screenshot_to(&desktop).await? > 10_000);

    // A killed worker leaves the console (its registry entry expires).
    assert!(browser.text("#workers tbody").await?.contains("w2"));
    cluster.workers[1].signal(Signal::SIGKILL)?;
    browser
        .wait_for_text("#workers tbody", PATIENCE, |text| {
            !text.contains("w2") && text.contains("w1")
        })
        .await?;
    browser
        .wait_for_text("#workers-count", PATIENCE, |text| text == "1")
        .await?;

    // Readable on a phone: nothing wider than the screen but the tables' own scrollers.
    browser.set_window_size(PHONE.0, PHONE.1).await?;
    let overflow = browser
        .eval(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            Vec::new(),
        )
        .await?;
    assert!(
        overflow.as_i64().is_some_and(|px| px <= 0),
        "the page is {overflow} px wider than a phone"
    );
    let phone = screens_dir()?.join("console-phone.png");
    assert!(browser.screenshot_to(&phone).await? > 5_000);

    // No script error and no CSP violation on the way.
    // (The sign-in form itself is served with 401 on purpose: Chromium logs that status.)
    let errors: Vec<_> = browser
        .page_errors()
        .await?
        .into_iter()
        .filter(|entry| !(entry.source == "network" && entry.message.contains("status of 401")))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");

    // Signing out returns to the form, and ends the session itself: the cookie, kept by
    // whoever copied it, no longer reads the API (here or on any gateway of the cluster).
    let session = format!("tc_console={}", cookie.value());
    let api = format!("{base}/console/api/overview");
    let read = http.get(&api).header("cookie", &session).send().await?;
    assert_eq!(read.status(), reqwest::StatusCode::OK);
    browser.click("#logout").await?;
    browser.wait_for("#token", PATIENCE).await?;
    assert!(browser.cookie("tc_console").await?.is_none());
    let read = http.get(&api).header("cookie", &session).send().await?;
    assert_eq!(read.status(), reqwest::StatusCode::UNAUTHORIZED);
    let status = browser
        .eval(
            "return fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.status);",
            vec![json!(api)],
        )
        .await?;
    assert_eq!(status, json!(401));
    browser.close().await?;
    Ok(())
}

/// Creates a task of `skill` with `input`, owned by [`OWNER_TOKEN`]; its id.
async fn create_task(
    http: &reqwest::Client,
    base: &str,
    skill: &str,
    input: serde_json::Value,
) -> TestResult<String> {
    harness::operator::create_task(http, base, OWNER_TOKEN, skill, &input).await
}

/// Clicks the element matching `css` inside the page in one step: the tables are rebuilt on
/// every overview, so a button found by one WebDriver call may be gone by the next.
async fn click_now(browser: &Browser, css: &str) -> TestResult {
    let clicked = browser
        .eval(
            "const el = document.querySelector(arguments[0]); if (!el) return false; el.click(); return true;",
            vec![json!(css)],
        )
        .await?;
    if clicked != json!(true) {
        return Err(format!("nothing to click at {css}").into());
    }
    Ok(())
}

/// The entrypoints paused in the registry, read from Redis itself.
async fn paused_in_redis(redis: &mut redis::aio::MultiplexedConnection) -> TestResult<Vec<String>> {
    Ok(redis::cmd("HKEYS")
        .arg("{tc}:paused")
        .query_async(redis)
        .await?)
}

/// Waits until `check` holds of the store, re-reading it.
async fn until_store<T>(
    what: &str,
    mut read: impl AsyncFnMut() -> TestResult<T>,
    check: impl Fn(&T) -> bool,
) -> TestResult<T> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let value = read().await?;
        if check(&value) {
            return Ok(value);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_acts_from_the_console_and_the_store_follows() -> TestResult {
    let mut cluster = cluster().await?;
    let base = cluster.base().to_owned();
    let client = redis::Client::open(cluster.redis.url())?;
    let mut redis = client.get_multiplexed_async_connection().await?;
    let browser =
        Browser::start_with(BrowserOptions::default().window(DESKTOP.0, DESKTOP.1)).await?;
    sign_in(&browser, &base).await?;

    // Pause `echo` from its row: the registry holds the pause, the row says so.
    let echo_row = "#entrypoints tr[data-key=\"echo\"]";
    browser
        .wait_for(
            &format!("{echo_row} button[data-action=\"pause\"]"),
            PATIENCE,
        )
        .await?;
    click_now(
        &browser,
        &format!("{echo_row} button[data-action=\"pause\"]"),
    )
    .await?;
    browser
        .wait_for_text("#action-result", PATIENCE, |text| text.contains("done"))
        .await?;
    assert_eq!(paused_in_redis(&mut redis).await?, ["echo"]);
    browser
        .wait_for_text(&format!("{echo_row} td.name"), PATIENCE, |text| {
            text.contains("paused")
        })
        .await?;
    // The audit log on the page names the session.
    browser
        .wait_for_text("#audit tbody", PATIENCE, |text| {
            text.contains("pause") && text.contains("console session")
        })
        .await?;

    // Resume it the same way.
    browser
        .wait_for(
            &format!("{echo_row} button[data-action=\"resume\"]"),
            PATIENCE,
        )
        .await?;
    click_now(
        &browser,
        &format!("{echo_row} button[data-action=\"resume\"]"),
    )
    .await?;
    until_store(
        "echo resumed in Redis",
        async || paused_in_redis(&mut redis).await,
        |paused| paused.is_empty(),
    )
    .await?;
    browser
        .wait_for_text("#audit tbody", PATIENCE, |text| text.contains("resume"))
        .await?;

    // Find a failed task, re-run it from the page: a new task of the same owner, which its
    // caller reads with its own token; the original stays failed.
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let http = reqwest::Client::new();
    let mut failed = Vec::new();
    for n in 0..2 {
        let id = create_task(
            &http,
            &base,
            "fail",
            json!({"code": format!("dead_letter_{n}")}),
        )
        .await?;
        until_store(
            "the task failed",
            async || Ok(store.get(&id).await?.map(|t| t.task.status)),
            |status| *status == Some(TaskStatus::Failed),
        )
        .await?;
        failed.push(id);
    }
    browser.type_into("#task-id", &failed[0]).await?;
    browser.submit("#task-form").await?;
    browser
        .wait_for_text("#task-json", PATIENCE, |text| {
            text.contains(&failed[0]) && text.contains("failed")
        })
        .await?;
    click_now(&browser, "#task-rerun").await?;
    let said = browser
        .wait_for_text("#action-result", PATIENCE, |text| text.contains("is task"))
        .await?;
    let rerun = said.rsplit(' ').next().ok_or("no new task id")?.to_owned();
    let original = store.get(&failed[0]).await?.ok_or("original gone")?;
    let copy = store.get(&rerun).await?.ok_or("no re-run task")?;
    assert_eq!(copy.owner, original.owner);
    assert_eq!(copy.invocation.entrypoint, "fail");
    assert_eq!(original.task.status, TaskStatus::Failed);
    let read = http
        .get(format!("{base}/tasks/{rerun}"))
        .header("Task-Access-Token", OWNER_TOKEN)
        .send()
        .await?;
    assert_eq!(read.status(), reqwest::StatusCode::OK);
    // The re-run of a `fail` task fails too and joins the failed index: wait for it, so that
    // the list loaded below already holds it and "select all" takes every entry.
    until_store(
        "the re-run failed",
        async || Ok(store.get(&rerun).await?.map(|t| t.task.status)),
        |status| *status == Some(TaskStatus::Failed),
    )
    .await?;

    // Cancel a running task from the page.
    let sleeping = create_task(&http, &base, "sleep", json!({"ms": 60000})).await?;
    until_store(
        "the sleep runs",
        async || Ok(store.get(&sleeping).await?.and_then(|t| t.lease)),
        Option::is_some,
    )
    .await?;
    browser.type_into("#task-id", &sleeping).await?;
    browser.submit("#task-form").await?;
    browser
        .wait_for_text("#task-json", PATIENCE, |text| text.contains(&sleeping))
        .await?;
    click_now(&browser, "#task-cancel").await?;
    until_store(
        "the sleep cancelled",
        async || Ok(store.get(&sleeping).await?.map(|t| t.task.status)),
        |status| *status == Some(TaskStatus::Cancelled),
    )
    .await?;

    // The failed list of `fail`: select all, remove; the store's index empties.
    browser
        .wait_for("#failed-entrypoint option[value=\"fail\"]", PATIENCE)
        .await?;
    browser
        .click("#failed-entrypoint option[value=\"fail\"]")
        .await?;
    browser.submit("#failed-form").await?;
    browser
        .wait_for_text("#failed-list tbody", PATIENCE, |text| {
            text.contains("dead_letter_1") && text.contains(&rerun)
        })
        .await?;
    click_now(&browser, "#failed-all").await?;
    click_now(&browser, "#failed-remove").await?;
    until_store(
        "the failed index of fail emptied",
        async || Ok(store.failed_page("fail", None, 50).await?.entries.len()),
        |left| *left == 0,
    )
    .await?;
    browser
        .wait_for_text("#failed-list tbody", PATIENCE, |text| text.contains("none"))
        .await?;
    browser
        .wait_for_text("#audit tbody", PATIENCE, |text| {
            text.contains("remove_failed") && text.contains("cancel") && text.contains("rerun")
        })
        .await?;

    // Drain w2 from its row: it stops, exits by itself with status 0 and leaves the console.
    let w2_drain = "#workers tr[data-key=\"w2\"] button[data-action=\"drain\"]";
    browser.wait_for(w2_drain, PATIENCE).await?;
    click_now(&browser, w2_drain).await?;
    let exit = cluster.workers[1].wait_exit(PATIENCE)?;
    assert!(exit.success(), "w2 exited with {exit}");
    browser
        .wait_for_text("#workers tbody", PATIENCE, |text| {
            !text.contains("w2") && text.contains("w1")
        })
        .await?;
    browser
        .wait_for_text("#audit tbody", PATIENCE, |text| text.contains("drain"))
        .await?;

    let errors: Vec<_> = browser
        .page_errors()
        .await?
        .into_iter()
        .filter(|entry| !(entry.source == "network" && entry.message.contains("status of 401")))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    browser.close().await?;
    Ok(())
}
