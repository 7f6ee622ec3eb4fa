//! `taskctl --pay` end to end: the real binary against an in-process priced agent whose 402s
//! are built by `payments::Terms` and which checks the paid retry with the real
//! `Credential::decode` + `precheck` before answering with a receipt. A hostile variant names
//! another origin as the resource: taskctl must refuse and sign nothing.

use std::path::PathBuf;
use std::process::Output;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use client::pay::{Address, U256};
use payments::wire::facilitator::SettleResponse;
use payments::wire::v2::ResourceInfo;
use payments::{Credential, LocalPayer, Terms, X402Version, precheck};
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Anvil's well-known key #0: a public test key.
const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// A paid request as the agent saw it: path and the credential header that came with it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    version: Option<X402Version>,
    /// The signed authorization's `validBefore - validAfter`, when one came.
    window: Option<u64>,
}

struct Agent {
    origin: String,
    /// The origin the challenges name as the resource's: `origin`, unless hostile.
    resource_origin: String,
    terms: Terms,
    seen: Mutex<Vec<Seen>>,
}

impl Agent {
    fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

fn reply(status: StatusCode, headers: Vec<(&str, String)>, body: String) -> Response {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn handle(
    State(agent): State<Arc<Agent>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if method == Method::GET {
        let card = json!({"name": "priced", "url": format!("{}/", agent.origin)});
        return reply(
            StatusCode::OK,
            vec![("content-type", "application/json".into())],
            card.to_string(),
        );
    }
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let credential = get(payments::PAYMENT_SIGNATURE)
        .map(|value| (X402Version::V2, value))
        .or_else(|| get(payments::X_PAYMENT).map(|value| (X402Version::V1, value)));
    let window = credential.as_ref().and_then(|(version, value)| {
        let credential = Credential::decode(*version, value).ok()?;
        Some(credential.valid_before() - credential.valid_after())
    });
    agent
        .seen
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Seen {
            path: uri.path().to_owned(),
            version: credential.as_ref().map(|(version, _)| *version),
            window,
        });
    // The route's terms: its resource is the request's URL (at the resource origin).
    let mut terms = agent.terms.clone();
    terms.resource.url = format!("{}{}", agent.resource_origin, uri.path());
    let challenge = |reason: &str| {
        reply(
            StatusCode::PAYMENT_REQUIRED,
            vec![
                (
                    payments::PAYMENT_REQUIRED,
                    payments::wire::encode(&terms.challenge_v2(Some(reason))),
                ),
                ("content-type", "application/json".into()),
            ],
            serde_json::to_string(&terms.challenge_v1(reason)).unwrap_or_default(),
        )
    };
    let Some((version, value)) = credential else {
        return challenge("payment required");
    };
    let payer = match Credential::decode(version, &value)
        .map_err(|err| err.to_string())
        .and_then(|credential| {
            precheck(&credential, &agent.terms, now()).map_err(|err| err.to_string())
        }) {
        Ok(payer) => payer,
        Err(reason) => return challenge(&reason),
    };
    let receipt = SettleResponse {
        success: true,
        error_reason: None,
        payer: Some(payer.to_string()),
        transaction: "0xfeed".into(),
        network: agent.terms.network.name.into(),
        amount: Some(agent.terms.amount.to_string()),
    };
    let mut headers = vec![(version.response_header(), payments::wire::encode(&receipt))];
    let (content_type, body) = match uri.path() {
        "/tasks" => (
            "application/json",
            json!({"taskId": "t-1", "accessToken": get("task-access-token"), "status": "running"})
                .to_string(),
        ),
        "/entrypoints/echo/stream" => (
            "text/event-stream",
            "event: run-end\ndata: {\"status\":\"succeeded\",\"output\":{\"x\":1}}\n\n".into(),
        ),
        _ => (
            "application/json",
            json!({"run_id": "r-1", "status": "succeeded", "output": {"x": 1}}).to_string(),
        ),
    };
    headers.push(("content-type", content_type.into()));
    reply(StatusCode::OK, headers, body)
}

/// A priced agent charging 0.001 USDC on base-sepolia for everything it runs.
async fn agent() -> Result<Arc<Agent>, Box<dyn std::error::Error>> {
    agent_with(None, payments::terms::DEFAULT_MAX_TIMEOUT_SECONDS).await
}

/// [`agent`], naming `resource_origin` (else its own) as its resources' origin and asking for
/// `max_timeout_seconds` of validity.
async fn agent_with(
    resource_origin: Option<&str>,
    max_timeout_seconds: u64,
) -> Result<Arc<Agent>, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let agent = Arc::new(Agent {
        terms: Terms {
            scheme: payments::Scheme::Exact,
            network: &payments::network::NETWORKS[0],
            amount: U256::from(1000u64),
            pay_to: Address::repeat_byte(0x22),
            max_timeout_seconds,
            resource: ResourceInfo {
                url: format!("{origin}/entrypoints/echo/invoke"),
                description: String::new(),
                mime_type: "application/json".into(),
            },
        },
        resource_origin: resource_origin.unwrap_or(&origin).to_owned(),
        origin,
        seen: Mutex::new(Vec::new()),
    });
    let app = Router::new().fallback(handle).with_state(agent.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(agent)
}

/// A key file holding `text`, unique to this test.
fn key_file(name: &str, text: &str) -> Result<PathBuf, std::io::Error> {
    let dir = std::env::temp_dir().join(format!("taskctl-pay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn taskctl(args: &[&str], envs: &[(&str, &str)]) -> Result<Output, std::io::Error> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskctl"));
    command
        .args(args)
        .env_remove("TASK_ACCESS_TOKEN")
        .env_remove("TASKCTL_PAY_KEY")
        .env_remove("TASKCTL_MAX_VALIDITY_SECONDS");
    for (name, value) in envs {
        command.env(name, value);
    }
    command.output().await
}

fn documents(out: &Output) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let text = String::from_utf8(out.stdout.clone())?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).map_err(|err| format!("{err}: {line}").into()))
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn payer_address() -> Result<String, Box<dyn std::error::Error>> {
    Ok(LocalPayer::from_hex(ANVIL_KEY_0)?.address().to_string())
}

#[tokio::test]
async fn invoke_pays_and_prints_the_settlement() -> TestResult {
    let agent = agent().await?;
    let key = key_file("invoke", &format!("{ANVIL_KEY_0}\n"))?;
    let key = key.to_str().ok_or("temp path is not UTF-8")?;

    let out = taskctl(
        &[
            "--json",
            "invoke",
            &agent.origin,
            "echo",
            "{\"x\":1}",
            "--pay",
            key,
        ],
        &[],
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let docs = documents(&out)?;
    assert_eq!(docs.len(), 1, "{docs:?}");
    assert_eq!(docs[0]["output"], json!({"x": 1}));
    let settlement = &docs[0]["settlement"];
    assert_eq!(settlement["success"], json!(true), "{settlement}");
    assert_eq!(settlement["transaction"], json!("0xfeed"));
    assert_eq!(settlement["network"], json!("base-sepolia"));
    assert_eq!(settlement["payer"], json!(payer_address()?));
    let seen = agent.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0].version, None);
    assert_eq!(seen[1].version, Some(X402Version::V2));

    // People get the result on standard output and the settlement on standard error; v1 when
    // asked for.
    let out = taskctl(
        &[
            "--output",
            "human",
            "invoke",
            &agent.origin,
            "echo",
            "--pay",
            key,
            "--x402-version",
            "1",
        ],
        &[],
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"x\": 1"));
    let notes = stderr(&out);
    assert!(
        notes.contains("settlement success") && notes.contains("transaction 0xfeed"),
        "{notes}"
    );
    assert_eq!(agent.seen()[3].version, Some(X402Version::V1));
    Ok(())
}

#[tokio::test]
async fn send_and_stream_pay_from_the_environment() -> TestResult {
    let agent = agent().await?;
    let env = [("TASKCTL_PAY_KEY", ANVIL_KEY_0)];
    let out = taskctl(&["--json", "send", &agent.origin, "echo", "{}"], &env).await?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let docs = documents(&out)?;
    assert_eq!(docs[0]["taskId"], json!("t-1"));
    assert_eq!(docs[0]["settlement"]["success"], json!(true), "{docs:?}");

    let out = taskctl(&["--json", "stream", &agent.origin, "echo"], &env).await?;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let docs = documents(&out)?;
    assert_eq!(docs[0]["type"], json!("settlement"), "{docs:?}");
    assert_eq!(docs[0]["data"]["payer"], json!(payer_address()?));
    assert_eq!(docs[1]["type"], json!("run-end"));

    let paths: Vec<String> = agent.seen().into_iter().map(|seen| seen.path).collect();
    assert_eq!(
        paths,
        [
            "/tasks",
            "/tasks",
            "/entrypoints/echo/stream",
            "/entrypoints/echo/stream"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn unpaid_and_over_the_cap_calls_fail_with_the_price() -> TestResult {
    let agent = agent().await?;
    let out = taskctl(&["--json", "invoke", &agent.origin, "echo"], &[]).await?;
    assert_eq!(out.status.code(), Some(1));
    let docs = documents(&out)?;
    let error = &docs[0]["error"];
    assert_eq!(error["status"], json!(402), "{error}");
    assert_eq!(error["price"]["amount"], json!("0.001"));
    assert_eq!(error["price"]["network"], json!("base-sepolia"));
    assert!(stderr(&out).contains("--pay"), "{}", stderr(&out));

    let out = taskctl(
        &["invoke", &agent.origin, "echo", "--max-amount", "0.0005"],
        &[("TASKCTL_PAY_KEY", ANVIL_KEY_0)],
    )
    .await?;
    assert_eq!(out.status.code(), Some(1));
    let notes = stderr(&out);
    assert!(
        notes.contains("0.001") && notes.contains("0.0005"),
        "{notes}"
    );
    // One unpaid request each: the cap stopped the second before it was built.
    assert_eq!(agent.seen().len(), 2);
    assert!(agent.seen().iter().all(|seen| seen.version.is_none()));
    Ok(())
}

#[tokio::test]
async fn a_bad_key_file_fails_in_one_line_without_echoing_the_key() -> TestResult {
    let agent = agent().await?;
    // One digit short of a key: close enough that echoing any of it would leak most of it.
    let almost = &ANVIL_KEY_0[..ANVIL_KEY_0.len() - 1];
    let key = key_file("bad", almost)?;
    let key = key.to_str().ok_or("temp path is not UTF-8")?;
    for format in ["human", "json"] {
        let out = taskctl(
            &[
                "--output",
                format,
                "invoke",
                &agent.origin,
                "echo",
                "--pay",
                key,
            ],
            &[],
        )
        .await?;
        assert_eq!(out.status.code(), Some(2));
        let notes = stderr(&out);
        let printed = format!("{notes}{}", String::from_utf8_lossy(&out.stdout));
        assert_eq!(notes.trim_end().lines().count(), 1, "{notes}");
        assert!(notes.contains("--pay"), "{notes}");
        assert!(!printed.contains(&almost[2..20]), "{printed}");
    }
    let out = taskctl(
        &["invoke", &agent.origin, "echo"],
        &[("TASKCTL_PAY_KEY", almost)],
    )
    .await?;
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains(&almost[2..20]));
    // Nothing was asked of the agent: the key is checked first.
    assert!(agent.seen().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_challenge_for_another_origin_is_refused_and_nothing_signed() -> TestResult {
    let agent = agent_with(Some("http://evil.example"), 300).await?;
    let env = [("TASKCTL_PAY_KEY", ANVIL_KEY_0)];
    for command in ["invoke", "send", "stream"] {
        let out = taskctl(&["--json", command, &agent.origin, "echo", "{}"], &env).await?;
        assert_eq!(out.status.code(), Some(1), "{command}: {}", stderr(&out));
        let docs = documents(&out)?;
        let message = docs
            .last()
            .and_then(|doc| doc["error"]["message"].as_str())
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("refused to sign") && message.contains("evil.example"),
            "{command}: {message}"
        );
    }
    // One unpaid request per command, and never a credential.
    let seen = agent.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|seen| seen.version.is_none()), "{seen:?}");
    Ok(())
}

#[tokio::test]
async fn the_signed_validity_is_capped_by_flag_or_environment() -> TestResult {
    // The agent asks for a day; what is signed is valid for 300 s, or what taskctl is told.
    // `validAfter` is back-dated ten minutes, so the window is 600 s longer.
    let agent = agent_with(None, 86_400).await?;
    let pay = [("TASKCTL_PAY_KEY", ANVIL_KEY_0)];
    let with_env = [
        ("TASKCTL_PAY_KEY", ANVIL_KEY_0),
        ("TASKCTL_MAX_VALIDITY_SECONDS", "120"),
    ];
    type Env<'a> = &'a [(&'a str, &'a str)];
    let runs: [(&[&str], Env, u64); 4] = [
        (&[], &pay, 600 + 300),
        (&["--max-validity-seconds", "60"], &pay, 600 + 60),
        (&[], &with_env, 600 + 120),
        // The flag wins over the environment.
        (&["--max-validity-seconds", "30"], &with_env, 600 + 30),
    ];
    for (flags, env, window) in runs {
        let before = agent.seen().len();
        let mut args = vec!["--json", "invoke", &agent.origin, "echo"];
        args.extend_from_slice(flags);
        let out = taskctl(&args, env).await?;
        assert_eq!(out.status.code(), Some(0), "{flags:?}: {}", stderr(&out));
        let seen = agent.seen();
        assert_eq!(seen.len(), before + 2, "{seen:?}");
        assert_eq!(seen[before + 1].window, Some(window), "{flags:?} {env:?}");
    }
    // Zero, or not a number, is a usage error before anything is asked.
    let before = agent.seen().len();
    for bad in ["0", "soon"] {
        let out = taskctl(
            &[
                "invoke",
                &agent.origin,
                "echo",
                "--max-validity-seconds",
                bad,
            ],
            &pay,
        )
        .await?;
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
    }
    assert_eq!(agent.seen().len(), before);
    // --help lists the flag and its variable.
    let out = taskctl(&["invoke", "--help"], &[]).await?;
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--max-validity-seconds") && help.contains("TASKCTL_MAX_VALIDITY_SECONDS"),
        "{help}"
    );
    Ok(())
}
