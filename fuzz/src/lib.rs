//! What the fuzz targets share: the server under test, and the oracles that check what it
//! answered against the protocol's promises (every request answered exactly once, with its
//! id; nothing sent for notifications and responses; every answer a well-formed JSON-RPC
//! response), beyond "no panic".

use std::io::BufReader;
use std::sync::LazyLock;

use cordon::fuzzing::{Dispatcher, Line};
use cordon::protocol::jsonrpc::{self, Incoming, RequestId};
use serde_json::Value;

/// One server for the whole run: building its engine costs milliseconds.
pub static DISPATCHER: LazyLock<Dispatcher> =
    LazyLock::new(|| Dispatcher::new().expect("setting up the fuzzed server"));

/// A reader buffer size and a line limit derived from the input itself, so that seeds stay
/// plain messages: small buffers make lines straddle reads.
pub fn reader_sizes(input: &[u8]) -> (usize, usize) {
    let sum = input.iter().fold(0usize, |sum, &byte| sum.wrapping_add(byte.into()));
    (1 + sum % 64, 1 + sum % 512)
}

/// The stdio line reader against a plain split on `\n`: the same lines, whatever the
/// buffer size, and every line over `limit` reported as too long instead.
pub fn check_framing(input: &[u8], buffer: usize, limit: usize) {
    let mut reader = BufReader::with_capacity(buffer, input);
    let mut got = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match cordon::fuzzing::stdio_line(&mut reader, &mut line, limit) {
            Line::Eof => break,
            Line::TooLong => got.push(None),
            Line::Complete => got.push(Some(line.clone())),
        }
    }
    let mut want: Vec<Option<Vec<u8>>> = input
        .split(|&byte| byte == b'\n')
        .map(|piece| (piece.len() <= limit).then(|| piece.to_vec()))
        .collect();
    // A final newline (or no input at all) leaves an empty piece that is no line.
    if input.is_empty() || input.ends_with(b"\n") {
        want.pop();
    }
    assert_eq!(got, want, "stdio framing with a {buffer}-byte buffer and a {limit}-byte limit");
}

/// Run `input` through `serve --stdio` on one connection and check every line written back.
pub fn check_stdio(input: &[u8], buffer: usize) {
    let expected: Vec<Option<Value>> = input
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.trim_ascii().is_empty())
        .filter_map(|line| match jsonrpc::parse(line) {
            Incoming::Request { id, .. } => Some(Some(checked_id(&id))),
            Incoming::Invalid { id, .. } => Some(id.as_ref().map(checked_id)),
            Incoming::Notification { .. } | Incoming::Unanswered { .. } | Incoming::Response { .. } => None,
        })
        .collect();
    let answers = DISPATCHER.stdio(input, buffer);
    assert_eq!(answers.len(), expected.len(), "one answer per request and per invalid message");
    for (answer, id) in answers.iter().zip(&expected) {
        let answer: Value = serde_json::from_slice(answer).expect("every line written is JSON");
        check_response(&answer, id.as_ref());
    }
}

/// The JSON an id is answered with, checked to be read back as the same id.
pub fn checked_id(id: &RequestId) -> Value {
    let json = id.to_json();
    assert_eq!(RequestId::parse(&json).as_ref(), Some(id), "an id survives its round trip");
    json
}

/// A well-formed JSON-RPC response answering `id` (`None`: an error without an id).
pub fn check_response(answer: &Value, id: Option<&Value>) {
    let object = answer.as_object().expect("a response is an object");
    assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")));
    assert_eq!(object.get("id"), id, "the answer carries the request's id, or none");
    match (object.get("result"), object.get("error")) {
        (Some(result), None) => assert!(result.is_object(), "a result is an object"),
        (None, Some(error)) => {
            let code = error["code"].as_i64().expect("an error code is an integer");
            let known = [
                jsonrpc::PARSE_ERROR,
                jsonrpc::INVALID_REQUEST,
                jsonrpc::METHOD_NOT_FOUND,
                jsonrpc::INVALID_PARAMS,
                jsonrpc::INTERNAL_ERROR,
                jsonrpc::HEADER_MISMATCH,
                jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY,
                jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            ];
            assert!(known.contains(&code), "unknown error code {code}");
            assert!(error["message"].is_string(), "an error has a message");
        }
        _ => panic!("a response has exactly one of result and error: {answer}"),
    }
}
