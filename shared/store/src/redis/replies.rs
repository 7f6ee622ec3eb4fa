//! Script and command replies turned into store types. Anything unreadable is
//! [`StoreError::Corrupt`], never a panic.

use redis::Value;

use crate::{Claim, Invocation, Lease, Phase, StoreError, StoredEvent, StoredTask};
use protocol::token::OwnerHash;
use protocol::{Task, TaskError, TaskResult, TaskStatus, Timestamp};

use super::fields;

/// Fields read for a full [`StoredTask`], in this order.
pub const TASK_FIELDS: [&str; 23] = [
    fields::STATUS,
    fields::PHASE,
    fields::OWNER,
    fields::CONTEXT,
    fields::CREATED,
    fields::UPDATED,
    fields::RESULT,
    fields::ERROR,
    fields::INVOCATION,
    fields::ADMISSION_EXPIRES,
    fields::LEASE_OWNER,
    fields::LEASE,
    fields::ATTEMPT,
    fields::MAX_ATTEMPTS,
    fields::HANDED_OFF,
    fields::SEQ,
    fields::ENTRYPOINT,
    fields::RECEIPT,
    fields::INPUT_REQUEST,
    fields::TURNS,
    fields::SETTLEMENT_HELD,
    fields::RETRIES,
    fields::LAST_ERROR,
];

fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Corrupt(what.into())
}

fn num(field: &Option<String>, name: &str) -> Result<u64, StoreError> {
    match field {
        None => Ok(0),
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| corrupt(format!("field {name} is not a number"))),
    }
}

fn opt_num(field: &Option<String>, name: &str) -> Result<Option<u64>, StoreError> {
    field.as_ref().map(|_| num(field, name)).transpose()
}

fn json<T: serde::de::DeserializeOwned>(
    field: &Option<String>,
    name: &str,
) -> Result<Option<T>, StoreError> {
    field
        .as_deref()
        .map(|text| {
            serde_json::from_str(text).map_err(|err| corrupt(format!("field {name}: {err}")))
        })
        .transpose()
}

fn status(text: &str) -> Result<TaskStatus, StoreError> {
    text.parse()
        .map_err(|_| corrupt(format!("bad status {text:?}")))
}

fn owner(text: &str) -> Result<OwnerHash, StoreError> {
    OwnerHash::from_hex(text).ok_or_else(|| corrupt("bad owner hash"))
}

/// The wire view from `status, context, created, updated, result, error`.
pub fn task_view(id: &str, f: &[Option<String>]) -> Result<Option<Task>, StoreError> {
    let [status_f, context, created, updated, result, error] = f else {
        return Err(corrupt("task view has the wrong arity"));
    };
    let Some(status_text) = status_f else {
        return Ok(None);
    };
    Ok(Some(Task {
        task_id: id.to_owned(),
        status: status(status_text)?,
        context_id: context.clone(),
        created_at: Timestamp(num(created, "created")?),
        updated_at: Timestamp(num(updated, "updated")?),
        result: json::<TaskResult>(result, "result")?,
        error: json::<TaskError>(error, "error")?,
    }))
}

/// A full record from an HMGET of [`TASK_FIELDS`]; `None` when the task does not exist.
pub fn stored_task(id: &str, f: &[Option<String>]) -> Result<Option<StoredTask>, StoreError> {
    if f.len() != TASK_FIELDS.len() {
        return Err(corrupt("task record has the wrong arity"));
    }
    let Some(task) = task_view(
        id,
        &[
            f[0].clone(),
            f[3].clone(),
            f[4].clone(),
            f[5].clone(),
            f[6].clone(),
            f[7].clone(),
        ],
    )?
    else {
        return Ok(None);
    };
    let owner = owner(f[2].as_deref().unwrap_or_default())?;
    // A terminal record keeps no phase: its status says it.
    let phase = match f[1].as_deref() {
        None if task.status.is_terminal() => Phase::Terminal,
        text => text
            .and_then(Phase::parse)
            .ok_or_else(|| corrupt("bad phase"))?,
    };
    let invocation: Invocation =
        json(&f[8], "invocation")?.ok_or_else(|| corrupt("missing invocation"))?;
    let entrypoint = f[16]
        .clone()
        .unwrap_or_else(|| invocation.entrypoint.clone());
    let field = f[11].as_deref().map(lease).transpose()?;
    let run_deadline_ms = field.as_ref().and_then(|field| field.run_deadline_ms);
    // The scripts write and drop the holder and the deadlines together.
    let lease = match (&f[10], field) {
        (Some(holder), Some(field)) => Some(Lease {
            task_id: id.to_owned(),
            task_owner: owner.clone(),
            entrypoint,
            holder: holder.clone(),
            epoch: field.epoch,
            expires_at_ms: field.expires_at_ms.unwrap_or(0),
        }),
        _ => None,
    };
    Ok(Some(StoredTask {
        task,
        owner,
        phase,
        invocation,
        admission_expires_at_ms: opt_num(&f[9], "admission_expires")?,
        lease,
        attempt: u32::try_from(num(&f[12], "attempt")?).unwrap_or(u32::MAX),
        max_attempts: u32::try_from(num(&f[13], "max_attempts")?).unwrap_or(u32::MAX),
        run_deadline_ms,
        handed_off: f[14].as_deref() == Some("1"),
        seq: num(&f[15], "seq")?,
        receipt: f[17].clone(),
        input_request: json::<serde_json::Value>(&f[18], "input_request")?,
        turns: json::<Vec<serde_json::Value>>(&f[19], "turns")?.unwrap_or_default(),
        settlement_held: f[20].as_deref() == Some("1"),
        retries: u32::try_from(num(&f[21], "retries")?).unwrap_or(u32::MAX),
        last_error: json::<TaskError>(&f[22], "last_error")?.map(Box::new),
    }))
}

/// A task's epoch and lease deadlines as its record holds them ([`fields::LEASE`]).
#[derive(Debug, PartialEq, Eq)]
pub struct LeaseField {
    /// The lease's deadline, while the task holds one.
    pub expires_at_ms: Option<u64>,
    /// The deadline of the run, once the claim is active.
    pub run_deadline_ms: Option<u64>,
    pub epoch: u64,
}

/// Reads [`fields::LEASE`]: `<lease deadline>:<run deadline>:<run limit>:<epoch>`, the run's
/// two empty while the claim is prepared and all three without a lease
/// (`lua/includes/lease_field.lua` writes it).
pub fn lease(text: &str) -> Result<LeaseField, StoreError> {
    let mut parts = text.split(':');
    let (Some(expires), Some(run_deadline), Some(run_ms), Some(epoch), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(corrupt("malformed lease field"));
    };
    let number = |text: &str, name: &str| {
        text.parse::<u64>()
            .map_err(|_| corrupt(format!("lease field: {name} is not a number")))
    };
    let optional = |text: &str, name: &str| match text {
        "" => Ok(None),
        text => number(text, name).map(Some),
    };
    optional(run_ms, "run limit")?;
    Ok(LeaseField {
        expires_at_ms: optional(expires, "deadline")?,
        run_deadline_ms: optional(run_deadline, "run deadline")?,
        epoch: number(epoch, "epoch")?,
    })
}

/// A claim from 9 reply values: id, epoch, lease_expires, owner, invocation, attempt,
/// max_attempts, entrypoint, created.
pub fn claim(holder: &str, v: &[Value]) -> Result<Claim, StoreError> {
    let [
        id,
        epoch,
        expires,
        task_owner,
        invocation,
        attempt,
        max_attempts,
        entrypoint,
        created,
    ] = v
    else {
        return Err(corrupt("claim reply has the wrong arity"));
    };
    let id: String = redis::from_redis_value_ref(id).map_err(|e| corrupt(e.to_string()))?;
    let task_owner: String =
        redis::from_redis_value_ref(task_owner).map_err(|e| corrupt(e.to_string()))?;
    let invocation: String =
        redis::from_redis_value_ref(invocation).map_err(|e| corrupt(e.to_string()))?;
    let entrypoint: String =
        redis::from_redis_value_ref(entrypoint).map_err(|e| corrupt(e.to_string()))?;
    let int = |v: &Value| -> Result<u64, StoreError> {
        redis::from_redis_value_ref::<u64>(v).map_err(|e| corrupt(e.to_string()))
    };
    let task_owner = owner(&task_owner)?;
    let invocation: Invocation =
        serde_json::from_str(&invocation).map_err(|err| corrupt(format!("invocation: {err}")))?;
    Ok(Claim {
        lease: Lease {
            task_id: id,
            task_owner: task_owner.clone(),
            entrypoint,
            holder: holder.to_owned(),
            epoch: int(epoch)?,
            expires_at_ms: int(expires)?,
        },
        owner: task_owner,
        invocation,
        previous_attempts: u32::try_from(int(attempt)?).unwrap_or(u32::MAX),
        max_attempts: u32::try_from(int(max_attempts)?).unwrap_or(u32::MAX),
        created_at_ms: int(created)?,
    })
}

/// An event log entry `<seq>|<event>|<data json>`.
pub fn event(entry: &str) -> Result<StoredEvent, StoreError> {
    let mut parts = entry.splitn(3, '|');
    let (Some(seq), Some(name), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(corrupt("malformed event entry"));
    };
    Ok(StoredEvent {
        seq: seq.parse().map_err(|_| corrupt("bad event seq"))?,
        event: name.to_owned(),
        data: serde_json::from_str(data).map_err(|err| corrupt(format!("event data: {err}")))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_field_reads_back_active_prepared_or_without_a_lease() {
        assert_eq!(
            lease("1700000000123:1700000900123:900000:7").ok(),
            Some(LeaseField {
                expires_at_ms: Some(1_700_000_000_123),
                run_deadline_ms: Some(1_700_000_900_123),
                epoch: 7,
            })
        );
        assert_eq!(
            lease("42:::1").ok(),
            Some(LeaseField {
                expires_at_ms: Some(42),
                run_deadline_ms: None,
                epoch: 1,
            })
        );
        assert_eq!(
            lease(":::0").ok(),
            Some(LeaseField {
                expires_at_ms: None,
                run_deadline_ms: None,
                epoch: 0,
            })
        );
    }

    #[test]
    fn a_malformed_lease_field_is_corrupt_not_a_panic() {
        for text in [
            "",
            "42",
            "42:1:2",
            "42:1:2:",
            "42:1:2:3:4",
            "x:::1",
            "42:y::1",
            "42::z:1",
            "-1:::1",
            "42:::h",
        ] {
            assert!(
                matches!(lease(text), Err(StoreError::Corrupt(_))),
                "{text:?}"
            );
        }
    }
}
