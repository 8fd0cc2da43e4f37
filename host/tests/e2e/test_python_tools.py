"""The Python example tools (`examples/python`, built with componentize-py by `cargo xtask
guests`) served by `cordon serve --stdio` to the official Python SDK client: schemas from
type hints, a call with progress, structured output, a Python exception as the error
text, and the hard stop of a spinning CPython guest with its cleanup. One server for all
of it: a CPython component takes seconds to compile."""

import asyncio
import json
import time

import pytest

from conftest import CORDON, REPO, serving

pytestmark = pytest.mark.anyio

PYTHON_TOOLS = REPO / "target" / "guests" / "example-python.wasm"


async def locks(client) -> list[str]:
    result = await client.call_tool("locks", {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def wait_for_locks(client, predicate, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        held = await locks(client)
        if predicate(held):
            return held
        assert time.monotonic() < deadline, f"locks never matched: {held}"
        await asyncio.sleep(0.02)


async def test_the_python_example_tools_through_the_server(tmp_path):
    assert CORDON.is_file(), f"{CORDON} is missing: build it (cargo xtask test does)"
    assert PYTHON_TOOLS.is_file(), f"{PYTHON_TOOLS} is missing: run `cargo xtask guests`"
    config = tmp_path / "cordon.toml"
    config.write_text(
        "[server]\ncache = false\nprogress_interval_ms = 10\n\n"
        f"[[components]]\npath = {json.dumps(str(PYTHON_TOOLS))}\ndata_dir = \"data\"\n"
        "limits = { grace_ms = 250, idle_timeout_ms = 0, max_duration_ms = 120000 }\n"
    )
    with serving("stdio", config, tmp_path) as cordon:
        async with cordon.client("2026-07-28") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert list(tools) == ["echo", "reindex", "locks", "spin", "ratio", "summarize"]
            assert tools["reindex"].input_schema["properties"]["total"] == {
                "type": "integer",
                "default": 120,
                "description": "How many documents to index.",
            }
            assert tools["summarize"].output_schema["properties"]["unit"]["enum"] == ["none", "seconds", "bytes"]

            seen = []

            async def on_progress(progress, total, message):
                seen.append((progress, total, message))

            result = await client.call_tool("reindex", {"collection": "books", "step_ms": 20}, progress_callback=on_progress)
            assert result.content[0].text == "Reindexed 120 documents in books"
            assert seen and seen[-1] == (120, 120, "Indexed 120 of 120 documents"), seen

            result = await client.call_tool("summarize", {"values": [1, 2], "unit": "bytes"})
            assert result.structured_content == {"count": 2, "mean": 1.5, "minimum": 1.0, "maximum": 2.0, "unit": "bytes"}

            result = await client.call_tool("ratio", {"numerator": 1, "denominator": 0})
            assert result.is_error
            assert result.content[0].text.startswith("ZeroDivisionError: division by zero (app.py, line ")

            task = asyncio.create_task(client.call_tool("spin", {"seconds": 600}))
            await wait_for_locks(client, lambda held: "spin" in held)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Grace (250 ms), the hard stop, then cleanup in a fresh instance releases it.
            await wait_for_locks(client, lambda held: held == [], timeout=5.0)
            assert (await client.call_tool("echo", {"text": "after"})).content[0].text == "after"
