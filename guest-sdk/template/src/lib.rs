//! {{name}}: a Cordon tool component.
//!
//! `count` counts to a number, one step at a time: it reports progress, stops when asked
//! (`check_cancelled`), and leaves a note that `cleanup` reads if the call is stopped.
//! Replace it with your own tools; `cordon build` builds the component, `cargo test` runs
//! the tests below natively.

use std::time::Duration;

use cordon_guest::{CleanupContext, LogLevel, Plugin, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

/// The arguments of `count`. Doc comments become the descriptions in the JSON Schema.
#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    /// Count from 1 to this number (at most 1000).
    to: u32,
    /// Milliseconds to pause between steps (default 100).
    #[serde(default = "default_pause_ms")]
    pause_ms: u64,
}

fn default_pause_ms() -> u64 {
    100
}

fn count(args: CountArgs) -> Result<String, ToolError> {
    if args.to > 1000 {
        return Err(ToolError::new(format!("{} is more than 1000", args.to)));
    }
    // What cleanup must know if this call is stopped midway.
    cordon_guest::set_cleanup_note(format!("counting to {}", args.to).as_bytes());
    for step in 1..=args.to {
        // Returns Err(Cancelled) once the client cancels or a timeout passes.
        cordon_guest::check_cancelled()?;
        std::thread::sleep(Duration::from_millis(args.pause_ms));
        cordon_guest::progress(step as f64, Some(args.to as f64), &format!("{step} of {}", args.to));
    }
    // Done: nothing for cleanup to undo.
    cordon_guest::clear_cleanup_note();
    Ok(format!("counted to {}", args.to))
}

struct Tools;

impl Plugin for Tools {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new("count", "Counts to a number, with progress; stops when cancelled.", count).read_only(),
        ]
    }

    /// Runs once after a stopped call, in a fresh instance: undo what the note names.
    fn cleanup(context: CleanupContext) {
        let note = context.note_text().unwrap_or("no note");
        cordon_guest::log(
            LogLevel::Warn,
            &format!("{} stopped ({:?}): {note}", context.tool, context.reason),
        );
    }
}

cordon_guest::export_plugin!(Tools);

#[cfg(test)]
mod tests {
    use cordon_guest::StopReason;
    use cordon_guest::testing::{TestHost, check_tools};
    use serde_json::json;

    use super::*;

    /// The names and schemas pass the rules the host checks when it loads the component.
    #[test]
    fn the_tool_list_is_one_the_host_accepts() {
        check_tools::<Tools>().unwrap();
    }

    #[test]
    fn count_reports_progress_and_clears_its_note() {
        let host = TestHost::new();
        let result = host.call::<Tools>("count", json!({"to": 3, "pause_ms": 0})).unwrap();
        assert_eq!(result.joined_text(), "counted to 3");
        let done: Vec<f64> = host.progress().iter().map(|report| report.done).collect();
        assert_eq!(done, [1.0, 2.0, 3.0]);
        assert_eq!(host.note(), None);
    }

    #[test]
    fn a_cancelled_count_stops_and_leaves_its_note_for_cleanup() {
        let host = TestHost::new().cancel_after_checks(2);
        let error = host.call::<Tools>("count", json!({"to": 10, "pause_ms": 0})).unwrap_err();
        assert_eq!(error.message(), "cancelled");
        assert_eq!(host.progress().len(), 2);
        assert_eq!(host.note_text().as_deref(), Some("counting to 10"));
        host.cleanup::<Tools>("count", json!({"to": 10}), StopReason::Cancelled);
        assert_eq!(host.logs()[0].1, "count stopped (Cancelled): counting to 10");
    }
}
