"""The JavaScript example tools (`examples/js/tools.js`, built by `cargo xtask guests` with
componentize-js into target/guests/example-js.wasm) through `cordon serve` and the official
Python SDK client, over stdio and HTTP: list, call, progress, structured output, a thrown
exception as the error text, and the hard stop of a busy loop that never checks."""

import asyncio
import json
import time

import pytest

from conftest import CORDON, REPO, serving
from test_python_client import cpu_seconds, wait_until_cpu_stops

pytestmark = pytest.mark.anyio

JS_TOOLS = REPO / "target" / "guests" / "example-js.wasm"
# Compiled code shared by both transports, later runs and tests/js_guest.rs (cargo's
# CARGO_TARGET_TMPDIR is target/tmp): the component holds a JavaScript engine, and
# compiling it takes seconds.
CACHE = REPO / "target" / "tmp" / "js-guest-cache"


@pytest.fixture(params=["stdio", "http"])
def cordon_js(request, tmp_path):
    assert CORDON.is_file(), f"{CORDON} is missing: build it (cargo xtask test does)"
    assert JS_TOOLS.is_file(), f"{JS_TOOLS} is missing: run `cargo xtask guests`"
    config = tmp_path / "cordon.toml"
    config.write_text(
        f"[server]\ncache_dir = {json.dumps(str(CACHE))}\nprogress_interval_ms = 10\n\n"
        f"[[components]]\npath = {json.dumps(str(JS_TOOLS))}\n"
        "limits = { grace_ms = 250, idle_timeout_ms = 0, max_duration_ms = 120000 }\n"
    )
    with serving(request.param, config, tmp_path) as server:
        yield server


async def test_list_call_progress_and_a_thrown_exception(cordon_js):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async with cordon_js.client("2026-07-28") as client:
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["echo", "reindex", "spin", "word_count", "fail"]
        reindex = next(tool for tool in tools.tools if tool.name == "reindex")
        assert reindex.input_schema["required"] == ["collection"]
        assert reindex.input_schema["properties"]["total"]["default"] == 120

        result = await client.call_tool("echo", {"text": "héllo"})
        assert result.content[0].text == "héllo" and not result.is_error

        result = await client.call_tool("reindex", {"collection": "books", "step_ms": 20}, progress_callback=on_progress)
        assert result.content[0].text == "Reindexed 120 documents in books"
        assert seen and seen[-1] == (120, 120, "Indexed 120 of 120 documents"), seen
        assert all(a[0] < b[0] for a, b in zip(seen, seen[1:])), seen

        result = await client.call_tool("word_count", {"text": "three little words"})
        assert result.structured_content == {"words": 3, "characters": 18}

        result = await client.call_tool("fail", {"message": "the index is corrupt"})
        assert result.is_error
        assert result.content[0].text == "Error: the index is corrupt"


async def test_a_busy_loop_that_never_checks_is_hard_stopped(cordon_js):
    started = asyncio.Event()

    async def on_progress(progress, total, message):
        started.set()

    async with cordon_js.client("2026-07-28") as client:
        task = asyncio.create_task(client.call_tool("spin", {"seconds": 600}, progress_callback=on_progress))
        await asyncio.wait_for(started.wait(), 30)
        pid = cordon_js.pid()
        before, deadline = cpu_seconds(pid), time.monotonic() + 5.0
        while cpu_seconds(pid) - before < 0.3:
            assert time.monotonic() < deadline, "spin burns CPU while it runs"
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until_cpu_stops(pid)
        assert (await client.call_tool("echo", {"text": "after"})).content[0].text == "after"
