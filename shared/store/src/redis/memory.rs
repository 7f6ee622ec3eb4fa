//! How full Redis's memory is: `INFO memory` (`used_memory` against `maxmemory`) from the one
//! server, or from every master of a Redis Cluster (each master holds its own slots' keys and
//! refuses writes on its own once full).

use redis::Value;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};

use super::pool::Connections;
use crate::{MemoryFill, StoreError};

impl Connections {
    /// `INFO memory` of the server, or of every master of the cluster.
    pub(super) async fn memory_fill(&self) -> Result<Vec<MemoryFill>, StoreError> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("memory");
        match self {
            Connections::Single(_) => {
                let text: String = self.query(&cmd).await?;
                Ok(vec![parse("server", &text)?])
            }
            Connections::Cluster { connection, .. } => {
                let route = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                // Without a response policy the cluster client answers a map of node address to
                // that node's reply.
                let reply = connection.clone().route_command(cmd, route).await?;
                let Value::Map(nodes) = reply else {
                    return Err(StoreError::Corrupt(format!(
                        "INFO memory over the cluster's masters answered {reply:?}"
                    )));
                };
                nodes
                    .into_iter()
                    .map(|(node, reply)| {
                        let node: String = redis::from_redis_value(node)
                            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
                        if let Value::ServerError(err) = &reply {
                            return Err(StoreError::Unavailable(format!(
                                "INFO memory on {node}: {err:?}"
                            )));
                        }
                        let text: String = redis::from_redis_value(reply)
                            .map_err(|err| StoreError::Corrupt(err.to_string()))?;
                        parse(&node, &text)
                    })
                    .collect()
            }
        }
    }
}

/// `used_memory` and `maxmemory` out of an `INFO memory` reply.
fn parse(node: &str, text: &str) -> Result<MemoryFill, StoreError> {
    let field = |name: &str| {
        text.lines()
            .filter_map(|line| line.trim_end().split_once(':'))
            .find(|(key, _)| *key == name)
            .and_then(|(_, value)| value.parse::<u64>().ok())
            .ok_or_else(|| StoreError::Corrupt(format!("INFO memory of {node} has no {name}")))
    };
    Ok(MemoryFill {
        node: node.to_owned(),
        used: field("used_memory")?,
        max: field("maxmemory")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_memory_parses() {
        let text = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n\
                    maxmemory:4194304\r\nmaxmemory_human:4.00M\r\nmaxmemory_policy:noeviction\r\n";
        let fill = parse("server", text).ok();
        assert_eq!(fill.as_ref().map(|fill| fill.used), Some(1_048_576));
        assert_eq!(fill.as_ref().map(|fill| fill.max), Some(4_194_304));
        assert_eq!(fill.and_then(|fill| fill.ratio()), Some(0.25));
        let unlimited = parse("server", "used_memory:10\r\nmaxmemory:0\r\n").ok();
        assert_eq!(unlimited.map(|fill| fill.ratio()), Some(None));
        assert!(parse("server", "used_memory:10\r\n").is_err());
    }
}
