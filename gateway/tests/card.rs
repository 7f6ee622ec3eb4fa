//! Discovery routes driven through `gateway::app` without a socket: the Agent Card (both
//! paths, origin awareness, base path, live registry, caching), `/entrypoints`,
//! `/openapi.json`, the landing page and the favicon. The state is the embedded mode, whose
//! in-process worker registers the built-ins (echo, sleep, fail, count, summarize).

use std::error::Error;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use gateway::core::config::GatewayConfig;
use gateway::core::state::AppState;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use store::registry::{EntrypointInfo, Price, WorkerEntry};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const BUILTINS: [&str; 5] = ["count", "echo", "fail", "sleep", "summarize"];

/// Bounds every wait, so a worker that never registers fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(10);

/// The app and its state; the in-process worker stops when this is dropped.
struct Gateway {
    app: Router,
    state: AppState,
    shutdown: CancellationToken,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(config: GatewayConfig) -> TestResult<Gateway> {
    let shutdown = CancellationToken::new();
    let state = gateway::embedded::start(config, shutdown.clone(), &TaskTracker::new());
    let gateway = Gateway {
        app: gateway::app(state.clone()),
        state,
        shutdown,
    };
    tokio::time::timeout(PATIENCE, async {
        loop {
            match gateway.state.registry.workers().await {
                Ok(workers) if !workers.is_empty() => return,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .map_err(|_| "the embedded worker never registered")?;
    Ok(gateway)
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> TestResult<Value> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    fn text(&self) -> TestResult<String> {
        Ok(String::from_utf8(self.body.clone())?)
    }

    fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
    }
}

async fn get(app: &Router, path: &str, headers: &[(&str, &str)]) -> TestResult<Reply> {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app.clone().oneshot(request.body(Body::empty())?).await?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await?.to_bytes().to_vec();
    Ok(Reply {
        status,
        headers,
        body,
    })
}

async fn card(app: &Router, headers: &[(&str, &str)]) -> TestResult<Value> {
    let reply = get(app, "/.well-known/agent-card.json", headers).await?;
    assert_eq!(reply.status, StatusCode::OK);
    reply.json()
}

#[tokio::test]
async fn both_card_paths_serve_the_same_card() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let host = [("host", "agent.test:8080")];
    let canonical = get(&gw.app, "/.well-known/agent-card.json", &host).await?;
    let legacy = get(&gw.app, "/.well-known/agent.json", &host).await?;
    assert_eq!(canonical.status, StatusCode::OK);
    assert_eq!(legacy.status, StatusCode::OK);
    assert_eq!(canonical.body, legacy.body);
    assert_eq!(
        canonical.header(header::CONTENT_TYPE),
        "application/json; charset=utf-8"
    );

    let card = canonical.json()?;
    assert_eq!(card["protocolVersion"], "1.0");
    assert_eq!(card["name"], "taskcluster");
    assert_eq!(card["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(card["url"], "http://agent.test:8080/");
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": "http://agent.test:8080/", "protocolBinding": "HTTP+JSON"},
            {"url": "http://agent.test:8080/a2a/jsonrpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://agent.test:8080/a2a/v1", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ])
    );
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": false, "stateTransitionHistory": true})
    );
    assert_eq!(card["defaultInputModes"], json!(["application/json"]));
    assert_eq!(
        card["defaultOutputModes"],
        json!(["application/json", "text/plain"])
    );
    assert_eq!(card["supportsAuthenticatedExtendedCard"], false);
    Ok(())
}

#[tokio::test]
async fn skills_and_entrypoints_describe_the_builtins() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let card = card(&gw.app, &[]).await?;

    let skills = card["skills"].as_array().ok_or("skills is not an array")?;
    let ids: Vec<&str> = skills.iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(ids, BUILTINS);
    for skill in skills {
        assert_eq!(skill["name"], skill["id"]);
        assert_eq!(skill["inputModes"], json!(["application/json"]));
        assert_eq!(
            skill["outputModes"],
            json!(["application/json", "text/plain"])
        );
        assert_eq!(skill["streaming"], json!(skill["id"] == "count"));
    }
    let sleep = &skills[3];
    assert!(sleep["x_input_schema"]["properties"]["ms"].is_object());
    assert!(sleep["x_output_schema"]["properties"]["slept"].is_object());
    // echo accepts anything: like upstream's schema-less entrypoint, no schema fields.
    assert!(skills[1].get("x_input_schema").is_none());

    let entrypoints = card["entrypoints"]
        .as_object()
        .ok_or("entrypoints is not an object")?;
    assert_eq!(entrypoints.keys().collect::<Vec<_>>(), BUILTINS);
    assert_eq!(
        entrypoints["sleep"]["input_schema"],
        sleep["x_input_schema"]
    );
    assert_eq!(entrypoints["count"]["streaming"], true);
    assert_eq!(
        entrypoints["echo"],
        json!({"description": "Returns its input", "streaming": false})
    );

    // Nothing is priced: the base card has no payments and no pricing.
    assert!(card.get("payments").is_none());
    assert!(entrypoints.values().all(|e| e.get("pricing").is_none()));
    Ok(())
}

#[tokio::test]
async fn card_urls_follow_trusted_forwarded_headers_only() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let url = |card: &Value| {
        assert_eq!(card["supportedInterfaces"][0]["url"], card["url"]);
        card["url"].as_str().unwrap_or("").to_owned()
    };

    let proxied = card(
        &gw.app,
        &[
            ("host", "10.0.0.7:8080"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "agents.example.com"),
        ],
    )
    .await?;
    assert_eq!(url(&proxied), "https://agents.example.com/");

    let bogus_proto = card(
        &gw.app,
        &[("host", "agent.test"), ("x-forwarded-proto", "javascript")],
    )
    .await?;
    assert_eq!(url(&bogus_proto), "http://agent.test/");

    for hostile in [
        "evil.example/\"><script>alert(1)</script>",
        "evil.example/phish?",
        "user@evil.example",
        "a.example, b.example",
    ] {
        let hostile_card = card(
            &gw.app,
            &[
                ("host", "agent.test"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-host", hostile),
            ],
        )
        .await?;
        assert_eq!(url(&hostile_card), "https://agent.test/", "{hostile}");
    }

    let hostile_host = card(&gw.app, &[("host", "evil\"><b>")]).await?;
    assert_eq!(url(&hostile_host), "http://127.0.0.1:8080/");
    // No Host at all (HTTP/1.0, or this test's bare requests): the listen address.
    assert_eq!(url(&card(&gw.app, &[]).await?), "http://127.0.0.1:8080/");
    Ok(())
}

#[tokio::test]
async fn base_path_prefixes_routes_and_card_urls() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.base_path = "/agents/a".into();
    let gw = start(config).await?;
    let host = [("host", "agent.test")];

    let reply = get(&gw.app, "/agents/a/.well-known/agent-card.json", &host).await?;
    assert_eq!(reply.status, StatusCode::OK);
    let card = reply.json()?;
    assert_eq!(card["url"], "http://agent.test/agents/a/");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "http://agent.test/agents/a/"
    );

    let legacy = get(&gw.app, "/agents/a/.well-known/agent.json", &host).await?;
    assert_eq!(legacy.body, reply.body);
    let unprefixed = get(&gw.app, "/.well-known/agent-card.json", &host).await?;
    assert_eq!(unprefixed.status, StatusCode::NOT_FOUND);

    let openapi = get(&gw.app, "/agents/a/openapi.json", &host)
        .await?
        .json()?;
    assert_eq!(
        openapi["servers"],
        json!([{"url": "http://agent.test/agents/a"}])
    );
    let landing = get(&gw.app, "/agents/a", &host).await?;
    assert_eq!(landing.status, StatusCode::OK);
    assert!(landing.text()?.contains("http://agent.test/agents/a/tasks"));
    Ok(())
}

#[tokio::test]
async fn etag_and_if_none_match_give_304() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let first = get(&gw.app, "/.well-known/agent-card.json", &[]).await?;
    let etag = first.header(header::ETAG).to_owned();
    assert_eq!(etag.len(), 66, "a quoted hex SHA-256: {etag}");
    assert!(etag.starts_with('"') && etag.ends_with('"'));
    assert!(first.header(header::CACHE_CONTROL).contains("max-age="));

    let again = get(&gw.app, "/.well-known/agent-card.json", &[]).await?;
    assert_eq!(again.header(header::ETAG), etag, "same card, same tag");

    let cached = get(
        &gw.app,
        "/.well-known/agent-card.json",
        &[("if-none-match", &etag)],
    )
    .await?;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert!(cached.body.is_empty());
    assert_eq!(cached.header(header::ETAG), etag);

    let stale = get(
        &gw.app,
        "/.well-known/agent-card.json",
        &[("if-none-match", "\"0000\"")],
    )
    .await?;
    assert_eq!(stale.status, StatusCode::OK);
    assert_eq!(stale.body, first.body);

    // Another origin is another card, hence another tag.
    let other = get(
        &gw.app,
        "/.well-known/agent-card.json",
        &[("host", "other.test"), ("if-none-match", &etag)],
    )
    .await?;
    assert_eq!(other.status, StatusCode::OK);
    assert_ne!(other.header(header::ETAG), etag);
    Ok(())
}

#[tokio::test]
async fn the_card_follows_the_live_registry() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let before = get(&gw.app, "/.well-known/agent-card.json", &[]).await?;

    let extra = WorkerEntry {
        worker_id: "zz-extra".into(),
        host: "test".into(),
        started_at_ms: 0,
        concurrency: 1,
        entrypoints: vec![EntrypointInfo {
            key: "paid".into(),
            description: "Costs money".into(),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming: false,
            price: Some(Price {
                invoke: Some("0.01".into()),
                stream: None,
                protocol: Default::default(),
                settle: Default::default(),
                scheme: Default::default(),
            }),
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }],
    };
    gw.state
        .registry
        .heartbeat(&extra, Duration::from_secs(60))
        .await?;
    let with_worker = get(&gw.app, "/.well-known/agent-card.json", &[]).await?;
    assert_ne!(
        with_worker.header(header::ETAG),
        before.header(header::ETAG)
    );
    let card = with_worker.json()?;
    assert_eq!(
        card["entrypoints"]["paid"]["pricing"],
        json!({"invoke": "0.01"})
    );
    assert!(
        card["skills"]
            .as_array()
            .is_some_and(|skills| skills.iter().any(|s| s["id"] == "paid"))
    );
    let landing = get(&gw.app, "/", &[]).await?.text()?;
    assert!(landing.contains("Price: invoke 0.01"));

    gw.state.registry.deregister("zz-extra").await?;
    let after = get(&gw.app, "/.well-known/agent-card.json", &[]).await?;
    assert_eq!(after.body, before.body);
    Ok(())
}

#[tokio::test]
async fn entrypoints_lists_key_description_streaming() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = get(&gw.app, "/entrypoints", &[]).await?;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header(header::CONTENT_TYPE),
        "application/json; charset=utf-8"
    );
    let body = reply.json()?;
    let items = body["items"].as_array().ok_or("items is not an array")?;
    assert_eq!(
        body.as_object().map(|o| o.len()),
        Some(1),
        "only items: {body}"
    );
    let keys: Vec<&str> = items.iter().filter_map(|i| i["key"].as_str()).collect();
    assert_eq!(keys, BUILTINS);
    assert_eq!(
        items[1],
        json!({"key": "echo", "description": "Returns its input", "streaming": false})
    );
    assert_eq!(items[0]["streaming"], true);
    for item in items {
        assert_eq!(item.as_object().map(|o| o.len()), Some(3), "{item}");
    }
    Ok(())
}

#[tokio::test]
async fn openapi_describes_every_route() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = get(
        &gw.app,
        "/openapi.json",
        &[("host", "agent.test"), ("x-forwarded-proto", "https")],
    )
    .await?;
    assert_eq!(reply.status, StatusCode::OK);
    let doc = reply.json()?;
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1"))
    );
    assert_eq!(doc["servers"], json!([{"url": "https://agent.test"}]));
    let paths = doc["paths"].as_object().ok_or("no paths")?;
    for (path, method) in [
        ("/health", "get"),
        ("/ready", "get"),
        ("/.well-known/agent-card.json", "get"),
        ("/.well-known/agent.json", "get"),
        ("/entrypoints", "get"),
        ("/entrypoints/echo/invoke", "post"),
        ("/entrypoints/count/stream", "post"),
        ("/tasks", "post"),
        ("/tasks", "get"),
        ("/tasks/{taskId}", "get"),
        ("/tasks/{taskId}/cancel", "post"),
        ("/tasks/{taskId}/subscribe", "get"),
        ("/openapi.json", "get"),
        ("/", "get"),
        ("/favicon.svg", "get"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path}");
    }
    let schemas = &doc["components"]["schemas"];
    for name in ["Error", "Task", "SendMessageRequest", "AgentCard"] {
        assert!(schemas[name].is_object(), "{name}");
    }
    let parameters = &doc["components"]["parameters"];
    assert_eq!(parameters["TaskAccessToken"]["name"], "Task-Access-Token");
    assert_eq!(parameters["TaskAccessToken"]["in"], "header");
    assert_eq!(parameters["IdempotencyKey"]["name"], "Idempotency-Key");
    assert!(
        paths["/tasks/{taskId}/subscribe"]["get"]["responses"]["200"]["content"]
            ["text/event-stream"]
            .is_object()
    );
    assert!(
        paths["/entrypoints/count/stream"]["post"]["responses"]["200"]["content"]
            ["text/event-stream"]
            .is_object()
    );
    // Task creation may be priced: 402 with the x402 challenge. (The embedded built-ins are
    // free, so their own paths have no 402; see priced_entrypoint_paths_answer_402.)
    assert_eq!(
        paths["/tasks"]["post"]["responses"]["402"],
        json!({"$ref": "#/components/responses/PaymentRequired"})
    );
    let payment_required = &doc["components"]["responses"]["PaymentRequired"];
    assert!(payment_required["headers"]["PAYMENT-REQUIRED"].is_object());
    assert_eq!(parameters["PaymentSignature"]["name"], "PAYMENT-SIGNATURE");
    assert_eq!(parameters["XPayment"]["name"], "X-PAYMENT");
    Ok(())
}

#[tokio::test]
async fn landing_page_lists_entrypoints_with_examples() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = get(&gw.app, "/", &[("host", "agent.test")]).await?;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header(header::CONTENT_TYPE),
        "text/html; charset=utf-8"
    );
    assert!(
        reply
            .header(header::CONTENT_SECURITY_POLICY)
            .contains("default-src 'none'")
    );
    let html = reply.text()?;
    assert!(html.contains("<h1>taskcluster</h1>"));
    for key in BUILTINS {
        assert!(html.contains(&format!("<code>{key}</code>")), "{key}");
    }
    assert!(html.contains("streaming</span>"));
    assert!(html.contains("Task-Access-Token: $TOKEN"));
    assert!(html.contains("http://agent.test/tasks"));
    assert!(html.contains("http://agent.test/entrypoints/echo/invoke"));
    // sleep's input schema, pretty-printed and escaped.
    assert!(html.contains("&quot;ms&quot;: {"));
    Ok(())
}

#[tokio::test]
async fn landing_page_escapes_a_hostile_agent_name() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.agent_name = "<script>alert('x')</script>".into();
    config.agent_description = "\"><img src=x onerror=alert(1)>".into();
    let gw = start(config).await?;
    let html = get(&gw.app, "/", &[]).await?.text()?;
    assert!(!html.contains("<script>"));
    assert!(!html.contains("<img"));
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
    assert!(html.contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
    // The card carries it as JSON data, which is the client's to escape.
    let card = card(&gw.app, &[]).await?;
    assert_eq!(card["name"], "<script>alert('x')</script>");
    Ok(())
}

#[tokio::test]
async fn favicon_is_svg() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = get(&gw.app, "/favicon.svg", &[]).await?;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply
            .header(header::CONTENT_TYPE)
            .starts_with("image/svg+xml")
    );
    assert!(reply.text()?.starts_with("<svg"));
    Ok(())
}

const PAY_TO: &str = "0xb308ed39d67D0d4BAe5BC2FAEF60c66BBb6AE429";
const FACILITATOR: &str = "https://facilitator.example";

/// A worker hosting one entrypoint `key` at `amount` (invoke, and stream when it streams).
fn priced_worker(worker_id: &str, key: &str, streaming: bool, amount: Option<&str>) -> WorkerEntry {
    WorkerEntry {
        worker_id: worker_id.into(),
        host: "test".into(),
        started_at_ms: 0,
        concurrency: 1,
        entrypoints: vec![EntrypointInfo {
            key: key.into(),
            description: "Costs money".into(),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming,
            price: amount.map(|amount| Price {
                invoke: Some(amount.into()),
                stream: streaming.then(|| amount.into()),
                protocol: Default::default(),
                settle: Default::default(),
                scheme: Default::default(),
            }),
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }],
    }
}

fn with_payments() -> GatewayConfig {
    let mut config = GatewayConfig::for_tests();
    config.pay_to = Some(PAY_TO.into());
    config.facilitator_url = Some(FACILITATOR.into());
    config
}

#[tokio::test]
async fn priced_entrypoints_show_pricing_protocol_and_network() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let worker = priced_worker("zz-paid", "paid", true, Some("0.01"));
    gw.state
        .registry
        .heartbeat(&worker, Duration::from_secs(60))
        .await?;
    let reply = get(&gw.app, "/.well-known/agent-card.json", &[]).await?;
    // Upstream's field order, byte for byte; the network is the CAIP-2 id of base-sepolia.
    assert!(
        reply.text()?.contains(
            r#""paid":{"description":"Costs money","streaming":true,"payment_protocol":"x402","network":"eip155:84532","pricing":{"invoke":"0.01","stream":"0.01"}}"#
        ),
        "{}",
        reply.text()?
    );
    let card = reply.json()?;
    // Free entrypoints carry none of it, and without a payee no payment methods are listed.
    assert_eq!(
        card["entrypoints"]["echo"],
        json!({"description": "Returns its input", "streaming": false})
    );
    assert!(card.get("payments").is_none());
    Ok(())
}

#[tokio::test]
async fn payments_are_listed_only_for_priced_entrypoints_with_payee_and_facilitator() -> TestResult
{
    // Configured but nothing priced: the base card, byte for byte.
    let plain = start(GatewayConfig::for_tests()).await?;
    let configured = start(with_payments()).await?;
    let base = get(&plain.app, "/.well-known/agent-card.json", &[]).await?;
    let unpriced = get(&configured.app, "/.well-known/agent-card.json", &[]).await?;
    assert_eq!(unpriced.body, base.body);

    let workers = [
        priced_worker("zz-a", "paid", false, Some("0.01")),
        priced_worker("zz-b", "stream-paid", true, Some("0.02")),
    ];
    for worker in &workers {
        configured
            .state
            .registry
            .heartbeat(worker, Duration::from_secs(60))
            .await?;
        plain
            .state
            .registry
            .heartbeat(worker, Duration::from_secs(60))
            .await?;
    }
    let method = |amount: &str| {
        json!({
            "method": "x402",
            "payee": PAY_TO,
            "network": "eip155:84532",
            "endpoint": FACILITATOR,
            "priceModel": {"default": amount},
            "extensions": {"x402": {
                "scheme": "exact",
                "network": "eip155:84532",
                "price": amount,
                "facilitatorUrl": FACILITATOR,
                "payTo": PAY_TO
            }}
        })
    };
    let card = card(&configured.app, &[]).await?;
    // One method per distinct offer; the streaming entrypoint's stream offer equals its
    // invoke offer and is listed once.
    assert_eq!(card["payments"], json!([method("0.01"), method("0.02")]));
    let text = serde_json::to_string(&card)?;
    assert!(text.ends_with(&format!(
        r#""payments":{}}}"#,
        serde_json::to_string(&card["payments"])?
    )));

    // Priced, but this gateway has no payee or facilitator: no payment methods.
    let unconfigured = self::card(&plain.app, &[]).await?;
    assert_eq!(
        unconfigured["entrypoints"]["paid"]["pricing"],
        json!({"invoke": "0.01"})
    );
    assert!(unconfigured.get("payments").is_none());
    Ok(())
}

#[tokio::test]
async fn disagreeing_workers_show_the_highest_price() -> TestResult {
    let gw = start(with_payments()).await?;
    for worker in [
        priced_worker("zz-1", "paid", true, Some("0.002")),
        priced_worker("zz-2", "paid", true, Some("0.0100")),
        priced_worker("zz-3", "paid", true, Some("0.009")),
        // A worker that hosts it without a price does not make it free.
        priced_worker("zz-4", "paid", true, None),
    ] {
        gw.state
            .registry
            .heartbeat(&worker, Duration::from_secs(60))
            .await?;
    }
    let card = card(&gw.app, &[]).await?;
    assert_eq!(
        card["entrypoints"]["paid"]["pricing"],
        json!({"invoke": "0.0100", "stream": "0.0100"})
    );
    assert_eq!(
        card["payments"][0]["priceModel"],
        json!({"default": "0.0100"})
    );
    assert_eq!(card["payments"].as_array().map(Vec::len), Some(1));
    // What the card shows is what admission charges.
    let admitted =
        gateway::core::admit::entrypoint(&gw.state, gateway::core::members::Viewer::Public, "paid")
            .await
            .map_err(|err| format!("{err:?}"))?
            .and_then(|entrypoint| entrypoint.price);
    assert_eq!(
        admitted,
        Some(Price {
            invoke: Some("0.0100".into()),
            stream: Some("0.0100".into()),
            protocol: Default::default(),
            settle: Default::default(),
            scheme: Default::default(),
        })
    );
    let landing = get(&gw.app, "/", &[]).await?.text()?;
    assert!(landing.contains("Price: invoke 0.0100, stream 0.0100"));
    Ok(())
}

/// What schemathesis (scripts/schemathesis) found against the document: each entrypoint's
/// path carries its own input schema (a generic `{key}` path promised input the entrypoint
/// refuses), SSE events are described as events (`event`, `data` with JSON content), the
/// status filter is enumerated, cancelling a finished task's 400 is documented, and task
/// creation does not claim to bound an Idempotency-Key it does not use.
#[tokio::test]
async fn openapi_matches_what_the_server_does() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let doc = get(&gw.app, "/openapi.json", &[]).await?.json()?;
    let paths = doc["paths"].as_object().ok_or("no paths")?;
    assert!(!paths.contains_key("/entrypoints/{key}/invoke"));
    assert!(!paths.contains_key("/entrypoints/{key}/stream"));
    for key in BUILTINS {
        assert!(
            paths.contains_key(&format!("/entrypoints/{key}/invoke")),
            "{key}"
        );
    }
    // Only streaming entrypoints have a stream path.
    assert!(paths.contains_key("/entrypoints/count/stream"));
    assert!(!paths.contains_key("/entrypoints/echo/stream"));

    // sleep's own schema, in the `input` member or as the whole body (one without an `input`
    // member: the server reads a body with one as `{"input": ...}` only).
    let card = get(&gw.app, "/.well-known/agent-card.json", &[])
        .await?
        .json()?;
    let sleep_schema = &card["entrypoints"]["sleep"]["input_schema"];
    assert!(
        sleep_schema["properties"]["ms"].is_object(),
        "{sleep_schema}"
    );
    let body = &paths["/entrypoints/sleep/invoke"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    assert_eq!(body["anyOf"][0]["properties"]["input"], *sleep_schema);
    assert_eq!(body["anyOf"][1]["allOf"][0], *sleep_schema);
    assert_eq!(
        body["anyOf"][1]["allOf"][1],
        json!({"not": {"type": "object", "required": ["input"]}})
    );

    let stream_event = &paths["/entrypoints/count/stream"]["post"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"];
    assert_eq!(stream_event["type"], "object");
    assert_eq!(
        stream_event["properties"]["data"]["contentSchema"],
        json!({"$ref": "#/components/schemas/RunEvent"})
    );
    assert_eq!(stream_event["properties"]["event"]["enum"][0], "run-start");
    let task_event = &paths["/tasks/{taskId}/subscribe"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"];
    assert_eq!(
        task_event["properties"]["event"]["enum"],
        json!(["statusUpdate", "resultUpdate", "error"])
    );
    assert_eq!(
        task_event["properties"]["data"]["contentMediaType"],
        "application/json"
    );

    let status = paths["/tasks"]["get"]["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "status"))
        .ok_or("no status parameter")?;
    let pattern = status["schema"]["pattern"].as_str().ok_or("no pattern")?;
    for state in ["running", "completed", "failed", "cancelled"] {
        assert!(pattern.contains(state), "{pattern}");
    }

    let cancel_400 = &paths["/tasks/{taskId}/cancel"]["post"]["responses"]["400"];
    assert!(
        cancel_400["description"]
            .as_str()
            .is_some_and(|text| text.contains("invalid_state")),
        "{cancel_400}"
    );

    let create_key = paths["/tasks"]["post"]["parameters"]
        .as_array()
        .and_then(|parameters| {
            parameters.iter().find(|p| {
                p["$ref"].is_string()
                    && p["$ref"]
                        .as_str()
                        .is_some_and(|r| r.contains("Idempotency"))
            })
        })
        .and_then(|p| p["$ref"].as_str())
        .ok_or("no Idempotency-Key on POST /tasks")?;
    let name = create_key.rsplit('/').next().ok_or("bad ref")?;
    let parameter = &doc["components"]["parameters"][name];
    assert_eq!(parameter["name"], "Idempotency-Key");
    assert!(parameter["schema"]["maxLength"].is_null(), "{parameter}");
    Ok(())
}

/// A priced entrypoint's own paths take the payment headers and answer the 402 challenge; a
/// free one's neither.
#[tokio::test]
async fn priced_entrypoint_paths_answer_402() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let worker = priced_worker("zz-paid", "paid", true, Some("0.01"));
    gw.state
        .registry
        .heartbeat(&worker, Duration::from_secs(60))
        .await?;
    let doc = get(&gw.app, "/openapi.json", &[]).await?.json()?;
    let paths = &doc["paths"];
    for path in ["/entrypoints/paid/invoke", "/entrypoints/paid/stream"] {
        let operation = &paths[path]["post"];
        assert_eq!(
            operation["responses"]["402"],
            json!({"$ref": "#/components/responses/PaymentRequired"}),
            "{path}"
        );
        assert!(
            operation["parameters"]
                .as_array()
                .is_some_and(|parameters| parameters
                    .contains(&json!({"$ref": "#/components/parameters/XPayment"}))),
            "{path}"
        );
    }
    let free = &paths["/entrypoints/echo/invoke"]["post"];
    assert!(free.is_object());
    assert!(free["responses"]["402"].is_null());
    Ok(())
}
