//! Errors a store reports. Callers map them to statuses: capacity -> 503
//! `task_capacity_exhausted`, unavailable -> 503, duplicate -> 409/500 as fits the route.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("A2A task capacity ({max}) is exhausted by active tasks")]
    Capacity { max: u64 },
    /// One owner holds as many tasks as it may: `live` for its non-terminal tasks, otherwise
    /// its retained tasks (all of them live, so nothing could be evicted). Maps to `429`.
    #[error("{}", owner_capacity_message(*.max, *.live))]
    OwnerCapacity { max: u64, live: bool },
    /// One client address holds as many non-terminal tasks as it may (whatever their
    /// owners: anonymous callers get a fresh owner per task). Maps to `429`.
    #[error("This client address already has {max} unfinished tasks; retry when one finishes")]
    AddressCapacity { max: u64 },
    #[error("task {0:?} already exists")]
    Duplicate(String),
    #[error("task store unavailable: {0}")]
    Unavailable(String),
    #[error("task store returned data it cannot read: {0}")]
    Corrupt(String),
    /// The namespace was written by another version's layout (refused at connect).
    #[error("task store layout mismatch: {0}")]
    Incompatible(String),
}

fn owner_capacity_message(max: u64, live: bool) -> String {
    if live {
        format!("This owner already has {max} unfinished tasks; retry when one finishes")
    } else {
        format!("This owner already holds {max} unfinished tasks and may hold no more")
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(err: redis::RedisError) -> Self {
        StoreError::Unavailable(err.to_string())
    }
}

impl From<deadpool_redis::PoolError> for StoreError {
    fn from(err: deadpool_redis::PoolError) -> Self {
        StoreError::Unavailable(err.to_string())
    }
}
