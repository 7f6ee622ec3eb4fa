//! `ListTasks`: the caller's tasks, most recently updated first, filtered by context, state
//! and update time, in pages of `pageSize` (1 to 100, default 50) with opaque page tokens.
//!
//! The store lists an owner's tasks by creation and by runtime status, which is coarser than
//! A2A's states (`failed` is FAILED or REJECTED; `running` is SUBMITTED, WORKING or
//! INPUT_REQUIRED) and ordered otherwise. So the candidates are read whole from the store (its
//! wire view, a thousand per round trip, at most [`LIST_SCAN_MAX`]), filtered and ordered here,
//! and only the page's tasks are read in full; `totalSize` counts what matched. A page token is
//! the position in that order, so tasks updated between two calls can move across pages.

use std::collections::HashMap;

use a2a::{ListTasksRequest, ListTasksResponse, TaskState};
use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use protocol::TaskStatus as RuntimeStatus;
use store::{ListQuery, MAX_LIST_LIMIT, StoredTask};

use super::{Caller, check_id, history_length};
use crate::a2a::error::A2aError;
use crate::a2a::mapping;

/// `ListTasks` page size when the request gives none, and the largest accepted.
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

/// Record reads one `ListTasks` keeps in flight.
const READS_IN_FLIGHT: usize = 32;

/// The most tasks one `ListTasks` looks through.
pub const LIST_SCAN_MAX: usize = 10_000;

/// `ListTasks` (see the module doc).
pub async fn list(
    caller: &Caller<'_>,
    request: ListTasksRequest,
) -> Result<ListTasksResponse, A2aError> {
    let query = Query::of(&request)?;
    let statuses = match &query.wanted {
        None => Vec::new(),
        Some(state) => match runtime_statuses(state.clone()) {
            Some(statuses) => statuses,
            // A state no runtime task is ever in.
            None => return Ok(empty_page(query.page_size)),
        },
    };
    let mut candidates = scan(caller, &request, statuses).await?;
    candidates.retain(|task| query.keeps(task));
    // States inside `running` depend on the phase, which only the full record holds.
    let records = match &query.wanted {
        Some(state @ (TaskState::Submitted | TaskState::Working | TaskState::InputRequired)) => {
            in_phase(caller, state, &mut candidates).await?
        }
        _ => HashMap::new(),
    };
    candidates.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.task_id.cmp(&b.task_id))
    });
    page(caller, &query, candidates, records).await
}

/// What a `ListTasks` request asks for, checked.
struct Query {
    page_size: usize,
    history_length: Option<usize>,
    offset: usize,
    /// The A2A state asked for (`UNSPECIFIED` is none).
    wanted: Option<TaskState>,
    /// Updated strictly after this (Unix milliseconds).
    after: Option<i64>,
    include_artifacts: bool,
}

impl Query {
    fn of(request: &ListTasksRequest) -> Result<Query, A2aError> {
        let page_size = match request.page_size {
            None | Some(0) => DEFAULT_PAGE_SIZE,
            Some(size) if (1..=MAX_PAGE_SIZE as i32).contains(&size) => size as usize,
            Some(size) => {
                return Err(A2aError::invalid_params(format!(
                    "pageSize must be between 1 and {MAX_PAGE_SIZE}, not {size}"
                )));
            }
        };
        let history_length = history_length(request.history_length)?;
        let offset = match request.page_token.as_deref() {
            None | Some("") => 0,
            Some(token) => page_offset(token)?,
        };
        if let Some(context_id) = &request.context_id {
            check_id("contextId", context_id)?;
        }
        Ok(Query {
            page_size,
            history_length,
            offset,
            wanted: request
                .status
                .clone()
                .filter(|state| *state != TaskState::Unspecified),
            after: request
                .status_timestamp_after
                .map(|time| time.timestamp_millis()),
            include_artifacts: request.include_artifacts.unwrap_or(false),
        })
    }

    /// Whether a candidate passes the filters its wire view can answer: FAILED against
    /// REJECTED, and the update time.
    fn keeps(&self, task: &protocol::Task) -> bool {
        let rejected = task
            .error
            .as_ref()
            .is_some_and(|error| error.code == mapping::REJECTED);
        let state_ok = match &self.wanted {
            Some(TaskState::Failed) => !rejected,
            Some(TaskState::Rejected) => rejected,
            _ => true,
        };
        let time_ok = self
            .after
            .is_none_or(|after| i64::try_from(task.updated_at.0).unwrap_or(i64::MAX) > after);
        state_ok && time_ok
    }
}

/// The caller's tasks in `statuses` (any when empty) and in the request's context, read a
/// store page at a time until none is left or [`LIST_SCAN_MAX`] are in hand.
async fn scan(
    caller: &Caller<'_>,
    request: &ListTasksRequest,
    statuses: Vec<RuntimeStatus>,
) -> Result<Vec<protocol::Task>, A2aError> {
    let store = &caller.state.store;
    let mut candidates = Vec::new();
    loop {
        let page = store
            .list(
                &caller.owner,
                &ListQuery {
                    context_id: request.context_id.clone(),
                    statuses: statuses.clone(),
                    limit: Some(MAX_LIST_LIMIT),
                    offset: candidates.len(),
                },
            )
            .await?;
        let read = page.tasks.len();
        candidates.extend(page.tasks);
        if !page.has_more || read == 0 || candidates.len() >= LIST_SCAN_MAX {
            return Ok(candidates);
        }
    }
}

/// Keeps the candidates whose full record is in `state` (a state inside `running`), and
/// returns those records, by task id.
async fn in_phase(
    caller: &Caller<'_>,
    state: &TaskState,
    candidates: &mut Vec<protocol::Task>,
) -> Result<HashMap<String, StoredTask>, A2aError> {
    let mut records = HashMap::new();
    let ids = candidates.iter().map(|task| task.task_id.clone()).collect();
    for stored in read_all(caller, ids).await? {
        if mapping::state_of(stored.task.status, stored.phase) == *state {
            records.insert(stored.task.task_id.clone(), stored);
        }
    }
    candidates.retain(|task| records.contains_key(&task.task_id));
    Ok(records)
}

/// The page of the ordered `candidates` the query asks for, each task read in full (unless
/// `records` holds it already).
async fn page(
    caller: &Caller<'_>,
    query: &Query,
    candidates: Vec<protocol::Task>,
    mut records: HashMap<String, StoredTask>,
) -> Result<ListTasksResponse, A2aError> {
    let (offset, page_size) = (query.offset, query.page_size);
    let total = candidates.len();
    let page_ids: Vec<String> = candidates
        .into_iter()
        .skip(offset)
        .take(page_size)
        .map(|task| task.task_id)
        .collect();
    let missing = page_ids
        .iter()
        .filter(|id| !records.contains_key(*id))
        .cloned()
        .collect::<Vec<_>>();
    for stored in read_all(caller, missing).await? {
        records.insert(stored.task.task_id.clone(), stored);
    }
    let tasks = page_ids
        .iter()
        .filter_map(|id| records.get(id))
        .map(|stored| {
            let mut task = mapping::task_of(stored, query.history_length);
            if !query.include_artifacts {
                task.artifacts = None;
            }
            task
        })
        .collect();
    let next_page_token = if offset + page_size < total {
        page_token(offset + page_size)
    } else {
        String::new()
    };
    Ok(ListTasksResponse {
        tasks,
        next_page_token,
        page_size: page_size as i32,
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    })
}

/// The caller's full records of `ids` (gone or foreign ones left out), in their order.
async fn read_all(caller: &Caller<'_>, ids: Vec<String>) -> Result<Vec<StoredTask>, A2aError> {
    let reads = ids.into_iter().map(|task_id| {
        let store = caller.state.store.clone();
        async move { store.get(&task_id).await }
    });
    // A bounded number in flight: a state filter may read every running task of the owner.
    let records: Vec<Option<StoredTask>> = futures::stream::iter(reads)
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(records
        .into_iter()
        .flatten()
        .filter(|stored| stored.owner == caller.owner)
        .collect())
}

fn empty_page(page_size: usize) -> ListTasksResponse {
    ListTasksResponse {
        tasks: Vec::new(),
        next_page_token: String::new(),
        page_size: page_size as i32,
        total_size: 0,
    }
}

/// The runtime statuses a task in A2A `state` has (`None`: no runtime task is ever in it).
fn runtime_statuses(state: TaskState) -> Option<Vec<RuntimeStatus>> {
    match state {
        TaskState::Submitted | TaskState::Working | TaskState::InputRequired => {
            Some(vec![RuntimeStatus::Running])
        }
        TaskState::Completed => Some(vec![RuntimeStatus::Completed]),
        TaskState::Failed | TaskState::Rejected => Some(vec![RuntimeStatus::Failed]),
        TaskState::Canceled => Some(vec![RuntimeStatus::Cancelled]),
        TaskState::AuthRequired | TaskState::Unspecified => None,
    }
}

/// Page tokens are the offset of the page, encoded so that clients treat them as opaque.
fn page_token(offset: usize) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("o:{offset}"))
}

fn page_offset(token: &str) -> Result<usize, A2aError> {
    let invalid = || A2aError::invalid_params("pageToken is not a token this agent issued");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid())?;
    let text = std::str::from_utf8(&bytes).map_err(|_| invalid())?;
    text.strip_prefix("o:")
        .and_then(|offset| offset.parse().ok())
        .ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(page_offset(&page_token(150)).ok(), Some(150));
        for foreign in ["", "abc", "!!!", "bzp4"] {
            assert!(page_offset(foreign).is_err(), "{foreign}");
        }
    }

    #[test]
    fn states_filter_runtime_statuses() {
        assert_eq!(
            runtime_statuses(TaskState::Working),
            Some(vec![RuntimeStatus::Running])
        );
        assert_eq!(runtime_statuses(TaskState::AuthRequired), None);
    }
}
