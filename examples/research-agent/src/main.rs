//! `research-agent`: an agent program hosting one entrypoint, `research`, with
//! `taskcluster-agent`. With `REDIS_URL` it is a worker of the cluster (every setting of
//! `worker --help`); without, one process serving the HTTP and A2A bindings itself (every
//! setting of `gateway --help`). The handler is in [`research`].

mod research;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    taskcluster_agent::run(taskcluster_agent::Entrypoints::new().with(research::entrypoint())).await
}
