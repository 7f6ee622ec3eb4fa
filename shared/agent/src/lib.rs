//! The library an agent's program depends on: write entrypoints with the worker's handler
//! API (re-exported here), then [`run`] them. One call, two modes, picked by the settings:
//!
//! - **cluster** (`REDIS_URL`, `REDIS_CLUSTER_URLS`, `--redis-url` or `--redis-cluster-urls`
//!   given): the program is a worker of the cluster, exactly the `worker` binary
//!   ([`worker::host`]) with the program's entrypoints: every flag and environment variable
//!   of `worker --help`, logs, telemetry, `/metrics`, registration, drain on SIGTERM;
//! - **embedded** (no Redis): the program is one process serving the gateway's HTTP, A2A and
//!   gRPC bindings over an in-memory store with an in-process worker hosting the program's
//!   entrypoints ([`gateway::host::run_hosting`]): every setting of `gateway --help`, as the
//!   quick start's `cargo run -p gateway` but with the program's agent.
//!
//! ```no_run
//! use taskcluster_agent::{Entrypoint, Entrypoints, HandlerError};
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let hello = Entrypoint::typed("hello", "Greets", |name: String, _ctx| async move {
//!         Ok::<_, HandlerError>(format!("Hello, {name}"))
//!     });
//!     taskcluster_agent::run(Entrypoints::new().with(hello)).await
//! }
//! ```

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

pub use worker;
pub use worker::emitter::Emitter;
pub use worker::entrypoint::{Entrypoint, Entrypoints};
pub use worker::handler::{HandlerError, HandlerOutput, TaskContext};

/// Which process the program is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A worker of a cluster on Redis.
    Cluster,
    /// One process, gateway and worker, no Redis.
    Embedded,
}

impl Mode {
    /// The mode this process's command line and environment ask for: cluster when Redis is
    /// named by either, as the gateway decides.
    pub fn from_env() -> Mode {
        let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
        Mode::of(
            std::env::args_os(),
            set("REDIS_URL") || set("REDIS_CLUSTER_URLS"),
        )
    }

    /// The mode of `args` (the program's name first) when the environment names Redis or
    /// not (`redis_env`).
    pub fn of(args: impl IntoIterator<Item = OsString>, redis_env: bool) -> Mode {
        let flag = args.into_iter().skip(1).any(|arg| {
            let arg = arg.to_string_lossy();
            let name = arg.split('=').next().unwrap_or_default();
            name == "--redis-url" || name == "--redis-cluster-urls"
        });
        if flag || redis_env {
            Mode::Cluster
        } else {
            Mode::Embedded
        }
    }
}

/// Hosts `entrypoints` until SIGTERM or SIGINT (and the drain), in the mode the settings ask
/// for ([`Mode::from_env`]), and returns the process's exit code. A setting it refuses is
/// printed on one line (exit code 2 for settings, as clap's usage errors).
pub async fn run(entrypoints: Entrypoints) -> ExitCode {
    match Mode::from_env() {
        Mode::Cluster => {
            worker::host::Host::from_env()
                .entrypoints(entrypoints)
                .run()
                .await
        }
        Mode::Embedded => {
            let config = gateway::core::config::GatewayConfig::parse();
            match gateway::host::run_hosting(config, entrypoints).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: {err:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(args: &[&str], redis_env: bool) -> Mode {
        Mode::of(args.iter().map(OsString::from), redis_env)
    }

    #[test]
    fn redis_in_the_environment_or_a_flag_makes_a_worker() {
        assert_eq!(mode(&["agent"], false), Mode::Embedded);
        assert_eq!(mode(&["agent", "--listen", "x"], false), Mode::Embedded);
        assert_eq!(mode(&["agent"], true), Mode::Cluster);
        assert_eq!(
            mode(&["agent", "--redis-url", "redis://x/"], false),
            Mode::Cluster
        );
        assert_eq!(
            mode(&["agent", "--redis-url=redis://x/"], false),
            Mode::Cluster
        );
        assert_eq!(
            mode(&["agent", "--redis-cluster-urls", "redis://x/"], false),
            Mode::Cluster
        );
        // The program's own name is not a flag.
        assert_eq!(mode(&["--redis-url"], false), Mode::Embedded);
    }
}
