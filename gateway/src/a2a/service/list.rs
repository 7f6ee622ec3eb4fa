//! `ListTasks`: the caller's tasks, most recently updated first, filtered by context, state
//! and update time, in pages of `pageSize` (1 to 100, default 50) with opaque page tokens.
//!
//! The store picks the page ([`store::TaskStore::select`]): it reads only the small fields of
//! the caller's tasks (status, phase, context, update time, and the error code when FAILED
//! and REJECTED must be told apart), filters and orders them, and answers the page's ids and
//! how many matched (`totalSize`); only the page's tasks are then read in full. A2A states map
//! onto the store's fields: SUBMITTED, WORKING and INPUT_REQUIRED are a `running` task's
//! phases, REJECTED is a `failed` task whose error code is `rejected`. A page token is the
//! position in that order, so tasks updated between two calls can move across pages.

use a2a::{ListTasksRequest, ListTasksResponse, TaskState};
use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use protocol::TaskStatus as RuntimeStatus;
use store::{CodeMatch, Phase, Selection, StoredTask};

use super::{Caller, check_id, history_length};
use crate::a2a::error::A2aError;
use crate::a2a::mapping;

/// `ListTasks` page size when the request gives none, and the largest accepted.
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

/// Record reads one `ListTasks` keeps in flight (at most a page's).
const READS_IN_FLIGHT: usize = 32;

/// `ListTasks` (see the module doc).
pub async fn list(
    caller: &Caller<'_>,
    request: ListTasksRequest,
) -> Result<ListTasksResponse, A2aError> {
    let query = Query::of(&request)?;
    let Some(selection) = query.selection(request.context_id.clone()) else {
        // A state no runtime task is ever in.
        return Ok(empty_page(query.page_size));
    };
    let selected = caller.state.store.select(&caller.owner, &selection).await?;
    let tasks = read_all(caller, selected.ids)
        .await?
        .iter()
        .map(|stored| {
            let mut task = mapping::task_of(stored, query.history_length);
            if !query.include_artifacts {
                task.artifacts = None;
            }
            task
        })
        .collect();
    let total = usize::try_from(selected.total).unwrap_or(usize::MAX);
    let next_page_token = if query.offset.saturating_add(query.page_size) < total {
        page_token(query.offset + query.page_size)
    } else {
        String::new()
    };
    Ok(ListTasksResponse {
        tasks,
        next_page_token,
        page_size: query.page_size as i32,
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    })
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

    /// The store selection of this query (`None`: a state no runtime task is ever in).
    fn selection(&self, context_id: Option<String>) -> Option<Selection> {
        let mut selection = Selection {
            context_id,
            // Every time is after one before 1970.
            updated_after_ms: self.after.and_then(|after| u64::try_from(after).ok()),
            offset: self.offset,
            limit: self.page_size,
            ..Selection::default()
        };
        let rejected = || mapping::REJECTED.to_owned();
        let (statuses, phases, code) = match &self.wanted {
            None => (vec![], vec![], None),
            Some(TaskState::Submitted) => (
                vec![RuntimeStatus::Running],
                vec![
                    Phase::Reserved,
                    Phase::Prepared,
                    Phase::Queued,
                    Phase::Backoff,
                    Phase::Terminal,
                ],
                None,
            ),
            Some(TaskState::Working) => (vec![RuntimeStatus::Running], vec![Phase::Active], None),
            Some(TaskState::InputRequired) => {
                (vec![RuntimeStatus::Running], vec![Phase::Waiting], None)
            }
            Some(TaskState::Completed) => (vec![RuntimeStatus::Completed], vec![], None),
            Some(TaskState::Failed) => (
                vec![RuntimeStatus::Failed],
                vec![],
                Some(CodeMatch::IsNot(rejected())),
            ),
            Some(TaskState::Rejected) => (
                vec![RuntimeStatus::Failed],
                vec![],
                Some(CodeMatch::Is(rejected())),
            ),
            Some(TaskState::Canceled) => (vec![RuntimeStatus::Cancelled], vec![], None),
            Some(TaskState::AuthRequired | TaskState::Unspecified) => return None,
        };
        selection.statuses = statuses;
        selection.phases = phases;
        selection.error_code = code;
        Some(selection)
    }
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
}
