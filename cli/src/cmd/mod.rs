//! One module per subcommand: its arguments (`Args`) and `run`.

pub mod admin;
pub mod admin_tasks;
pub mod cancel;
pub mod card;
pub mod get;
pub mod invoke;
pub mod list;
pub mod send;
pub mod stream;
pub mod watch;

use protocol::Task;

use crate::Output;
use crate::output::pretty;

/// A task for people: id, status, times, then its result or error.
pub(crate) fn print_task(output: &Output, task: &Task) {
    output.line(&format!("task      {}", task.task_id));
    output.line(&format!("status    {}", task.status));
    if let Some(context_id) = &task.context_id {
        output.line(&format!("context   {context_id}"));
    }
    output.line(&format!("created   {}", task.created_at.to_iso()));
    output.line(&format!("updated   {}", task.updated_at.to_iso()));
    if let Some(result) = &task.result {
        output.line("result");
        output.line(&indent(&pretty(&result.output)));
    }
    if let Some(error) = &task.error {
        output.line(&format!("error     {}: {}", error.code, error.message));
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("  {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}
