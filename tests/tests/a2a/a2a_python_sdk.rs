//! The official A2A Python SDK (PyPI `a2a-sdk[grpc]`, pinned by `scripts/a2a-sdk-venv`) as a
//! client of the gateway's A2A v1.0 bindings, on a real cluster: a private redis-server, a worker
//! hosting the TCK agent (`--a2a-tck-agent`) and a gateway that runs it by default
//! (`A2A_DEFAULT_SKILL=tck`), serves gRPC on a free port (`GRPC_LISTEN`) and may deliver push
//! notifications to loopback (`PUSH_ALLOWLIST=127.0.0.1:*`).
//!
//! `tests/python/a2a_sdk_client.py` resolves the card with the SDK's `A2ACardResolver`, makes
//! its clients with the SDK's `ClientFactory` (the binding chosen by `ClientConfig` from the
//! card's `supportedInterfaces`, gRPC over the SDK's `GrpcTransport`, the bearer token added by
//! the SDK's `AuthInterceptor`), and on JSON-RPC, HTTP+JSON and gRPC alike sends a message
//! (blocking), streams one, gets the tasks, creates, gets, lists and deletes a push notification
//! config (a token and Bearer authentication) of a task it sent with `returnImmediately`, cancels
//! that task, and sends a message with an inline push config whose deliveries its own webhook
//! receiver (a stdlib HTTP server on 127.0.0.1) awaits until the completed status update, checking
//! their Content-Type, Authorization and X-A2A-Notification-Token, and reads the extended card
//! as a member (its token is the gateway's member `sdk`; `echo` is private: the extended card
//! lists it and the member extension, the public card does not). It checks every answer itself
//! and prints a JSON summary, which this test checks again.
//!
//! The interpreter is `A2A_SDK_PYTHON`, else `<target dir>/a2a-sdk-venv/bin/python` (the target
//! dir found like the harness finds the binaries: `target/` of the workspace by default, where
//! `bash scripts/a2a-sdk-venv` makes the venv). One that is missing or cannot import the SDK
//! fails the test, saying how to set it up: the test is never skipped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use harness::TestResult;
use harness::cluster::{Cluster, free_port};
use harness::process::{ServiceProcess, plain};
use serde_json::{Value, json};

/// A test failure whose text reads as written (`Debug` of a `String` error would escape it).
struct Failure(String);

impl std::fmt::Debug for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

fn failure(text: impl Into<String>) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(Failure(text.into()))
}

/// How long the cluster may take to come up (it takes well under a second).
const PATIENCE: Duration = Duration::from_secs(30);
/// A bound against a hung client, not an expectation: the script takes a few seconds.
const SCRIPT_LIMIT: Duration = Duration::from_secs(300);
const TOKEN: &str = "a2a-python-sdk-interop-token-0123456789";

/// How to set the SDK up, in every failure about it.
const SETUP_HINT: &str = "run `bash scripts/a2a-sdk-venv`: it makes ${CARGO_TARGET_DIR:-target}/\
                          a2a-sdk-venv with a2a-sdk[grpc]==1.3.0 from PyPI, where this test \
                          looks for it unless A2A_SDK_PYTHON names another python that imports \
                          a2a-sdk with its grpc extra";

/// The workspace's target dir, found from this test binary as the harness finds the service
/// binaries: `<target>/<profile>/deps/<test>`.
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    if dir.file_name().and_then(|name| name.to_str()) == Some("deps") {
        dir = dir.parent()?;
    }
    dir.parent().map(Path::to_path_buf)
}

/// The interpreter with the SDK: `A2A_SDK_PYTHON`, else the venv of `scripts/a2a-sdk-venv`.
fn sdk_python() -> TestResult<PathBuf> {
    if let Some(python) = std::env::var_os("A2A_SDK_PYTHON").filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(python));
    }
    target_dir()
        .map(|dir| dir.join("a2a-sdk-venv").join("bin").join("python"))
        .ok_or_else(|| {
            failure(format!(
                "cannot locate the target dir to find the SDK venv; {SETUP_HINT}"
            ))
        })
}

/// Fails, saying how to set it up, unless `python` runs and imports the SDK; else its version.
async fn sdk_version(python: &Path) -> TestResult<String> {
    let probe = tokio::process::Command::new(python)
        .args([
            "-c",
            "import a2a.client, a2a.client.transports.grpc, httpx; \
             from importlib.metadata import version; print(version('a2a-sdk'))",
        ])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|err| {
            failure(format!(
                "the A2A Python SDK is not set up: cannot run {}: {err}; {SETUP_HINT}",
                python.display()
            ))
        })?;
    if !probe.status.success() {
        let stderr = String::from_utf8_lossy(&probe.stderr);
        return Err(failure(format!(
            "the A2A Python SDK is not set up: {} cannot import a2a ({}: {}); {SETUP_HINT}",
            python.display(),
            probe.status,
            stderr.lines().last().unwrap_or_default().trim()
        )));
    }
    Ok(String::from_utf8_lossy(&probe.stdout).trim().to_owned())
}

/// Waits until `GET {base}/health` answers 200 and the A2A card lists every skill of `skills`.
async fn wait_for_cluster(
    base: &str,
    skills: &[&str],
    gateway: &ServiceProcess,
    worker: &ServiceProcess,
) -> TestResult {
    let client = reqwest::Client::new();
    let card_url = format!("{base}/a2a/.well-known/agent-card.json");
    let start = tokio::time::Instant::now();
    loop {
        let healthy = matches!(
            client.get(format!("{base}/health")).send().await,
            Ok(response) if response.status() == 200
        );
        if healthy
            && let Ok(response) = client.get(&card_url).send().await
            && let Ok(card) = response.json::<Value>().await
        {
            let listed = card["skills"].as_array().is_some_and(|listed| {
                skills
                    .iter()
                    .all(|skill| listed.iter().any(|s| s["id"] == *skill))
            });
            if listed {
                return Ok(());
            }
        }
        if start.elapsed() > PATIENCE {
            return Err(failure(format!(
                "the cluster never served an A2A card with the skills {skills:?}\n\
                 --- gateway ---\n{}\n--- worker ---\n{}",
                plain(&gateway.log()),
                plain(&worker.log())
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The last `lines` lines of a service's log, plain.
fn tail(log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    plain(&all[all.len().saturating_sub(lines)..].join("\n"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_sends_streams_gets_cancels_and_pushes_on_all_three_bindings()
-> TestResult {
    let python = sdk_python()?;
    let sdk = sdk_version(&python).await?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/a2a_sdk_client.py");

    let grpc = format!("127.0.0.1:{}", free_port()?);
    // The script's token is a member's (`sdk`), and `echo` is private: the SDK reads the
    // extended card, with `echo` and the member extension, on every binding.
    let members = tempfile::tempdir()?;
    let member_file = members.path().join("members");
    let hash = protocol::token::AccessToken::parse(TOKEN)?.owner_hash();
    std::fs::write(&member_file, format!("sdk {}\n", hash.as_str()))?;
    let member_file = member_file.display().to_string();
    let cluster = Cluster::builder()
        .worker("w1", &[("WORKER_PRIVATE", "echo")])
        .args(&["--a2a-tck-agent"])
        .gateway(
            "g1",
            &[
                ("A2A_DEFAULT_SKILL", "tck"),
                ("GRPC_LISTEN", grpc.as_str()),
                // Every port: the script picks its receiver's once the gateway runs.
                ("PUSH_ALLOWLIST", "127.0.0.1:*"),
                ("MEMBER_TOKENS_FILE", member_file.as_str()),
            ],
        )
        .skills(&["tck", "sleep"])
        .start()
        .await?;
    let base = cluster.base().to_owned();
    let gateway = &cluster.gateways[0].process;
    let worker = &cluster.workers[0];
    // The Lucid card lists the skills; the A2A card, which the SDK reads, must too.
    wait_for_cluster(&base, &["tck", "sleep"], gateway, worker).await?;

    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(format!("{base}/a2a"))
        .env("A2A_TOKEN", TOKEN)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_LIMIT, run)
        .await
        .map_err(|_| {
            failure(format!(
                "{} did not finish within {SCRIPT_LIMIT:?}",
                script.display()
            ))
        })??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        // The whole story on stderr (shown with the failure), the mismatches in the error.
        eprintln!(
            "--- {} (a2a-sdk {sdk}, {}) exited with {} ---\nstdout:\n{}\nstderr:\n{}\n\
             --- gateway (last lines) ---\n{}\n--- worker (last lines) ---\n{}",
            script.display(),
            python.display(),
            output.status,
            stdout.trim(),
            stderr.trim(),
            tail(&gateway.log(), 40),
            tail(&worker.log(), 40),
        );
        let failures: Vec<&str> = stderr
            .lines()
            .filter(|line| line.starts_with("a2a_sdk_client: FAIL"))
            .map(|line| line.get(..600).unwrap_or(line))
            .collect();
        return Err(failure(format!(
            "the official A2A Python SDK (a2a-sdk {sdk}) found mismatches with the gateway \
             ({}; details on stderr):\n{}",
            output.status,
            if failures.is_empty() {
                stderr.trim().to_owned()
            } else {
                failures.join("\n")
            }
        )));
    }

    let line = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .ok_or("the client printed no summary")?;
    let summary: Value = serde_json::from_str(line)?;
    eprintln!("a2a-sdk {sdk} summary: {summary}");
    assert_eq!(summary["ok"], json!(true), "{summary}");
    assert_eq!(summary["failures"], json!([]), "{summary}");
    assert_eq!(summary["sdkVersion"], json!(sdk), "{summary}");
    assert_eq!(
        summary["card"]["interfaces"],
        json!(["JSONRPC", "HTTP+JSON", "GRPC"]),
        "{summary}"
    );
    let mut secrets = Vec::new();
    for (binding, url) in [
        ("JSONRPC", format!("{base}/a2a/jsonrpc")),
        ("HTTP+JSON", format!("{base}/a2a/v1")),
        ("GRPC", grpc.clone()),
    ] {
        let result = &summary["bindings"][binding];
        assert_eq!(result["url"], json!(url), "{binding}: {result}");
        assert_eq!(result["a2aVersion"], json!("1.0"), "{binding}: {result}");
        assert_eq!(result["failures"], json!([]), "{binding}: {result}");

        let send = &result["send"];
        assert_eq!(send["state"], json!("TASK_STATE_COMPLETED"), "{binding}");
        assert_eq!(send["text"], json!("Hello from TCK"), "{binding}");
        assert_eq!(send["artifactText"], json!("Generated text content"));

        let stream = &result["stream"];
        let events = stream["events"].as_array().ok_or("no stream events")?;
        assert_eq!(events.first(), Some(&json!("task")), "{binding}: {stream}");
        assert_eq!(
            events.last(),
            Some(&json!("status_update")),
            "{binding}: {stream}"
        );
        assert_eq!(
            stream["chunks"],
            json!(["chunk-1 ", "chunk-2"]),
            "{binding}"
        );
        assert_eq!(stream["assembled"], json!("chunk-1 chunk-2"), "{binding}");
        assert_eq!(stream["final"], json!("TASK_STATE_COMPLETED"), "{binding}");

        let get = &result["get"];
        assert_eq!(get["taskId"], send["taskId"], "{binding}: {get}");
        assert_eq!(get["state"], json!("TASK_STATE_COMPLETED"), "{binding}");
        assert_eq!(get["streamedTaskId"], stream["taskId"], "{binding}: {get}");
        assert_eq!(get["streamedState"], json!("TASK_STATE_COMPLETED"));

        let cancel = &result["cancel"];
        assert_eq!(cancel["state"], json!("TASK_STATE_CANCELED"), "{binding}");
        assert_eq!(cancel["after"], json!("TASK_STATE_CANCELED"), "{binding}");

        let token = result["push"]["token"].as_str().ok_or("no push token")?;
        let credentials = result["push"]["credentials"]
            .as_str()
            .ok_or("no push credentials")?;
        let configs = &result["pushConfigs"];
        assert_eq!(configs["taskId"], cancel["taskId"], "{binding}: {configs}");
        let config_id = &configs["configId"];
        let created = &configs["created"];
        assert_eq!(created["id"], *config_id, "{binding}: {configs}");
        assert_eq!(created["taskId"], configs["taskId"], "{binding}: {configs}");
        assert_eq!(created["token"], json!(token), "{binding}: {configs}");
        assert_eq!(
            created["authentication"],
            json!({"scheme": "Bearer", "credentials": credentials}),
            "{binding}: {configs}"
        );
        assert_eq!(configs["got"], *created, "{binding}: {configs}");
        let listed = configs["listed"].as_array().ok_or("no listed configs")?;
        assert!(listed.contains(config_id), "{binding}: {configs}");
        assert_eq!(configs["afterDelete"], json!("TaskNotFoundError"));
        let relisted = configs["listedAfterDelete"].as_array().ok_or("no list")?;
        assert!(!relisted.contains(config_id), "{binding}: {configs}");

        let delivery = &result["pushDelivery"];
        assert_eq!(
            delivery["final"],
            json!("TASK_STATE_COMPLETED"),
            "{binding}"
        );
        assert_eq!(
            delivery["states"]
                .as_array()
                .and_then(|states| states.last()),
            Some(&json!("TASK_STATE_COMPLETED")),
            "{binding}: {delivery}"
        );
        assert!(
            delivery["contentType"]
                .as_str()
                .is_some_and(|value| value.starts_with("application/a2a+json")),
            "{binding}: {delivery}"
        );
        assert_eq!(
            delivery["authorization"],
            json!(format!("Bearer {credentials}")),
            "{binding}"
        );
        assert_eq!(delivery["notificationToken"], json!(token), "{binding}");
        secrets.extend([token.to_owned(), credentials.to_owned()]);
    }
    // Over gRPC, every call the script makes went through A2AService's own methods.
    let methods = &summary["bindings"]["GRPC"]["grpcMethods"];
    for method in [
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "CancelTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let path = json!(format!("/lf.a2a.v1.A2AService/{method}"));
        assert!(
            methods
                .as_array()
                .is_some_and(|called| called.contains(&path)),
            "{method} not called over gRPC: {methods}"
        );
    }
    // The token reached the gateway on every call, and no log line shows it, nor any push
    // config's token or credentials.
    for log in [gateway.log(), worker.log()] {
        assert!(!log.contains(TOKEN), "a log shows the bearer token");
        for secret in &secrets {
            assert!(!log.contains(secret.as_str()), "a log shows a push secret");
        }
    }
    Ok(())
}
