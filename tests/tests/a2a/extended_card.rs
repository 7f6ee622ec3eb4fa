//! The authenticated extended Agent Card and private entrypoints against real processes: a
//! private redis-server, a worker hosting the built-ins with `echo` private
//! (`WORKER_PRIVATE=echo`), and a gateway with a member file (`MEMBER_TOKENS_FILE`) serving
//! every binding (JSON-RPC, HTTP+JSON, gRPC) and the Lucid routes. One embedded gateway
//! (`--worker-private`) signs its cards.
//!
//! One behaviour per test: the private entrypoint is on no public surface; a caller who is not
//! a member gets, on every route and binding, exactly the answer an unknown entrypoint gets; a
//! member runs it everywhere; the extended card is refused without a member's token and shows
//! a member the private skill and its entitlements; a signed extended card verifies.

use a2a_pb::a2a_service_client::A2aServiceClient;
use a2a_pb::pbconv;
use harness::TestResult;
use harness::a2a::{A2a, skill_ids};
use harness::cluster::{Cluster, free_port};
use protocol::token::AccessToken;
use reqwest::header::{CACHE_CONTROL, HeaderMap};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_types::StatusExt;

const MEMBER: &str = "extended-suite-member-0123456789";
const STRANGER: &str = "extended-suite-stranger-0123456789";
/// The private entrypoint, and a key no worker hosts.
const PRIVATE: &str = "echo";
const UNKNOWN: &str = "nosuch";
const EXTENSION: &str = "https://taskcluster.dev/a2a/ext/member/v1";

/// The member file: `alice` holds [`MEMBER`].
fn member_file(dir: &tempfile::TempDir) -> TestResult<String> {
    let hash = AccessToken::parse(MEMBER)?.owner_hash();
    let path = dir.path().join("members");
    std::fs::write(
        &path,
        format!("# the suite's member\nalice {}\n", hash.as_str()),
    )?;
    Ok(path.display().to_string())
}

/// The cluster, its gRPC port, and the folder holding the member file.
struct Members {
    cluster: Cluster,
    grpc: u16,
    _dir: tempfile::TempDir,
}

impl Members {
    async fn start() -> TestResult<Members> {
        let dir = tempfile::tempdir()?;
        let members = member_file(&dir)?;
        let grpc = free_port()?;
        let listen = format!("127.0.0.1:{grpc}");
        let cluster = Cluster::builder()
            .worker("w1", &[("WORKER_PRIVATE", PRIVATE)])
            .gateway(
                "g1",
                &[
                    ("GRPC_LISTEN", listen.as_str()),
                    ("MEMBER_TOKENS_FILE", members.as_str()),
                ],
            )
            // The worker registers every entrypoint at once: `count` listed, `echo` is there.
            .skills(&["count", "sleep"])
            .start()
            .await?;
        Ok(Members {
            cluster,
            grpc,
            _dir: dir,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.cluster.base())
    }

    /// The harness's A2A client of the gateway with `token` as `Authorization: Bearer` (none:
    /// no header) and the A2A version.
    fn a2a(&self, token: Option<&str>) -> A2a {
        A2a::new(self.cluster.http.clone(), self.cluster.base()).with_bearer(token)
    }

    /// `method path` as [`Members::a2a`] of `token`: the status, headers and JSON body (`null`
    /// when there is none).
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> TestResult<(StatusCode, HeaderMap, Value)> {
        self.a2a(token).call(method, path, body).await
    }

    async fn rpc(
        &self,
        token: Option<&str>,
        method: &str,
        params: Value,
    ) -> TestResult<(StatusCode, Value)> {
        self.a2a(token).rpc_call(method, params).await
    }

    async fn grpc_client(&self) -> TestResult<A2aServiceClient<Channel>> {
        Ok(A2aServiceClient::connect(format!("http://127.0.0.1:{}", self.grpc)).await?)
    }
}

/// `message` with `token` (if any) as `authorization` metadata and `a2a-version: 1.0`.
fn grpc_call<T>(token: Option<&str>, message: T) -> TestResult<Request<T>> {
    let mut request = Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
    }
    request.metadata_mut().insert("a2a-version", "1.0".parse()?);
    Ok(request)
}

/// An A2A `SendMessageRequest` (ProtoJSON) for `skill` with one data part.
fn a2a_send(skill: &str) -> Value {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({
        "message": {
            "messageId": format!("ext-{skill}-{}-{id}", std::process::id()),
            "role": "ROLE_USER",
            "parts": [{"data": {"private": "hello"}}],
            "metadata": {"skillId": skill},
        }
    })
}

/// `text` with the entrypoint name `key` replaced, so that the answers about two names
/// compare equal exactly when they differ only by the name asked for.
fn unnamed(text: &str, key: &str) -> String {
    text.replace(key, "KEY")
}

/// [`unnamed`] for a JSON answer, compared as JSON (the order of an object's members is not
/// part of the answer).
fn unnamed_json(value: &Value, key: &str) -> TestResult<Value> {
    Ok(serde_json::from_str(&unnamed(&value.to_string(), key))?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_entrypoint_is_on_no_public_surface() -> TestResult {
    let members = Members::start().await?;
    for token in [None, Some(STRANGER), Some(MEMBER)] {
        let (_, _, lucid) = members
            .call(Method::GET, "/.well-known/agent-card.json", token, None)
            .await?;
        let ids = skill_ids(&lucid);
        assert!(ids.contains(&"count".to_owned()), "{lucid}");
        assert!(!ids.contains(&PRIVATE.to_owned()), "{lucid}");
        assert!(lucid["entrypoints"].get(PRIVATE).is_none(), "{lucid}");

        let (_, _, a2a) = members
            .call(Method::GET, "/a2a/.well-known/agent-card.json", token, None)
            .await?;
        assert!(!skill_ids(&a2a).contains(&PRIVATE.to_owned()), "{a2a}");
        assert_eq!(a2a["capabilities"]["extendedAgentCard"], true, "{a2a}");

        let (_, _, listed) = members
            .call(Method::GET, "/entrypoints", token, None)
            .await?;
        let keys: Vec<&str> = listed["items"]
            .as_array()
            .ok_or("no items")?
            .iter()
            .filter_map(|item| item["key"].as_str())
            .collect();
        assert!(
            keys.contains(&"count") && !keys.contains(&PRIVATE),
            "{listed}"
        );

        let (_, _, openapi) = members
            .call(Method::GET, "/openapi.json", token, None)
            .await?;
        let paths = openapi["paths"].as_object().ok_or("no paths")?;
        assert!(paths.contains_key("/entrypoints/count/invoke"), "{openapi}");
        assert!(
            !paths
                .keys()
                .any(|path| path.contains(&format!("/{PRIVATE}/"))),
            "{openapi}"
        );
    }
    let landing = members
        .cluster
        .http
        .get(members.url("/"))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        !landing.contains(&format!("/entrypoints/{PRIVATE}/")),
        "{landing}"
    );
    Ok(())
}

/// Without a member's token, on every Lucid route and every A2A binding, the private
/// entrypoint is answered exactly as a key no worker hosts (the name aside).
#[tokio::test(flavor = "multi_thread")]
async fn a_private_entrypoint_is_unknown_to_anyone_but_a_member() -> TestResult {
    let members = Members::start().await?;
    let mut grpc = members.grpc_client().await?;
    for token in [None, Some(STRANGER)] {
        let who = token.unwrap_or("no token");
        for route in ["invoke", "stream"] {
            let input = Some(json!({"input": {"x": 1}}));
            let private = members
                .call(
                    Method::POST,
                    &format!("/entrypoints/{PRIVATE}/{route}"),
                    token,
                    input.clone(),
                )
                .await?;
            let unknown = members
                .call(
                    Method::POST,
                    &format!("/entrypoints/{UNKNOWN}/{route}"),
                    token,
                    input,
                )
                .await?;
            assert_eq!(
                private.0,
                StatusCode::NOT_FOUND,
                "{route} {who}: {}",
                private.2
            );
            assert_eq!(
                (private.0, &private.2),
                (unknown.0, &unknown.2),
                "{route} {who}"
            );
        }

        let task = |skill: &str| {
            Some(json!({"skillId": skill, "message": {"role": "user", "content": {"text": "{}"}}}))
        };
        let private = members
            .call(Method::POST, "/tasks", token, task(PRIVATE))
            .await?;
        let unknown = members
            .call(Method::POST, "/tasks", token, task(UNKNOWN))
            .await?;
        assert_eq!(
            private.0,
            StatusCode::NOT_FOUND,
            "POST /tasks {who}: {}",
            private.2
        );
        assert_eq!(private.0, unknown.0, "POST /tasks {who}");
        assert_eq!(
            unnamed_json(&private.2, PRIVATE)?,
            unnamed_json(&unknown.2, UNKNOWN)?
        );

        // A2A wants a token: without one every skill is refused alike, before any lookup.
        for method in ["SendMessage", "SendStreamingMessage"] {
            let (private_status, private) = members.rpc(token, method, a2a_send(PRIVATE)).await?;
            let (unknown_status, unknown) = members.rpc(token, method, a2a_send(UNKNOWN)).await?;
            assert!(private.get("error").is_some(), "{method} {who}: {private}");
            assert_eq!(private_status, unknown_status, "{method} {who}");
            assert_eq!(
                unnamed_json(&private["error"], PRIVATE)?,
                unnamed_json(&unknown["error"], UNKNOWN)?,
                "{method} {who}"
            );
        }

        let private = members
            .call(
                Method::POST,
                "/a2a/v1/message:send",
                token,
                Some(a2a_send(PRIVATE)),
            )
            .await?;
        let unknown = members
            .call(
                Method::POST,
                "/a2a/v1/message:send",
                token,
                Some(a2a_send(UNKNOWN)),
            )
            .await?;
        assert!(private.0.is_client_error(), "REST {who}: {}", private.2);
        assert_eq!(private.0, unknown.0, "REST {who}");
        assert_eq!(
            unnamed_json(&private.2, PRIVATE)?,
            unnamed_json(&unknown.2, UNKNOWN)?,
            "REST {who}"
        );

        let send = |skill: &str| -> TestResult<a2a_pb::SendMessageRequest> {
            let request: a2a::SendMessageRequest = serde_json::from_value(a2a_send(skill))?;
            Ok(pbconv::to_proto_send_message_request(&request))
        };
        let private = grpc
            .send_message(grpc_call(token, send(PRIVATE)?)?)
            .await
            .err()
            .ok_or("gRPC ran the private skill")?;
        let unknown = grpc
            .send_message(grpc_call(token, send(UNKNOWN)?)?)
            .await
            .err()
            .ok_or("gRPC ran an unknown skill")?;
        assert_eq!(private.code(), unknown.code(), "gRPC {who}");
        assert_eq!(
            unnamed(private.message(), PRIVATE),
            unnamed(unknown.message(), UNKNOWN),
            "gRPC {who}"
        );
        assert_eq!(
            private.get_details_error_info().map(|info| info.reason),
            unknown.get_details_error_info().map(|info| info.reason),
            "gRPC {who}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_runs_a_private_entrypoint_on_every_route_and_binding() -> TestResult {
    let members = Members::start().await?;
    let token = Some(MEMBER);
    let (status, _, invoked) = members
        .call(
            Method::POST,
            &format!("/entrypoints/{PRIVATE}/invoke"),
            token,
            Some(json!({"input": {"private": "hello"}})),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "{invoked}");
    assert!(invoked.to_string().contains("hello"), "{invoked}");

    let (status, _, created) = members
        .call(
            Method::POST,
            "/tasks",
            token,
            Some(
                json!({"skillId": PRIVATE, "message": {"role": "user", "content": {"text": "{}"}}}),
            ),
        )
        .await?;
    assert!(status.is_success(), "POST /tasks: {status} {created}");
    assert!(created["taskId"].is_string(), "{created}");

    let completed = |result: &Value| {
        result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            || result.get("message").is_some()
    };
    let (_, answer) = members.rpc(token, "SendMessage", a2a_send(PRIVATE)).await?;
    assert!(completed(&answer["result"]), "JSON-RPC: {answer}");
    let (status, _, answer) = members
        .call(
            Method::POST,
            "/a2a/v1/message:send",
            token,
            Some(a2a_send(PRIVATE)),
        )
        .await?;
    assert_eq!(status, StatusCode::OK, "REST: {answer}");
    assert!(completed(&answer), "REST: {answer}");

    let request: a2a::SendMessageRequest = serde_json::from_value(a2a_send(PRIVATE))?;
    let mut grpc = members.grpc_client().await?;
    let answer = grpc
        .send_message(grpc_call(
            token,
            pbconv::to_proto_send_message_request(&request),
        )?)
        .await?
        .into_inner();
    let answer = pbconv::from_proto_send_message_response(&answer).ok_or("an empty answer")?;
    assert!(completed(&serde_json::to_value(answer)?), "gRPC");
    Ok(())
}

/// The member's extended card: every skill, the member extension, never cached.
fn check_member_card(card: &Value, what: &str) -> TestResult {
    let ids = skill_ids(card);
    assert!(
        ids.contains(&PRIVATE.to_owned()) && ids.contains(&"count".to_owned()),
        "{what}: {card}"
    );
    assert_eq!(
        card["capabilities"]["extendedAgentCard"], true,
        "{what}: {card}"
    );
    let extensions = card["capabilities"]["extensions"]
        .as_array()
        .ok_or_else(|| format!("{what}: no extensions: {card}"))?;
    let member = extensions
        .iter()
        .find(|extension| extension["uri"] == EXTENSION)
        .ok_or_else(|| format!("{what}: no member extension: {card}"))?;
    assert_eq!(member["params"]["member"], "alice", "{what}: {card}");
    assert_eq!(
        member["params"]["privateSkills"],
        json!([PRIVATE]),
        "{what}: {card}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_extended_card_is_a_members_on_every_binding() -> TestResult {
    let members = Members::start().await?;
    let mut grpc = members.grpc_client().await?;
    for token in [None, Some(STRANGER)] {
        let who = token.unwrap_or("no token");
        let (status, refused) = members
            .rpc(token, "GetExtendedAgentCard", json!({}))
            .await?;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "JSON-RPC {who}: {refused}"
        );
        assert_eq!(
            refused["error"]["data"][0]["reason"], "UNAUTHENTICATED",
            "{refused}"
        );
        assert!(refused.get("result").is_none(), "{refused}");

        let (status, headers, refused) = members
            .call(Method::GET, "/a2a/v1/extendedAgentCard", token, None)
            .await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "REST {who}: {refused}");
        assert!(headers.contains_key("www-authenticate"), "REST {who}");
        assert_eq!(refused["error"]["status"], "UNAUTHENTICATED", "{refused}");

        let refused = grpc
            .get_extended_agent_card(grpc_call(
                token,
                a2a_pb::GetExtendedAgentCardRequest::default(),
            )?)
            .await
            .err()
            .ok_or_else(|| format!("gRPC {who}: an extended card was answered"))?;
        assert_eq!(
            refused.code(),
            Code::Unauthenticated,
            "gRPC {who}: {refused:?}"
        );
    }

    let (status, answer) = members
        .rpc(Some(MEMBER), "GetExtendedAgentCard", json!({}))
        .await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    check_member_card(&answer["result"], "JSON-RPC")?;

    let (status, headers, card) = members
        .call(Method::GET, "/a2a/v1/extendedAgentCard", Some(MEMBER), None)
        .await?;
    assert_eq!(status, StatusCode::OK, "{card}");
    assert_eq!(
        headers
            .get(CACHE_CONTROL)
            .and_then(|value| value.to_str().ok()),
        Some("private, no-store")
    );
    check_member_card(&card, "REST")?;
    // The public card is not changed by it.
    let (_, _, public) = members
        .call(
            Method::GET,
            "/a2a/.well-known/agent-card.json",
            Some(MEMBER),
            None,
        )
        .await?;
    assert!(
        public["capabilities"].get("extensions").is_none(),
        "{public}"
    );

    let card = grpc
        .get_extended_agent_card(grpc_call(
            Some(MEMBER),
            a2a_pb::GetExtendedAgentCardRequest::default(),
        )?)
        .await?
        .into_inner();
    let card = serde_json::to_value(pbconv::from_proto_agent_card(&card))?;
    check_member_card(&card, "gRPC")
}

/// An embedded gateway signing its cards (`CARD_SIGNING_KEY_FILE`, `PUBLIC_URL`) with `echo`
/// private (`--worker-private`): the member's extended card carries signatures that verify
/// against the gateway's JWKS, on both HTTP bindings.
#[tokio::test(flavor = "multi_thread")]
async fn a_signed_extended_card_verifies_against_the_jwks() -> TestResult {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use client::trust::{Jwks, Verification, verify_card};

    let dir = tempfile::tempdir()?;
    let members = member_file(&dir)?;
    let keys = dir.path().join("card-keys.json");
    let d = URL_SAFE_NO_PAD.encode([9u8; 32]);
    std::fs::write(
        &keys,
        format!(r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"ext","d":"{d}"}}]}}"#),
    )?;
    // The port chosen first: PUBLIC_URL names it. No REDIS_URL: an embedded gateway.
    let port = free_port()?;
    let origin = format!("http://127.0.0.1:{port}");
    let gateway = harness::cluster::gateway_process(
        "gateway",
        port,
        "signing",
        &["--worker-private", PRIVATE],
        &[
            ("PUBLIC_URL", origin.clone()),
            ("CARD_SIGNING_KEY_FILE", keys.display().to_string()),
            ("MEMBER_TOKENS_FILE", members),
        ],
    )
    .await?;
    let http = harness::cluster::http()?;
    let member = A2a::new(http.clone(), &origin).with_bearer(Some(MEMBER));
    let jwks = http
        .get(format!("{origin}/.well-known/jwks.json"))
        .send()
        .await?
        .bytes()
        .await?;
    let jwks = Jwks::from_json(&jwks)?;

    let (_, _, rest) = member
        .call(Method::GET, "/a2a/v1/extendedAgentCard", None)
        .await?;
    let (_, rpc) = member.rpc_call("GetExtendedAgentCard", json!({})).await?;
    for (card, what) in [(&rest, "REST"), (&rpc["result"], "JSON-RPC")] {
        assert!(
            skill_ids(card).contains(&PRIVATE.to_owned()),
            "{what}: {card}"
        );
        let verified = verify_card(card, &jwks, true)?;
        assert!(
            matches!(&verified, Verification::Verified { kid } if kid == "ext"),
            "{what}: {verified:?}"
        );
        // The member extension is under the signature: changing it breaks it.
        let mut forged = card.clone();
        forged["capabilities"]["extensions"][0]["params"]["member"] = json!("mallory");
        assert!(verify_card(&forged, &jwks, true).is_err(), "{what}");
    }
    // The public card is signed too, and lists no private skill.
    let public: Value = http
        .get(format!("{origin}/a2a/.well-known/agent-card.json"))
        .send()
        .await?
        .json()
        .await?;
    assert!(
        !skill_ids(&public).contains(&PRIVATE.to_owned()),
        "{public}"
    );
    verify_card(&public, &jwks, true)?;
    drop(gateway);
    Ok(())
}
