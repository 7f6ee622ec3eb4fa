//! The `worker` binary refusing a configuration at start: one line on stderr, exit code 2,
//! before it connects to anything (the Redis URL given points nowhere).

use std::process::{Command, Output};

/// Runs the worker binary with `args` and `envs` and none of the settings a developer's shell
/// may carry.
fn worker(args: &[&str], envs: &[(&str, &str)]) -> std::io::Result<Output> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_worker"));
    for inherited in [
        "REDIS_URL",
        "REDIS_CLUSTER_URLS",
        "WORKER_PRICES",
        "WORKER_SIWX",
        "WORKER_ENTRYPOINTS",
        "WORKER_RETRY_SAFE",
        "WORKER_RETRY",
        "RUST_BACKTRACE",
    ] {
        command.env_remove(inherited);
    }
    command
        .args(["--redis-url", "redis://127.0.0.1:1"])
        .args(args)
        .envs(envs.iter().copied())
        .output()
}

/// Exit code 2 and exactly `message` as the one line on stderr.
fn assert_refused(output: &Output, message: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr, format!("error: {message}\n"));
}

const PRICED_AUTH_ONLY: &str = "entrypoint \"echo\" is priced and --siwx echo:auth-only (free for any signed-in wallet): drop one, or use --siwx echo to let payers sign in again instead of paying";

#[test]
fn a_retry_policy_for_an_entrypoint_not_hosted_stops_the_worker() -> std::io::Result<()> {
    let flags = worker(&["--entrypoints", "echo", "--retry", "echo=1,fial=2"], &[])?;
    assert_refused(
        &flags,
        "--retry names entrypoints this worker does not host: fial",
    );
    let bad = worker(&["--retry", "fail"], &[])?;
    assert_eq!(bad.status.code(), Some(2));
    Ok(())
}

#[test]
fn a_priced_auth_only_entrypoint_stops_the_worker() -> std::io::Result<()> {
    let flags = worker(&["--price", "echo=0.001", "--siwx", "echo:auth-only"], &[])?;
    assert_refused(&flags, PRICED_AUTH_ONLY);
    // The same from the environment, among other settings that are fine, and with MPP.
    let env = worker(
        &[],
        &[
            ("WORKER_PRICES", "summarize=0.002,echo=0.001:mpp"),
            ("WORKER_SIWX", "summarize,echo:auth-only"),
        ],
    )?;
    assert_refused(&env, PRICED_AUTH_ONLY);
    Ok(())
}

#[test]
fn a_worker_id_an_operator_could_not_name_stops_the_worker() -> std::io::Result<()> {
    for bad in ["w 1", "w/1", &"w".repeat(129)] {
        let output = worker(&[], &[("WORKER_ID", bad)])?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("a worker id is 1 to 128 of A-Z a-z 0-9 . _ : @ -"),
            "{stderr}"
        );
    }
    Ok(())
}
