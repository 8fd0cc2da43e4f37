//! Plausible JSON-RPC messages on stdin, built from the fuzz input: valid JSON with the
//! envelope keys, methods, ids and `_meta` of MCP (each sometimes wrong), so that the
//! fuzzer spends its time in the envelope checks and dispatch rather than in JSON syntax.
//! Checked as the raw target is: framing, one answer per request, well-formed answers.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

fuzz_target!(|input: &[u8]| {
    let mut u = Unstructured::new(input);
    let Ok(messages) = stream(&mut u) else { return };
    let (buffer, limit) = cordon_fuzz::reader_sizes(&messages);
    cordon_fuzz::check_framing(&messages, buffer, limit);
    cordon_fuzz::check_stdio(&messages, buffer);
});

/// Up to eight messages, one per line (some ending in `\r\n`, some blank lines between).
fn stream(u: &mut Unstructured) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..u.int_in_range(1..=8)? {
        out.extend(message(u)?);
        out.extend_from_slice(u.choose(&[&b"\n"[..], b"\r\n", b"\n\n", b" \n"])?);
    }
    Ok(out)
}

fn message(u: &mut Unstructured) -> Result<Vec<u8>> {
    let mut object = Map::new();
    match u.int_in_range(0..=9)? {
        0 => {}
        1 => {
            object.insert("jsonrpc".into(), json!("1.0"));
        }
        2 => {
            object.insert("jsonrpc".into(), json!(2.0));
        }
        _ => {
            object.insert("jsonrpc".into(), json!("2.0"));
        }
    }
    // Ids are spliced in as text: numbers such as 1e2 or 2^64 must reach the parser as written.
    let id = id_text(u)?;
    let method = u.choose(&[
        "initialize",
        "server/discover",
        "tools/list",
        "tools/call",
        "ping",
        "notifications/cancelled",
        "notifications/initialized",
        "resources/list",
        "",
    ])?;
    match u.int_in_range(0..=9)? {
        0 => {}
        1 => {
            object.insert("method".into(), json(u, 1)?);
        }
        _ => {
            object.insert("method".into(), json!(method));
        }
    }
    match u.int_in_range(0..=9)? {
        0 => {}
        1 => {
            object.insert("params".into(), json(u, 2)?);
        }
        _ => {
            object.insert("params".into(), params(u, method)?);
        }
    }
    if u.ratio(1, 8)? {
        object.insert(u.choose(&["result", "error"])?.to_string(), json(u, 2)?);
    }
    let mut text = serde_json::to_string(&Value::Object(object)).expect("a Value serializes");
    if let Some(id) = id {
        // `{}` or `{...}`: put the id first.
        let rest = if text.len() > 2 { format!(",{}", &text[1..]) } else { "}".into() };
        text = format!("{{\"id\":{id}{rest}");
    }
    Ok(text.into_bytes())
}

fn id_text(u: &mut Unstructured) -> Result<Option<String>> {
    Ok(match u.int_in_range(0..=12)? {
        0 => None,
        1 => Some("null".into()),
        2 => Some(
            u.choose(&[
                "1.0",
                "-0",
                "1e2",
                "1.5",
                "1e20",
                "18446744073709551615",
                "18446744073709551616",
                "9007199254740993.0",
                "-9223372036854775809",
                "[]",
                "{}",
                "true",
            ])?
            .to_string(),
        ),
        3 | 4 => Some(json!(u.arbitrary::<String>()?).to_string()),
        5 => Some(json(u, 1)?.to_string()),
        _ => Some(u.arbitrary::<i64>()?.to_string()),
    })
}

fn params(u: &mut Unstructured, method: &str) -> Result<Value> {
    let mut params = Map::new();
    if !u.ratio(1, 6)? {
        params.insert("_meta".into(), meta(u)?);
    }
    match method {
        "initialize" => {
            let version = u.choose(&["2025-11-25", "2025-06-18", "2025-03-26", "2026-07-28", ""])?;
            params.insert("protocolVersion".into(), json!(version));
            params.insert("capabilities".into(), json!({}));
        }
        "tools/list" if u.ratio(1, 2)? => {
            let cursor = match u.int_in_range(0..=3)? {
                0 => json!(""),
                1 => json!(u.int_in_range(0u32..=300)?.to_string()),
                2 => json!(u.arbitrary::<String>()?),
                _ => json(u, 1)?,
            };
            params.insert("cursor".into(), cursor);
        }
        "tools/call" => {
            let name = match u.int_in_range(0..=3)? {
                0 => json(u, 1)?,
                1 => json!("echo"),
                _ => json!(u.arbitrary::<String>()?),
            };
            params.insert("name".into(), name);
            if !u.ratio(1, 4)? {
                params.insert("arguments".into(), json(u, 3)?);
            }
        }
        "notifications/cancelled" => {
            let id = id_text(u)?.unwrap_or_else(|| "1".into());
            let id: Value = serde_json::from_str(&id).unwrap_or(Value::Null);
            params.insert("requestId".into(), id);
        }
        _ => {}
    }
    Ok(Value::Object(params))
}

fn meta(u: &mut Unstructured) -> Result<Value> {
    let mut meta = Map::new();
    if !u.ratio(1, 6)? {
        let version = match u.int_in_range(0..=5)? {
            0 => json(u, 1)?,
            1 => json!("2025-11-25"),
            _ => json!("2026-07-28"),
        };
        meta.insert("io.modelcontextprotocol/protocolVersion".into(), version);
    }
    if !u.ratio(1, 6)? {
        let capabilities = match u.int_in_range(0..=3)? {
            0 => json(u, 2)?,
            1 => json!({"sampling": {}, "elicitation": {}}),
            _ => json!({}),
        };
        meta.insert("io.modelcontextprotocol/clientCapabilities".into(), capabilities);
    }
    if u.ratio(1, 3)? {
        let token = match u.int_in_range(0..=2)? {
            0 => json(u, 1)?,
            1 => json!(u.arbitrary::<String>()?),
            _ => json!(u.arbitrary::<i64>()?),
        };
        meta.insert("progressToken".into(), token);
    }
    if u.ratio(1, 4)? {
        let level = match u.int_in_range(0..=1)? {
            0 => json(u, 1)?,
            _ => json!(u.choose(&[
                "debug",
                "info",
                "notice",
                "warning",
                "error",
                "critical",
                "alert",
                "emergency",
                "trace"
            ])?),
        };
        meta.insert("io.modelcontextprotocol/logLevel".into(), level);
    }
    Ok(Value::Object(meta))
}

/// An arbitrary JSON value, nested at most `depth` deep (recursion stays bounded).
fn json(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let kinds = if depth == 0 { 5 } else { 7 };
    Ok(match u.int_in_range(0..=kinds - 1)? {
        0 => Value::Null,
        1 => json!(u.arbitrary::<bool>()?),
        2 => json!(u.arbitrary::<i64>()?),
        3 => serde_json::Number::from_f64(u.arbitrary::<f64>()?).map_or(Value::Null, Value::Number),
        4 => json!(u.arbitrary::<String>()?),
        5 => {
            let mut items = Vec::new();
            for _ in 0..u.int_in_range(0..=4)? {
                items.push(json(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let mut map = Map::new();
            for _ in 0..u.int_in_range(0..=4)? {
                let key = u.choose(&["region", "name", "count", "a", "b", "_meta", ""])?.to_string();
                let key = if u.ratio(1, 4)? { u.arbitrary::<String>()? } else { key };
                map.insert(key, json(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}
