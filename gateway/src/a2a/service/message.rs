//! What a message must be before it is admitted, and the input it carries for a skill: the
//! media types its parts declare, its mapping to the runtime's input, the skill's schema and
//! the size bounds.

use a2a::{Message, Role};
use store::registry::EntrypointInfo;
use store::{Phase, StoredTask};

use super::{Caller, check_id, read_owned};
use crate::a2a::error::{self, A2aError};
use crate::a2a::mapping;
use crate::core::admit;
use crate::core::state::AppState;

/// Media types a message's parts may declare (the card's `defaultInputModes`); a part with
/// none is taken as what its content is.
pub const INPUT_MODES: &[&str] = &["text/plain", "application/json"];

/// The input modes of a skill that takes anything.
pub const ANY_INPUT: &[&str] = &["*/*"];

/// What a message must be before it is admitted: from the user, with an id and parts, and,
/// when it names a task, addressed to one of the caller's tasks that waits for input (which it
/// returns: the message resumes it).
pub(super) async fn check_message(
    state: &AppState,
    caller: &Caller<'_>,
    message: &Message,
) -> Result<Option<StoredTask>, A2aError> {
    check_id("messageId", &message.message_id)?;
    if message.role != Role::User {
        return Err(A2aError::invalid_params(
            "A client's message has role ROLE_USER",
        ));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params("The message has no parts"));
    }
    if let Some(context_id) = &message.context_id {
        check_id("contextId", context_id)?;
    }
    let Some(task_id) = &message.task_id else {
        return Ok(None);
    };
    check_id("taskId", task_id)?;
    let stored = read_owned(state, &caller.owner, task_id).await?;
    if let Some(context_id) = &message.context_id
        && *context_id != mapping::context_of(&stored)
    {
        return Err(A2aError::invalid_params(format!(
            "contextId does not match task {task_id}'s context"
        )));
    }
    if stored.task.status.is_terminal() {
        return Err(A2aError::unsupported(format!(
            "Task {task_id} is in a terminal state and takes no more messages"
        )));
    }
    if stored.phase != Phase::Waiting {
        return Err(A2aError::unsupported(format!(
            "Task {task_id} is not waiting for input"
        )));
    }
    Ok(Some(stored))
}

/// The runtime input of `message` for `entrypoint`: its parts of media types the skill takes,
/// mapped ([`mapping::input_of`]) and checked against the skill's input schema. The input, and
/// what the task keeps of the message besides it (its parts when they are not the input's
/// own, its metadata), are each bounded by `MAX_INPUT_BYTES`.
pub(super) fn input_for(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    message: &Message,
) -> Result<serde_json::Value, A2aError> {
    let modes = input_modes(entrypoint);
    for part in &message.parts {
        if let Some(media_type) = &part.media_type
            && !accepted(modes, media_type)
        {
            return Err(A2aError::content_type(error::truncated(media_type)));
        }
    }
    let input =
        mapping::input_of(message).map_err(|err| A2aError::invalid_params(err.to_string()))?;
    admit::check_input(state, entrypoint, &input).map_err(A2aError::from)?;
    admit::check_size(state, "message", &mapping::metadata_of(message, &input))
        .map_err(A2aError::from)?;
    Ok(input)
}

/// The media types a skill takes: any for a skill without an input schema (it takes any
/// JSON, and a file part is `{url|bytes, mediaType, filename}`), else text and JSON, which
/// are all its schema can accept.
pub fn input_modes(entrypoint: &EntrypointInfo) -> &'static [&'static str] {
    if crate::core::catalog::accepts_anything(&entrypoint.input_schema) {
        ANY_INPUT
    } else {
        INPUT_MODES
    }
}

/// Whether a part's declared media type is one of `modes` (parameters such as `charset`
/// ignored, case-insensitive; `*/*` and `type/*` match as in HTTP).
fn accepted(modes: &[&str], media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let Some((kind, _)) = essence.split_once('/') else {
        return false;
    };
    modes.iter().any(|mode| {
        *mode == "*/*"
            || *mode == essence
            || mode.strip_suffix("/*").is_some_and(|prefix| prefix == kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_ignore_parameters_and_case() {
        assert!(accepted(INPUT_MODES, "text/plain; charset=utf-8"));
        assert!(accepted(INPUT_MODES, "Application/JSON"));
        assert!(!accepted(INPUT_MODES, "application/x-unsupported-tck-type"));
        assert!(!accepted(INPUT_MODES, ""));
        assert!(accepted(ANY_INPUT, "application/x-unsupported-tck-type"));
        assert!(!accepted(ANY_INPUT, "not a media type"));
        assert!(accepted(&["image/*"], "image/png"));
        assert!(!accepted(&["image/*"], "imagex/png"));
    }
}
