//! `taskctl`: see the crate documentation (`cli/src/lib.rs`).

fn main() -> std::process::ExitCode {
    cli::main()
}
