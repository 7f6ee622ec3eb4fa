//! The `taskctl` binary against a real cluster (gateway, worker, private redis-server): every
//! subcommand, `--json` output that parses (one document per line), token sources, and the
//! documented exit codes (0 ok, 1 remote error, 2 usage, 3 network).

use std::process::Output;
use std::time::Duration;

use harness::TestResult;
use harness::cluster::{Cluster, free_port};
use harness::process::binary;
use serde_json::Value;

const PATIENCE: Duration = Duration::from_secs(30);

/// A worker and a gateway under `/agents/a` (the harness's cluster builder), once `taskctl card`
/// shows the worker's entrypoints.
async fn cluster() -> TestResult<Cluster> {
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("BASE_PATH", "/agents/a")])
        .skills(&["count"])
        .start()
        .await?;
    // The CLI itself sees the entrypoints too (the readiness this suite has always used).
    let start = tokio::time::Instant::now();
    loop {
        let out = taskctl(&["card", cluster.base(), "--json"], &[]).await?;
        if out.status.success()
            && json_lines(&out)?
                .first()
                .is_some_and(|card| card["entrypoints"].get("count").is_some())
        {
            return Ok(cluster);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("cluster never came up:\n{}", cluster.logs()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs taskctl with `args` and extra environment (TASK_ACCESS_TOKEN is cleared unless given).
async fn taskctl(args: &[&str], envs: &[(&str, &str)]) -> TestResult<Output> {
    let mut command = tokio::process::Command::new(binary("taskctl")?);
    command.args(args).env_remove("TASK_ACCESS_TOKEN");
    for (key, value) in envs {
        command.env(key, value);
    }
    Ok(tokio::time::timeout(PATIENCE, command.output()).await??)
}

/// Standard output as JSON documents, one per line; every line must parse.
fn json_lines(out: &Output) -> TestResult<Vec<Value>> {
    let text = String::from_utf8(out.stdout.clone())?;
    let mut documents = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        documents.push(
            serde_json::from_str(line).map_err(|err| format!("{err}: {line:?} in {text:?}"))?,
        );
    }
    Ok(documents)
}

fn one(out: &Output) -> TestResult<Value> {
    let mut documents = json_lines(out)?;
    if documents.len() != 1 {
        return Err(format!(
            "expected one JSON document, got {}: {}\nstderr: {}",
            documents.len(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(documents.remove(0))
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_with_json_output() -> TestResult {
    let cluster = cluster().await?;
    let url = cluster.base();

    let card = one(&taskctl(&["card", url, "--json"], &[]).await?)?;
    assert_eq!(card["protocolVersion"], "1.0");
    assert!(
        card["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("/agents/a/"))
    );

    let out = taskctl(&["invoke", url, "echo", r#"{"x":1}"#, "--json"], &[]).await?;
    assert_eq!(code(&out), Some(0));
    let result = one(&out)?;
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["output"]["x"], 1);

    let out = taskctl(&["stream", url, "count", r#"{"n":3}"#, "--json"], &[]).await?;
    assert_eq!(
        code(&out),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out)?;
    assert_eq!(
        events.first().map(|e| e["type"].clone()),
        Some("run-start".into())
    );
    assert_eq!(events.iter().filter(|e| e["type"] == "delta").count(), 3);
    assert_eq!(
        events.last().map(|e| e["data"]["status"].clone()),
        Some("succeeded".into())
    );

    // send without a token: one is generated, and printed because it was just created.
    let out = taskctl(&["send", url, "echo", r#"{"y":2}"#, "--json"], &[]).await?;
    assert_eq!(code(&out), Some(0));
    let created = one(&out)?;
    let token = created["accessToken"]
        .as_str()
        .ok_or("no token printed")?
        .to_owned();
    let task_id = created["taskId"].as_str().ok_or("no taskId")?.to_owned();
    assert!(created["idempotencyKey"].is_string());
    assert_eq!(created["status"], "running");

    // A token from the environment is used and never printed.
    let out = taskctl(
        &["send", url, "echo", r#"{"z":3}"#, "--wait", "--json"],
        &[("TASK_ACCESS_TOKEN", &token)],
    )
    .await?;
    assert_eq!(
        code(&out),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let waited = one(&out)?;
    assert!(waited.get("accessToken").is_none());
    assert!(!stdout(&out).contains(&token));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(&token));
    assert_eq!(waited["status"], "completed");
    assert_eq!(waited["task"]["result"]["output"]["z"], 3);

    // A token from a file.
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{token}\n"))?;
    let token_file = token_file.to_str().ok_or("path")?;
    let with_file = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend([
            "--token-file".to_owned(),
            token_file.to_owned(),
            "--json".to_owned(),
        ]);
        all
    };
    let run = |args: Vec<String>| async move {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        taskctl(&refs, &[]).await
    };

    let out = run(with_file(&["get", url, &task_id])).await?;
    assert_eq!(code(&out), Some(0));
    let task = one(&out)?;
    assert_eq!(task["taskId"], task_id.as_str());
    assert!(!stdout(&out).contains(&token));

    let out = run(with_file(&["list", url])).await?;
    let list = one(&out)?;
    assert_eq!(list["tasks"].as_array().map(Vec::len), Some(2));
    let out = run(with_file(&[
        "list", url, "--status", "running", "--limit", "5",
    ]))
    .await?;
    assert_eq!(one(&out)?["tasks"].as_array().map(Vec::len), Some(0));

    let out = run(with_file(&["watch", url, &task_id])).await?;
    assert_eq!(code(&out), Some(0));
    let events = json_lines(&out)?;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds, ["statusUpdate", "resultUpdate"]);

    // cancel: a running sleep is cancelled; again, it is a remote error (exit 1).
    let out = taskctl(
        &[
            "send",
            url,
            "sleep",
            r#"{"ms":60000}"#,
            "--json",
            "--token",
            &token,
        ],
        &[],
    )
    .await?;
    let slow = one(&out)?;
    let slow_id = slow["taskId"].as_str().ok_or("no taskId")?.to_owned();
    let out = run(with_file(&["cancel", url, &slow_id])).await?;
    assert_eq!(code(&out), Some(0));
    assert_eq!(one(&out)?["status"], "cancelled");
    let out = run(with_file(&["cancel", url, &slow_id])).await?;
    assert_eq!(code(&out), Some(1));
    let error = one(&out)?;
    assert_eq!(error["error"]["code"], "invalid_state");
    assert_eq!(error["error"]["exitCode"], 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn human_output_and_exit_codes() -> TestResult {
    let cluster = cluster().await?;
    let url = cluster.base();

    let out = taskctl(&["--output", "human", "card", url], &[]).await?;
    assert_eq!(code(&out), Some(0));
    let text = stdout(&out);
    assert!(
        text.contains("service   ") && text.contains("/agents/a/"),
        "{text}"
    );
    assert!(
        text.contains("count") && text.contains("[stream]"),
        "{text}"
    );

    // Not a terminal: auto means JSON.
    assert!(one(&taskctl(&["card", url], &[]).await?)?.is_object());

    let out = taskctl(
        &[
            "--output",
            "human",
            "send",
            url,
            "echo",
            r#""hello""#,
            "--wait",
        ],
        &[],
    )
    .await?;
    assert_eq!(
        code(&out),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("token     "), "{text}");
    assert!(text.contains("status    completed"), "{text}");
    assert!(text.contains("hello"), "{text}");

    let out = taskctl(
        &["--output", "human", "stream", url, "count", r#"{"n":2}"#],
        &[],
    )
    .await?;
    assert_eq!(code(&out), Some(0));
    assert!(
        stdout(&out).contains("[run-end] succeeded"),
        "{}",
        stdout(&out)
    );

    // A task that fails: --wait exits 1.
    let out = taskctl(
        &[
            "send",
            url,
            "fail",
            r#"{"code":"boom"}"#,
            "--wait",
            "--json",
        ],
        &[],
    )
    .await?;
    assert_eq!(
        code(&out),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let documents = json_lines(&out)?;
    assert_eq!(
        documents.first().map(|d| d["status"].clone()),
        Some("failed".into())
    );

    // Usage: no token, input that is not JSON, an unknown flag.
    let out = taskctl(&["get", url, "t1"], &[]).await?;
    assert_eq!(code(&out), Some(2));
    let out = taskctl(&["invoke", url, "echo", "not json"], &[]).await?;
    assert_eq!(code(&out), Some(2));
    let out = taskctl(&["card", url, "--bogus"], &[]).await?;
    assert_eq!(code(&out), Some(2));

    // Remote: an unknown task (a 404 from the agent).
    let token = "0123456789abcdef0123456789abcdef";
    let out = taskctl(
        &["get", url, "no-such-task", "--token", token, "--json"],
        &[],
    )
    .await?;
    assert_eq!(code(&out), Some(1));
    assert_eq!(one(&out)?["error"]["code"], "task_not_found");

    // Network: nobody listens there.
    let closed = format!("http://127.0.0.1:{}", free_port()?);
    let out = taskctl(&["card", &closed, "--json"], &[]).await?;
    assert_eq!(code(&out), Some(3));
    assert_eq!(one(&out)?["error"]["exitCode"], 3);

    // A card from outside the allowlist is refused (remote error).
    let out = taskctl(
        &[
            "card",
            url,
            "--allow-origin",
            "http://127.0.0.1:1",
            "--json",
        ],
        &[],
    )
    .await?;
    assert_eq!(code(&out), Some(1));
    Ok(())
}

/// Serves a card naming itself, and drops the connection of any other request (task creation).
async fn card_then_drop() -> TestResult<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let card = serde_json::json!({"name": "fake", "url": format!("{origin}/")}).to_string();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let card = card.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                if request.starts_with(b"GET /.well-known/agent-card.json ") {
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{card}",
                        card.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                } else if request.starts_with(b"GET ") {
                    let _ = socket
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    Ok(origin)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dropped_send_prints_the_keys_to_reconcile_with() -> TestResult {
    let origin = card_then_drop().await?;
    let out = taskctl(&["send", &origin, "echo", "{}", "--json"], &[]).await?;
    assert_eq!(
        code(&out),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let error = one(&out)?;
    assert!(error["error"]["idempotencyKey"].is_string());
    // Generated here, so printed: the only way to find the task later.
    assert_eq!(
        error["error"]["accessToken"].as_str().map(str::len),
        Some(64)
    );

    // A token the caller gave is never printed.
    let token = "caller-token-0123456789abcdef";
    let out = taskctl(
        &[
            "send",
            &origin,
            "echo",
            "{}",
            "--json",
            "--idempotency-key",
            "key-0123456789abcdefgh",
        ],
        &[("TASK_ACCESS_TOKEN", token)],
    )
    .await?;
    assert_eq!(code(&out), Some(3));
    let error = one(&out)?;
    assert_eq!(error["error"]["idempotencyKey"], "key-0123456789abcdefgh");
    assert!(error["error"].get("accessToken").is_none());
    assert!(!stdout(&out).contains(token));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(token));
    Ok(())
}

/// Interop of the two halves of card signing: `taskctl card --verify` (the client's trust
/// policy, `serde_jcs`) accepts a card our gateway signed (`CARD_SIGNING_KEY_FILE`,
/// `serde_json_canonicalizer`) with the keys of the gateway's own JWKS, and refuses it under a
/// pinned JWKS that does not hold the signing key.
#[tokio::test(flavor = "multi_thread")]
async fn taskctl_verifies_the_card_our_gateway_signed() -> TestResult {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    let dir = tempfile::tempdir()?;
    let keys = dir.path().join("card-keys.json");
    let d = URL_SAFE_NO_PAD.encode([7u8; 32]);
    std::fs::write(
        &keys,
        format!(r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"interop","d":"{d}"}}]}}"#),
    )?;
    // The port chosen first: PUBLIC_URL names it. No REDIS_URL: an embedded gateway.
    let port = free_port()?;
    let origin = format!("http://127.0.0.1:{port}");
    let _gateway = harness::cluster::gateway_process(
        "gateway",
        port,
        "signing",
        &[],
        &[
            ("PUBLIC_URL", origin.clone()),
            ("CARD_SIGNING_KEY_FILE", keys.display().to_string()),
        ],
    )
    .await?;

    let verified = taskctl(&["card", &origin, "--verify", "--json"], &[]).await?;
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    assert_eq!(one(&verified)?["verified"]["kid"], "interop");

    // A pinned JWKS without the signing key: the same card is refused.
    let other = dir.path().join("other-jwks.json");
    let jwks: Value = reqwest::get(format!("{origin}/.well-known/jwks.json"))
        .await?
        .json()
        .await?;
    let mut foreign = jwks.clone();
    foreign["keys"][0]["kid"] = Value::from("someone-else");
    std::fs::write(&other, serde_json::to_vec(&foreign)?)?;
    let other = other.display().to_string();
    let refused = taskctl(&["card", &origin, "--verify", "--jwks", &other], &[]).await?;
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("signature"));
    Ok(())
}
