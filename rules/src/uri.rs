//! What the host sends as a URI: a resource's, a read's contents', a resource link's, and
//! (around its variables) a template's. The MCP schema gives these `format: uri` (and
//! `uri-template`), and clients that validate formats refuse a message carrying
//! `guide.md` or a space: such a message would cost the client the whole answer.

/// Check that `uri` is an absolute URI (RFC 3986: a scheme, `:`, then URI characters and
/// `%XX` escapes only).
pub fn check_uri(uri: &str) -> Result<(), String> {
    check_scheme(uri)?;
    check_characters(uri, false)
}

/// Check the literal text of a URI template (`{name}` variables aside): URI characters and
/// `%XX` escapes only. (A template may start with a variable, `{scheme}://…`, as RFC 6570
/// allows: the URIs it matches are checked when they are read.)
pub fn check_uri_template(template: &str) -> Result<(), String> {
    check_characters(template, true)
}

fn check_scheme(uri: &str) -> Result<(), String> {
    let scheme = uri.split_once(':').map(|(scheme, _)| scheme).unwrap_or_default();
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if valid { Ok(()) } else { Err("a URI starts with a scheme and `:` (e.g. `file:///notes.md`)".into()) }
}

/// `braces`: `{` and `}` allowed, as a template's variables.
fn check_characters(uri: &str, braces: bool) -> Result<(), String> {
    let bytes = uri.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        if byte == b'%' {
            let escaped = bytes.get(at + 1..at + 3).is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit));
            if !escaped {
                return Err("a `%` in a URI starts an escape of two hexadecimal digits".into());
            }
            at += 3;
            continue;
        }
        let allowed = byte.is_ascii_alphanumeric()
            || b"-._~:/?#[]@!$&'()*+,;=".contains(&byte)
            || (braces && matches!(byte, b'{' | b'}'));
        if !allowed {
            let shown = uri[at..].chars().next().unwrap_or('?');
            return Err(format!("{shown:?} cannot appear in a URI unescaped (write it as %XX)"));
        }
        at += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_uris_pass_and_relative_or_unescaped_ones_do_not() {
        for good in
            ["file:///notes.md", "test://static/text", "https://a.example/x?y=%20#z", "urn:isbn:0451450523"]
        {
            assert_eq!(check_uri(good), Ok(()), "{good}");
        }
        for bad in [
            "guide.md",
            "notes/1",
            "",
            ":x",
            "1a://x",
            "file:///a b",
            "file:///a\"b",
            "x://%zz",
            "x://<a>",
            "x://é",
        ] {
            assert!(check_uri(bad).is_err(), "{bad}");
        }
        assert_eq!(check_uri_template("hostile://spin/{label}"), Ok(()));
        assert_eq!(check_uri_template("{scheme}://{host}/{label}"), Ok(()));
        assert!(check_uri_template("x://a b/{label}").is_err());
        assert!(check_uri("x://{label}").is_err(), "braces only in templates");
    }
}
