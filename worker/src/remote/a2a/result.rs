//! A2A answers as the runtime's outcomes.
//!
//! - An input as a message: a JSON string is one text part, any other JSON value one data part
//!   (the inverse of the gateway's rule for its own A2A callers).
//! - Parts as an output: parts all text are their text, concatenated (streamed chunks of one
//!   answer); one part of another kind is its value (a data part its JSON, a file
//!   `{url|bytes, mediaType?, filename?}`); several are the array of their values.
//! - The result of a task: the parts of its artifacts in order, else those of its status
//!   message; of a message answer, the message's parts.
//! - `TASK_STATE_FAILED` fails the task with `agent_failed`, `TASK_STATE_REJECTED` with
//!   `rejected` (which our gateway shows its A2A callers as rejected again),
//!   `TASK_STATE_CANCELED` with `agent_cancelled` and `TASK_STATE_AUTH_REQUIRED` with
//!   `agent_auth_required` (credentials for an agent are not supported); the status message's
//!   text is the error's message. `TASK_STATE_INPUT_REQUIRED` ends the run asking the caller
//!   for input, with the agent's message (`{"parts": [...]}`).

use a2a::{Artifact, Message, Part, PartContent, Role, Task, TaskState};
use base64::Engine;
use serde_json::{Value, json};

use crate::handler::{HandlerError, HandlerOutput};

/// The message that carries `input` to skill `skill`.
pub fn message_of(
    input: Value,
    skill: &str,
    message_id: String,
    context_id: Option<String>,
) -> Message {
    let part = match input {
        Value::String(text) => Part::text(text),
        other => Part::data(other),
    };
    let mut message = Message::new(Role::User, vec![part]);
    message.message_id = message_id;
    message.context_id = context_id;
    message.metadata = Some([("skillId".to_owned(), Value::String(skill.to_owned()))].into());
    message
}

/// The output of `parts` (see the module's rules).
pub fn output_of(parts: &[Part]) -> Value {
    if !parts.is_empty()
        && parts
            .iter()
            .all(|part| matches!(part.content, PartContent::Text(_)))
    {
        let text: String = parts.iter().filter_map(|part| part.as_text()).collect();
        return Value::String(text);
    }
    match parts {
        [] => Value::Null,
        [only] => value_of(only),
        parts => Value::Array(parts.iter().map(value_of).collect()),
    }
}

fn value_of(part: &Part) -> Value {
    let file = |key: &str, value: Value| {
        let mut file = serde_json::Map::new();
        file.insert(key.to_owned(), value);
        if let Some(media_type) = part.media_type.as_ref().filter(|m| !m.is_empty()) {
            file.insert("mediaType".into(), Value::String(media_type.clone()));
        }
        if let Some(filename) = part.filename.as_ref().filter(|f| !f.is_empty()) {
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

/// The text of a message's text parts, for an error's message.
fn text_of(message: Option<&Message>) -> Option<String> {
    let text: Vec<&str> = message?
        .parts
        .iter()
        .filter_map(|part| part.as_text())
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// Artifacts as they stream in: a chunk with `append` extends the artifact of its id, any
/// other replaces it (the order is the one of their first chunks).
#[derive(Debug, Default)]
pub struct Artifacts(Vec<Artifact>);

impl Artifacts {
    pub fn update(&mut self, artifact: Artifact, append: bool) {
        match self
            .0
            .iter_mut()
            .find(|known| known.artifact_id == artifact.artifact_id)
        {
            Some(known) if append => known.parts.extend(artifact.parts),
            Some(known) => *known = artifact,
            None => self.0.push(artifact),
        }
    }

    /// Every artifact of `task` (a task answer lists them all).
    pub fn replace_with(&mut self, task: &Task) {
        if let Some(artifacts) = &task.artifacts
            && !artifacts.is_empty()
        {
            self.0 = artifacts.clone();
        }
    }

    fn parts(&self) -> Vec<Part> {
        self.0
            .iter()
            .flat_map(|artifact| artifact.parts.iter().cloned())
            .collect()
    }
}

/// How a run ends for a task in `state`, or `None` while it is still to end (submitted or
/// working).
pub fn outcome(
    state: &TaskState,
    status_message: Option<&Message>,
    artifacts: &Artifacts,
) -> Option<Result<HandlerOutput, HandlerError>> {
    let because = |fallback: &str| text_of(status_message).unwrap_or_else(|| fallback.to_owned());
    let failed = |code: &str, fallback: &str| {
        let mut error = HandlerError::new(code, because(fallback));
        if let Some(message) = status_message {
            error = error.with_details(json!({"a2a": {"state": state, "message": message}}));
        }
        Some(Err(error))
    };
    match state {
        TaskState::Completed => {
            let parts = artifacts.parts();
            let parts = if parts.is_empty() {
                status_message
                    .map(|message| message.parts.clone())
                    .unwrap_or_default()
            } else {
                parts
            };
            Some(Ok(HandlerOutput::new(output_of(&parts))))
        }
        TaskState::Failed => failed("agent_failed", "the agent failed the task"),
        TaskState::Rejected => failed("rejected", "the agent rejected the task"),
        TaskState::Canceled => failed("agent_cancelled", "the agent cancelled the task"),
        TaskState::AuthRequired => failed(
            "agent_auth_required",
            "the agent asks for authentication, which is not supported for hosted agents",
        ),
        TaskState::InputRequired => {
            let parts = status_message
                .map(|message| message.parts.clone())
                .unwrap_or_default();
            Some(Ok(HandlerOutput::input_required(json!({"parts": parts}))))
        }
        TaskState::Submitted | TaskState::Working | TaskState::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_become_one_part_and_carry_the_skill() -> Result<(), serde_json::Error> {
        let text = message_of(json!("hi"), "upper", "m1".into(), None);
        let wire = serde_json::to_value(&text)?;
        assert_eq!(wire["parts"], json!([{"text": "hi"}]));
        assert_eq!(wire["metadata"], json!({"skillId": "upper"}));
        assert_eq!(wire["role"], "ROLE_USER");
        assert_eq!(wire["messageId"], "m1");
        let data = message_of(json!({"a": 1}), "x", "m2".into(), Some("c".into()));
        let wire = serde_json::to_value(&data)?;
        assert_eq!(wire["parts"], json!([{"data": {"a": 1}}]));
        assert_eq!(wire["contextId"], "c");
        Ok(())
    }

    #[test]
    fn outputs_follow_the_parts() {
        assert_eq!(
            output_of(&[Part::text("one "), Part::text("two")]),
            json!("one two")
        );
        assert_eq!(output_of(&[Part::data(json!({"a": 1}))]), json!({"a": 1}));
        assert_eq!(
            output_of(&[Part::text("t"), Part::data(json!(2))]),
            json!(["t", 2])
        );
        assert_eq!(
            output_of(&[Part::url("https://x/f").with_media_type("image/png")]),
            json!({"url": "https://x/f", "mediaType": "image/png"})
        );
        assert_eq!(output_of(&[]), Value::Null);
    }

    #[test]
    fn states_end_runs_or_not() {
        let mut artifacts = Artifacts::default();
        let chunk = |text: &str| Artifact {
            artifact_id: "a".into(),
            name: None,
            description: None,
            parts: vec![Part::text(text)],
            metadata: None,
            extensions: None,
        };
        artifacts.update(chunk("one "), false);
        artifacts.update(chunk("two"), true);
        let done = outcome(&TaskState::Completed, None, &artifacts);
        assert_eq!(done, Some(Ok(HandlerOutput::new(json!("one two")))));
        assert_eq!(outcome(&TaskState::Working, None, &artifacts), None);
        let why = Message::new(Role::Agent, vec![Part::text("no")]);
        let Some(Err(rejected)) = outcome(&TaskState::Rejected, Some(&why), &artifacts) else {
            panic!("a rejected task fails");
        };
        assert_eq!(
            (rejected.code.as_str(), rejected.message.as_str()),
            ("rejected", "no")
        );
        let Some(Ok(asks)) = outcome(&TaskState::InputRequired, Some(&why), &artifacts) else {
            panic!("input-required ends the run");
        };
        assert!(asks.awaits_input);
        assert_eq!(asks.output, json!({"parts": [{"text": "no"}]}));
    }
}
