//! The runtime's tasks as A2A v1.0 sees them, and A2A messages as the runtime's inputs.
//!
//! - States: a task not running yet (reserved, claimed, queued) is `TASK_STATE_SUBMITTED`, a
//!   running one `TASK_STATE_WORKING`; `completed`, `failed` and `cancelled` are
//!   `TASK_STATE_COMPLETED`, `TASK_STATE_FAILED` and `TASK_STATE_CANCELED`.
//! - A task: its id, its context (the task id when it was created without one: A2A requires
//!   one), its status with the time of its last transition and, for a failure, an agent
//!   message carrying the error (text and data); the result as one artifact (a text part for
//!   a string output, a data part otherwise); the history as the user message that started
//!   it, rebuilt from the stored input.
//! - An input: one data part is its value; one text part is parsed as JSON when it is JSON and
//!   kept as text otherwise (the Lucid profile's rule for `content.text`); several parts are
//!   the array of their values, files as `{url|bytes, mediaType, filename}`.
//! - The skill: the message's `metadata.skillId`, else the configured default, else the only
//!   skill; several skills and none named is an invalid-params error.

use std::collections::HashMap;

use a2a::{
    Artifact, Message, Part, PartContent, Role, Task, TaskArtifactUpdateEvent, TaskState,
    TaskStatus,
};
use base64::Engine;
use protocol::TaskStatus as RuntimeStatus;
use serde_json::{Value, json};
use store::{Phase, StoredTask};

/// The A2A state of a runtime task in `phase` with `status`.
pub fn state_of(status: RuntimeStatus, phase: Phase) -> TaskState {
    match status {
        RuntimeStatus::Running if phase == Phase::Active => TaskState::Working,
        RuntimeStatus::Running if phase == Phase::Waiting => TaskState::InputRequired,
        RuntimeStatus::Running => TaskState::Submitted,
        RuntimeStatus::Completed => TaskState::Completed,
        RuntimeStatus::Failed => TaskState::Failed,
        RuntimeStatus::Cancelled => TaskState::Canceled,
    }
}

/// `stored` as an A2A task, with at most `history_length` messages of history (`None`: all).
pub fn task_of(stored: &StoredTask, history_length: Option<usize>) -> Task {
    let task = &stored.task;
    let context_id = context_of(stored);
    let timestamp = i64::try_from(task.updated_at.0)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis);
    let native = task
        .result
        .as_ref()
        .and_then(|result| native_of(&result.output));
    let mut state = state_of(task.status, stored.phase);
    let message = match (&task.error, &native) {
        (Some(error), _) => {
            if error.code == REJECTED {
                state = TaskState::Rejected;
            }
            Some(agent_message(
                &task.task_id,
                &context_id,
                vec![
                    Part::text(error.message.clone()),
                    Part::data(json!({"code": error.code, "message": error.message})),
                ],
            ))
        }
        (None, Some(native)) => native
            .message
            .clone()
            .map(|parts| agent_message(&task.task_id, &context_id, parts)),
        (None, None) => stored
            .input_request
            .as_ref()
            .filter(|_| stored.phase == Phase::Waiting)
            .map(|request| request_message(&task.task_id, &context_id, request)),
    };
    let artifacts = match (&task.result, native) {
        (Some(_), Some(native)) => Some(native.artifacts_for(&task.task_id)),
        (Some(result), None) => Some(vec![Artifact {
            artifact_id: format!("{}-result", task.task_id),
            name: Some("result".into()),
            description: None,
            parts: vec![part_of(&result.output)],
            metadata: None,
            extensions: None,
        }]),
        (None, _) => None,
    }
    .filter(|artifacts| !artifacts.is_empty());
    let mut history = Vec::with_capacity(stored.turns.len() * 2 + 1);
    for (i, turn) in stored.turns.iter().enumerate() {
        let metadata = turn.get("metadata");
        history.push(user_message(
            &task.task_id,
            &context_id,
            metadata
                .and_then(message_id_in)
                .unwrap_or_else(|| format!("{}-input-{i}", task.task_id)),
            turn.get("input").unwrap_or(&Value::Null),
            metadata,
        ));
        let mut request = request_message(
            &task.task_id,
            &context_id,
            turn.get("request").unwrap_or(&Value::Null),
        );
        request.message_id = format!("{}-request-{i}", task.task_id);
        history.push(request);
    }
    history.push(user_message(
        &task.task_id,
        &context_id,
        message_id_of(stored).unwrap_or_else(|| format!("{}-input", task.task_id)),
        &stored.invocation.input,
        stored.invocation.metadata.as_ref(),
    ));
    // `historyLength` keeps the most recent messages.
    if let Some(length) = history_length {
        history.drain(..history.len().saturating_sub(length));
    }
    Task {
        id: task.task_id.clone(),
        context_id,
        status: TaskStatus {
            state,
            message,
            timestamp,
        },
        artifacts,
        history: Some(history),
        metadata: None,
    }
}

/// The error code a skill fails with to refuse the work: `TASK_STATE_REJECTED`.
pub const REJECTED: &str = "rejected";

/// The context of a stored task (its id when it was created without one: A2A requires one).
pub fn context_of(stored: &StoredTask) -> String {
    stored
        .task
        .context_id
        .clone()
        .unwrap_or_else(|| stored.task.task_id.clone())
}

/// The `messageId` of the A2A message that started the task's current turn, kept in its
/// metadata.
pub fn message_id_of(stored: &StoredTask) -> Option<String> {
    message_id_in(stored.invocation.metadata.as_ref()?)
}

fn message_id_in(metadata: &Value) -> Option<String> {
    metadata
        .get("a2a")?
        .get("messageId")?
        .as_str()
        .map(str::to_owned)
}

/// A user message of task `task_id`: the turn with `input` and `metadata`.
fn user_message(
    task_id: &str,
    context_id: &str,
    message_id: String,
    input: &Value,
    metadata: Option<&Value>,
) -> Message {
    Message {
        message_id,
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::User,
        parts: sent_parts(metadata, input),
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// What a run asked its caller for, as the agent message A2A shows with
/// `TASK_STATE_INPUT_REQUIRED`: `{"parts": [...]}` as written, anything else as one part.
pub fn request_message(task_id: &str, context_id: &str, request: &Value) -> Message {
    #[derive(serde::Deserialize)]
    struct Request {
        parts: Vec<Part>,
    }
    let parts = serde_json::from_value::<Request>(request.clone())
        .map(|request| request.parts)
        .unwrap_or_else(|_| vec![part_of(request)]);
    let mut message = agent_message(task_id, context_id, parts);
    message.message_id = format!("{task_id}-request");
    message
}

/// The runtime metadata of a task created by the A2A message `message_id`, with the
/// message's own metadata: what a skill sees as `ctx.metadata`.
///
/// The message's parts are kept too (`parts`) when the input does not give them back as they
/// were sent (a text part that read as JSON, several parts, a file's name or media type), so
/// the task's history shows the message the caller sent.
pub fn metadata_of(message: &Message, input: &Value) -> Value {
    let mut a2a = serde_json::Map::new();
    a2a.insert(
        "messageId".into(),
        Value::String(message.message_id.clone()),
    );
    if let Some(metadata) = &message.metadata {
        a2a.insert(
            "metadata".into(),
            Value::Object(metadata.clone().into_iter().collect()),
        );
    }
    if message.parts != [part_of(input)]
        && let Ok(parts) = serde_json::to_value(&message.parts)
    {
        a2a.insert("parts".into(), parts);
    }
    json!({ "a2a": a2a })
}

/// The parts of the message that started a turn: as sent when they were kept, else rebuilt
/// from the turn's input.
fn sent_parts(metadata: Option<&Value>, input: &Value) -> Vec<Part> {
    metadata
        .and_then(|metadata| metadata.get("a2a")?.get("parts"))
        .and_then(|parts| serde_json::from_value(parts.clone()).ok())
        .unwrap_or_else(|| vec![part_of(input)])
}

/// A run's output written for A2A: an object whose only member is `a2a`, holding
/// `message` (`{parts}`: the final status message), `artifacts` (`[{artifactId?, name?,
/// description?, parts}]`) and `reply` (`true`: the caller of `SendMessage` gets the message
/// itself rather than the task).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Native {
    pub message: Option<Vec<Part>>,
    pub artifacts: Vec<NativeArtifact>,
    pub reply: bool,
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NativeArtifact {
    #[serde(default)]
    pub artifact_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub parts: Vec<Part>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NativeWire {
    #[serde(default)]
    message: Option<NativeMessage>,
    #[serde(default)]
    artifacts: Vec<NativeArtifact>,
    #[serde(default)]
    reply: bool,
}

#[derive(serde::Deserialize)]
struct NativeMessage {
    parts: Vec<Part>,
}

impl Native {
    /// The artifacts with their ids (`{task}-artifact-{i}` where the run named none).
    pub fn artifacts_for(&self, task_id: &str) -> Vec<Artifact> {
        self.artifacts
            .iter()
            .enumerate()
            .map(|(i, artifact)| Artifact {
                artifact_id: artifact
                    .artifact_id
                    .clone()
                    .unwrap_or_else(|| format!("{task_id}-artifact-{i}")),
                name: artifact.name.clone(),
                description: artifact.description.clone(),
                parts: artifact.parts.clone(),
                metadata: None,
                extensions: None,
            })
            .collect()
    }
}

/// `output` read as an A2A-native output, if it is one (see [`Native`]).
pub fn native_of(output: &Value) -> Option<Native> {
    let Value::Object(map) = output else {
        return None;
    };
    if map.len() != 1 {
        return None;
    }
    let wire: NativeWire = serde_json::from_value(map.get("a2a")?.clone()).ok()?;
    Some(Native {
        message: wire.message.map(|message| message.parts),
        artifacts: wire.artifacts,
        reply: wire.reply,
    })
}

/// The message a run answered with instead of a task (`{"a2a": {"reply": true, ...}}`).
pub fn reply_of(stored: &StoredTask) -> Option<Message> {
    let native = native_of(&stored.task.result.as_ref()?.output)?;
    if !native.reply {
        return None;
    }
    let mut message = agent_message(
        &stored.task.task_id,
        &context_of(stored),
        native.message.unwrap_or_default(),
    );
    message.message_id = format!("{}-reply", stored.task.task_id);
    Some(message)
}

/// A stream event of a run as an artifact update: `{"a2a": {"artifact", "append",
/// "lastChunk"}}` as written; anything else as a chunk of the artifact `{task}-stream`
/// (`first`: the first such chunk, not appended).
pub fn artifact_event(
    task_id: &str,
    context_id: &str,
    kind: &str,
    data: Value,
    first: bool,
) -> TaskArtifactUpdateEvent {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Chunk {
        artifact: NativeArtifact,
        #[serde(default)]
        append: Option<bool>,
        #[serde(default)]
        last_chunk: Option<bool>,
    }
    // Workers wrap each stream event's payload in its kind (`{"delta": ...}`, `{"text": ...}`).
    let data = match data {
        Value::Object(mut map) if map.len() == 1 && map.contains_key(kind) => {
            map.remove(kind).unwrap_or(Value::Null)
        }
        other => other,
    };
    let native = match &data {
        Value::Object(map) if map.len() == 1 => map
            .get("a2a")
            .and_then(|chunk| serde_json::from_value::<Chunk>(chunk.clone()).ok()),
        _ => None,
    };
    if let Some(chunk) = native {
        let artifact = Native {
            artifacts: vec![chunk.artifact],
            ..Native::default()
        }
        .artifacts_for(task_id)
        .into_iter()
        .next();
        if let Some(artifact) = artifact {
            return TaskArtifactUpdateEvent {
                task_id: task_id.to_owned(),
                context_id: context_id.to_owned(),
                artifact,
                append: chunk.append,
                last_chunk: chunk.last_chunk,
                metadata: None,
            };
        }
    }
    let part = match (kind, data) {
        ("text", Value::String(text)) => Part::text(text),
        (_, value) => part_of(&value),
    };
    TaskArtifactUpdateEvent {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        artifact: Artifact {
            artifact_id: format!("{task_id}-stream"),
            name: Some("stream".into()),
            description: None,
            parts: vec![part],
            metadata: None,
            extensions: None,
        },
        append: Some(!first),
        last_chunk: None,
        metadata: None,
    }
}

/// An agent message of task `task_id`.
fn agent_message(task_id: &str, context_id: &str, parts: Vec<Part>) -> Message {
    Message {
        message_id: format!("{task_id}-status"),
        context_id: Some(context_id.to_owned()),
        task_id: Some(task_id.to_owned()),
        role: Role::Agent,
        parts,
        metadata: None,
        extensions: None,
        reference_task_ids: None,
    }
}

/// A value as one part: text for a string, data otherwise.
fn part_of(value: &Value) -> Part {
    match value {
        Value::String(text) => Part::text(text.clone()),
        other => Part::data(other.clone()),
    }
}

/// Why a message cannot be an input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("the message has no parts")]
    Empty,
}

/// The runtime input of `message` (see the module's rules).
pub fn input_of(message: &Message) -> Result<Value, InputError> {
    match message.parts.as_slice() {
        [] => Err(InputError::Empty),
        [
            Part {
                content: PartContent::Text(text),
                ..
            },
        ] => Ok(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))),
        [only] => Ok(value_of(only)),
        parts => Ok(Value::Array(parts.iter().map(value_of).collect())),
    }
}

fn value_of(part: &Part) -> Value {
    let file = |key: &str, value: Value| {
        let mut file = serde_json::Map::new();
        file.insert(key.to_owned(), value);
        if let Some(media_type) = &part.media_type {
            file.insert("mediaType".into(), Value::String(media_type.clone()));
        }
        if let Some(filename) = &part.filename {
            file.insert("filename".into(), Value::String(filename.clone()));
        }
        Value::Object(file)
    };
    match &part.content {
        PartContent::Text(text) => Value::String(text.clone()),
        PartContent::Data(value) => value.clone(),
        PartContent::Url(url) => file("url", Value::String(url.clone())),
        PartContent::Raw(bytes) => file(
            "bytes",
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    }
}

/// Why no skill could be chosen (the spec's invalid-params error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    #[error("metadata.skillId must be a string")]
    NotAString,
    #[error("several skills are offered; name one in metadata.skillId")]
    Ambiguous,
    #[error("no skill is offered")]
    None,
}

/// The skill a message asks for: `metadata.skillId`, else `default`, else the only one of
/// `skills`. An unknown named skill is returned as named (the caller answers it as unknown).
pub fn skill_of(
    metadata: Option<&HashMap<String, Value>>,
    default: Option<&str>,
    skills: &[&str],
) -> Result<String, SkillError> {
    if let Some(named) = metadata.and_then(|metadata| metadata.get("skillId")) {
        return named
            .as_str()
            .map(str::to_owned)
            .ok_or(SkillError::NotAString);
    }
    if let Some(default) = default {
        return Ok(default.to_owned());
    }
    match skills {
        [only] => Ok((*only).to_owned()),
        [] => Err(SkillError::None),
        _ => Err(SkillError::Ambiguous),
    }
}

#[cfg(test)]
mod tests {
    use protocol::token::AccessToken;
    use protocol::{Task as RuntimeTask, TaskError, TaskResult, Timestamp};
    use store::Invocation;

    use super::*;

    fn stored(status: RuntimeStatus, phase: Phase, input: Value) -> StoredTask {
        StoredTask {
            task: RuntimeTask {
                task_id: "t1".into(),
                status,
                context_id: None,
                created_at: Timestamp(1_700_000_000_000),
                updated_at: Timestamp(1_700_000_001_000),
                result: None,
                error: None,
            },
            owner: AccessToken::generate().owner_hash(),
            phase,
            invocation: Invocation {
                entrypoint: "echo".into(),
                input,
                context_id: None,
                metadata: None,
                trace_context: Default::default(),
            },
            admission_expires_at_ms: None,
            lease: None,
            attempt: 1,
            max_attempts: 3,
            retries: 0,
            last_error: None,
            run_deadline_ms: None,
            handed_off: true,
            seq: 2,
            receipt: None,
            input_request: None,
            turns: Vec::new(),
            settlement_held: false,
        }
    }

    #[test]
    fn states_follow_status_and_phase() {
        assert_eq!(
            state_of(RuntimeStatus::Running, Phase::Queued),
            TaskState::Submitted
        );
        assert_eq!(
            state_of(RuntimeStatus::Running, Phase::Reserved),
            TaskState::Submitted
        );
        assert_eq!(
            state_of(RuntimeStatus::Running, Phase::Active),
            TaskState::Working
        );
        assert_eq!(
            state_of(RuntimeStatus::Cancelled, Phase::Terminal),
            TaskState::Canceled
        );
    }

    #[test]
    fn a_completed_task_has_its_result_as_an_artifact_and_its_input_as_history()
    -> Result<(), serde_json::Error> {
        let mut done = stored(RuntimeStatus::Completed, Phase::Terminal, json!({"i": 1}));
        done.task.result = Some(TaskResult::output(json!({"i": 1})));
        let task = serde_json::to_value(task_of(&done, None))?;
        assert_eq!(task["id"], "t1");
        assert_eq!(task["contextId"], "t1");
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
        assert!(
            task["status"]["timestamp"]
                .as_str()
                .is_some_and(|t| t.starts_with("2023-11-14T22:13:21"))
        );
        assert_eq!(task["artifacts"][0]["parts"][0]["data"], json!({"i": 1}));
        assert_eq!(task["history"][0]["role"], "ROLE_USER");
        assert_eq!(task["history"][0]["parts"][0]["data"], json!({"i": 1}));
        let without = serde_json::to_value(task_of(&done, Some(0)))?;
        assert_eq!(without["history"], json!([]));
        Ok(())
    }

    #[test]
    fn a_failed_task_says_why_in_its_status_message() -> Result<(), serde_json::Error> {
        let mut failed = stored(RuntimeStatus::Failed, Phase::Terminal, json!("text in"));
        failed.task.error = Some(TaskError::new("task_timeout", "too slow"));
        let task = serde_json::to_value(task_of(&failed, None))?;
        assert_eq!(task["status"]["state"], "TASK_STATE_FAILED");
        assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
        assert_eq!(task["status"]["message"]["parts"][0]["text"], "too slow");
        assert_eq!(
            task["status"]["message"]["parts"][1]["data"]["code"],
            "task_timeout"
        );
        assert_eq!(task["history"][0]["parts"][0]["text"], "text in");
        assert!(task.get("artifacts").is_none());
        Ok(())
    }

    #[test]
    fn stream_events_become_artifact_updates() -> Result<(), serde_json::Error> {
        let chunk = json!({"delta": {"a2a": {
            "artifact": {"artifactId": "c", "parts": [{"text": "chunk-2"}]},
            "append": true,
            "lastChunk": true
        }}});
        let event = serde_json::to_value(artifact_event("t", "ctx", "delta", chunk, false))?;
        assert_eq!(event["artifact"]["artifactId"], "c");
        assert_eq!(event["artifact"]["parts"][0]["text"], "chunk-2");
        assert_eq!(
            (event["append"].clone(), event["lastChunk"].clone()),
            (json!(true), json!(true))
        );
        let text = serde_json::to_value(artifact_event(
            "t",
            "ctx",
            "text",
            json!({"text": "hi"}),
            true,
        ))?;
        assert_eq!(text["artifact"]["artifactId"], "t-stream");
        assert_eq!(text["artifact"]["parts"][0]["text"], "hi");
        assert_eq!(text["append"], false);
        let delta = serde_json::to_value(artifact_event(
            "t",
            "ctx",
            "delta",
            json!({"delta": 3}),
            false,
        ))?;
        assert_eq!(delta["artifact"]["parts"][0]["data"], 3);
        assert_eq!(delta["append"], true);
        Ok(())
    }

    #[test]
    fn history_shows_the_message_as_sent() -> Result<(), serde_json::Error> {
        let sent = Message::new(Role::User, vec![Part::text(r#"{"n":3}"#)]);
        let input = input_of(&sent).unwrap_or_default();
        let mut task = stored(RuntimeStatus::Running, Phase::Queued, input.clone());
        task.invocation.metadata = Some(metadata_of(&sent, &input));
        let history = serde_json::to_value(task_of(&task, None))?["history"].clone();
        assert_eq!(history[0]["parts"], json!([{"text": r#"{"n":3}"#}]));
        assert_eq!(history[0]["messageId"], json!(sent.message_id));
        // A part the input gives back as it was is not kept twice.
        let plain = Message::new(Role::User, vec![Part::text("hello")]);
        let kept = metadata_of(&plain, &json!("hello"));
        assert!(kept["a2a"].get("parts").is_none());
        Ok(())
    }

    #[test]
    fn inputs_come_from_parts() -> Result<(), InputError> {
        let message = |parts| Message::new(Role::User, parts);
        assert_eq!(
            input_of(&message(vec![Part::text(r#"{"n":3}"#)]))?,
            json!({"n": 3})
        );
        assert_eq!(
            input_of(&message(vec![Part::text("hello")]))?,
            json!("hello")
        );
        assert_eq!(
            input_of(&message(vec![Part::data(json!([1, 2]))]))?,
            json!([1, 2])
        );
        let mut file = Part::url("https://x.example/a.png");
        file.media_type = Some("image/png".into());
        assert_eq!(
            input_of(&message(vec![
                Part::text("see"),
                file,
                Part::raw(vec![1, 2])
            ]))?,
            json!(["see", {"url": "https://x.example/a.png", "mediaType": "image/png"}, {"bytes": "AQI="}])
        );
        assert_eq!(input_of(&message(vec![])), Err(InputError::Empty));
        Ok(())
    }

    #[test]
    fn the_skill_is_named_defaulted_or_the_only_one() {
        let named: HashMap<String, Value> = [("skillId".to_owned(), json!("sleep"))].into();
        assert_eq!(
            skill_of(Some(&named), Some("echo"), &["echo", "sleep"]),
            Ok("sleep".into())
        );
        assert_eq!(
            skill_of(None, Some("echo"), &["echo", "sleep"]),
            Ok("echo".into())
        );
        assert_eq!(skill_of(None, None, &["echo"]), Ok("echo".into()));
        assert_eq!(
            skill_of(None, None, &["echo", "sleep"]),
            Err(SkillError::Ambiguous)
        );
        assert_eq!(skill_of(None, None, &[]), Err(SkillError::None));
        let wrong: HashMap<String, Value> = [("skillId".to_owned(), json!(7))].into();
        assert_eq!(
            skill_of(Some(&wrong), None, &["echo"]),
            Err(SkillError::NotAString)
        );
    }
}
