//! Signed Agent Cards (A2A v1.0 §8.4): with a key file and a public URL, both card paths carry
//! one JWS per key (ES256 for P-256, EdDSA for Ed25519) over the RFC 8785 bytes of the card
//! without `signatures`, verifiable with the keys `/.well-known/jwks.json` serves; a tampered
//! card verifies with none; without a key file nothing is signed; a key file without a public
//! URL stops the gateway; SIGHUP rotates the keys of a running gateway. Driven through
//! `gateway::app` in embedded mode, and the real binary for the refusal and the rotation.

use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use clap::Parser;
use gateway::core::card_signing::CardSigner;
use gateway::core::config::GatewayConfig;
use http_body_util::BodyExt;
use p256::EncodedPoint;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use serde_json::{Value, json};
use sighup::RunningGateway;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

const PATIENCE: Duration = Duration::from_secs(10);
const PUBLIC: &str = "https://agent.example";
const CARDS: [&str; 2] = [
    "/.well-known/agent-card.json",
    "/a2a/.well-known/agent-card.json",
];

/// A private JWK for a fixed scalar (any nonzero 32 bytes below the group order will do).
fn private_jwk(kid: &str, byte: u8) -> TestResult<Value> {
    let key = SigningKey::from_slice(&[byte; 32])?;
    let point = key.verifying_key().to_encoded_point(false);
    Ok(json!({
        "kty": "EC", "crv": "P-256", "kid": kid,
        "d": B64.encode([byte; 32]),
        "x": B64.encode(point.x().ok_or("x")?),
        "y": B64.encode(point.y().ok_or("y")?),
    }))
}

/// A private Ed25519 JWK (RFC 8037) for a fixed seed.
fn ed_jwk(kid: &str, byte: u8) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "d": B64.encode([byte; 32])})
}

/// Writes a JWK Set of P-256 `keys` to a file of this test's own.
fn key_file(name: &str, keys: &[(&str, u8)]) -> TestResult<PathBuf> {
    let keys = keys
        .iter()
        .map(|(kid, byte)| private_jwk(kid, *byte))
        .collect::<TestResult<Vec<_>>>()?;
    jwk_file(name, &keys)
}

/// Writes a JWK Set of `keys` (private JWKs) to a file of this test's own.
fn jwk_file(name: &str, keys: &[Value]) -> TestResult<PathBuf> {
    let path =
        std::env::temp_dir().join(format!("card-signing-{}-{name}.json", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(&json!({ "keys": keys }))?)?;
    Ok(path)
}

struct Gateway {
    app: Router,
    shutdown: CancellationToken,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn start(args: &[&str]) -> TestResult<Gateway> {
    let config =
        GatewayConfig::try_parse_from(std::iter::once("gateway").chain(args.iter().copied()))?;
    let signer = CardSigner::from_config(&config).map_err(|err| err.to_string())?;
    let shutdown = CancellationToken::new();
    let mut state = gateway::embedded::start(config, shutdown.clone(), &TaskTracker::new());
    state.card_signer = signer;
    // The card lists the embedded worker's entrypoints: wait for them, so it stays put.
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
    Ok(Gateway {
        app: gateway::app(state),
        shutdown,
    })
}

/// GET `path` with a hostile `Host`: status, ETag and body.
async fn get(app: &Router, path: &str) -> TestResult<(StatusCode, String, Vec<u8>)> {
    let request = Request::get(path)
        .header(header::HOST, "evil.example")
        .header("x-forwarded-host", "evil.example")
        .body(Body::empty())?;
    let response = app.clone().oneshot(request).await?;
    let status = response.status();
    let etag = response
        .headers()
        .get(header::ETAG)
        .and_then(|etag| etag.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = response.into_body().collect().await?.to_bytes().to_vec();
    Ok((status, etag, body))
}

/// A served public key.
enum Public {
    Es256(VerifyingKey),
    EdDsa(ed25519_dalek::VerifyingKey),
}

/// The served JWK Set as verifying keys by kid.
async fn jwks(app: &Router) -> TestResult<Vec<(String, Public)>> {
    let (status, _, body) = get(app, "/.well-known/jwks.json").await?;
    assert_eq!(status, StatusCode::OK);
    public_keys(&body)
}

fn public_keys(body: &[u8]) -> TestResult<Vec<(String, Public)>> {
    let set: Value = serde_json::from_slice(body)?;
    let mut keys = Vec::new();
    for key in set["keys"].as_array().ok_or("keys")? {
        assert!(key.get("d").is_none(), "the JWKS shows a private key");
        let coordinate = |name: &str| -> TestResult<Vec<u8>> {
            Ok(B64.decode(key[name].as_str().ok_or("coordinate")?)?)
        };
        let public = if key["kty"] == "OKP" {
            let x: [u8; 32] = coordinate("x")?.try_into().map_err(|_| "x")?;
            Public::EdDsa(ed25519_dalek::VerifyingKey::from_bytes(&x)?)
        } else {
            let (x, y) = (coordinate("x")?, coordinate("y")?);
            let point = EncodedPoint::from_affine_coordinates(
                x.as_slice().into(),
                y.as_slice().into(),
                false,
            );
            Public::Es256(VerifyingKey::from_encoded_point(&point)?)
        };
        keys.push((key["kid"].as_str().ok_or("kid")?.to_owned(), public));
    }
    Ok(keys)
}

/// The kids whose signature on `card` verifies (per §8.4: JCS of the card without
/// `signatures`, detached payload), each with the algorithm of its key.
fn verified_kids(card: &Value, keys: &[(String, Public)]) -> TestResult<Vec<String>> {
    let mut unsigned = card.clone();
    let signatures = unsigned
        .as_object_mut()
        .ok_or("card")?
        .remove("signatures")
        .ok_or("no signatures")?;
    let payload = B64.encode(serde_json_canonicalizer::to_vec(&unsigned)?);
    let mut kids = Vec::new();
    for entry in signatures.as_array().ok_or("signatures")? {
        let protected = entry["protected"].as_str().ok_or("protected")?;
        let header: Value = serde_json::from_slice(&B64.decode(protected)?)?;
        let kid = header["kid"].as_str().ok_or("kid")?;
        let (_, key) = keys.iter().find(|(id, _)| id == kid).ok_or("unknown kid")?;
        let raw = B64.decode(entry["signature"].as_str().ok_or("sig")?)?;
        let input = format!("{protected}.{payload}");
        let good = match key {
            Public::Es256(key) => {
                assert_eq!(header["alg"], "ES256");
                key.verify(input.as_bytes(), &Signature::from_slice(&raw)?)
                    .is_ok()
            }
            Public::EdDsa(key) => {
                assert_eq!(header["alg"], "EdDSA");
                key.verify_strict(
                    input.as_bytes(),
                    &ed25519_dalek::Signature::from_slice(&raw)?,
                )
                .is_ok()
            }
        };
        if good {
            kids.push(kid.to_owned());
        }
    }
    Ok(kids)
}

#[tokio::test]
async fn both_cards_are_signed_per_key_over_the_public_url() -> TestResult {
    let file = key_file("two", &[("old", 7), ("new", 9)])?;
    let file = file.to_str().ok_or("path")?;
    let gateway = start(&["--public-url", PUBLIC, "--card-signing-key-file", file]).await?;
    let keys = jwks(&gateway.app).await?;
    assert_eq!(keys.len(), 2);
    for path in CARDS {
        let (status, _, body) = get(&gateway.app, path).await?;
        assert_eq!(status, StatusCode::OK, "{path}");
        let text = String::from_utf8(body.clone())?;
        // Signed over the public URL, whatever the request's headers said.
        assert!(!text.contains("evil.example"), "{path}: {text}");
        assert!(text.contains(PUBLIC), "{path}: {text}");
        let card: Value = serde_json::from_slice(&body)?;
        assert_eq!(verified_kids(&card, &keys)?, ["old", "new"], "{path}");

        if path.starts_with("/a2a") {
            // §8.4.1: an empty scope list is a default value, omitted from the card signed
            // and served alike.
            assert_eq!(
                card["securityRequirements"][0]["schemes"]["bearer"],
                json!({})
            );
        }

        let mut tampered = card.clone();
        tampered["name"] = json!("Someone else");
        assert!(verified_kids(&tampered, &keys)?.is_empty(), "{path}");
        let mut moved = card.clone();
        let object = moved.as_object_mut().ok_or("card")?;
        object.insert("url".into(), json!("https://evil.example/"));
        assert!(verified_kids(&moved, &keys)?.is_empty(), "{path}");
    }
    std::fs::remove_file(file)?;
    Ok(())
}

#[tokio::test]
async fn a_key_change_changes_the_etag_and_no_key_signs_nothing() -> TestResult {
    let one = key_file("one", &[("old", 7)])?;
    let two = key_file("rotating", &[("old", 7), ("new", 9)])?;
    let signed_once = start(&[
        "--public-url",
        PUBLIC,
        "--card-signing-key-file",
        one.to_str().ok_or("path")?,
    ])
    .await?;
    let signed_twice = start(&[
        "--public-url",
        PUBLIC,
        "--card-signing-key-file",
        two.to_str().ok_or("path")?,
    ])
    .await?;
    let unsigned = start(&["--public-url", PUBLIC]).await?;
    for path in CARDS {
        let (_, once, body) = get(&signed_once.app, path).await?;
        let card: Value = serde_json::from_slice(&body)?;
        assert_eq!(
            verified_kids(&card, &jwks(&signed_once.app).await?)?,
            ["old"]
        );
        let (_, twice, _) = get(&signed_twice.app, path).await?;
        let (_, plain, body) = get(&unsigned.app, path).await?;
        assert!(once != twice && twice != plain && once != plain, "{path}");
        // The same bytes (and ETag) on every request: signed once per card.
        assert_eq!(get(&signed_once.app, path).await?.1, once);
        let card: Value = serde_json::from_slice(&body)?;
        assert!(
            card.get("signatures").is_none_or(Value::is_null),
            "{path}: {card}"
        );
    }
    assert_eq!(
        get(&unsigned.app, "/.well-known/jwks.json").await?.0,
        StatusCode::NOT_FOUND
    );
    std::fs::remove_file(one)?;
    std::fs::remove_file(two)?;
    Ok(())
}

#[test]
fn a_key_file_without_a_public_url_stops_the_gateway() -> TestResult {
    let file = key_file("nopublic", &[("old", 7)])?;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_gateway"))
        .env_clear()
        .env("CARD_SIGNING_KEY_FILE", &file)
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .stdin(std::process::Stdio::null())
        .output()?;
    std::fs::remove_file(file)?;
    assert!(!output.status.success());
    let printed = String::from_utf8_lossy(&output.stderr);
    assert!(printed.contains("PUBLIC_URL"), "{printed}");
    Ok(())
}

/// The workspace's target dir, from this test binary: `<target>/<profile>/deps/<test>`.
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    if dir.file_name().and_then(|name| name.to_str()) == Some("deps") {
        dir = dir.parent()?;
    }
    dir.parent().map(std::path::Path::to_path_buf)
}

/// `tests/python/a2a_sdk_card_signature.py`: the official SDK (`a2a-sdk[signing]`, in the venv
/// of `scripts/a2a-sdk-venv`, or `A2A_SDK_PYTHON`) verifies the served A2A card per the spec
/// with its own JCS and PyJWT, and its `create_signature_verifier` still differs only by
/// dropping empty members (see docs/a2a.md).
#[tokio::test]
async fn the_official_python_sdk_verifies_the_signed_card_per_the_spec() -> TestResult {
    let python = match std::env::var_os("A2A_SDK_PYTHON").filter(|value| !value.is_empty()) {
        Some(python) => PathBuf::from(python),
        None => target_dir()
            .ok_or("cannot locate the target dir")?
            .join("a2a-sdk-venv/bin/python"),
    };
    let output = sdk_check(
        python.as_os_str(),
        "python/a2a_sdk_card_signature.py",
        "run `bash scripts/a2a-sdk-venv` (a2a-sdk[signing])",
    )
    .await?;
    assert!(
        output.status.success()
            && output.stdout.starts_with(b"ok")
            && String::from_utf8_lossy(&output.stdout).contains("algs: ES256 EdDSA"),
        "{}\n{}\nrun `bash scripts/a2a-sdk-venv` if PyJWT is missing (a2a-sdk[signing])",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// `tests/js/a2a_sdk_card_signature.mjs`: the official JavaScript SDK (`@a2a-js/sdk`, pinned in
/// tests/js and installed by `scripts/a2a-js-sdk`) and `jose` verify the served A2A card per the
/// spec, and the SDK's `verifyAgentCardSignature` differs only by dropping empty members, as
/// the Python SDK's does (see docs/a2a.md).
#[tokio::test]
async fn the_official_javascript_sdk_verifies_the_signed_card_per_the_spec() -> TestResult {
    let node = std::env::var_os("NODE").unwrap_or("node".into());
    let output = sdk_check(
        &node,
        "js/a2a_sdk_card_signature.mjs",
        "Node.js 20 or later is needed",
    )
    .await?;
    assert!(
        output.status.success() && output.stdout.starts_with(b"ok"),
        "{}\n{}\nrun `bash scripts/a2a-js-sdk` if @a2a-js/sdk is missing",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Serves a gateway signing with one ES256 and one EdDSA key, runs `program` on
/// `tests/<script>` with the A2A card's and the JWKS's URLs, and returns what it printed.
/// The key file is named after the script's folder, so that the checks can run side by side.
/// `setup` says how to get `program` when it cannot be run.
async fn sdk_check(
    program: &std::ffi::OsStr,
    script: &str,
    setup: &str,
) -> TestResult<std::process::Output> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let public = format!("http://{}", listener.local_addr()?);
    let name = script.split('/').next().unwrap_or("sdk");
    let file = jwk_file(name, &[private_jwk("old", 7)?, ed_jwk("new", 5)])?;
    let gateway = start(&[
        "--public-url",
        &public,
        "--card-signing-key-file",
        file.to_str().ok_or("path")?,
    ])
    .await?;
    let server = tokio::spawn(
        axum::serve(listener, gateway.app.clone())
            .with_graceful_shutdown(gateway.shutdown.clone().cancelled_owned())
            .into_future(),
    );
    let run = tokio::process::Command::new(program)
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests")
                .join(script),
        )
        .arg(format!("{public}/a2a/.well-known/agent-card.json"))
        .arg(format!("{public}/.well-known/jwks.json"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .map_err(|_| "the SDK check did not finish")?
        .map_err(|err| {
            let program = std::path::Path::new(program).display();
            format!("cannot run {program} ({err}): {setup}")
        })?;
    gateway.shutdown.cancel();
    server.await??;
    std::fs::remove_file(file)?;
    Ok(output)
}

#[path = "card_signing/sighup.rs"]
mod sighup;

/// A rotation as docs/a2a.md describes it, on the real binary: key A; A and B (EdDSA) after a
/// SIGHUP, both signing; B alone after another. Each step changes the JWKS, the cards'
/// signatures (the member's extended card included) and their ETags at once. An unusable file then keeps B and logs one error that
/// shows nothing of the file.
#[tokio::test]
async fn sighup_rotates_the_keys_of_a_running_gateway() -> TestResult {
    let file = key_file("sighup", &[("a", 7)])?;
    let gateway = RunningGateway::start(Some(&file), PUBLIC)?;
    let keys = gateway.jwks_with(&["a"]).await?;
    assert_eq!(
        verified_kids(&gateway.extended_card().await?, &keys)?,
        ["a"]
    );
    let mut etags = Vec::new();
    for path in CARDS {
        let (card, etag) = gateway.card(path).await?;
        assert_eq!(verified_kids(&card, &keys)?, ["a"], "{path}");
        etags.push(etag);
    }

    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"keys": [private_jwk("a", 7)?, ed_jwk("b", 5)]}))?,
    )?;
    gateway.hangup()?;
    let keys = gateway.jwks_with(&["a", "b"]).await?;
    assert_eq!(
        verified_kids(&gateway.extended_card().await?, &keys)?,
        ["a", "b"]
    );
    for (path, before) in CARDS.into_iter().zip(&mut etags) {
        let (card, etag) = gateway.card(path).await?;
        assert_eq!(verified_kids(&card, &keys)?, ["a", "b"], "{path}");
        assert_ne!(&etag, before, "{path}");
        *before = etag;
    }

    std::fs::write(
        &file,
        serde_json::to_vec(&json!({"keys": [ed_jwk("b", 5)]}))?,
    )?;
    gateway.hangup()?;
    let keys = gateway.jwks_with(&["b"]).await?;
    assert_eq!(
        verified_kids(&gateway.extended_card().await?, &keys)?,
        ["b"]
    );
    for (path, before) in CARDS.into_iter().zip(&etags) {
        let (card, etag) = gateway.card(path).await?;
        assert_eq!(verified_kids(&card, &keys)?, ["b"], "{path}");
        assert_ne!(&etag, before, "{path}");
    }

    let secret = B64.encode([5; 32]);
    std::fs::write(&file, format!("{{\"keys\": [{{\"d\": \"{secret}\"}}"))?;
    gateway.hangup()?;
    let log = gateway.log_with("the previous keys stay in use").await?;
    assert!(!log.contains(&secret), "{log}");
    assert_eq!(
        log.matches("the previous keys stay in use").count(),
        1,
        "{log}"
    );
    gateway.jwks_with(&["b"]).await?;
    std::fs::remove_file(file)?;
    Ok(())
}

/// SIGHUP with no key file is answered with one log line: a reload sent to every process of a
/// host never stops a gateway (the signal's default action would).
#[tokio::test]
async fn sighup_without_a_key_file_leaves_the_gateway_running() -> TestResult {
    let mut gateway = RunningGateway::start(None, PUBLIC)?;
    gateway.healthy().await?;
    gateway.hangup()?;
    gateway
        .log_with("SIGHUP: no card signing key file to reload")
        .await?;
    assert!(!gateway.exited()?, "the gateway stopped on SIGHUP");
    gateway.healthy().await?;
    Ok(())
}
