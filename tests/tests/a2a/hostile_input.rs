//! Hostile JSON-RPC and HTTP+JSON input gets the protocol's error (JSON-RPC: HTTP 200 with the
//! right code, id and `ErrorInfo`; HTTP+JSON: a 4xx in AIP-193 shape), never a 5xx; after
//! each kind of it the gateway is still up and still answers (`still_answering`).

use harness::TestResult;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{
    A2a, Binding, CONTENT_TYPE_NOT_SUPPORTED, Cluster, INVALID_PARAMS, INVALID_REQUEST,
    METHOD_NOT_FOUND, PARSE_ERROR, TASK_NOT_FOUND, TOKEN_A, ensure, error_info, expect_error,
    message, reason_of, rest_reply, state, tck,
};

/// The gateway's default `BODY_LIMIT_BYTES`.
const BODY_LIMIT: usize = 1024 * 1024;
const JSON: &str = "application/json";

/// Expects a JSON-RPC error of `code` answered with HTTP 200 and the id `id`.
fn expect_rpc(answer: &(StatusCode, Value), code: i64, id: &Value, what: &str) -> TestResult {
    let (status, body) = answer;
    ensure(
        *status == StatusCode::OK
            && body["jsonrpc"] == "2.0"
            && body["error"]["code"] == code
            && body["id"] == *id
            && body.get("result").is_none(),
        || format!("{what}: expected error {code} with id {id}, got {status}: {body}"),
    )?;
    let reason = error_info(&body["error"]["data"][0])?;
    ensure(reason == reason_of(code), || {
        format!("{what}: reason {reason} for {code}")
    })
}

/// A well-formed `GetTask` request of id `id`.
fn get(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "GetTask", "params": {"id": "x"}})
}

fn bytes(value: &Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// A user message whose JSON is about `size` bytes.
fn message_of_size(size: usize) -> Value {
    message("big", json!([{"text": "a".repeat(size)}]))
}

/// A cluster and Alice's client.
async fn start() -> TestResult<(Cluster, A2a)> {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    Ok((cluster, alice))
}

/// Still up, still answering: the health check, `TaskNotFound` for an unknown task, and a task
/// that completes.
async fn still_answering(cluster: &Cluster, alice: &A2a) -> TestResult {
    assert_eq!(cluster.health().await?, StatusCode::OK);
    expect_error(
        Binding::JsonRpc,
        alice
            .get_task(Binding::JsonRpc, "no-such-task", None)
            .await?,
        TASK_NOT_FOUND,
        404,
        "after the hostile input",
    )?;
    let task = alice
        .send_task(Binding::JsonRpc, tck("tck-complete-task"))
        .await?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_json_is_a_parse_error() -> TestResult {
    let (cluster, alice) = start().await?;
    let answer = alice
        .raw_rpc(br#"{"jsonrpc":"2.0","id":1,"method":"#.to_vec(), JSON)
        .await?;
    expect_rpc(&answer, PARSE_ERROR, &Value::Null, "invalid JSON")?;
    still_answering(&cluster, &alice).await
}

#[tokio::test(flavor = "multi_thread")]
async fn json_that_is_not_one_request_object_is_an_invalid_request() -> TestResult {
    let (cluster, alice) = start().await?;
    for (body, case) in [
        (json!([get(json!(1))]), "a batch"),
        (json!([]), "an empty batch"),
        (json!("GetTask"), "a string"),
        (json!(42), "a number"),
        (Value::Null, "null"),
    ] {
        let answer = alice.raw_rpc(bytes(&body), JSON).await?;
        expect_rpc(&answer, INVALID_REQUEST, &Value::Null, case)?;
    }
    still_answering(&cluster, &alice).await
}

/// `jsonrpc` must be `"2.0"`: 1.0, or none, is an invalid request (answered with the id).
#[tokio::test(flavor = "multi_thread")]
async fn a_jsonrpc_version_other_than_2_0_is_an_invalid_request() -> TestResult {
    let (cluster, alice) = start().await?;
    let mut old = get(json!(1));
    old["jsonrpc"] = json!("1.0");
    expect_rpc(
        &alice.raw_rpc(bytes(&old), JSON).await?,
        INVALID_REQUEST,
        &json!(1),
        "jsonrpc 1.0",
    )?;
    let no_version = json!({"id": 1, "method": "GetTask", "params": {"id": "x"}});
    expect_rpc(
        &alice.raw_rpc(bytes(&no_version), JSON).await?,
        INVALID_REQUEST,
        &json!(1),
        "no jsonrpc member",
    )?;
    still_answering(&cluster, &alice).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_non_string_method_is_an_invalid_request() -> TestResult {
    let (cluster, alice) = start().await?;
    for method in [None, Some(json!(7)), Some(json!(["GetTask"]))] {
        let mut request = get(json!(2));
        match method.clone() {
            Some(method) => request["method"] = method,
            None => {
                if let Some(object) = request.as_object_mut() {
                    object.remove("method");
                }
            }
        }
        expect_rpc(
            &alice.raw_rpc(bytes(&request), JSON).await?,
            INVALID_REQUEST,
            &json!(2),
            &format!("method {method:?}"),
        )?;
    }
    still_answering(&cluster, &alice).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_method_is_method_not_found() -> TestResult {
    let (cluster, alice) = start().await?;
    let mut unknown = get(json!("u-1"));
    unknown["method"] = json!("NoSuchMethod");
    expect_rpc(
        &alice.raw_rpc(bytes(&unknown), JSON).await?,
        METHOD_NOT_FOUND,
        &json!("u-1"),
        "an unknown method",
    )?;
    still_answering(&cluster, &alice).await
}

/// A 10 KB method name is not found, and not echoed in full in the error message.
#[tokio::test(flavor = "multi_thread")]
async fn a_10_kb_method_name_is_method_not_found_and_not_echoed() -> TestResult {
    let (cluster, alice) = start().await?;
    let mut unknown = get(json!("u-1"));
    let long_name = "M".repeat(10 * 1024);
    unknown["method"] = json!(long_name);
    let answer = alice.raw_rpc(bytes(&unknown), JSON).await?;
    expect_rpc(&answer, METHOD_NOT_FOUND, &json!("u-1"), "a 10 KB method")?;
    let message = answer.1["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.len() < 1024 && !message.contains(&long_name),
        "the method name is not echoed in full: {} bytes",
        message.len()
    );
    still_answering(&cluster, &alice).await
}

/// An id that is an object, an array, a fraction, a huge float or 10,000 characters long is
/// an invalid request, answered without an id.
#[tokio::test(flavor = "multi_thread")]
async fn an_id_of_the_wrong_kind_or_size_is_an_invalid_request() -> TestResult {
    let (cluster, alice) = start().await?;
    for (id, case) in [
        (json!({"a": 1}), "an object id"),
        (json!([1]), "an array id"),
        (json!(1.5), "a fractional id"),
        (json!(1e300), "a huge float id"),
        (json!("i".repeat(10_000)), "a 10,000-character id"),
    ] {
        let answer = alice.raw_rpc(bytes(&get(id)), JSON).await?;
        expect_rpc(&answer, INVALID_REQUEST, &Value::Null, case)?;
    }
    still_answering(&cluster, &alice).await
}

/// JSON's grammar has no bound on numbers, but RFC 8259 (section 6) lets a parser limit
/// their range: 1e400 is past what an f64 holds, so the body is unreadable (-32700), and an
/// error without an id is all it can get.
#[tokio::test(flavor = "multi_thread")]
async fn an_id_past_the_range_of_a_double_is_a_parse_error() -> TestResult {
    let (cluster, alice) = start().await?;
    let huge = br#"{"jsonrpc":"2.0","id":1e400,"method":"GetTask","params":{"id":"x"}}"#;
    let answer = alice.raw_rpc(huge.to_vec(), JSON).await?;
    expect_rpc(&answer, PARSE_ERROR, &Value::Null, "an id of 1e400")?;
    still_answering(&cluster, &alice).await
}

#[tokio::test(flavor = "multi_thread")]
async fn params_as_an_array_are_invalid_params() -> TestResult {
    let (cluster, alice) = start().await?;
    let mut array_params = get(json!(3));
    array_params["params"] = json!(["x"]);
    expect_rpc(
        &alice.raw_rpc(bytes(&array_params), JSON).await?,
        INVALID_PARAMS,
        &json!(3),
        "params as an array",
    )?;
    still_answering(&cluster, &alice).await
}

/// Params of the wrong shape: a string message, parts as an object, a part with no content,
/// a string `historyLength` or `pageSize`, a numeric task id.
#[tokio::test(flavor = "multi_thread")]
async fn params_of_the_wrong_shape_are_invalid_params() -> TestResult {
    let (cluster, alice) = start().await?;
    for (method, params, case) in [
        (
            "SendMessage",
            json!({"message": "hello"}),
            "message as a string",
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": {"text": "x"}}}),
            "parts as an object",
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"nothing": 1}]}}),
            "a part with no content",
        ),
        (
            "GetTask",
            json!({"id": "x", "historyLength": "ten"}),
            "historyLength as a string",
        ),
        ("GetTask", json!({"id": 7}), "id as a number"),
        (
            "ListTasks",
            json!({"pageSize": "two"}),
            "pageSize as a string",
        ),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": params});
        expect_rpc(
            &alice.raw_rpc(bytes(&request), JSON).await?,
            INVALID_PARAMS,
            &json!(4),
            case,
        )?;
    }
    still_answering(&cluster, &alice).await
}

/// 10,000 levels of nesting: an error, not a crash.
#[tokio::test(flavor = "multi_thread")]
async fn deep_nesting_is_an_error_not_a_crash() -> TestResult {
    let (cluster, alice) = start().await?;
    let depth = 10_000;
    let nested = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"SendMessage","params":{{"x":{}{}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let (status, body) = alice.raw_rpc(nested.into_bytes(), JSON).await?;
    assert_eq!(status, StatusCode::OK, "deep nesting: {body}");
    assert!(
        body["error"]["code"].is_i64() && body.get("result").is_none(),
        "deep nesting: {body}"
    );
    still_answering(&cluster, &alice).await
}

/// A body over the limit: a JSON-RPC error or 413.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_over_the_limit_is_refused() -> TestResult {
    let (cluster, alice) = start().await?;
    let big = json!({"jsonrpc": "2.0", "id": 6, "method": "SendMessage", "params": {"message":
        message_of_size(BODY_LIMIT + 1024)}});
    let (status, body) = alice.raw_rpc(bytes(&big), JSON).await?;
    assert!(
        status == StatusCode::PAYLOAD_TOO_LARGE
            || (status == StatusCode::OK && body["error"]["code"].is_i64()),
        "an oversized body: {status} {body}"
    );
    still_answering(&cluster, &alice).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_not_declared_as_json_is_content_type_not_supported() -> TestResult {
    let (cluster, alice) = start().await?;
    expect_rpc(
        &alice.raw_rpc(bytes(&get(json!(7))), "text/plain").await?,
        CONTENT_TYPE_NOT_SUPPORTED,
        &Value::Null,
        "Content-Type text/plain",
    )?;
    still_answering(&cluster, &alice).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_is_not_utf8_is_a_parse_error() -> TestResult {
    let (cluster, alice) = start().await?;
    let mut invalid_utf8 =
        br#"{"jsonrpc":"2.0","id":8,"method":"GetTask","params":{"id":""#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    invalid_utf8.extend_from_slice(br#""}}"#);
    expect_rpc(
        &alice.raw_rpc(invalid_utf8, JSON).await?,
        PARSE_ERROR,
        &Value::Null,
        "invalid UTF-8",
    )?;
    still_answering(&cluster, &alice).await
}

/// HTTP+JSON `message:send` with invalid JSON, a body that is not a request object, a
/// message of the wrong type (400), or not declared as JSON (415), in AIP-193 shape.
#[tokio::test(flavor = "multi_thread")]
async fn rest_bad_bodies_get_a_4xx_in_aip_193_shape() -> TestResult {
    let (cluster, alice) = start().await?;
    let url = format!("{}/a2a/v1/message:send", cluster.base);
    for (body, content_type, status, case) in [
        (&b"{nope"[..], JSON, 400, "invalid JSON"),
        (&b"[]"[..], JSON, 400, "an array"),
        (&b"\"x\""[..], JSON, 400, "a string"),
        (&b"{\"message\": 7}"[..], JSON, 400, "message as a number"),
        (&b"{}"[..], "text/plain", 415, "text/plain"),
    ] {
        let response = alice
            .request(Method::POST, &url)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await?;
        let failure = rest_reply(response)
            .await?
            .err()
            .ok_or_else(|| format!("REST {case}: accepted"))?;
        assert_eq!(failure.http.as_u16(), status, "REST {case}: {failure:?}");
    }
    still_answering(&cluster, &alice).await
}

/// HTTP+JSON queries of the wrong type (400), unknown paths and actions (404), in AIP-193
/// shape.
#[tokio::test(flavor = "multi_thread")]
async fn rest_bad_queries_and_unknown_paths_get_a_4xx_in_aip_193_shape() -> TestResult {
    let (cluster, alice) = start().await?;
    for (path, status, case) in [
        ("/tasks?pageSize=abc", 400, "pageSize=abc"),
        (
            "/tasks?includeArtifacts=maybe",
            400,
            "includeArtifacts=maybe",
        ),
        ("/tasks?status=DONE", 400, "status=DONE"),
        ("/tasks/x?historyLength=abc", 400, "historyLength=abc"),
        ("/no/such/path", 404, "an unknown path"),
        ("/tasks/x:explode", 404, "an unknown action"),
    ] {
        let url = format!("{}/a2a/v1{path}", cluster.base);
        let response = alice.request(Method::GET, &url).send().await?;
        let failure = rest_reply(response)
            .await?
            .err()
            .ok_or_else(|| format!("REST {case}: accepted"))?;
        assert_eq!(failure.http.as_u16(), status, "REST {case}: {failure:?}");
    }
    still_answering(&cluster, &alice).await
}
