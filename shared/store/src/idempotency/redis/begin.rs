//! `lua/idempotency_begin.lua`: claims the idempotency record of one (scope, key) for a
//! request, or says why it cannot run. A new record is `running`, owned by the claim, and
//! expires after the in-progress TTL; another fingerprint is a conflict whatever the record's
//! state; a finished record is replayed. A new record is charged to its quota subjects; a
//! subject at its quota is refused (`quota`, with the ms until its oldest record lapses), and
//! at the namespace's ceiling every newcomer is (`full`). Nothing is ever evicted.
//!
//! - KEYS: the record, running ids (zset), done ids (zset), then each subject's ids (zset).
//! - ARGV: fingerprint, claim owner id, in-progress TTL ms (>= 1), the record's id, max
//!   records (>= 1), max records per subject (>= 1).
//! - Reply: `{'started'}` | `{'in_progress'}` | `{'conflict'}` | `{'replay', status, headers
//!   json, body}` | `{'not_kept', status}` | `{'quota', ms}` | `{'full'}` ([`Reply`]).

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use super::{RedisIdempotency, corrupt, millis};
use crate::StoreError;
use crate::idempotency::{Begin, Claim, StoredResponse};
use crate::lua::lua_script;

lua_script!(static "idempotency_begin");

/// What the script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    Started,
    InProgress,
    Conflict,
    Replay(StoredResponse),
    NotKept {
        status: u16,
    },
    /// A subject at its quota; its oldest record lapses in this many ms.
    Quota(u64),
    Full,
    /// Not a reply of this script, or a record it cannot read: what is wrong with it.
    Unreadable(String),
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let reply = Vec::<String>::from_redis_value(v)?;
        Ok(parse(&reply).unwrap_or_else(Reply::Unreadable))
    }
}

fn parse(reply: &[String]) -> Result<Reply, String> {
    let status = |text: &str| {
        text.parse::<u16>()
            .map_err(|_| format!("bad status {text:?}"))
    };
    match reply {
        [tag, ms] if tag == "quota" => Ok(Reply::Quota(
            // A record lapsing this instant still counts: at least 1 ms.
            ms.parse::<i64>()
                .map_err(|_| format!("bad quota wait {ms:?}"))?
                .max(1) as u64,
        )),
        [tag] if tag == "full" => Ok(Reply::Full),
        [tag, code] if tag == "not_kept" => Ok(Reply::NotKept {
            status: status(code)?,
        }),
        [tag] if tag == "started" => Ok(Reply::Started),
        [tag] if tag == "in_progress" => Ok(Reply::InProgress),
        [tag] if tag == "conflict" => Ok(Reply::Conflict),
        [tag, code, headers, body] if tag == "replay" => {
            let status = status(code)?;
            let headers: Vec<(String, String)> =
                serde_json::from_str(headers).map_err(|err| format!("headers: {err}"))?;
            Ok(Reply::Replay(StoredResponse {
                status,
                headers,
                body: body.clone(),
            }))
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// Claims `record` (the record key of the claim's scope and key) for `claim`.
pub(super) async fn call(
    records: &RedisIdempotency,
    record: &str,
    claim: Claim,
    in_progress_ttl: Duration,
) -> Result<Begin, StoreError> {
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(record)
        .key(&records.running)
        .key(&records.done);
    for subject in &claim.subjects {
        invocation.key(records.subject_key(subject));
    }
    invocation
        .arg(&claim.fingerprint)
        .arg(&claim.owner)
        .arg(millis(in_progress_ttl))
        .arg(records.record_id(record))
        .arg(records.limits.max_records)
        .arg(records.limits.max_records_per_subject);
    Ok(match records.store.eval(NAME, &mut invocation).await? {
        Reply::Started => Begin::Started(claim),
        Reply::InProgress => Begin::InProgress,
        Reply::Conflict => Begin::Conflict,
        Reply::Replay(response) => Begin::Replay(response),
        Reply::NotKept { status } => Begin::NotKept { status },
        Reply::Full => Begin::Full,
        Reply::Quota(ms) => Begin::OverQuota {
            retry_after: Duration::from_millis(ms),
        },
        Reply::Unreadable(what) => return Err(corrupt(what)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: &[&str]) -> Result<Reply, ParsingError> {
        Reply::from_redis_value(Value::Array(
            items
                .iter()
                .map(|item| Value::BulkString(item.as_bytes().to_vec()))
                .collect(),
        ))
    }

    #[test]
    fn replies_parse() -> Result<(), ParsingError> {
        assert_eq!(reply(&["started"])?, Reply::Started);
        assert_eq!(reply(&["quota", "1500"])?, Reply::Quota(1500));
        assert_eq!(reply(&["quota", "-3"])?, Reply::Quota(1));
        assert_eq!(reply(&["not_kept", "200"])?, Reply::NotKept { status: 200 });
        assert_eq!(
            reply(&["replay", "201", r#"[["content-type","text/plain"]]"#, "hi"])?,
            Reply::Replay(StoredResponse {
                status: 201,
                headers: vec![("content-type".into(), "text/plain".into())],
                body: "hi".into(),
            })
        );
        assert_eq!(
            reply(&["not_kept", "x"])?,
            Reply::Unreadable(r#"bad status "x""#.into())
        );
        assert!(matches!(
            reply(&["replay", "200", "{", ""])?,
            Reply::Unreadable(_)
        ));
        assert_eq!(
            reply(&["started", "extra"])?,
            Reply::Unreadable(r#"unexpected reply ["started", "extra"]"#.into())
        );
        Ok(())
    }
}
