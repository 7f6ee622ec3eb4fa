//! `/openapi.json` says exactly what each route takes, driven through `gateway::app` without a
//! socket (embedded mode, whose in-process worker registers the built-ins): a method a path
//! does not declare answers `405` with `Allow` (TRACE included), and the documented body of
//! each built-in's invoke accepts what the server accepts and refuses what it refuses
//! (schemathesis with its default checks found `{"code": "", "input": {}}` allowed by the
//! document and refused by `fail`, and wordless texts the same on `summarize`).

use std::error::Error;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use gateway::core::config::GatewayConfig;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const PATIENCE: Duration = Duration::from_secs(10);
const TOKEN: &str = "contract-test-owner-token-0123";

struct Gateway {
    app: Router,
    shutdown: CancellationToken,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start() -> TestResult<Gateway> {
    let shutdown = CancellationToken::new();
    let state = gateway::embedded::start(
        GatewayConfig::for_tests(),
        shutdown.clone(),
        &TaskTracker::new(),
    );
    let app = gateway::app(state.clone());
    tokio::time::timeout(PATIENCE, async {
        loop {
            match state.registry.workers().await {
                Ok(workers) if !workers.is_empty() => return,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .map_err(|_| "the embedded worker never registered")?;
    Ok(Gateway { app, shutdown })
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

async fn send(app: &Router, method: Method, path: &str, body: Option<&Value>) -> TestResult<Reply> {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("task-access-token", TOKEN);
    let request = match body {
        Some(body) => request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))?,
        None => request.body(Body::empty())?,
    };
    let response = app.clone().oneshot(request).await?;
    Ok(Reply {
        status: response.status(),
        headers: response.headers().clone(),
        body: response.into_body().collect().await?.to_bytes().to_vec(),
    })
}

async fn document(app: &Router) -> TestResult<Value> {
    let reply = send(app, Method::GET, "/openapi.json", None).await?;
    assert_eq!(reply.status, StatusCode::OK);
    Ok(serde_json::from_slice(&reply.body)?)
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[tokio::test]
async fn an_undeclared_method_answers_405_with_allow_on_every_documented_path() -> TestResult {
    let gw = start().await?;
    let doc = document(&gw.app).await?;
    let paths = doc["paths"].as_object().ok_or("no paths")?;
    assert!(paths.contains_key("/tasks") && paths.contains_key("/entrypoints/fail/invoke"));
    for (path, item) in paths {
        let declared: Vec<&str> = METHODS
            .into_iter()
            .filter(|method| item.get(*method).is_some())
            .collect();
        let concrete = path.replace("{taskId}", "00000000-0000-0000-0000-000000000000");
        for method in METHODS {
            // HEAD is answered wherever GET is (HTTP says so).
            if declared.contains(&method) || (method == "head" && declared.contains(&"get")) {
                continue;
            }
            let verb = Method::from_bytes(method.to_uppercase().as_bytes())?;
            let reply = send(&gw.app, verb, &concrete, None).await?;
            assert_eq!(
                reply.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {}",
                String::from_utf8_lossy(&reply.body)
            );
            let allow = reply
                .headers
                .get(header::ALLOW)
                .and_then(|value| value.to_str().ok())
                .ok_or_else(|| format!("{method} {path}: no Allow header"))?
                .to_ascii_lowercase();
            let allowed: Vec<&str> = allow.split(',').map(str::trim).collect();
            for declared in &declared {
                assert!(
                    allowed.contains(declared),
                    "{path}: Allow {allow} lacks {declared}"
                );
            }
            assert!(
                !allowed.contains(&method),
                "{path}: Allow {allow} has {method}"
            );
            if method != "head" {
                let body: Value = serde_json::from_slice(&reply.body)?;
                assert_eq!(
                    body["error"]["code"], "method_not_allowed",
                    "{method} {path}"
                );
            }
        }
    }
    // An unknown path is still 404, whatever the method.
    let reply = send(&gw.app, Method::TRACE, "/no-such-path", None).await?;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    Ok(())
}

/// The documented request body of `POST /entrypoints/<key>/invoke`.
fn invoke_schema(doc: &Value, key: &str) -> TestResult<Value> {
    let schema = &doc["paths"][format!("/entrypoints/{key}/invoke")]["post"]["requestBody"]["content"]
        ["application/json"]["schema"];
    if schema.is_null() {
        return Err(format!("no invoke body for {key}").into());
    }
    Ok(schema.clone())
}

#[tokio::test]
async fn the_input_schemas_require_what_the_entrypoints_require() -> TestResult {
    let gw = start().await?;
    let doc = document(&gw.app).await?;
    let fail = invoke_schema(&doc, "fail")?;
    let summarize = invoke_schema(&doc, "summarize")?;
    // The input schemas name their required fields and their constraints.
    let fail_input = &fail["anyOf"][0]["properties"]["input"];
    assert_eq!(fail_input["required"], json!(["code"]), "{fail_input}");
    assert!(
        fail_input["properties"]["code"]["pattern"].is_string(),
        "{fail_input}"
    );
    let summarize_input = &summarize["anyOf"][0]["properties"]["input"];
    assert_eq!(
        summarize_input["required"],
        json!(["text"]),
        "{summarize_input}"
    );
    assert_eq!(summarize_input["properties"]["text"]["minLength"], 1);
    assert_eq!(summarize_input["properties"]["sentences"]["minimum"], 1);
    assert_eq!(summarize_input["properties"]["sentences"]["maximum"], 20);

    // Each body: the document allows it exactly when the server takes it (anything but 400
    // and 422; `fail` then fails on purpose).
    let cases = [
        ("fail", &fail, json!({"code": "", "input": {}}), false),
        ("fail", &fail, json!({"code": "boom", "input": {}}), false),
        ("fail", &fail, json!({"input": {}}), false),
        ("fail", &fail, json!({"input": {"code": ""}}), false),
        ("fail", &fail, json!({"input": {"code": " \n"}}), false),
        ("fail", &fail, json!({}), false),
        ("fail", &fail, json!({"input": {"code": "boom"}}), true),
        ("fail", &fail, json!({"code": "boom"}), true),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": ""}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": " \t "}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": "?! ... !"}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": "_"}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"text": "", "input": {"text": "x"}}),
            true,
        ),
        (
            "summarize",
            &summarize,
            json!({"text": "Fine.", "input": {}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": "Fine.", "sentences": 0}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": "Fine.", "sentences": 21}}),
            false,
        ),
        (
            "summarize",
            &summarize,
            json!({"input": {"text": "Fine."}}),
            true,
        ),
        (
            "summarize",
            &summarize,
            json!({"text": "Fine. Good.", "sentences": 1}),
            true,
        ),
    ];
    for (key, schema, body, valid) in cases {
        let documented = jsonschema::is_valid(schema, &body);
        assert_eq!(documented, valid, "the document on {key} {body}");
        let reply = send(
            &gw.app,
            Method::POST,
            &format!("/entrypoints/{key}/invoke"),
            Some(&body),
        )
        .await?;
        let taken = !matches!(
            reply.status,
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            taken,
            valid,
            "the server on {key} {body}: {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
    }
    Ok(())
}
