//! Settings under hostile eyes (issue 29): secrets never shown by `--help` nor logged, and the
//! dev facilitator kept on loopback unless told otherwise. Real binaries, a real redis-server.

use std::process::{Command, Output, Stdio};

use harness::TestResult;
use harness::cluster::{PATIENCE, free_port, wait_healthy};
use harness::process::{ServiceProcess, binary};
use harness::redis_server::RedisServer;

/// What every secret-bearing variable is set to: must never be printed.
const CANARY: &str = "s3cr3t-canary";

/// Runs `name` with `args` and `envs` (nothing else from this process's Redis settings) to exit.
fn run(name: &str, args: &[&str], envs: &[(&str, String)]) -> TestResult<Output> {
    let mut command = Command::new(binary(name)?);
    command
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_URLS")
        .stdin(Stdio::null());
    for (key, value) in envs {
        command.env(key, value);
    }
    Ok(command.output()?)
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every secret-bearing variable any binary reads, set to a value carrying the canary.
fn secret_envs() -> Vec<(&'static str, String)> {
    vec![
        ("REDIS_URL", format!("redis://:{CANARY}@127.0.0.1:1/")),
        (
            "REDIS_CLUSTER_URLS",
            format!("redis://:{CANARY}@127.0.0.1:2,redis://:{CANARY}@127.0.0.1:3"),
        ),
        ("MPP_SECRET", format!("{CANARY}-{CANARY}-{CANARY}")),
        (
            "FACILITATOR_URL",
            format!("https://user:{CANARY}@facilitator.example/"),
        ),
        ("TASKCTL_PAY_KEY", format!("0x{CANARY}")),
        ("TASK_ACCESS_TOKEN", CANARY.to_owned()),
    ]
}

#[test]
fn help_never_shows_a_secret_value() -> TestResult<()> {
    for name in ["gateway", "worker", "facilitator", "taskctl"] {
        let output = run(name, &["--help"], &secret_envs())?;
        let text = printed(&output);
        assert!(output.status.success(), "{name} --help failed:\n{text}");
        assert!(
            text.contains("Usage"),
            "{name} --help printed no usage:\n{text}"
        );
        assert!(
            !text.contains(CANARY),
            "{name} --help shows a secret:\n{text}"
        );
    }
    // The variables are still named, only their values hidden.
    let text = printed(&run("gateway", &["--help"], &secret_envs())?);
    assert!(text.contains("REDIS_URL"), "{text}");
    assert!(text.contains("MPP_SECRET"), "{text}");
    assert!(text.contains("FACILITATOR_URL"), "{text}");
    Ok(())
}

/// A gateway (and a worker) given a Redis URL with a password: the password refused by a real
/// redis-server (it has none configured) and, on a closed port, never reached. Either way the
/// process stops with an error, and nothing it printed carries the password.
#[test]
fn a_redis_password_never_reaches_the_logs() -> TestResult<()> {
    let redis = RedisServer::start()?;
    let urls = [
        format!("redis://:{CANARY}@127.0.0.1:{}/", redis.port()),
        format!("redis://default:{CANARY}@127.0.0.1:{}/", free_port()?),
    ];
    for url in urls {
        for (name, listen) in [
            ("gateway", vec!["--listen", "127.0.0.1:0"]),
            ("worker", vec![]),
        ] {
            // Not cluster::gateway/worker: this process must refuse to start, never get healthy.
            let mut process = ServiceProcess::start(
                name,
                name,
                &listen,
                &[
                    ("REDIS_URL", url.clone()),
                    ("REDIS_TIMEOUT_MS", "2000".to_owned()),
                ],
            )?;
            let status = process.wait_exit(PATIENCE)?;
            let log = process.log();
            assert!(!status.success(), "{name} started on {url}:\n{log}");
            assert!(!log.trim().is_empty(), "{name} said nothing");
            assert!(!log.contains(CANARY), "{name} logged a secret:\n{log}");
        }
    }
    Ok(())
}

#[test]
fn the_dev_facilitator_refuses_a_public_listen_address() -> TestResult<()> {
    for listen in ["0.0.0.0:0", "[::]:0", "example.com:8402"] {
        // A process (not harness::paid::Facilitator, which waits for health): one that is not
        // refused serves until killed, and must fail the wait.
        let mut process =
            ServiceProcess::start("facilitator", "facilitator", &["--listen", listen], &[])?;
        let status = process.wait_exit(PATIENCE)?;
        let text = process.log();
        assert_eq!(status.code(), Some(2), "{listen}:\n{text}");
        assert_eq!(text.trim().lines().count(), 1, "{listen}:\n{text}");
        assert!(text.contains("--allow-public-listen"), "{text}");
    }
    let help = printed(&run("facilitator", &["--help"], &[])?);
    assert!(help.contains("development only"), "{help}");
    assert!(help.contains("--allow-public-listen"), "{help}");
    Ok(())
}

#[tokio::test]
async fn the_dev_facilitator_listens_publicly_when_told() -> TestResult<()> {
    for (listen, allow) in [("0.0.0.0", true), ("127.0.0.1", false)] {
        let port = free_port()?;
        let envs = if allow {
            vec![("FACILITATOR_ALLOW_PUBLIC_LISTEN", "true".to_owned())]
        } else {
            vec![]
        };
        let address = format!("{listen}:{port}");
        // Not harness::paid::Facilitator: the point is this listen address, which it fixes to
        // loopback.
        let mut process =
            ServiceProcess::start("facilitator", "facilitator", &["--listen", &address], &envs)?;
        wait_healthy(&process, &format!("http://127.0.0.1:{port}")).await?;
        let log = process.log();
        assert!(log.contains("development only"), "{log}");
        process.kill()?;
    }
    Ok(())
}
