//! The operator console over HTTP against a live cluster (Redis, real gateway and worker
//! processes): off without an operator token, closed without a session, and its overview
//! follows the cluster (a queued task, a running one, a failure with its code, a killed
//! worker). The browser tests (`console_browser.rs`) drive the page itself.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::Cluster;
use nix::sys::signal::Signal;
use reqwest::StatusCode;
use reqwest::header::{
    AUTHORIZATION, CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE,
};
use serde_json::{Value, json};

const OPERATOR_TOKEN: &str = "console-test-operator-token-0123456789";
const PATIENCE: Duration = Duration::from_secs(30);

/// A client that does not follow redirects (the login answers 303 with the cookie).
fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_operator_token_there_is_no_console() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base();
    for path in [
        "/console",
        "/console/api/overview",
        "/console/api/events",
        "/console/assets/console.js",
    ] {
        let response = http.get(format!("{base}{path}")).send().await?;
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], "not_found", "{path}");
    }
    let response = http
        .post(format!("{base}/console/session"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}", OPERATOR_TOKEN))
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let landing = http.get(format!("{base}/")).send().await?.text().await?;
    assert!(!landing.contains("/console"), "{landing}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_wants_the_operator_token_and_never_shows_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("operator-token");
    std::fs::write(&token_file, format!("{OPERATOR_TOKEN}\n"))?;
    let token_path = token_file.display().to_string();
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN_FILE", token_path.as_str())])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base();

    // No session: the login form, and nothing of the cluster.
    let page = http.get(format!("{base}/console")).send().await?;
    assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
    assert!(page.headers().contains_key(CONTENT_SECURITY_POLICY));
    let page = page.text().await?;
    assert!(page.contains("name=\"token\""), "{page}");
    assert!(!page.contains("echo") && !page.contains("w1"), "{page}");
    for bearer in [None, Some("Bearer not-the-token"), Some(OPERATOR_TOKEN)] {
        let mut request = http.get(format!("{base}/console/api/overview"));
        if let Some(value) = bearer {
            request = request.header(AUTHORIZATION, value);
        }
        let response = request.send().await?;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{bearer:?}");
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], "auth_required");
    }
    let events = http
        .get(format!("{base}/console/api/events"))
        .send()
        .await?;
    assert_eq!(events.status(), StatusCode::UNAUTHORIZED);

    // A wrong token is refused; the right one gets a session cookie that is not the token.
    let refused = http
        .post(format!("{base}/console/session"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!(
            "token={}",
            "console-test-operator-token-012345678X"
        ))
        .send()
        .await?;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert!(refused.headers().get(SET_COOKIE).is_none());
    let signed_in = http
        .post(format!("{base}/console/session"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}", OPERATOR_TOKEN))
        .send()
        .await?;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        signed_in
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some("/console")
    );
    let set_cookie = signed_in
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .ok_or("no session cookie")?
        .to_owned();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    assert!(set_cookie.contains("Path=/console"), "{set_cookie}");
    assert!(!set_cookie.contains(OPERATOR_TOKEN), "{set_cookie}");
    let cookie = set_cookie
        .split(';')
        .next()
        .ok_or("empty cookie")?
        .to_owned();

    let page = http
        .get(format!("{base}/console"))
        .header(COOKIE, &cookie)
        .send()
        .await?;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await?.contains("/console/assets/console.js"));
    let overview: Value = http
        .get(format!("{base}/console/api/overview"))
        .header(COOKIE, &cookie)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(overview["mode"], "cluster", "{overview}");
    let by_bearer = http
        .get(format!("{base}/console/api/overview"))
        .header(AUTHORIZATION, format!("Bearer {OPERATOR_TOKEN}"))
        .send()
        .await?;
    assert_eq!(by_bearer.status(), StatusCode::OK);
    // A forged session (another secret under the same signature) is refused.
    let forged = forge(&cookie);
    let response = http
        .get(format!("{base}/console/api/overview"))
        .header(COOKIE, &forged)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);

    // Signing out (with the page's sign-out token) clears the cookie.
    let csrf = csrf_of(&http, base, &cookie).await?;
    let out = http
        .post(format!("{base}/console/logout"))
        .header(COOKIE, &cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await?;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let cleared = out
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");

    let landing = http.get(format!("{base}/")).send().await?.text().await?;
    assert!(landing.contains("href=\"/console\""), "{landing}");
    let logs = cluster.logs();
    assert!(!logs.contains(OPERATOR_TOKEN), "the token is in a log");
    Ok(())
}

/// `cookie` with one character of its secret changed (its signature no longer matches).
fn forge(cookie: &str) -> String {
    let (name, value) = cookie.split_once('=').unwrap_or((cookie, ""));
    let mut chars: Vec<char> = value.chars().collect();
    if let Some(first) = chars.first_mut() {
        *first = if *first == 'a' { 'b' } else { 'a' };
    }
    format!("{name}={}", chars.into_iter().collect::<String>())
}

/// Signs in at `base` with `token`; the `tc_console=<value>` pair of the session cookie.
async fn sign_in(http: &reqwest::Client, base: &str, token: &str) -> TestResult<String> {
    let signed_in = http
        .post(format!("{base}/console/session"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await?;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    let set_cookie = signed_in
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .ok_or("no session cookie")?;
    Ok(set_cookie
        .split(';')
        .next()
        .ok_or("empty cookie")?
        .to_owned())
}

/// The sign-out token in the console page served to `cookie`'s session (empty when the page
/// holds none).
async fn csrf_of(http: &reqwest::Client, base: &str, cookie: &str) -> TestResult<String> {
    let page = http
        .get(format!("{base}/console"))
        .header(COOKIE, cookie)
        .send()
        .await?
        .text()
        .await?;
    let field = "name=\"csrf\" value=\"";
    Ok(page
        .split_once(field)
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(value, _)| value.to_owned())
        .unwrap_or_default())
}

/// The status of an overview read with `cookie`.
async fn overview_status(
    http: &reqwest::Client,
    base: &str,
    cookie: &str,
) -> Result<StatusCode, reqwest::Error> {
    Ok(http
        .get(format!("{base}/console/api/overview"))
        .header(COOKIE, cookie)
        .send()
        .await?
        .status())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cross_site_sign_out_is_refused_and_changes_nothing() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base();
    let cookie = sign_in(&http, base, OPERATOR_TOKEN).await?;
    let csrf = csrf_of(&http, base, &cookie).await?;

    // What another site can make a browser send: a form post, said to be cross-site, with or
    // without the operator's cookie (SameSite=Strict keeps it home; older browsers may not).
    for (what, with_cookie, site, origin) in [
        (
            "cross-site, no cookie",
            false,
            Some("cross-site"),
            Some("https://evil.example"),
        ),
        (
            "cross-site, cookie",
            true,
            Some("cross-site"),
            Some("https://evil.example"),
        ),
        ("same-site, cookie", true, Some("same-site"), None),
        (
            "foreign origin, cookie",
            true,
            None,
            Some("https://evil.example"),
        ),
        ("null origin, cookie", true, None, Some("null")),
    ] {
        let mut request = http
            .post(format!("{base}/console/logout"))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}"));
        if with_cookie {
            request = request.header(COOKIE, &cookie);
        }
        if let Some(site) = site {
            request = request.header("sec-fetch-site", site);
        }
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        let response = request.send().await?;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{what}");
        assert!(response.headers().get(SET_COOKIE).is_none(), "{what}");
        assert_eq!(
            overview_status(&http, base, &cookie).await?,
            StatusCode::OK,
            "{what}"
        );
    }
    // The operator's own cookie without the page's sign-out token (a form another site could
    // build when the browser sends neither header) is refused too.
    for wrong in ["", "00", &csrf[..csrf.len().saturating_sub(2)]] {
        let response = http
            .post(format!("{base}/console/logout"))
            .header(COOKIE, &cookie)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("csrf={}", wrong))
            .send()
            .await?;
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{wrong:?}");
        assert!(response.headers().get(SET_COOKIE).is_none());
    }
    assert_eq!(overview_status(&http, base, &cookie).await?, StatusCode::OK);
    // A same-origin sign-out without a session changes nothing and clears nothing.
    let response = http
        .post(format!("{base}/console/logout"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert!(response.headers().get(SET_COOKIE).is_none());
    // A cross-site sign-in is refused before the token is even read.
    let response = http
        .post(format!("{base}/console/session"))
        .header("sec-fetch-site", "cross-site")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("token={}", OPERATOR_TOKEN))
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert!(response.headers().get(SET_COOKIE).is_none());
    // The page's own form, as a browser sends it, signs out.
    let host = base.trim_start_matches("http://");
    let response = http
        .post(format!("{base}/console/logout"))
        .header(COOKIE, &cookie)
        .header("sec-fetch-site", "same-origin")
        .header("origin", format!("http://{host}"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        overview_status(&http, base, &cookie).await?,
        StatusCode::UNAUTHORIZED
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cookie_is_dead_after_sign_out_on_every_gateway() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .gateway("g2", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let (g1, g2) = (&cluster.gateways[0].base, &cluster.gateways[1].base);
    let cookie = sign_in(&http, g1, OPERATOR_TOKEN).await?;
    let other = sign_in(&http, g1, OPERATOR_TOKEN).await?;
    // One session, read on both gateways.
    assert_eq!(overview_status(&http, g1, &cookie).await?, StatusCode::OK);
    assert_eq!(overview_status(&http, g2, &cookie).await?, StatusCode::OK);
    let stream = http
        .get(format!("{g2}/console/api/events"))
        .header(COOKIE, &cookie)
        .send()
        .await?;
    assert_eq!(stream.status(), StatusCode::OK);

    let csrf = csrf_of(&http, g1, &cookie).await?;
    let out = http
        .post(format!("{g1}/console/logout"))
        .header(COOKIE, &cookie)
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await?;
    assert_eq!(out.status(), StatusCode::SEE_OTHER);

    // The cookie, kept by whoever copied it, reads nothing anymore, on either gateway.
    for base in [g1, g2] {
        assert_eq!(
            overview_status(&http, base, &cookie).await?,
            StatusCode::UNAUTHORIZED,
            "{base}"
        );
        let page = http
            .get(format!("{base}/console"))
            .header(COOKIE, &cookie)
            .send()
            .await?;
        assert_eq!(page.status(), StatusCode::UNAUTHORIZED);
        let events = http
            .get(format!("{base}/console/api/events"))
            .header(COOKIE, &cookie)
            .send()
            .await?;
        assert_eq!(events.status(), StatusCode::UNAUTHORIZED);
    }
    // The stream it had open ends (at its next tick), rather than running on.
    let rest = tokio::time::timeout(PATIENCE, stream.bytes()).await;
    assert!(
        matches!(rest, Ok(Ok(_))),
        "the stream did not end: {rest:?}"
    );
    // Another session of the same operator stands.
    assert_eq!(overview_status(&http, g2, &other).await?, StatusCode::OK);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn rotating_the_operator_token_ends_every_session() -> TestResult {
    const ROTATED: &str = "console-test-rotated-operator-token-987654";
    let mut cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base().to_owned();
    let cookie = sign_in(&http, &base, OPERATOR_TOKEN).await?;
    assert_eq!(
        overview_status(&http, &base, &cookie).await?,
        StatusCode::OK
    );

    // The gateway restarted with another token: the old session is refused...
    cluster.gateways[0].process.kill()?;
    let rotated = cluster
        .add_gateway("g2", &[("OPERATOR_TOKEN", ROTATED)])
        .await?;
    let rotated_base = cluster.gateways[rotated].base.clone();
    assert_eq!(
        overview_status(&http, &rotated_base, &cookie).await?,
        StatusCode::UNAUTHORIZED
    );
    let new_cookie = sign_in(&http, &rotated_base, ROTATED).await?;
    assert_eq!(
        overview_status(&http, &rotated_base, &new_cookie).await?,
        StatusCode::OK
    );

    // ...and stays dead should the old token come back (say, a rollback of the secret).
    cluster.gateways[rotated].process.kill()?;
    let back = cluster
        .add_gateway("g3", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .await?;
    let back_base = cluster.gateways[back].base.clone();
    assert_eq!(
        overview_status(&http, &back_base, &cookie).await?,
        StatusCode::UNAUTHORIZED,
        "a session of the old token came back with it"
    );
    assert_eq!(
        overview_status(&http, &back_base, &new_cookie).await?,
        StatusCode::UNAUTHORIZED
    );
    let logs = cluster.logs();
    for secret in [OPERATOR_TOKEN, ROTATED] {
        assert!(!logs.contains(secret), "a token is in a log");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_overview_follows_the_cluster() -> TestResult {
    // w1 runs `sleep` one at a time, so further sleeps queue; w2 hosts `echo` and `fail` and
    // drops out of the registry two seconds after it is killed.
    let cluster = Cluster::builder()
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
                ("WORKER_ENTRYPOINTS", "echo,fail"),
                ("WORKER_LEASE_TTL_MS", "2000"),
            ],
        )
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["sleep", "echo", "fail"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base().to_owned();

    for _ in 0..3 {
        let response = http
            .post(format!("{base}/tasks"))
            .header("Task-Access-Token", "console-test-owner-token-0123")
            .json(&json!({"skillId": "sleep", "message": {"role": "user", "content": {"text": "{\"ms\": 60000}"}}}))
            .send()
            .await?;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "{}",
            response.text().await?
        );
    }
    let overview = wait_for(&http, &base, "one sleep running and two queued", |o| {
        let sleep = row(o, "sleep");
        sleep["queued"] == 2 && sleep["running"] == 1
    })
    .await
    .map_err(|err| format!("{err}\n{}", cluster.logs()))?;
    assert_eq!(row(&overview, "sleep")["capacity"], 1, "{overview}");
    let w1 = worker(&overview, "w1");
    assert_eq!(w1["leases"], 1, "{overview}");
    assert_eq!(w1["entrypoints"], json!(["sleep"]));

    let failed = http
        .post(format!("{base}/entrypoints/fail/invoke"))
        .json(&json!({"input": {"code": "console_probe_failure"}}))
        .send()
        .await?;
    assert!(!failed.status().is_success());
    let overview = wait_for(&http, &base, "the failure listed", |o| {
        o["failures"].as_array().is_some_and(|failures| {
            failures
                .iter()
                .any(|f| f["code"] == "console_probe_failure" && f["entrypoint"] == "fail")
        }) && o["totals"]["failed"].as_u64() >= Some(1)
    })
    .await?;
    // Aggregates only: no owner, input, result or message anywhere in the document.
    let text = overview.to_string();
    for leak in [
        "console-test-owner-token-0123",
        "\"input\"",
        "\"result\"",
        "\"message\"",
        "\"ms\"",
    ] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }

    cluster.workers[1].signal(Signal::SIGKILL)?;
    wait_for(&http, &base, "w2 gone", |o| {
        worker(o, "w2").is_null() && !worker(o, "w1").is_null()
    })
    .await?;
    Ok(())
}

fn row<'a>(overview: &'a Value, entrypoint: &str) -> &'a Value {
    overview["entrypoints"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["name"] == entrypoint))
        .unwrap_or(&Value::Null)
}

fn worker<'a>(overview: &'a Value, id: &str) -> &'a Value {
    overview["workers"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["id"] == id))
        .unwrap_or(&Value::Null)
}

/// Reads the overview until `ready` holds (the console refreshes every 2 s), or fails with
/// the last one read.
async fn wait_for(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> TestResult<Value> {
    let start = tokio::time::Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < PATIENCE {
        last = http
            .get(format!("{base}/console/api/overview"))
            .header(AUTHORIZATION, format!("Bearer {OPERATOR_TOKEN}"))
            .send()
            .await?
            .json()
            .await?;
        if ready(&last) {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("the console never showed {what}; last overview: {last:#}").into())
}

#[tokio::test(flavor = "multi_thread")]
async fn console_streams_are_bounded_per_gateway() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base();
    let open = || {
        http.get(format!("{base}/console/api/events"))
            .header(AUTHORIZATION, format!("Bearer {OPERATOR_TOKEN}"))
            .send()
    };
    // Every stream the gateway allows (32), held open...
    let mut streams = Vec::new();
    for _ in 0..32 {
        let stream = open().await?;
        assert_eq!(stream.status(), StatusCode::OK);
        streams.push(stream);
    }
    // ...then one more is refused, while the rest of the gateway still answers.
    let refused = open().await?;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    let overview = http
        .get(format!("{base}/console/api/overview"))
        .header(AUTHORIZATION, format!("Bearer {OPERATOR_TOKEN}"))
        .send()
        .await?;
    assert_eq!(overview.status(), StatusCode::OK);
    // A stream that ends gives its place back (the server notices at its next event).
    drop(streams.pop());
    let start = tokio::time::Instant::now();
    loop {
        let again = open().await?;
        if again.status() == StatusCode::OK {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the freed place never came back"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_are_bounded_and_a_failed_sign_in_keeps_nothing() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base();
    let redis = redis::Client::open(cluster.redis.url())?;
    let mut conn = redis.get_multiplexed_async_connection().await?;
    const SESSIONS: &str = "{tc}:console:sessions";

    // Wrong tokens and made-up cookies: nothing is kept.
    for n in 0..20 {
        let refused = http
            .post(format!("{base}/console/session"))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(format!("token=not-the-operator-token-{n:04}-padding"))
            .send()
            .await?;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        let made_up = format!("tc_console={n:064x}.{n:064x}");
        assert_eq!(
            overview_status(&http, base, &made_up).await?,
            StatusCode::UNAUTHORIZED
        );
    }
    let held: u64 = redis::cmd("ZCARD")
        .arg(SESSIONS)
        .query_async(&mut conn)
        .await?;
    assert_eq!(held, 0);

    // At most 64 sessions stand: one more sign-in drops the oldest.
    let first = sign_in(&http, base, OPERATOR_TOKEN).await?;
    let mut last = String::new();
    for _ in 0..64 {
        last = sign_in(&http, base, OPERATOR_TOKEN).await?;
    }
    let held: u64 = redis::cmd("ZCARD")
        .arg(SESSIONS)
        .query_async(&mut conn)
        .await?;
    assert_eq!(held, 64);
    assert_eq!(
        overview_status(&http, base, &first).await?,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(overview_status(&http, base, &last).await?, StatusCode::OK);
    // The store holds neither a cookie's secret nor the token, and the set expires.
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(SESSIONS)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await?;
    let secret = last
        .trim_start_matches("tc_console=")
        .split('.')
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(secret.len() == 64, "{last}");
    for member in &members {
        assert!(!member.contains(&secret) && !member.contains(OPERATOR_TOKEN));
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg(SESSIONS)
        .query_async(&mut conn)
        .await?;
    assert!(ttl > 0, "{ttl}");
    Ok(())
}

/// POSTs a pause of `echo` with `cookie` and the given page token and fetch headers.
async fn pause_by_session(
    http: &reqwest::Client,
    base: &str,
    cookie: Option<&str>,
    csrf: Option<&str>,
    site: Option<&str>,
    origin: Option<&str>,
) -> TestResult<StatusCode> {
    let mut request = http
        .post(format!("{base}/console/api/entrypoints/echo/pause"))
        .header(CONTENT_TYPE, "application/json")
        .body(r#"{"mode":"queue"}"#);
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    if let Some(csrf) = csrf {
        request = request.header("x-console-csrf", csrf);
    }
    if let Some(site) = site {
        request = request.header("sec-fetch-site", site);
    }
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    Ok(request.send().await?.status())
}

/// The registry's paused entrypoints, read from Redis itself.
async fn paused_in_redis(cluster: &Cluster) -> TestResult<Vec<String>> {
    let client = redis::Client::open(cluster.redis.url())?;
    let mut redis = client.get_multiplexed_async_connection().await?;
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("{tc}:paused")
        .query_async(&mut redis)
        .await?;
    Ok(keys)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_action_by_session_needs_the_page_token_and_a_standing_session() -> TestResult {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo"])
        .start()
        .await?;
    let http = client()?;
    let base = cluster.base();
    let cookie = sign_in(&http, base, OPERATOR_TOKEN).await?;
    let csrf = csrf_of(&http, base, &cookie).await?;
    assert!(!csrf.is_empty(), "the page carries the session's token");
    let host = base.trim_start_matches("http://");
    let own_origin = format!("http://{host}");

    // What another site can make a browser send, and a script holding only the cookie.
    for (what, csrf, site, origin, expected) in [
        (
            "no credentials at all",
            None,
            None,
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "cookie, no page token",
            None,
            Some("same-origin"),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie, a wrong page token",
            Some("00ff"),
            Some("same-origin"),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie and page token, cross-site",
            Some(csrf.as_str()),
            Some("cross-site"),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie and page token, same-site",
            Some(csrf.as_str()),
            Some("same-site"),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            "cookie and page token, foreign origin",
            Some(csrf.as_str()),
            None,
            Some("https://evil.example"),
            StatusCode::FORBIDDEN,
        ),
    ] {
        let cookie = (what != "no credentials at all").then_some(cookie.as_str());
        let status = pause_by_session(&http, base, cookie, csrf, site, origin).await?;
        assert_eq!(status, expected, "{what}");
        assert!(
            paused_in_redis(&cluster).await?.is_empty(),
            "{what} paused echo"
        );
    }

    // The page's own request pauses, and the audit log names the session, not the token.
    let status = pause_by_session(
        &http,
        base,
        Some(&cookie),
        Some(&csrf),
        Some("same-origin"),
        Some(&own_origin),
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(paused_in_redis(&cluster).await?, ["echo"]);
    let audit: Value = http
        .get(format!("{base}/console/api/audit"))
        .header(COOKIE, &cookie)
        .send()
        .await?
        .json()
        .await?;
    let actor = audit["entries"][0]["actor"].as_str().unwrap_or_default();
    assert!(actor.starts_with("console session "), "{audit}");
    assert!(!actor.contains(OPERATOR_TOKEN));

    // Signed out (the session revoked), the same cookie and page token act no more.
    let signed_out = http
        .post(format!("{base}/console/logout"))
        .header(COOKIE, &cookie)
        .header("sec-fetch-site", "same-origin")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await?;
    assert_eq!(signed_out.status(), StatusCode::SEE_OTHER);
    let resume = http
        .post(format!("{base}/console/api/entrypoints/echo/resume"))
        .header(COOKIE, &cookie)
        .header("x-console-csrf", &csrf)
        .header("sec-fetch-site", "same-origin")
        .send()
        .await?;
    assert_eq!(resume.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(paused_in_redis(&cluster).await?, ["echo"]);
    // The operator token as a bearer still acts (scripts need no page).
    let resume = http
        .post(format!("{base}/console/api/entrypoints/echo/resume"))
        .header(AUTHORIZATION, format!("Bearer {OPERATOR_TOKEN}"))
        .send()
        .await?;
    assert_eq!(resume.status(), StatusCode::OK);
    assert!(paused_in_redis(&cluster).await?.is_empty());
    Ok(())
}
