//! What a bench asks Redis outside its timed window.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;

use super::Res;

/// The bench's own connection (INFO, CONFIG, SCAN: left out of the counts).
pub async fn admin_connection(url: &str) -> Res<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

/// `key:value` lines of an `INFO` reply (section headers left out).
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The redis-server measured: its version and persistence, for a bench's meta data.
#[derive(Debug, Clone)]
pub struct ServerFacts {
    pub version: String,
    /// `appendonly yes`, or `no AOF, save "<the save setting>"`.
    pub persistence: String,
}

pub async fn server_facts(admin: &mut MultiplexedConnection) -> Res<ServerFacts> {
    let info = parse_info(
        &redis::cmd("INFO")
            .arg("server")
            .arg("persistence")
            .query_async::<String>(admin)
            .await?,
    );
    let save: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query_async(admin)
        .await?;
    let persistence = if info.get("aof_enabled").map(String::as_str) == Some("1") {
        String::from("appendonly yes")
    } else {
        format!(
            "no AOF, save \"{}\"",
            save.get(1).map(String::as_str).unwrap_or("?")
        )
    };
    Ok(ServerFacts {
        version: info
            .get("redis_version")
            .cloned()
            .ok_or("INFO server has no redis_version")?,
        persistence,
    })
}

/// One `SCAN cursor MATCH pattern COUNT 1000`: the next cursor (0 at the end) and the keys.
pub async fn scan_page(
    admin: &mut MultiplexedConnection,
    cursor: u64,
    pattern: &str,
) -> Res<(u64, Vec<String>)> {
    Ok(redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(1000)
        .query_async(admin)
        .await?)
}

/// Deletes every key matching `pattern` (a namespace's), synchronously; returns how many.
pub async fn delete_matching(admin: &mut MultiplexedConnection, pattern: &str) -> Res<u64> {
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys) = scan_page(admin, cursor, pattern).await?;
        if !keys.is_empty() {
            let removed: u64 = redis::cmd("DEL").arg(&keys).query_async(admin).await?;
            deleted += removed;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
