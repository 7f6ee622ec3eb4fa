//! `tck`: the A2A conformance agent the official A2A TCK (a2aproject/a2a-tck) drives. It is not
//! one of [`crate::builtins::all`]: a worker hosts it only with `--a2a-tck-agent`.
//!
//! The TCK picks a behaviour by the prefix of the A2A message's `messageId`, which the gateway's
//! A2A adapter hands over as the task metadata `{"a2a": {"messageId": ...}}`. The input (the
//! message's parts) is accepted whatever it is and otherwise ignored. The longest matching
//! prefix wins (`tck-artifact-file-url` over `tck-artifact-file`); an id matching none, or no id
//! at all, completes with a greeting like `tck-complete-task`.
//!
//! Outputs follow the gateway's A2A-native conventions: an object with the single key `"a2a"`
//! holding a status `message`, `artifacts`, or `reply: true` with a direct `message`. Streaming
//! behaviours emit `{"a2a": {"artifact": ..., "append": bool, "lastChunk": bool}}` deltas (A2A
//! artifact updates) and return the artifacts they streamed, whole. A failure with code
//! [`REJECTED`] is A2A's `TASK_STATE_REJECTED`.

use std::time::Duration;

use protocol::ErrorCode;
use serde_json::{Value, json};

use crate::builtins::count::LEASE_LOST;
use crate::emitter::EmitError;
use crate::entrypoint::Entrypoint;
use crate::handler::{HandlerError, HandlerOutput, TaskContext};

pub const KEY: &str = "tck";

/// The error code that maps to A2A's `TASK_STATE_REJECTED`.
pub const REJECTED: &str = "rejected";

/// What [`input_required`] asks for.
pub const INPUT_REQUEST: &str = "Input required: send a follow-up message";

/// How long `test-resubscribe-message-id` runs before completing, so the TCK can resubscribe
/// to the task while it is still working.
pub const RESUBSCRIBE_WAIT: Duration = Duration::from_secs(10);

/// The content of the file artifacts (sent as base64 in a `raw` part).
pub const FILE_CONTENT: &str = "Generated file content";

/// What the agent does for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Completes with the status message "Hello from TCK" (also the default).
    Complete,
    /// Completes with a text artifact.
    ArtifactText,
    /// Completes with a file artifact carried by URL.
    ArtifactFileUrl,
    /// Completes with a file artifact carried as base64 bytes.
    ArtifactFile,
    /// Completes with a data artifact.
    ArtifactData,
    /// Answers with a direct Message instead of a Task.
    MessageResponse,
    /// Fails with [`REJECTED`].
    Reject,
    /// Asks for more input; see [`input_required`].
    InputRequired,
    /// Streams one text artifact (`"stream"`) in a single chunk, then returns it.
    StreamText(&'static str),
    /// Streams nothing and completes with no message nor artifact.
    StreamNothing,
    /// Streams one file artifact (`"file"`) in a single chunk, then returns it.
    StreamFile,
    /// Streams one text artifact (`"chunked"`) in two chunks, then returns it whole.
    StreamChunked,
    /// Waits [`RESUBSCRIBE_WAIT`] (or until cancelled), then completes.
    Resubscribe,
}

/// `messageId` prefixes and their behaviours. Order does not matter: the longest match wins.
pub const BEHAVIOURS: &[(&str, Behaviour)] = &[
    ("tck-complete-task", Behaviour::Complete),
    ("tck-artifact-text", Behaviour::ArtifactText),
    ("tck-artifact-file-url", Behaviour::ArtifactFileUrl),
    ("tck-artifact-file", Behaviour::ArtifactFile),
    ("tck-artifact-data", Behaviour::ArtifactData),
    ("tck-message-response", Behaviour::MessageResponse),
    ("tck-reject-task", Behaviour::Reject),
    ("tck-input-required", Behaviour::InputRequired),
    (
        "tck-stream-001",
        Behaviour::StreamText("Stream hello from TCK"),
    ),
    ("tck-stream-002", Behaviour::StreamNothing),
    (
        "tck-stream-003",
        Behaviour::StreamText("Stream task lifecycle"),
    ),
    (
        "tck-stream-ordering-001",
        Behaviour::StreamText("Ordered output"),
    ),
    (
        "tck-stream-artifact-text",
        Behaviour::StreamText("Streamed text content"),
    ),
    ("tck-stream-artifact-file", Behaviour::StreamFile),
    ("tck-stream-artifact-chunked", Behaviour::StreamChunked),
    ("test-resubscribe-message-id", Behaviour::Resubscribe),
];

/// The behaviour for `message_id`: the one of the longest prefix it starts with, else
/// [`Behaviour::Complete`].
pub fn behaviour(message_id: Option<&str>) -> Behaviour {
    let Some(message_id) = message_id else {
        return Behaviour::Complete;
    };
    BEHAVIOURS
        .iter()
        .filter(|(prefix, _)| message_id.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map_or(Behaviour::Complete, |(_, behaviour)| *behaviour)
}

/// The A2A `messageId` of the task's message, from the metadata `{"a2a": {"messageId": ...}}`.
pub fn message_id(metadata: Option<&Value>) -> Option<&str> {
    metadata?.get("a2a")?.get("messageId")?.as_str()
}

pub fn entrypoint() -> Entrypoint {
    Entrypoint::new(
        KEY,
        "A2A TCK conformance agent: behaves by the message's messageId prefix",
        |_input: Value, ctx: TaskContext| run(ctx),
    )
    .streaming()
}

async fn run(ctx: TaskContext) -> Result<HandlerOutput, HandlerError> {
    let output = match behaviour(message_id(ctx.metadata.as_ref())) {
        // The one behaviour that does not finish its task.
        Behaviour::InputRequired => return Ok(input_required()),
        Behaviour::Complete => Ok(status_message("Hello from TCK")),
        Behaviour::ArtifactText => Ok(artifacts(vec![artifact(
            "text",
            json!([{"text": "Generated text content"}]),
        )])),
        Behaviour::ArtifactFileUrl => Ok(artifacts(vec![artifact(
            "file-url",
            json!([{
                "url": "https://example.com/output.txt",
                "filename": "output.txt",
                "mediaType": "text/plain",
            }]),
        )])),
        Behaviour::ArtifactFile => Ok(artifacts(vec![file_artifact()])),
        Behaviour::ArtifactData => Ok(artifacts(vec![artifact(
            "data",
            json!([{"data": {"key": "value", "count": 42}}]),
        )])),
        Behaviour::MessageResponse => Ok(json!({
            "a2a": {"reply": true, "message": {"parts": [{"text": "Direct message response"}]}}
        })),
        Behaviour::Reject => Err(HandlerError::new(REJECTED, "rejected")),
        Behaviour::StreamText(text) => {
            let streamed = artifact("stream", json!([{ "text": text }]));
            emit_chunk(&ctx, &streamed, false, true).await?;
            Ok(artifacts(vec![streamed]))
        }
        Behaviour::StreamNothing => Ok(json!({"a2a": {}})),
        Behaviour::StreamFile => {
            let streamed = file_artifact();
            emit_chunk(&ctx, &streamed, false, true).await?;
            Ok(artifacts(vec![streamed]))
        }
        Behaviour::StreamChunked => {
            emit_chunk(
                &ctx,
                &artifact("chunked", json!([{"text": "chunk-1 "}])),
                false,
                false,
            )
            .await?;
            emit_chunk(
                &ctx,
                &artifact("chunked", json!([{"text": "chunk-2"}])),
                true,
                true,
            )
            .await?;
            Ok(artifacts(vec![artifact(
                "chunked",
                json!([{"text": "chunk-1 chunk-2"}]),
            )]))
        }
        Behaviour::Resubscribe => {
            tokio::select! {
                // Checked first: a run cancelled before it started does not wait at all.
                biased;
                () = ctx.cancelled() => Err(HandlerError::cancelled()),
                () = tokio::time::sleep(RESUBSCRIBE_WAIT) => Ok(status_message("Resubscribe complete")),
            }
        }
    }?;
    Ok(HandlerOutput::new(output))
}

/// `tck-input-required`: the run ends asking for more input (`TASK_STATE_INPUT_REQUIRED`); the
/// task waits until a follow-up message resumes it, which then behaves by its own messageId.
fn input_required() -> HandlerOutput {
    HandlerOutput::input_required(json!({"parts": [{"text": INPUT_REQUEST}]}))
}

/// An artifact named as its id.
fn artifact(id: &str, parts: Value) -> Value {
    json!({"artifactId": id, "name": id, "parts": parts})
}

/// The `"file"` artifact: [`FILE_CONTENT`] as a base64 `raw` part.
fn file_artifact() -> Value {
    use base64::Engine as _;
    let raw = base64::engine::general_purpose::STANDARD.encode(FILE_CONTENT);
    artifact(
        "file",
        json!([{"raw": raw, "filename": "output.txt", "mediaType": "text/plain"}]),
    )
}

/// A completed task whose status message says `text`.
fn status_message(text: &str) -> Value {
    json!({"a2a": {"message": {"parts": [{ "text": text }]}}})
}

/// A completed task with `artifacts` and no status message.
fn artifacts(artifacts: Vec<Value>) -> Value {
    json!({"a2a": {"artifacts": artifacts}})
}

/// Emits `artifact` as an A2A artifact update delta.
async fn emit_chunk(
    ctx: &TaskContext,
    artifact: &Value,
    append: bool,
    last_chunk: bool,
) -> Result<(), HandlerError> {
    if ctx.cancel.is_cancelled() {
        return Err(HandlerError::cancelled());
    }
    let delta = json!({"a2a": {"artifact": artifact, "append": append, "lastChunk": last_chunk}});
    match ctx.events.delta(delta).await {
        Ok(_seq) => Ok(()),
        Err(EmitError::Fenced) => Err(HandlerError::new(
            LEASE_LOST,
            "The task's lease was lost while streaming an artifact",
        )),
        Err(EmitError::Store(err)) => Err(HandlerError::new(
            ErrorCode::ServiceUnavailable.as_str(),
            format!("Could not emit an artifact update: {err}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use futures::StreamExt;
    use store::{Subscription, TaskStore};

    use super::*;
    use crate::builtins::test_support::{Harness, PATIENCE, TestResult, error, output};

    /// A task of `tck` whose A2A message has `message_id`.
    async fn task(message_id: &str) -> TestResult<Harness> {
        let mut task = Harness::start(KEY, json!("hi")).await?;
        task.ctx.metadata = Some(json!({"a2a": {"messageId": message_id, "role": "ROLE_USER"}}));
        Ok(task)
    }

    /// Runs `tck` for a message with `message_id`.
    async fn run_for(message_id: &str) -> TestResult<Result<HandlerOutput, HandlerError>> {
        let task = task(message_id).await?;
        Ok(task.call(&entrypoint(), json!("hi")).await)
    }

    /// The next `n` delta events' `delta` values.
    async fn deltas(subscription: &mut Subscription, n: usize) -> TestResult<Vec<Value>> {
        let mut deltas = Vec::new();
        let mut last_seq = subscription.snapshot_seq;
        while deltas.len() < n {
            let Some(event) = tokio::time::timeout(PATIENCE, subscription.events.next()).await?
            else {
                return Err("the event stream ended early".into());
            };
            assert!(event.seq > last_seq, "sequence numbers increase");
            last_seq = event.seq;
            if event.event == "delta" {
                deltas.push(event.data["delta"].clone());
            }
        }
        Ok(deltas)
    }

    fn hello() -> Value {
        json!({"a2a": {"message": {"parts": [{"text": "Hello from TCK"}]}}})
    }

    #[tokio::test]
    async fn complete_task_says_hello() -> TestResult {
        let outcome = run_for("tck-complete-task-0a1b").await?;
        assert_eq!(output(outcome)?, hello());
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_message_id_completes_by_default() -> TestResult {
        for message_id in ["some-other-id", "", "tck-", "TCK-REJECT-TASK"] {
            let outcome = run_for(message_id).await?;
            assert_eq!(output(outcome)?, hello(), "{message_id:?}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn no_metadata_or_no_message_id_completes_by_default() -> TestResult {
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"any": ["json"]})).await?;
        assert_eq!(output(outcome)?, hello());

        for metadata in [
            json!({}),
            json!({"a2a": {}}),
            json!({"a2a": {"messageId": 7}}),
            json!("tck-reject-task"),
        ] {
            let mut task = Harness::start(KEY, json!(null)).await?;
            task.ctx.metadata = Some(metadata.clone());
            let outcome = task.call(&entrypoint(), json!(null)).await;
            assert_eq!(output(outcome)?, hello(), "{metadata}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn artifact_text() -> TestResult {
        let outcome = run_for("tck-artifact-text-1").await?;
        assert_eq!(
            output(outcome)?,
            json!({"a2a": {"artifacts": [{
                "artifactId": "text",
                "name": "text",
                "parts": [{"text": "Generated text content"}],
            }]}})
        );
        Ok(())
    }

    #[tokio::test]
    async fn artifact_file_url_wins_over_artifact_file() -> TestResult {
        let outcome = run_for("tck-artifact-file-url-1").await?;
        assert_eq!(
            output(outcome)?,
            json!({"a2a": {"artifacts": [{
                "artifactId": "file-url",
                "name": "file-url",
                "parts": [{
                    "url": "https://example.com/output.txt",
                    "filename": "output.txt",
                    "mediaType": "text/plain",
                }],
            }]}})
        );
        Ok(())
    }

    #[tokio::test]
    async fn artifact_file_carries_base64_bytes() -> TestResult {
        let outcome = run_for("tck-artifact-file-1").await?;
        let output = output(outcome)?;
        assert_eq!(
            output,
            json!({"a2a": {"artifacts": [{
                "artifactId": "file",
                "name": "file",
                "parts": [{
                    "raw": "R2VuZXJhdGVkIGZpbGUgY29udGVudA==",
                    "filename": "output.txt",
                    "mediaType": "text/plain",
                }],
            }]}})
        );
        let raw = output["a2a"]["artifacts"][0]["parts"][0]["raw"]
            .as_str()
            .unwrap_or_default();
        let bytes = base64::engine::general_purpose::STANDARD.decode(raw)?;
        assert_eq!(bytes, FILE_CONTENT.as_bytes());
        Ok(())
    }

    #[tokio::test]
    async fn artifact_data() -> TestResult {
        let outcome = run_for("tck-artifact-data-1").await?;
        assert_eq!(
            output(outcome)?,
            json!({"a2a": {"artifacts": [{
                "artifactId": "data",
                "name": "data",
                "parts": [{"data": {"key": "value", "count": 42}}],
            }]}})
        );
        Ok(())
    }

    #[tokio::test]
    async fn message_response_replies_directly() -> TestResult {
        let outcome = run_for("tck-message-response-1").await?;
        assert_eq!(
            output(outcome)?,
            json!({"a2a": {
                "reply": true,
                "message": {"parts": [{"text": "Direct message response"}]},
            }})
        );
        Ok(())
    }

    #[tokio::test]
    async fn reject_task_fails_as_rejected() -> TestResult {
        let outcome = run_for("tck-reject-task-1").await?;
        assert_eq!(error(outcome)?, HandlerError::new(REJECTED, "rejected"));
        Ok(())
    }

    #[tokio::test]
    async fn input_required_asks_for_input() -> TestResult {
        let harness = Harness::start(KEY, json!("x")).await?;
        let mut ctx = harness.ctx.clone();
        ctx.metadata = Some(json!({"a2a": {"messageId": "tck-input-required-1"}}));
        let outcome = entrypoint().handler.call(json!("x"), ctx).await;
        let output = outcome.map_err(|err| format!("handler failed: {err}"))?;
        assert!(output.awaits_input);
        assert_eq!(output.output["parts"][0]["text"], INPUT_REQUEST);
        Ok(())
    }

    #[tokio::test]
    async fn streamed_text_artifacts_are_one_last_chunk_and_returned() -> TestResult {
        for (message_id, text) in [
            ("tck-stream-001-x", "Stream hello from TCK"),
            ("tck-stream-003-x", "Stream task lifecycle"),
            ("tck-stream-ordering-001-x", "Ordered output"),
            ("tck-stream-artifact-text-x", "Streamed text content"),
        ] {
            let task = task(message_id).await?;
            let mut subscription = task.subscribe().await?;
            let outcome = task.call(&entrypoint(), json!("hi")).await;
            let streamed =
                json!({"artifactId": "stream", "name": "stream", "parts": [{"text": text}]});
            assert_eq!(
                output(outcome)?,
                json!({"a2a": {"artifacts": [streamed.clone()]}}),
                "{message_id}"
            );
            assert_eq!(
                deltas(&mut subscription, 1).await?,
                vec![json!({"a2a": {"artifact": streamed, "append": false, "lastChunk": true}})],
                "{message_id}"
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn stream_002_emits_nothing_and_returns_nothing() -> TestResult {
        let task = task("tck-stream-002-x").await?;
        let before = task.store.get(&task.task_id).await?.map(|t| t.seq);
        let outcome = task.call(&entrypoint(), json!("hi")).await;
        assert_eq!(output(outcome)?, json!({"a2a": {}}));
        let after = task.store.get(&task.task_id).await?.map(|t| t.seq);
        assert_eq!(before, after, "no event was published");
        Ok(())
    }

    #[tokio::test]
    async fn stream_artifact_file_streams_and_returns_the_file() -> TestResult {
        let task = task("tck-stream-artifact-file-x").await?;
        let mut subscription = task.subscribe().await?;
        let outcome = task.call(&entrypoint(), json!("hi")).await;
        let file = file_artifact();
        assert_eq!(file["artifactId"], json!("file"));
        assert_eq!(
            output(outcome)?,
            json!({"a2a": {"artifacts": [file.clone()]}})
        );
        assert_eq!(
            deltas(&mut subscription, 1).await?,
            vec![json!({"a2a": {"artifact": file, "append": false, "lastChunk": true}})]
        );
        Ok(())
    }

    #[tokio::test]
    async fn chunked_stream_appends_the_second_chunk_in_order() -> TestResult {
        let task = task("tck-stream-artifact-chunked-x").await?;
        let mut subscription = task.subscribe().await?;
        let outcome = task.call(&entrypoint(), json!("hi")).await;
        assert_eq!(
            output(outcome)?,
            json!({"a2a": {"artifacts": [{
                "artifactId": "chunked",
                "name": "chunked",
                "parts": [{"text": "chunk-1 chunk-2"}],
            }]}})
        );
        assert_eq!(
            deltas(&mut subscription, 2).await?,
            vec![
                json!({"a2a": {
                    "artifact": {"artifactId": "chunked", "name": "chunked", "parts": [{"text": "chunk-1 "}]},
                    "append": false,
                    "lastChunk": false,
                }}),
                json!({"a2a": {
                    "artifact": {"artifactId": "chunked", "name": "chunked", "parts": [{"text": "chunk-2"}]},
                    "append": true,
                    "lastChunk": true,
                }}),
            ]
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_cancelled_stream_emits_nothing() -> TestResult {
        let task = task("tck-stream-artifact-chunked-x").await?;
        let before = task.store.get(&task.task_id).await?.map(|t| t.seq);
        task.ctx.cancel.cancel();
        let outcome = task.call(&entrypoint(), json!("hi")).await;
        assert_eq!(error(outcome)?, HandlerError::cancelled());
        let after = task.store.get(&task.task_id).await?.map(|t| t.seq);
        assert_eq!(before, after, "no delta was published");
        Ok(())
    }

    #[tokio::test]
    async fn resubscribe_stops_waiting_when_cancelled() -> TestResult {
        let task = task("test-resubscribe-message-id-x").await?;
        let ep = entrypoint();
        let running = tokio::spawn(ep.handler.call(json!("hi"), task.ctx.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!running.is_finished(), "it waits");
        task.ctx.cancel.cancel();
        let outcome = tokio::time::timeout(PATIENCE, running).await??;
        assert_eq!(error(outcome)?, HandlerError::cancelled());
        Ok(())
    }

    #[test]
    fn the_longest_prefix_wins() {
        assert_eq!(
            behaviour(Some("tck-artifact-file-url-abc")),
            Behaviour::ArtifactFileUrl
        );
        assert_eq!(
            behaviour(Some("tck-artifact-file-abc")),
            Behaviour::ArtifactFile
        );
        assert_eq!(
            behaviour(Some("tck-stream-artifact-file-abc")),
            Behaviour::StreamFile
        );
        assert_eq!(
            behaviour(Some("tck-stream-artifact-chunked")),
            Behaviour::StreamChunked
        );
        assert_eq!(
            behaviour(Some("test-resubscribe-message-id")),
            Behaviour::Resubscribe
        );
        assert_eq!(behaviour(Some("tck-stream-")), Behaviour::Complete);
        assert_eq!(behaviour(None), Behaviour::Complete);
    }

    #[test]
    fn every_prefix_selects_its_own_behaviour() {
        for (prefix, expected) in BEHAVIOURS {
            assert_eq!(behaviour(Some(prefix)), *expected, "{prefix}");
            assert_eq!(
                behaviour(Some(&format!("{prefix}-some-uuid"))),
                *expected,
                "{prefix}"
            );
        }
    }

    #[test]
    fn reads_the_message_id_from_the_a2a_metadata() {
        let metadata = json!({"a2a": {"messageId": "tck-reject-task-1"}});
        assert_eq!(message_id(Some(&metadata)), Some("tck-reject-task-1"));
        assert_eq!(message_id(None), None);
        assert_eq!(message_id(Some(&json!({"messageId": "x"}))), None);
    }

    #[test]
    fn streams_accepts_anything_and_is_not_a_default_builtin() {
        let ep = entrypoint();
        assert_eq!(ep.key, KEY);
        assert!(ep.streaming);
        assert_eq!(ep.input_schema, json!({}));
        assert!(!crate::builtins::all().keys().contains(&KEY.to_owned()));
    }
}
