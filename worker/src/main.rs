//! `worker`: the worker process of [`worker::host`] with the built-in entrypoints: parse
//! settings, set up logs and telemetry, connect, run until SIGTERM or SIGINT, drain, flush
//! telemetry, exit.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    worker::host::Host::from_env().run().await
}
