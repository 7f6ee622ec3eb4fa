//! `CreateTaskPushNotificationConfig`, `GetTaskPushNotificationConfig`,
//! `ListTaskPushNotificationConfigs`, `DeleteTaskPushNotificationConfig`, and the inline
//! config of a send (`SendMessageConfiguration.taskPushNotificationConfig`): configs stored
//! with the task in the store's outbox (`store::push`), owned as the task is (another owner's
//! task is TaskNotFound), delivered by [`crate::a2a::push::deliver`].
//!
//! A config is checked when it is stored, without calling its URL: an http(s) URL without
//! user info, not an IP address the SSRF policy refuses; `Authorization` scheme and
//! credentials, and the notification token, free of CR, LF and other control characters. Host
//! names are checked where it matters, at every connection.
//!
//! The stored config is returned as it was given (the caller's own credentials, to the
//! caller alone), with its id and task id filled in.
//!
//! Stored bytes, bounded as a task's are: each part has a size limit; a task has at most
//! `--push-max-configs`; a config is refused like a new task while the store is at its
//! memory high-water mark (`crate::core::store_memory`), and its creation is rate limited as a
//! task's is (`crate::core::ratelimit`); it counts in its task's retained bytes and goes with the
//! task (`store::push`). The caller's client address is kept with the task: delivery slots are
//! shared by address (`crate::a2a::push`).

use std::time::Duration;

use a2a::{
    DeleteTaskPushNotificationConfigRequest, GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig,
};
use store::push::{PutMode, PutOutcome};

use super::{Caller, check_id, read_owned};
use crate::a2a::error::A2aError;
use crate::core::push::Push;
use crate::core::state::AppState;

/// Longest push config URL.
const MAX_URL_LEN: usize = 2048;

/// How long a config stored ahead of its task waits for the task to exist.
const PENDING_TTL: Duration = Duration::from_secs(60);

fn enabled(state: &AppState) -> Result<&Push, A2aError> {
    state
        .push
        .as_deref()
        .ok_or_else(A2aError::push_not_supported)
}

pub async fn create(
    caller: &Caller<'_>,
    config: TaskPushNotificationConfig,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let push = enabled(caller.state)?;
    check_id("taskId", &config.task_id)?;
    let task_id = config.task_id.clone();
    read_owned(caller.state, &caller.owner, &task_id).await?;
    let config = checked(push, config, &task_id)?;
    caller.state.store_memory.admit()?;
    store_config(caller, push, &task_id, &config, PutMode::Existing).await?;
    Ok(config)
}

pub async fn get(
    caller: &Caller<'_>,
    request: GetTaskPushNotificationConfigRequest,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let push = enabled(caller.state)?;
    check_id("taskId", &request.task_id)?;
    check_id("id", &request.id)?;
    read_owned(caller.state, &caller.owner, &request.task_id).await?;
    let stored = push.outbox.config(&request.task_id, &request.id).await?;
    stored
        .as_deref()
        .and_then(|json| serde_json::from_str(json).ok())
        .ok_or_else(|| A2aError::push_config_not_found(&request.task_id, &request.id))
}

pub async fn list(
    caller: &Caller<'_>,
    request: ListTaskPushNotificationConfigsRequest,
) -> Result<ListTaskPushNotificationConfigsResponse, A2aError> {
    let push = enabled(caller.state)?;
    check_id("taskId", &request.task_id)?;
    if request.page_size.is_some_and(|size| size < 0) {
        return Err(A2aError::invalid_params("pageSize must not be negative"));
    }
    read_owned(caller.state, &caller.owner, &request.task_id).await?;
    // A task has at most --push-max-configs configs: one page holds them all.
    let configs = push
        .outbox
        .configs(&request.task_id)
        .await?
        .into_iter()
        .filter_map(|(_, json)| serde_json::from_str(&json).ok())
        .collect();
    Ok(ListTaskPushNotificationConfigsResponse {
        configs,
        next_page_token: None,
    })
}

/// Idempotent: deleting a config that is not there succeeds.
pub async fn delete(
    caller: &Caller<'_>,
    request: DeleteTaskPushNotificationConfigRequest,
) -> Result<(), A2aError> {
    let push = enabled(caller.state)?;
    check_id("taskId", &request.task_id)?;
    check_id("id", &request.id)?;
    read_owned(caller.state, &caller.owner, &request.task_id).await?;
    push.outbox
        .delete_config(&request.task_id, &request.id)
        .await?;
    Ok(())
}

/// The inline config of a send that creates task `task_id`: checked, and stored before the
/// task exists, so that none of its events can be published before it (confirmed by
/// [`confirm_inline`] once the task is created, dropped by [`discard_inline`] if it is not).
/// The config as stored. Refused, as the task would be, at the memory high-water mark.
pub(super) async fn store_inline(
    caller: &Caller<'_>,
    task_id: &str,
    config: TaskPushNotificationConfig,
) -> Result<TaskPushNotificationConfig, A2aError> {
    let push = enabled(caller.state)?;
    let config = checked(push, config, task_id)?;
    caller.state.store_memory.admit()?;
    store_config(
        caller,
        push,
        task_id,
        &config,
        PutMode::Pending(PENDING_TTL),
    )
    .await?;
    Ok(config)
}

/// The task of an inline config exists: the config lives as long as the task. A failure is
/// logged, not answered: the task exists, and its first event keeps the config anyway.
pub(super) async fn confirm_inline(
    caller: &Caller<'_>,
    task_id: &str,
    config: &TaskPushNotificationConfig,
) {
    let Some(push) = caller.state.push.as_deref() else {
        return;
    };
    if let Err(err) = store_config(caller, push, task_id, config, PutMode::Existing).await {
        tracing::warn!(task_id, error = %err, "could not confirm the inline push config of a task");
    }
}

/// The task of an inline config was not created: the config goes (it would expire anyway).
pub(super) async fn discard_inline(state: &AppState, task_id: &str) {
    if let Some(push) = state.push.as_deref()
        && let Err(err) = push.outbox.discard(task_id).await
    {
        tracing::warn!(task_id, error = %err, "could not drop the push config of a task never created");
    }
}

/// The inline config of a send that answers task `task_id` (waiting for input; the caller's
/// own, checked already): stored as a created config is.
pub(super) async fn store_existing(
    caller: &Caller<'_>,
    task_id: &str,
    config: TaskPushNotificationConfig,
) -> Result<(), A2aError> {
    let push = enabled(caller.state)?;
    let config = checked(push, config, task_id)?;
    caller.state.store_memory.admit()?;
    store_config(caller, push, task_id, &config, PutMode::Existing).await
}

/// A config that may be stored: its parts checked, its id (generated when absent) and task
/// id filled in.
fn checked(
    push: &Push,
    mut config: TaskPushNotificationConfig,
    task_id: &str,
) -> Result<TaskPushNotificationConfig, A2aError> {
    if !config.task_id.is_empty() && config.task_id != task_id {
        return Err(A2aError::invalid_params(
            "taskPushNotificationConfig.taskId names another task",
        ));
    }
    config.task_id = task_id.to_owned();
    match config.id.as_deref() {
        Some(id) => check_id("id", id)?,
        None => config.id = Some(uuid::Uuid::new_v4().to_string()),
    }
    if config.url.len() > MAX_URL_LEN {
        return Err(A2aError::invalid_params(format!(
            "url is longer than {MAX_URL_LEN} bytes"
        )));
    }
    webhook::validate_url(&config.url, push.client.policy())
        .map_err(|err| A2aError::invalid_params(format!("url: {err}")))?;
    if let Some(auth) = &config.authentication {
        match auth.credentials.as_deref() {
            Some(credentials) => webhook::validate_authorization(&auth.scheme, credentials)
                .map_err(|err| A2aError::invalid_params(format!("authentication: {err}")))?,
            None => {
                return Err(A2aError::invalid_params(
                    "authentication.credentials is required with a scheme",
                ));
            }
        }
    }
    if let Some(token) = &config.token {
        webhook::validate_token(token).map_err(|err| A2aError::invalid_params(err.to_string()))?;
    }
    config.tenant = None;
    Ok(config)
}

/// Stores `config` with the caller's client address (what the task's deliveries share slots
/// by).
async fn store_config(
    caller: &Caller<'_>,
    push: &Push,
    task_id: &str,
    config: &TaskPushNotificationConfig,
    mode: PutMode,
) -> Result<(), A2aError> {
    let id = config.id.as_deref().unwrap_or_default();
    let json = serde_json::to_string(config).map_err(|_| A2aError::internal())?;
    let source = caller.source.as_deref();
    match push
        .outbox
        .put_config(task_id, id, &json, mode, source)
        .await?
    {
        PutOutcome::Stored => Ok(()),
        PutOutcome::NoTask => Err(A2aError::task_not_found(task_id)),
        PutOutcome::Full => Err(A2aError::invalid_params(
            "this task has as many push notification configs as it may; delete one first",
        )),
    }
}
