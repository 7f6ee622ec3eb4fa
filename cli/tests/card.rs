//! `taskctl card` against an in-process card server: `--verify` with the origin's JWKS or a
//! pinned `--jwks` file, an unsigned card, a revoked kid, and a card naming another origin
//! (`--allow-origin`); the global `--verify` (or `TASKCTL_VERIFY`) stopping every other
//! command at the card.

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn jwk(key: &SigningKey, kid: &str) -> Value {
    let point = key.verifying_key().to_encoded_point(false);
    let coordinate = |bytes: Option<&p256::FieldBytes>| {
        URL_SAFE_NO_PAD.encode(bytes.map(|b| &b[..]).unwrap_or_default())
    };
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": coordinate(point.x()), "y": coordinate(point.y())})
}

/// `card` with one ES256 signature over its JCS bytes.
fn sign(mut card: Value, key: &SigningKey, kid: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let protected = URL_SAFE_NO_PAD.encode(json!({"alg": "ES256", "kid": kid}).to_string());
    let payload = URL_SAFE_NO_PAD.encode(serde_jcs::to_vec(&card)?);
    let signature: Signature = key.sign(format!("{protected}.{payload}").as_bytes());
    card["signatures"] = json!([{"protected": protected, "signature": URL_SAFE_NO_PAD.encode(signature.to_bytes())}]);
    Ok(card)
}

/// Serves the card `make` builds for the server's origin, and `jwks`; returns the origin.
async fn serve(
    make: impl FnOnce(&str) -> Result<Value, Box<dyn std::error::Error>>,
    jwks: Value,
) -> Result<String, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let served = Arc::new((make(&origin)?, jwks));
    let app = Router::new().fallback(move |uri: Uri| {
        let served = Arc::clone(&served);
        async move {
            let body = match uri.path() {
                "/.well-known/agent-card.json" => &served.0,
                "/.well-known/jwks.json" => &served.1,
                _ => {
                    return Response::builder()
                        .status(StatusCode::NOT_FOUND)
                        .body(Body::empty())
                        .unwrap_or_default();
                }
            };
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap_or_default()
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(origin)
}

fn card_at(origin: &str) -> Value {
    json!({"name": "signed", "version": "1.0.0",
           "supportedInterfaces": [{"url": format!("{origin}/"), "protocolBinding": "HTTP+JSON"}]})
}

async fn taskctl(args: &[&str], envs: &[(&str, &str)]) -> Result<Output, std::io::Error> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_taskctl"));
    command
        .args(args)
        .env_remove("TASKCTL_ALLOW_ORIGIN")
        .env_remove("TASKCTL_VERIFY")
        .env_remove("TASKCTL_JWKS")
        .env_remove("TASKCTL_REVOKED_KID");
    for (name, value) in envs {
        command.env(name, value);
    }
    command.output().await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn jwks_file(name: &str, jwks: &Value) -> Result<PathBuf, std::io::Error> {
    let path =
        std::env::temp_dir().join(format!("taskctl-{name}-{}.jwks.json", std::process::id()));
    std::fs::write(&path, jwks.to_string())?;
    Ok(path)
}

#[tokio::test]
async fn verify_accepts_a_good_signature_and_refuses_a_foreign_or_missing_one() -> TestResult {
    let signer = SigningKey::from_slice(&[7; 32])?;
    let jwks = json!({"keys": [jwk(&signer, "k1")]});
    let origin = serve(|origin| sign(card_at(origin), &signer, "k1"), jwks).await?;

    let out = taskctl(&["card", &origin, "--verify", "--output", "human"], &[]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("signature verified (key k1)"));
    let out = taskctl(&["card", &origin, "--verify", "--json"], &[]).await?;
    let document: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(document["verified"]["kid"], "k1");
    assert_eq!(document["card"]["name"], "signed");

    // Pinned keys that do not include k1: the origin's own JWKS is not consulted.
    let other = SigningKey::from_slice(&[9; 32])?;
    let pinned = jwks_file("other", &json!({"keys": [jwk(&other, "k9")]}))?;
    let pinned = pinned.to_str().ok_or("temp path is not UTF-8")?;
    let out = taskctl(&["card", &origin, "--verify", "--jwks", pinned], &[]).await?;
    let _ = std::fs::remove_file(pinned);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("unknown key \"k1\""),
        "{}",
        text(&out.stderr)
    );

    let unsigned = serve(|origin| Ok(card_at(origin)), json!({"keys": []})).await?;
    let out = taskctl(&["card", &unsigned, "--verify"], &[]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not signed"),
        "{}",
        text(&out.stderr)
    );
    // Without --verify the unsigned card is shown.
    let out = taskctl(&["card", &unsigned], &[]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test]
async fn a_card_naming_another_origin_needs_allow_origin() -> TestResult {
    let origin = serve(
        |_| Ok(card_at("http://elsewhere.example:8080")),
        json!({"keys": []}),
    )
    .await?;
    let out = taskctl(&["card", &origin], &[]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not the card's origin"),
        "{}",
        text(&out.stderr)
    );
    let allowed = format!("{origin},http://elsewhere.example:8080");
    let out = taskctl(
        &["card", &origin, "--output", "human"],
        &[("TASKCTL_ALLOW_ORIGIN", &allowed)],
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("service   http://elsewhere.example:8080/"));
    let out = taskctl(
        &[
            "--allow-origin",
            &origin,
            "--allow-origin",
            "http://elsewhere.example:8080",
            "card",
            &origin,
        ],
        &[],
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test]
async fn a_revoked_kid_is_refused() -> TestResult {
    let signer = SigningKey::from_slice(&[7; 32])?;
    let jwks = json!({"keys": [jwk(&signer, "k1")]});
    let origin = serve(|origin| sign(card_at(origin), &signer, "k1"), jwks).await?;
    let out = taskctl(&["card", &origin, "--verify", "--revoked-kid", "k0"], &[]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = taskctl(
        &[
            "--revoked-kid",
            "k0",
            "--revoked-kid",
            "k1",
            "--verify",
            "card",
            &origin,
        ],
        &[],
    )
    .await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("revoked key \"k1\""),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}

/// Every command that talks to an agent fetches its card first: with --verify (or
/// TASKCTL_VERIFY=1) an unsigned card stops each one there, with one line saying why, before
/// any task is touched.
#[tokio::test]
async fn every_command_verifies_the_card_when_asked() -> TestResult {
    let unsigned = serve(|origin| Ok(card_at(origin)), json!({"keys": []})).await?;
    let u = unsigned.as_str();
    let commands: [&[&str]; 7] = [
        &["send", u, "echo", "{}", "--token", "t0123456789abcdef"],
        &["invoke", u, "echo"],
        &["stream", u, "echo"],
        &["get", u, "task-1", "--token", "t0123456789abcdef"],
        &["list", u, "--token", "t0123456789abcdef"],
        &["cancel", u, "task-1", "--token", "t0123456789abcdef"],
        &["watch", u, "task-1", "--token", "t0123456789abcdef"],
    ];
    let refused = "taskctl: card signature refused: the card is not signed";
    for command in commands {
        let mut flagged = command.to_vec();
        flagged.push("--verify");
        for (args, envs) in [
            (flagged.as_slice(), &[][..]),
            (command, &[("TASKCTL_VERIFY", "1")][..]),
        ] {
            let out = taskctl(args, envs).await?;
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(stderr.starts_with(refused), "{args:?}: {stderr}");
        }
        // TASKCTL_VERIFY=0 is off: the command goes past the card (and fails later, here).
        let out = taskctl(command, &[("TASKCTL_VERIFY", "0")]).await?;
        assert!(
            !text(&out.stderr).contains("signature"),
            "{command:?}: {}",
            text(&out.stderr)
        );
    }
    Ok(())
}
