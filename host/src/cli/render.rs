//! What `cordon call` prints, as pure functions: a result for people or for `jq`, progress,
//! and how a call ended, in words. No I/O here, so each shape is unit-tested.

use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::runtime::{
    CallReport, CleanupOutcome, CleanupReport, Content, Outcome, Progress, StopPath, Timeout, ToolLimits,
    ToolResult,
};

/// A byte count for people: `512 bytes`, `1.5 KiB`, `3.0 MiB`.
pub fn size(bytes: usize) -> String {
    const KIB: f64 = 1024.0;
    let value = bytes as f64;
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else if value < KIB * KIB {
        format!("{:.1} KiB", value / KIB)
    } else {
        format!("{:.1} MiB", value / (KIB * KIB))
    }
}

/// A duration for people: `850 µs`, `12 ms`, `1.25 s`.
pub fn duration(duration: Duration) -> String {
    let micros = duration.as_micros();
    if micros < 1000 {
        format!("{micros} µs")
    } else if micros < 10_000 {
        format!("{:.1} ms", micros as f64 / 1000.0)
    } else if micros < 1_000_000 {
        format!("{} ms", micros / 1000)
    } else {
        format!("{:.2} s", duration.as_secs_f64())
    }
}

/// A progress number without a needless `.0`.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{}", value as i64) } else { format!("{value}") }
}

/// A progress report in one line: `40/120 (33%) Indexed 40 of 120 documents`.
pub fn progress(report: &Progress) -> String {
    let mut line = number(report.done);
    if let Some(total) = report.total {
        line.push('/');
        line.push_str(&number(total));
        if total > 0.0 {
            let percent = (report.done / total * 100.0).clamp(0.0, 100.0);
            line.push_str(&format!(" ({percent:.0}%)"));
        }
    }
    if let Some(message) = report.message.as_deref().filter(|message| !message.is_empty()) {
        line.push(' ');
        line.push_str(&crate::text::printable(message));
    }
    line
}

/// Whether a text item only repeats the structured result (the guest SDK sends structured
/// output as JSON text too, for clients that read only content): it is then left out, so
/// that the structured result is printed once.
fn repeats(text: &str, structured: Option<&Value>) -> bool {
    structured
        .is_some_and(|structured| serde_json::from_str::<Value>(text).is_ok_and(|value| &value == structured))
}

/// A result for people: text as it is, media and blobs summarised (type and size), the
/// structured result once, pretty-printed.
pub fn result_text(result: &ToolResult) -> String {
    let structured = result.structured.as_ref();
    let mut parts: Vec<String> = Vec::new();
    for item in &result.content {
        match item {
            Content::Text(text) if repeats(text, structured) => {}
            Content::Text(text) => parts.push(text.clone()),
            Content::Image(media) => {
                parts.push(format!("[image: {}, {}]", media.mime_type, size(media.data.len())))
            }
            Content::Audio(media) => {
                parts.push(format!("[audio: {}, {}]", media.mime_type, size(media.data.len())))
            }
            Content::ResourceLink(link) => {
                let mut line = format!("[link: {} <{}>", link.name, link.uri);
                if let Some(mime_type) = &link.mime_type {
                    line.push_str(&format!(", {mime_type}"));
                }
                line.push(']');
                if let Some(description) = &link.description {
                    line.push_str(&format!(" {description}"));
                }
                parts.push(line)
            }
            Content::EmbeddedResource(resource) => {
                let mime_type =
                    resource.mime_type.as_deref().map(|mime| format!(", {mime}")).unwrap_or_default();
                match (&resource.text, &resource.blob) {
                    (_, Some(blob)) => {
                        parts.push(format!("[resource {}{mime_type}, {}]", resource.uri, size(blob.len())))
                    }
                    (text, None) => parts.push(format!(
                        "[resource {}{mime_type}]\n{}",
                        resource.uri,
                        text.as_deref().unwrap_or("")
                    )),
                }
            }
        }
    }
    if let Some(structured) = structured {
        parts.push(serde_json::to_string_pretty(structured).expect("a JSON value serializes"));
    }
    // The tool's text, printed to a terminal: no control of it from a guest.
    crate::text::printable_lines(&parts.join("\n")).into_owned()
}

/// A result as one JSON document, for `jq`: MCP's `CallToolResult` shape (`content`,
/// `structuredContent`, `isError`, always present), except that media and blobs carry their
/// size in `bytes` instead of their data, and text that only repeats `structuredContent`
/// is left out.
pub fn result_json(result: &ToolResult) -> Value {
    let structured = result.structured.as_ref();
    let content: Vec<Value> = result
        .content
        .iter()
        .filter(|item| !matches!(item, Content::Text(text) if repeats(text, structured)))
        .map(content_json)
        .collect();
    let mut document = Map::new();
    document.insert("content".into(), Value::Array(content));
    if let Some(structured) = structured {
        document.insert("structuredContent".into(), structured.clone());
    }
    document.insert("isError".into(), json!(result.is_error));
    Value::Object(document)
}

fn content_json(item: &Content) -> Value {
    match item {
        Content::Text(text) => json!({"type": "text", "text": text}),
        Content::Image(media) => {
            json!({"type": "image", "mimeType": media.mime_type, "bytes": media.data.len()})
        }
        Content::Audio(media) => {
            json!({"type": "audio", "mimeType": media.mime_type, "bytes": media.data.len()})
        }
        Content::ResourceLink(link) => {
            let mut item = Map::new();
            item.insert("type".into(), json!("resource_link"));
            item.insert("uri".into(), json!(link.uri));
            item.insert("name".into(), json!(link.name));
            if let Some(description) = &link.description {
                item.insert("description".into(), json!(description));
            }
            if let Some(mime_type) = &link.mime_type {
                item.insert("mimeType".into(), json!(mime_type));
            }
            Value::Object(item)
        }
        Content::EmbeddedResource(resource) => {
            let mut contents = Map::new();
            contents.insert("uri".into(), json!(resource.uri));
            if let Some(mime_type) = &resource.mime_type {
                contents.insert("mimeType".into(), json!(mime_type));
            }
            match (&resource.text, &resource.blob) {
                (_, Some(blob)) => contents.insert("bytes".into(), json!(blob.len())),
                (text, None) => contents.insert("text".into(), json!(text.as_deref().unwrap_or(""))),
            };
            json!({"type": "resource", "resource": contents})
        }
    }
}

/// Why a call that did not complete ended, in one sentence.
pub fn outcome(outcome: &Outcome, limits: &ToolLimits) -> String {
    match outcome {
        Outcome::Completed(result) if result.is_error => "the tool answered with an error result".into(),
        Outcome::Completed(_) => "the tool answered".into(),
        // The guest's own words: up to megabytes of them, escapes and all.
        Outcome::ToolError(message) => format!("the tool failed: {}", crate::text::printable(message)),
        Outcome::Cancelled => "the call was cancelled".into(),
        Outcome::TimedOut(Timeout::Idle(idle)) => format!(
            "the call timed out: the tool reported no progress for {} (its idle timeout)",
            duration(*idle)
        ),
        Outcome::TimedOut(Timeout::MaxDuration(max)) => {
            format!("the call timed out: it ran for {} (its maximum duration)", duration(*max))
        }
        Outcome::Trapped(message) => format!("the tool crashed: {message}"),
        Outcome::OutOfMemory => {
            format!("the tool ran out of memory (its limit is {} MiB)", limits.memory_bytes >> 20)
        }
        Outcome::ResultTooLarge { bytes, limit } => {
            format!("the tool's result ({}) is larger than its limit ({})", size(*bytes), size(*limit))
        }
        Outcome::InvalidResult(problem) => format!("the tool returned an invalid result: {problem}"),
        Outcome::Shutdown => "the call was stopped: the runtime shut down".into(),
        Outcome::StartFailed(problem) => format!("the tool could not start: {problem}"),
        Outcome::InputRequired(input) => {
            format!("the tool asked the client for input ({}), which `cordon call` cannot give", asked(input))
        }
        Outcome::Answered(_) => "the component answered".into(),
    }
}

/// How the guest stopped, in words; `None` when it returned with no stop asked of it.
/// `since_interrupt` is the time from the user's Ctrl-C to the guest stopping, when the
/// user stopped it.
pub fn stop(report: &CallReport, limits: &ToolLimits, since_interrupt: Option<Duration>) -> Option<String> {
    let grace = duration(limits.grace);
    let after_interrupt =
        since_interrupt.map(|since| format!(" ({} after Ctrl-C)", duration(since))).unwrap_or_default();
    let after_hard_stop = report
        .hard_stop_at
        .map(|at| {
            format!(", {} after the hard stop", duration(report.stopped_at.saturating_duration_since(at)))
        })
        .unwrap_or_default();
    Some(match report.stop_path {
        StopPath::Returned => return None,
        StopPath::Cooperative => format!(
            "the tool saw the stop request and returned by itself within its grace period \
             ({grace}){after_interrupt}"
        ),
        StopPath::EpochTrap => format!(
            "the tool was still computing when its grace period ({grace}) ran out: trapped at its next \
             epoch check{after_hard_stop}{after_interrupt}"
        ),
        StopPath::DroppedInHostCall => format!(
            "the tool was waiting in a host call when its grace period ({grace}) ran out: dropped \
             there{after_hard_stop}{after_interrupt}"
        ),
    })
}

/// What the cleanup after a stop did, in words.
pub fn cleanup(report: &CleanupReport, limits: &ToolLimits) -> String {
    match &report.outcome {
        CleanupOutcome::Completed => {
            format!(
                "the tool's cleanup ran in a fresh instance and completed in {}",
                duration(report.duration)
            )
        }
        CleanupOutcome::Failed(message) => {
            format!(
                "the tool's cleanup ran in a fresh instance and failed after {}: {message}",
                duration(report.duration)
            )
        }
        CleanupOutcome::TimedOut => format!(
            "the tool's cleanup ran in a fresh instance past its budget ({}) and was stopped",
            duration(limits.cleanup_budget)
        ),
    }
}

/// What a request for input asks, e.g. `elicitation/create "confirm"`.
fn asked(input: &crate::runtime::InputRequired) -> String {
    let asked: Vec<String> =
        input.requests.iter().map(|(key, request)| format!("{} {key:?}", request.method())).collect();
    if asked.is_empty() { "no request, only state".into() } else { asked.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{EmbeddedResource, Media, ResourceLink};

    fn result(content: Vec<Content>, structured: Option<Value>) -> ToolResult {
        ToolResult { content, structured, is_error: false }
    }

    #[test]
    fn progress_lines_show_the_fraction_and_the_message() {
        let report = Progress { done: 40.0, total: Some(120.0), message: Some("Indexed 40".into()) };
        assert_eq!(progress(&report), "40/120 (33%) Indexed 40");
        let report = Progress { done: 0.5, total: None, message: None };
        assert_eq!(progress(&report), "0.5");
        let report = Progress { done: 3.0, total: Some(0.0), message: Some(String::new()) };
        assert_eq!(progress(&report), "3/0");
    }

    #[test]
    fn a_guests_terminal_controls_are_printed_escaped() {
        let erase = Progress { done: 1.0, total: None, message: Some("\u{1b}[1A\u{1b}[2Kok".into()) };
        assert_eq!(progress(&erase), "1 \\u{1b}[1A\\u{1b}[2Kok");
        let result = result(vec![Content::Text("line\n\u{1b}]52;c;eA==\u{7}".into())], None);
        assert_eq!(result_text(&result), "line\n\\u{1b}]52;c;eA==\\u{7}");
        let failed = Outcome::ToolError("no\u{1b}]52;c;eA==\u{7}".into());
        assert_eq!(outcome(&failed, &ToolLimits::default()), "the tool failed: no\\u{1b}]52;c;eA==\\u{7}");
    }

    #[test]
    fn media_are_summarised_by_type_and_size_never_dumped() {
        let image = Content::Image(Media { data: vec![7; 2048], mime_type: "image/png".into() });
        let audio = Content::Audio(Media { data: vec![1; 100], mime_type: "audio/wav".into() });
        let blob = Content::EmbeddedResource(EmbeddedResource {
            uri: "file:///a.bin".into(),
            mime_type: Some("application/octet-stream".into()),
            text: None,
            blob: Some(vec![0; 3 << 20]),
        });
        let result = result(vec![Content::Text("here".into()), image, audio, blob], None);
        assert_eq!(
            result_text(&result),
            "here\n[image: image/png, 2.0 KiB]\n[audio: audio/wav, 100 bytes]\n\
             [resource file:///a.bin, application/octet-stream, 3.0 MiB]"
        );
        assert_eq!(
            result_json(&result),
            json!({"content": [
                {"type": "text", "text": "here"},
                {"type": "image", "mimeType": "image/png", "bytes": 2048},
                {"type": "audio", "mimeType": "audio/wav", "bytes": 100},
                {"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "bytes": 3 << 20}},
            ], "isError": false})
        );
    }

    #[test]
    fn structured_output_is_printed_once() {
        let structured = json!({"count": 3, "names": ["a"]});
        let result = result(vec![Content::Text(structured.to_string())], Some(structured.clone()));
        assert_eq!(result_text(&result), serde_json::to_string_pretty(&structured).unwrap());
        assert_eq!(
            result_json(&result),
            json!({"content": [], "structuredContent": structured, "isError": false})
        );
        // Text that says something else stays.
        let result = ToolResult {
            content: vec![Content::Text("3 found".into())],
            structured: Some(structured.clone()),
            is_error: true,
        };
        assert_eq!(
            result_json(&result),
            json!({"content": [{"type": "text", "text": "3 found"}], "structuredContent": structured, "isError": true})
        );
    }

    #[test]
    fn links_and_text_resources_are_shown_with_what_they_have() {
        let link = Content::ResourceLink(ResourceLink {
            uri: "https://example.com/r".into(),
            name: "r".into(),
            description: Some("a report".into()),
            mime_type: None,
        });
        let text = Content::EmbeddedResource(EmbeddedResource {
            uri: "file:///n.txt".into(),
            mime_type: None,
            text: Some("hello".into()),
            blob: None,
        });
        let result = result(vec![link, text], None);
        assert_eq!(
            result_text(&result),
            "[link: r <https://example.com/r>] a report\n[resource file:///n.txt]\nhello"
        );
        assert_eq!(
            result_json(&result)["content"],
            json!([
                {"type": "resource_link", "uri": "https://example.com/r", "name": "r", "description": "a report"},
                {"type": "resource", "resource": {"uri": "file:///n.txt", "text": "hello"}},
            ])
        );
    }

    #[test]
    fn outcomes_are_sentences_not_debug_forms() {
        let limits = ToolLimits::default();
        let cases = [
            (Outcome::Cancelled, "the call was cancelled"),
            (
                Outcome::TimedOut(Timeout::MaxDuration(Duration::from_millis(1500))),
                "the call timed out: it ran for 1.50 s (its maximum duration)",
            ),
            (Outcome::OutOfMemory, "the tool ran out of memory (its limit is 64 MiB)"),
            (Outcome::ToolError("no such file".into()), "the tool failed: no such file"),
        ];
        for (case, words) in cases {
            assert_eq!(outcome(&case, &limits), words);
        }
    }

    #[test]
    fn sizes_and_durations_read_as_people_write_them() {
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(duration(Duration::from_micros(850)), "850 µs");
        assert_eq!(duration(Duration::from_micros(2500)), "2.5 ms");
        assert_eq!(duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(duration(Duration::from_millis(1250)), "1.25 s");
    }
}
