//! Resource templates (RFC 6570 level 1, `{name}` variables): how the host routes a URI to
//! the template that serves it and how the guest SDK reads the variables back out, one
//! implementation for both; and whether two templates can match one URI
//! ([`UriTemplate::overlap`]), which the host refuses across components.

use std::collections::VecDeque;

/// The longest template accepted. Whether two templates overlap is decided in time that
/// grows with the product of their lengths; real templates are tens of bytes.
pub const MAX_TEMPLATE_BYTES: usize = 1024;

/// Whether two templates can match one URI ([`UriTemplate::overlap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// No URI matches both.
    Disjoint,
    /// Both match this URI.
    Common(String),
    /// Both patterns admit a URI, but the one found is not matched by both templates as
    /// [`UriTemplate::match_uri`] reads them (a variable ends at the first occurrence of
    /// the text after it): whether another is, is not decided.
    Possible,
    /// The budget ran out before it was decided.
    Undecided,
}

/// A URI template, parsed: literal text and `{variable}`s, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
    /// The template as a pattern, one list of items per `/`-separated segment: made once,
    /// for [`Self::overlap`].
    pattern: Vec<Vec<Item>>,
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
        if text.len() > MAX_TEMPLATE_BYTES {
            return Err(format!(
                "it is {} bytes long; a template has at most {MAX_TEMPLATE_BYTES}",
                text.len()
            ));
        }
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
        let pattern = pattern(&parts);
        Ok(Self { parts, pattern })
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

    /// How many `/`-separated segments its URIs have: a variable never holds a `/`, so
    /// every URI it matches has as many as its literal text.
    pub fn segments(&self) -> usize {
        self.pattern.len()
    }

    /// Whether some URI matches both `self` and `other`, and one that does; `budget` is
    /// spent on the work (a step per state looked at, per table cell, per few characters
    /// compared) and the answer is [`Overlap::Undecided`] when it runs out.
    ///
    /// Decided over the templates as patterns (each variable any non-empty run without
    /// `/`): an intersection of two automata, segment by segment, since each `/` of a URI
    /// is literal text in both. [`Self::match_uri`] takes a variable only up to the first
    /// occurrence of the text after it, so a pair it could never both match (`x://{a}ab`
    /// and `x://{b}abab`) may be [`Overlap::Possible`]: never [`Overlap::Disjoint`] when
    /// a URI matches both.
    pub fn overlap(&self, other: &Self, budget: &mut u64) -> Overlap {
        let (ours, theirs) = (&self.pattern, &other.pattern);
        if ours.len() != theirs.len() {
            return Overlap::Disjoint;
        }
        let mut common = Vec::with_capacity(ours.len());
        for (a, b) in ours.iter().zip(theirs) {
            match common_text(a, b, budget) {
                Some(Some(text)) => common.push(text),
                Some(None) => return Overlap::Disjoint,
                None => return Overlap::Undecided,
            }
        }
        let uri = common.join("/");
        match self.match_uri(&uri).is_some() && other.match_uri(&uri).is_some() {
            true => Overlap::Common(uri),
            false => Overlap::Possible,
        }
    }
}

/// `parts` as a pattern, one list of items per `/`-separated segment.
fn pattern(parts: &[Part]) -> Vec<Vec<Item>> {
    let mut segments = vec![Vec::new()];
    for part in parts {
        match part {
            Part::Variable(_) => segments.last_mut().unwrap().extend([Item::One, Item::Any]),
            Part::Literal(text) => {
                for c in text.chars() {
                    match c {
                        '/' => segments.push(Vec::new()),
                        c => segments.last_mut().unwrap().push(Item::Char(c)),
                    }
                }
            }
        }
    }
    segments
}

/// One step of a segment's pattern: a variable is [`Item::One`] then [`Item::Any`] (one
/// character or more, none of them `/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Char(char),
    /// Exactly one character.
    One,
    /// Any number of characters.
    Any,
}

/// The character both items can read next, if any (`x` for any character at all).
fn joint(a: Item, b: Item) -> Option<char> {
    match (a, b) {
        (Item::Char(c), Item::Char(d)) => (c == d).then_some(c),
        (Item::Char(c), _) | (_, Item::Char(c)) => Some(c),
        _ => Some('x'),
    }
}

/// How a state of [`common_text`] was first reached, to spell the text back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Unseen,
    Start,
    /// `a`'s `Any` read nothing more.
    SkipA,
    /// `b`'s `Any` read nothing more.
    SkipB,
    /// Both read a character and moved on.
    Both,
    /// `a`'s `Any` read the character `b` moved on with.
    AnyA,
    /// `b`'s `Any` read the character `a` moved on with.
    AnyB,
}

/// A text both segment patterns match (`Some(None)`: none does), found breadth-first over
/// the pairs of positions in `a` and `b`; `None` when `budget` ran out first.
fn common_text(a: &[Item], b: &[Item], budget: &mut u64) -> Option<Option<String>> {
    // Literal text at either end that differs rules a pair out without the search: most
    // pairs of templates differ there (a scheme, a host, a file extension).
    let mut compared = 0u64;
    let mut differs = |pairs: &mut dyn Iterator<Item = (&Item, &Item)>| {
        pairs
            .map_while(|pair| match pair {
                (Item::Char(c), Item::Char(d)) => Some(c == d),
                _ => None,
            })
            .inspect(|_| compared += 1)
            .any(|same| !same)
    };
    let disjoint = differs(&mut a.iter().zip(b)) || differs(&mut a.iter().rev().zip(b.iter().rev()));
    spend(budget, 1 + compared / 8)?;
    if disjoint {
        return Some(None);
    }
    // Literal text alone on both sides (a scheme, a fixed path segment): already compared.
    let literal = |items: &[Item]| items.iter().all(|item| matches!(item, Item::Char(_)));
    if literal(a) && literal(b) {
        let text = a.iter().map(|item| if let Item::Char(c) = item { *c } else { 'x' });
        return Some((a.len() == b.len()).then(|| text.collect()));
    }
    let width = b.len() + 1;
    let cells = (a.len() + 1) * width;
    spend(budget, cells as u64)?;
    let mut reached = vec![Step::Unseen; cells];
    reached[0] = Step::Start;
    let mut queue = VecDeque::from([(0, 0)]);
    while let Some((i, j)) = queue.pop_front() {
        spend(budget, 1)?;
        if (i, j) == (a.len(), b.len()) {
            return Some(Some(spell(a, b, &reached, width)));
        }
        let mut visit = |i: usize, j: usize, step: Step| {
            if reached[i * width + j] == Step::Unseen {
                reached[i * width + j] = step;
                queue.push_back((i, j));
            }
        };
        let (x, y) = (a.get(i).copied(), b.get(j).copied());
        if x == Some(Item::Any) {
            visit(i + 1, j, Step::SkipA);
        }
        if y == Some(Item::Any) {
            visit(i, j + 1, Step::SkipB);
        }
        let (Some(x), Some(y)) = (x, y) else { continue };
        if joint(x, y).is_none() {
            continue;
        }
        match (x == Item::Any, y == Item::Any) {
            (false, false) => visit(i + 1, j + 1, Step::Both),
            (true, false) => visit(i, j + 1, Step::AnyA),
            (false, true) => visit(i + 1, j, Step::AnyB),
            // Both reading on in place changes nothing.
            (true, true) => {}
        }
    }
    Some(None)
}

/// Take `steps` from `budget`, or all of it and `None` when it has fewer.
fn spend(budget: &mut u64, steps: u64) -> Option<()> {
    match budget.checked_sub(steps) {
        Some(left) => {
            *budget = left;
            Some(())
        }
        None => {
            *budget = 0;
            None
        }
    }
}

/// The text read on the way to the end state, from the steps that first reached each.
fn spell(a: &[Item], b: &[Item], reached: &[Step], width: usize) -> String {
    let (mut i, mut j) = (a.len(), b.len());
    let mut text = Vec::new();
    loop {
        match reached[i * width + j] {
            Step::Start | Step::Unseen => break,
            Step::SkipA => i -= 1,
            Step::SkipB => j -= 1,
            Step::Both => {
                (i, j) = (i - 1, j - 1);
                text.extend(joint(a[i], b[j]));
            }
            Step::AnyA => {
                j -= 1;
                text.extend(joint(Item::Any, b[j]));
            }
            Step::AnyB => {
                i -= 1;
                text.extend(joint(a[i], Item::Any));
            }
        }
    }
    text.iter().rev().collect()
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
        let long = format!("x://{}/{{id}}", "a".repeat(MAX_TEMPLATE_BYTES));
        assert!(UriTemplate::parse(&long).unwrap_err().contains("at most 1024"));
    }

    fn overlap(a: &str, b: &str) -> Overlap {
        let (a, b) = (UriTemplate::parse(a).unwrap(), UriTemplate::parse(b).unwrap());
        let forward = a.overlap(&b, &mut u64::MAX.clone());
        // Symmetric, and any URI given matches both.
        let backward = b.overlap(&a, &mut u64::MAX.clone());
        assert_eq!(forward == Overlap::Disjoint, backward == Overlap::Disjoint);
        if let Overlap::Common(uri) = &forward {
            assert!(a.match_uri(uri).is_some() && b.match_uri(uri).is_some(), "{uri}");
        }
        forward
    }

    #[test]
    fn templates_overlap_when_one_uri_matches_both() {
        for (a, b, common) in [
            ("notes://{c}/{id}", "notes://books/{id}", "notes://books/x"),
            ("notes://{c}/{id}", "notes://{x}/{y}", "notes://x/x"),
            ("{s}://{h}/{p}", "notes://books/{id}", "notes://books/x"),
            ("x://a{b}c/{d}", "x://{e}bc/z", "x://abc/z"),
            ("x://{a}-{b}", "x://p-{q}", "x://p-x"),
            ("x://{a}.json", "x://data.{ext}", "x://data.json"),
        ] {
            assert_eq!(overlap(a, b), Overlap::Common(common.into()), "{a} and {b}");
        }
        // The patterns meet, but where the first template's variable would end early.
        assert_eq!(overlap("x://{a}x", "x://{b}xx"), Overlap::Possible);
        for (a, b) in [
            ("notes://{c}/{id}", "notes://{c}/{id}/x"),
            ("notes://books/{id}", "notes://films/{id}"),
            ("notes://{c}/{id}", "other://{c}/{id}"),
            ("x://a{b}", "x://b{a}"),
            ("x://{a}.json", "x://{a}.toml"),
            ("x://ab{c}", "x://ac{d}"),
            // A variable is one character at least.
            ("x://{a}b", "x://b{c}z"),
        ] {
            assert_eq!(overlap(a, b), Overlap::Disjoint, "{a} and {b}");
        }
    }

    #[test]
    fn deciding_an_overlap_stops_when_its_budget_is_spent() {
        // Neither end's literal text tells these apart: it takes the search.
        let (a, b) =
            (UriTemplate::parse("x://{a}b{c}d").unwrap(), UriTemplate::parse("x://{e}bb{f}cd").unwrap());
        let mut budget = 10;
        assert_eq!(a.overlap(&b, &mut budget), Overlap::Undecided);
        assert_eq!(budget, 0);
        let mut budget = u64::MAX;
        let found = a.overlap(&b, &mut budget);
        assert!(matches!(found, Overlap::Common(_)), "{found:?}");
        assert!(u64::MAX - budget > 10, "it took {} steps", u64::MAX - budget);
        // Literal text that differs at either end costs a step per segment, whatever the
        // lengths.
        let long = |end: &str| UriTemplate::parse(&format!("x://{{a}}{}{end}", "b".repeat(900))).unwrap();
        let mut budget = 3;
        assert_eq!(long("c").overlap(&long("d"), &mut budget), Overlap::Disjoint);
    }
}
