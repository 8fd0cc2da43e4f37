//! Text a guest wrote (a log line, a tool's description, a result), made safe to print:
//! control characters escaped, so it can neither break nor forge the operator's log lines
//! nor drive a terminal (cursor moves, erased lines, OSC 52 clipboard writes). Unicode's
//! line and paragraph separators and its bidirectional controls are escaped too: the
//! first break lines in log viewers and editors, the second reorder what the operator
//! reads (a REFUSED line shown as accepted, "Trojan Source").

use std::borrow::Cow;

/// `text` with every control character escaped (`\n`, `\r`, `\u{1b}`): for one line.
pub fn printable(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// `text` with its control characters escaped except line breaks and tabs: for text of
/// several lines printed to a terminal.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escaped(text, |c| c == '\n' || c == '\t')
}

fn escaped(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let escape = |c: char| is_unprintable(c) && !keep(c);
    if !text.chars().any(escape) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// A control character, or one that changes how the text around it is laid out: what
/// must never reach a terminal raw.
pub(crate) fn is_unprintable(c: char) -> bool {
    c.is_control() || is_layout_control(c)
}

/// Characters that are not `Cc` controls yet change how the text around them is laid
/// out: line and paragraph separators, and the bidirectional marks, embeddings,
/// overrides and isolates.
fn is_layout_control(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_line_breaks_kept_where_asked() {
        assert_eq!(printable("plain"), "plain");
        assert_eq!(printable("a\nb\r\u{1b}[2K"), "a\\nb\\r\\u{1b}[2K");
        assert_eq!(printable_lines("a\n\tb\u{1b}]52;c;eA==\u{7}"), "a\n\tb\\u{1b}]52;c;eA==\\u{7}");
    }

    #[test]
    fn separators_and_bidirectional_controls_are_escaped() {
        assert_eq!(printable("a\u{2028}b\u{2029}c"), "a\\u{2028}b\\u{2029}c");
        assert_eq!(printable_lines("ok \u{202E}DESUFER\u{202C}"), "ok \\u{202e}DESUFER\\u{202c}");
        assert_eq!(printable("\u{2066}\u{2069}\u{200F}\u{61C}"), "\\u{2066}\\u{2069}\\u{200f}\\u{61c}");
        assert_eq!(printable("naïve — ünïcode ✓"), "naïve — ünïcode ✓");
    }
}
