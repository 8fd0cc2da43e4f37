//! What a message will cost in memory once parsed, told from its bytes without building it.
//!
//! A JSON body is small next to the [`serde_json::Value`] it becomes: every value takes a
//! 32-byte slot, every object entry a share of a B-tree node and a heap copy of its key,
//! every string a heap block of its own. 3 MB of `{"k0":0,"k1":0,…}` (300,000 keys) is
//! 40 MB as a `Value`. Admission (in the dispatch layer) charges a request this
//! estimate, so a bound on bytes held is a bound on real memory, and a message too costly
//! to hold is refused before it is built: [`estimate`] walks the text with serde's
//! visitors and allocates nothing but the request's `id`. The runtime holds a guest's
//! structured output to the call's host memory the same way, before parsing it. (A leaf
//! of its own, so that both layers use it and neither reaches into the other.)

use std::fmt;

use serde::Deserializer;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The slot every value takes in its parent (`size_of::<Value>()` on 64-bit targets).
const VALUE_SLOT: usize = 32;
/// An object entry besides its value slot: the key's `String` and its share of B-tree
/// nodes (of 11 entries, about two thirds full). Measured: 300,000 small keys hold
/// 40 MB once parsed, 133 bytes each with a 32-byte block for the key's text.
const ENTRY_OVERHEAD: usize = 72;
/// The least a non-empty object takes: one B-tree leaf of 11 keys and 11 values.
const MAP_NODE: usize = 640;

/// What [`estimate`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// About how many bytes of heap the parsed [`Value`] takes.
    pub bytes: usize,
    /// The message's top-level `id`, when it has one (so a refusal can answer it).
    pub id: Option<Value>,
    /// It is shaped as a response (a `result` or an `error`, no `method`): the client's
    /// answer to a request of the server's, whose `id` is the server's own, never to be
    /// answered.
    pub is_response: bool,
}

/// Estimate the memory `text` takes once parsed into a [`Value`]. Fails only when `text`
/// is not JSON (parsing it then fails the same way, for a fraction of the cost).
pub fn estimate(text: &[u8]) -> Result<Estimate, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(text);
    // The parser's own recursion limit (128) applies: no stack is at risk.
    let estimate = deserializer.deserialize_any(Counter { top: true })?;
    deserializer.end()?;
    Ok(estimate)
}

/// A heap block as the allocator hands it out: at least 32 bytes, in steps of 16, with
/// 8 bytes of header (glibc's malloc).
pub(crate) fn block(requested: usize) -> usize {
    if requested == 0 { 0 } else { (requested + 8).div_ceil(16).max(2) * 16 }
}

/// Counts one value (and everything in it); at the top level, also keeps `id`.
struct Counter {
    top: bool,
}

impl<'de> DeserializeSeed<'de> for Counter {
    type Value = Estimate;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Estimate, D::Error> {
        deserializer.deserialize_any(self)
    }
}

fn scalar(bytes: usize) -> Estimate {
    Estimate { bytes, id: None, is_response: false }
}

impl<'de> Visitor<'de> for Counter {
    type Value = Estimate;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Estimate, E> {
        Ok(scalar(0))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Estimate, E> {
        Ok(scalar(0))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Estimate, E> {
        Ok(scalar(0))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Estimate, E> {
        Ok(scalar(0))
    }

    fn visit_unit<E>(self) -> Result<Estimate, E> {
        Ok(scalar(0))
    }

    fn visit_str<E>(self, text: &str) -> Result<Estimate, E> {
        Ok(scalar(block(text.len())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Estimate, A::Error> {
        let (mut count, mut bytes) = (0usize, 0usize);
        while let Some(item) = items.next_element_seed(Counter { top: false })? {
            count += 1;
            bytes = bytes.saturating_add(item.bytes);
        }
        // A `Vec` grown by pushes: capacity is the next power of two (at least 4).
        let capacity = if count == 0 { 0 } else { count.next_power_of_two().max(4) };
        Ok(scalar(bytes.saturating_add(block(capacity * VALUE_SLOT))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Estimate, A::Error> {
        let (mut bytes, mut count, mut id) = (0usize, 0usize, None);
        let (mut method, mut answers) = (false, 0);
        while let Some(key) = entries.next_key::<KeyLength>()? {
            count += 1;
            method |= key.role == KeyRole::Method;
            answers += usize::from(key.role == KeyRole::Answer);
            let value = if self.top && key.role == KeyRole::Id {
                let found = entries.next_value_seed(IdCounter)?;
                id = found.id;
                found.bytes
            } else {
                entries.next_value_seed(Counter { top: false })?.bytes
            };
            bytes = bytes.saturating_add(block(key.length)).saturating_add(value);
        }
        let nodes = if count == 0 { 0 } else { (count * (VALUE_SLOT + ENTRY_OVERHEAD)).max(MAP_NODE) };
        // One with both `result` and `error` is malformed, but still the client's answer
        // to a request of the server's, whose id must never be answered.
        let is_response = self.top && answers >= 1 && !method;
        Ok(Estimate { bytes: bytes.saturating_add(nodes), id, is_response })
    }
}

/// Counts the top-level `id` and keeps it when it is a scalar: an object or an array is
/// no id (the message is refused for it), and may be megabytes, so it is only counted.
struct IdCounter;

impl<'de> DeserializeSeed<'de> for IdCounter {
    type Value = Estimate;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Estimate, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdCounter {
    type Value = Estimate;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, flag: bool) -> Result<Estimate, E> {
        Ok(Estimate { bytes: 0, id: Some(Value::Bool(flag)), is_response: false })
    }

    fn visit_i64<E>(self, number: i64) -> Result<Estimate, E> {
        Ok(Estimate { bytes: 0, id: Some(number.into()), is_response: false })
    }

    fn visit_u64<E>(self, number: u64) -> Result<Estimate, E> {
        Ok(Estimate { bytes: 0, id: Some(number.into()), is_response: false })
    }

    fn visit_f64<E>(self, number: f64) -> Result<Estimate, E> {
        Ok(Estimate { bytes: 0, id: Some(number.into()), is_response: false })
    }

    fn visit_unit<E>(self) -> Result<Estimate, E> {
        Ok(Estimate { bytes: 0, id: Some(Value::Null), is_response: false })
    }

    fn visit_str<E>(self, text: &str) -> Result<Estimate, E> {
        Ok(Estimate {
            bytes: block(text.len()),
            id: Some(Value::String(text.to_owned())),
            is_response: false,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, items: A) -> Result<Estimate, A::Error> {
        Counter { top: false }.visit_seq(items)
    }

    fn visit_map<A: MapAccess<'de>>(self, entries: A) -> Result<Estimate, A::Error> {
        Counter { top: false }.visit_map(entries)
    }
}

/// An object key, counted but not kept.
struct KeyLength {
    length: usize,
    role: KeyRole,
}

/// What a key says of the message it is a top-level key of.
#[derive(PartialEq, Eq)]
enum KeyRole {
    Id,
    Method,
    /// `result` or `error`.
    Answer,
    Other,
}

impl<'de> de::Deserialize<'de> for KeyLength {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Key;
        impl Visitor<'_> for Key {
            type Value = KeyLength;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("an object key")
            }

            fn visit_str<E>(self, key: &str) -> Result<KeyLength, E> {
                let role = match key {
                    "id" => KeyRole::Id,
                    "method" => KeyRole::Method,
                    "result" | "error" => KeyRole::Answer,
                    _ => KeyRole::Other,
                };
                Ok(KeyLength { length: key.len(), role })
            }
        }
        deserializer.deserialize_str(Key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::heap_count as counting;

    /// The heap a parsed `text` really holds on to.
    fn measured(text: &str) -> usize {
        let before = counting::live();
        let value: Value = serde_json::from_str(text).unwrap();
        let held = counting::live() - before;
        drop(value);
        held as usize
    }

    #[test]
    fn the_estimate_is_close_to_what_a_parsed_value_holds() {
        let many_keys =
            format!("{{{}}}", (0..300_000).map(|key| format!("\"k{key}\":0")).collect::<Vec<_>>().join(","));
        let numbers = format!("[{}]", (0..100_000).map(|n| n.to_string()).collect::<Vec<_>>().join(","));
        let strings =
            format!("[{}]", (0..50_000).map(|n| format!("\"text {n}\"")).collect::<Vec<_>>().join(","));
        let nested = format!("{}1{}", "{\"a\":[".repeat(60), "]}".repeat(60));
        let long_string = format!("{{\"text\":\"{}\"}}", "x".repeat(1 << 20));
        for (name, text) in [
            ("300,000 keys", many_keys.as_str()),
            ("100,000 numbers", &numbers),
            ("50,000 strings", &strings),
            ("nested", &nested),
            ("one long string", &long_string),
        ] {
            let real = measured(text) as f64;
            let estimate = estimate(text.as_bytes()).unwrap().bytes as f64;
            assert!(
                (0.75..=1.5).contains(&(estimate / real)),
                "{name}: estimated {estimate} bytes, parsed {real}"
            );
        }
    }

    #[test]
    fn the_id_is_kept_and_bad_json_is_an_error() {
        let found = estimate(br#"{"jsonrpc":"2.0","id":"a","method":"x","params":{"id":7}}"#).unwrap();
        assert_eq!(found.id, Some(Value::String("a".into())));
        assert_eq!(estimate(br#"{"params":{"id":7}}"#).unwrap().id, None);
        assert_eq!(estimate(br#"{"id":7.0}"#).unwrap().id, Some(serde_json::json!(7.0)));
        assert_eq!(estimate(br#"{"id":null}"#).unwrap().id, Some(Value::Null));
        // An id that is an object is counted like any value, and never built.
        let keys = (0..100_000).map(|key| format!("\"k{key}\":0")).collect::<Vec<_>>().join(",");
        let huge_id = format!("{{\"jsonrpc\":\"2.0\",\"id\":{{{keys}}},\"method\":\"x\"}}");
        let before = counting::live();
        let found = estimate(huge_id.as_bytes()).unwrap();
        assert!(counting::live() - before < 4096, "the id was built");
        assert_eq!(found.id, None);
        assert!(found.bytes > 10 << 20, "counted: {} bytes", found.bytes);
        assert!(estimate(b"{nope").is_err());
        assert!(estimate(b"{} {}").is_err());
    }

    /// A response is a top-level `result` or `error` without a `method`: a request whose
    /// params hold those keys is not one.
    #[test]
    fn responses_are_told_from_requests() {
        let is_response = |text: &str| estimate(text.as_bytes()).unwrap().is_response;
        assert!(is_response(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        assert!(is_response(r#"{"error":{"code":1,"message":"x"},"id":"s"}"#));
        assert!(!is_response(r#"{"jsonrpc":"2.0","id":1,"method":"x","result":{}}"#));
        assert!(!is_response(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"result":1,"error":2}}"#));
        assert!(!is_response(r#"[{"id":1,"result":{}}]"#));
        assert!(is_response(r#"{"id":1,"result":{},"error":{"code":1,"message":"x"}}"#));
    }

    /// Text that turns out not to be JSON only at its end (a cut-off array, trailing
    /// bytes) is refused by the estimate alone: nothing of it is built.
    #[test]
    fn text_that_is_not_json_is_refused_without_building_what_came_before() {
        let values = "0,".repeat(2 << 20);
        for text in [format!("{{\"a\":[{values}"), format!("[{values}0] x")] {
            let _ = counting::peak_since_last();
            let refused = estimate(text.as_bytes());
            let peak = counting::peak_since_last();
            assert!(refused.is_err(), "admitted");
            assert!(peak < 64 << 10, "{peak} bytes were built for text that is not JSON");
            // What a parse would have built first.
            let _ = counting::peak_since_last();
            assert!(serde_json::from_slice::<Value>(text.as_bytes()).is_err());
            assert!(counting::peak_since_last() > 32 << 20);
        }
    }
}
