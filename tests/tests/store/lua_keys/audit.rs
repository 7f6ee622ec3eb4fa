//! The check: every key a script's commands touch is among the keys its call declared.
//!
//! A script runs atomically, so the commands it runs (`[0 lua]` monitor lines) are one
//! contiguous run of lines next to its EVALSHA/EVAL line: right after it on Redis 7.0 (the
//! call is fed to monitors before it runs), right before it on later versions (fed after it
//! ran). [`Order::probe`] asks the server which, with a script of known commands, before the
//! lines are read either way. Which arguments of a command are keys the server says itself
//! (`COMMAND GETKEYSANDFLAGS`: no table of key positions here to fall out of date); a
//! channel (`SPUBLISH`'s, flagged `not_key`) is not a key. A script is named by the header
//! line of its file (`-- take: ...`), found in the text the client loaded (EVAL or SCRIPT
//! LOAD) and tied to EVALSHA calls by its SHA1; a function of the store's library (FCALL) by
//! its name, which ends with its script's.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use redis::Value;

use crate::BoxError;
use crate::monitor::{Line, Origin};

/// Where a script's commands are, relative to its call's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Its commands follow the call's line (Redis 7.0).
    CallFirst,
    /// Its commands precede the call's line (Redis 7.2 and later).
    CommandsFirst,
}

impl Order {
    /// The order of a recording holding the probe script's call ([`PROBE`] with `marker` as
    /// its one key): where its `EXISTS marker` line sits relative to the EVAL line.
    pub fn probe(lines: &[Line], marker: &str) -> Result<Order, BoxError> {
        let marker = marker.as_bytes();
        let call = lines
            .iter()
            .position(|line| {
                line.origin == Origin::Client
                    && is_call(line)
                    && line.args.get(3).map(Vec::as_slice) == Some(marker)
            })
            .ok_or("the probe's EVAL was not recorded")?;
        let command = lines
            .iter()
            .position(|line| {
                line.origin == Origin::Lua && line.args.get(1).map(Vec::as_slice) == Some(marker)
            })
            .ok_or("the probe's EXISTS was not recorded")?;
        Ok(if command > call {
            Order::CallFirst
        } else {
            Order::CommandsFirst
        })
    }
}

/// The probe: one declared key (`EXISTS KEYS[1]`) and one undeclared (`EXISTS ARGV[1]`), so
/// that it also proves the check catches an undeclared key.
pub const PROBE: &str =
    "redis.call('EXISTS', KEYS[1]) redis.call('EXISTS', ARGV[1]) return redis.call('TIME')";

/// One script call and the commands it ran.
#[derive(Debug)]
pub struct Run {
    /// The script's name, from its header; `None` for a script that is not one of the store's.
    pub script: Option<String>,
    pub declared: BTreeSet<Vec<u8>>,
    pub commands: Vec<Line>,
}

/// A key a script touched without declaring it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub script: String,
    pub command: String,
    pub key: String,
    /// Whether the key carries the hash tag of one of the keys the call declared (so a
    /// cluster node runs the call anyway, which is why nothing but this check sees it).
    pub tag_declared: bool,
}

/// What a recording showed.
#[derive(Debug, Default)]
pub struct Report {
    /// Calls per script name (only calls that ran commands: a NOSCRIPT answer runs none).
    pub runs: BTreeMap<String, usize>,
    /// Every undeclared access, once per (script, command, key).
    pub violations: BTreeSet<Violation>,
}

/// Whether a client line calls a script.
fn is_call(line: &Line) -> bool {
    matches!(
        line.name().as_str(),
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO"
    )
}

/// The script runs of a recording: each call line with the `[lua]` lines it ran.
pub fn runs(lines: &[Line], order: Order, known: &BTreeSet<String>) -> Result<Vec<Run>, BoxError> {
    let mut names: HashMap<String, Option<String>> = HashMap::new();
    let mut out: Vec<Run> = Vec::new();
    // CommandsFirst: the script commands waiting for their call's line.
    let mut pending: Vec<Line> = Vec::new();
    // CallFirst: whether the last line was a call or one of its commands.
    let mut open = false;
    for line in lines {
        if line.origin == Origin::Lua {
            match (order, out.last_mut()) {
                (Order::CommandsFirst, _) => pending.push(line.clone()),
                (Order::CallFirst, Some(run)) if open => run.commands.push(line.clone()),
                (Order::CallFirst, _) => {
                    return Err(format!("a script command with no call before it: {line:?}").into());
                }
            }
            continue;
        }
        if let Some(text) = loaded_text(line) {
            let sha = redis::Script::new(&text).get_hash().to_owned();
            names.insert(sha, script_name(&text, known));
        }
        open = is_call(line);
        if open {
            let mut run = call(line, &names, known)?;
            run.commands = std::mem::take(&mut pending);
            out.push(run);
        } else if !pending.is_empty() {
            return Err(format!(
                "script commands followed by {:?}, not by their call",
                line.name()
            )
            .into());
        }
    }
    if !pending.is_empty() {
        return Err("script commands at the end of the recording with no call".into());
    }
    Ok(out)
}

/// The script text a client line loads (`EVAL text ...`, `SCRIPT LOAD text`).
fn loaded_text(line: &Line) -> Option<String> {
    let name = line.name();
    let text = match name.as_str() {
        "EVAL" | "EVAL_RO" => line.args.get(1)?,
        "SCRIPT" if String::from_utf8_lossy(line.args.get(1)?).eq_ignore_ascii_case("LOAD") => {
            line.args.get(2)?
        }
        _ => return None,
    };
    Some(String::from_utf8_lossy(text).into_owned())
}

/// The store script a text holds: the first line `-- <name>: ...` naming a known script
/// (each script's file opens with it; the replay guard's own header names none).
fn script_name(text: &str, known: &BTreeSet<String>) -> Option<String> {
    text.lines().find_map(|line| {
        let (name, _) = line.strip_prefix("-- ")?.split_once(':')?;
        known.contains(name).then(|| name.to_owned())
    })
}

/// The store script a library function runs: its name is `taskcluster_<16 hex>_<script>`
/// (`shared/store/src/redis/functions.rs`).
fn function_script(function: &str, known: &BTreeSet<String>) -> Option<String> {
    let rest = function.strip_prefix("taskcluster_")?;
    let (digest, script) = rest.split_at_checked(16)?;
    let script = script.strip_prefix('_')?;
    (digest.bytes().all(|b| b.is_ascii_hexdigit()) && known.contains(script))
        .then(|| script.to_owned())
}

/// A call line as a run with no commands yet: its script and its declared keys.
fn call(
    line: &Line,
    names: &HashMap<String, Option<String>>,
    known: &BTreeSet<String>,
) -> Result<Run, BoxError> {
    let name = line.name();
    let script = match name.as_str() {
        "EVALSHA" | "EVALSHA_RO" => {
            let sha = String::from_utf8_lossy(line.args.get(1).ok_or("EVALSHA without a sha")?)
                .to_ascii_lowercase();
            names.get(&sha).cloned().flatten()
        }
        "FCALL" | "FCALL_RO" => {
            let function =
                String::from_utf8_lossy(line.args.get(1).ok_or("FCALL without a function")?);
            function_script(&function, known)
        }
        _ => {
            let text = loaded_text(line).ok_or("EVAL without a script")?;
            names
                .get(redis::Script::new(&text).get_hash())
                .cloned()
                .flatten()
        }
    };
    let count: usize =
        String::from_utf8_lossy(line.args.get(2).ok_or("a call without numkeys")?).parse()?;
    let declared = line
        .args
        .iter()
        .skip(3)
        .take(count)
        .cloned()
        .collect::<BTreeSet<_>>();
    if declared.len() > count || line.args.len() < 3 + count {
        return Err(format!("a call with fewer keys than its numkeys: {line:?}").into());
    }
    Ok(Run {
        script,
        declared,
        commands: Vec::new(),
    })
}

/// The keys (not channels) of each command, as the server finds them.
pub async fn keys_of(
    conn: &mut redis::aio::MultiplexedConnection,
    commands: &BTreeSet<Vec<Vec<u8>>>,
) -> Result<HashMap<Vec<Vec<u8>>, Vec<Vec<u8>>>, BoxError> {
    // GETKEYS refuses a command without key arguments (`TIME`) as a wrong call: ask only
    // about commands that have some, by their COMMAND INFO.
    let keyless = keyless(conn, commands).await?;
    let commands: Vec<&Vec<Vec<u8>>> = commands
        .iter()
        .filter(|args| !keyless.contains(&name_of(args)))
        .collect();
    let mut out = HashMap::new();
    for chunk in commands.chunks(1_000) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for args in chunk {
            pipe.cmd("COMMAND").arg("GETKEYSANDFLAGS").arg(*args);
        }
        let replies: Vec<Value> = pipe.query_async(conn).await?;
        for (args, reply) in chunk.iter().zip(replies) {
            out.insert((*args).clone(), keys_in(args, reply)?);
        }
    }
    Ok(out)
}

fn name_of(args: &[Vec<u8>]) -> String {
    args.first()
        .map(|name| String::from_utf8_lossy(name).to_ascii_lowercase())
        .unwrap_or_default()
}

/// The names among `commands` of those that take no key at all (no first key, no movable
/// keys).
async fn keyless(
    conn: &mut redis::aio::MultiplexedConnection,
    commands: &BTreeSet<Vec<Vec<u8>>>,
) -> Result<BTreeSet<String>, BoxError> {
    let names: BTreeSet<String> = commands.iter().map(|args| name_of(args)).collect();
    let mut out = BTreeSet::new();
    for name in names {
        let info: Vec<Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(&name)
            .query_async(conn)
            .await?;
        let Some(Value::Array(fields)) = info.into_iter().next() else {
            return Err(format!("the server does not know {name}").into());
        };
        let first_key: i64 = redis::from_redis_value_ref(fields.get(3).ok_or("first key")?)?;
        let flags: Vec<String> = redis::from_redis_value_ref(fields.get(2).ok_or("flags")?)?;
        if first_key == 0 && !flags.iter().any(|flag| flag == "movablekeys") {
            out.insert(name);
        }
    }
    Ok(out)
}

/// The keys of one `COMMAND GETKEYSANDFLAGS` reply, less those flagged `not_key`.
fn keys_in(args: &[Vec<u8>], reply: Value) -> Result<Vec<Vec<u8>>, BoxError> {
    match reply {
        Value::Array(entries) => {
            let mut keys = Vec::new();
            for entry in entries {
                let (key, flags): (Vec<u8>, Vec<String>) = redis::from_redis_value(entry)?;
                if !flags.iter().any(|flag| flag == "not_key") {
                    keys.push(key);
                }
            }
            Ok(keys)
        }
        Value::ServerError(err) if err.to_string().contains("no key arguments") => Ok(Vec::new()),
        other => Err(format!(
            "the server found no keys of {:?}: {other:?}",
            args.iter()
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect::<Vec<_>>()
        )
        .into()),
    }
}

/// Checks every run: counts the runs of each script and collects every undeclared key.
pub async fn check(
    conn: &mut redis::aio::MultiplexedConnection,
    runs: &[Run],
) -> Result<Report, BoxError> {
    let commands = runs
        .iter()
        .flat_map(|run| run.commands.iter().map(|line| line.args.clone()))
        .collect::<BTreeSet<_>>();
    let keys = keys_of(conn, &commands).await?;
    let mut report = Report::default();
    for run in runs {
        let script = run.script.clone().unwrap_or_else(|| "(unnamed)".into());
        if !run.commands.is_empty() {
            *report.runs.entry(script.clone()).or_default() += 1;
        }
        for line in &run.commands {
            for key in keys.get(&line.args).into_iter().flatten() {
                if !run.declared.contains(key) {
                    report.violations.insert(Violation {
                        script: script.clone(),
                        command: line.name(),
                        key: String::from_utf8_lossy(key).into_owned(),
                        tag_declared: hash_tag(key).is_some_and(|tag| {
                            run.declared
                                .iter()
                                .any(|other| hash_tag(other) == Some(tag))
                        }),
                    });
                }
            }
        }
    }
    Ok(report)
}

/// A key's hash tag as Redis Cluster reads it: what lies between its first `{` and the next
/// `}`, when that is not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|byte| *byte == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|byte| *byte == b'}')?;
    (close > 0).then(|| &rest[..close])
}
