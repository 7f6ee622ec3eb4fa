//! What one `ListTasks` page costs Redis: a page of one among thirty tasks with 100 KB results
//! reads about one task's record, not every candidate's result (the bytes Redis sent, counted
//! by its own `INFO stats`, while nothing else is asked of it but the workers' idle polls).

use harness::TestResult;
use serde_json::json;

use crate::support::{BINDINGS, Cluster, for_skill, ok, state, unique};

/// Tasks the owner holds, and the size of each one's result.
const TASKS: usize = 30;
const RESULT_BYTES: usize = 100 * 1024;

/// `total_net_output_bytes` of the cluster's Redis: every byte it has sent to clients.
async fn bytes_sent(redis: &mut redis::aio::MultiplexedConnection) -> TestResult<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(redis).await?;
    info.lines()
        .find_map(|line| line.strip_prefix("total_net_output_bytes:"))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| "INFO stats has no total_net_output_bytes".into())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_one_reads_one_task_not_every_candidate() -> TestResult {
    let cluster = Cluster::start().await?;
    let owner = cluster.client(&unique("list-reads-token-of-enough-length"));
    let context = unique("list-reads-ctx");
    let text = "r".repeat(RESULT_BYTES);
    for _ in 0..TASKS {
        let mut request = for_skill("echo", json!({"data": {"text": text}}));
        request["message"]["contextId"] = json!(context);
        let task = owner.send_task(BINDINGS[0], request).await?;
        assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{}", task["status"]);
    }
    let mut redis = redis::Client::open(cluster.redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    for binding in BINDINGS {
        for params in [
            json!({"pageSize": 1}),
            json!({"pageSize": 1, "contextId": context, "status": "TASK_STATE_COMPLETED"}),
        ] {
            let before = bytes_sent(&mut redis).await?;
            let page = ok(owner.list(binding, params.clone()).await?, "ListTasks")?;
            let sent = bytes_sent(&mut redis).await?.saturating_sub(before);
            assert_eq!(page["tasks"].as_array().map(Vec::len), Some(1), "{params}");
            assert_eq!(page["totalSize"], TASKS, "{params}");
            // One task's record holds its input and its result (about 2 × 100 KB); reading
            // every candidate's result would be 30 × 100 KB more.
            assert!(
                sent < 4 * RESULT_BYTES as u64,
                "{binding:?} {params}: one page of one cost {sent} bytes from Redis"
            );
        }
    }
    Ok(())
}
