//! Resource templates (RFC 6570 level 1, `{name}` variables): how the host routes a URI to
//! the template that serves it and how the guest SDK reads the variables back out, one
//! implementation for both.

/// A URI template, parsed: literal text and `{variable}`s, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Variable(String),
}

impl UriTemplate {
    /// Parse `text`. Operators (`{+path}`, `{?query}`), two variables side by side (a URI
    /// could not be split between them) and a template without variables are refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            } else if matches!(parts.last(), Some(Part::Variable(_))) {
                return Err("two variables must be separated by literal text".into());
            }
            let close = rest[open..].find('}').ok_or("a `{` is never closed")? + open;
            let name = &rest[open + 1..close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err("a variable must be `{name}` (letters, digits, `_`)".into());
            }
            parts.push(Part::Variable(name.to_owned()));
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err("a `}` is never opened".into());
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        if !parts.iter().any(|part| matches!(part, Part::Variable(_))) {
            return Err("it has no variable: list it as a resource instead".into());
        }
        Ok(Self { parts })
    }

    /// The variables, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Variable(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// The variables' values when `uri` is one of the template's URIs: each variable a
    /// non-empty run of characters without `/`, up to the literal text that follows it.
    pub fn match_uri(&self, uri: &str) -> Option<Vec<(String, String)>> {
        let mut rest = uri;
        let mut values = Vec::new();
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(text) => rest = rest.strip_prefix(text.as_str())?,
                Part::Variable(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    values.push((name.clone(), value.to_owned()));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_one_segment_per_variable() {
        let data = UriTemplate::parse("test://template/{id}/data").unwrap();
        assert_eq!(data.match_uri("test://template/123/data"), Some(vec![("id".into(), "123".into())]));
        assert_eq!(data.match_uri("test://template//data"), None);
        assert_eq!(data.match_uri("test://template/1/2/data"), None);
        assert_eq!(data.match_uri("test://template/123/data/more"), None);
        assert_eq!(data.match_uri("test://other/123/data"), None);
        let two = UriTemplate::parse("notes://{collection}/{id}").unwrap();
        assert_eq!(two.match_uri("notes://books/7").unwrap().len(), 2);
        assert_eq!(two.match_uri("notes://books"), None);
        assert_eq!(two.variables().collect::<Vec<_>>(), ["collection", "id"]);
        for bad in ["x://{a}{b}", "x://{a", "x://a}", "x://plain", "x://{+path}"] {
            assert!(UriTemplate::parse(bad).is_err(), "{bad}");
        }
    }
}
