//! Arbitrary bytes on stdin: the stdio framing, JSON-RPC parsing, MCP envelope checks and
//! dispatch, as `cordon serve --stdio` runs them (without guests: every tool is unknown).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let (buffer, limit) = cordon_fuzz::reader_sizes(input);
    cordon_fuzz::check_framing(input, buffer, limit);
    cordon_fuzz::check_stdio(input, buffer);
});
