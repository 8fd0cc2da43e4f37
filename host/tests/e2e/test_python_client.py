"""The official Python SDK client (mcp 2.3.0) against `cordon serve`, over stdio and over
Streamable HTTP (the `cordon` fixture runs each test on both), in both protocol eras:
list, call, progress, cancel (on HTTP: by closing the stream), timeout, the hard stop of
`spin`, and 200 concurrent calls."""

import asyncio
import json
import os
import time

import pytest
from mcp import Client, MCPError  # noqa: F401  (Client: see conftest)
from mcp_types import REQUEST_TIMEOUT

pytestmark = pytest.mark.anyio

ERAS = ["2026-07-28", "legacy"]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


async def locks(client: Client) -> list[str]:
    result = await client.call_tool("locks", {})
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def wait_for_locks(client: Client, predicate, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        held = await locks(client)
        if predicate(held):
            return held
        assert time.monotonic() < deadline, f"locks never matched: {held}"
        await asyncio.sleep(0.02)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


async def wait_until_cpu_stops(pid: int, timeout: float = 5.0, window: float = 0.5) -> None:
    """Wait for a `window` in which the server used under a fifth of it in CPU: a guest
    still spinning never gives one. Within `timeout` (the hard stop's grace and the
    cleanup take well under it)."""
    deadline = time.monotonic() + timeout
    while True:
        before = cpu_seconds(pid)
        await asyncio.sleep(window)
        if cpu_seconds(pid) - before < window / 5:
            return
        assert time.monotonic() < deadline, "the server's CPU use never stopped"


@pytest.mark.parametrize("mode", ERAS)
async def test_list_and_call(cordon, mode):
    async with cordon.client(mode) as client:
        assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
        tools = await client.list_tools()
        assert [tool.name for tool in tools.tools] == ["echo", "reindex", "locks", "spin", "order_book", "fetch", "delete_collection"]
        reindex = next(tool for tool in tools.tools if tool.name == "reindex")
        assert reindex.input_schema["required"] == ["collection"]
        result = await client.call_tool("echo", {"text": "hello"})
        assert result.content[0].text == "hello" and not result.is_error
        # Structured output of any JSON type: `locks` answers an array, which the client
        # checks against the array schema it was listed with (2026-07-28); a 2025-11-25
        # client is listed no schema for it and reads the array from the text.
        listed = next(tool for tool in tools.tools if tool.name == "locks")
        held = await client.call_tool("locks", {})
        assert json.loads(held.content[0].text) == []
        if mode == "legacy":
            assert listed.output_schema is None and held.structured_content is None
        else:
            assert listed.output_schema["type"] == "array"
            assert held.structured_content == []


@pytest.mark.parametrize("mode", ERAS)
async def test_arguments_that_break_the_schema_come_back_as_a_tool_error(cordon, mode):
    """SEP-1303: the model sees what to correct (the JSON path) and may call again; an
    unknown tool stays a protocol error."""
    async with cordon.client(mode) as client:
        result = await client.call_tool("reindex", {"collection": 7})
        assert result.is_error
        assert result.content[0].text.startswith("Invalid arguments for tool reindex: /collection"), result
        corrected = await client.call_tool("reindex", {"collection": "c7", "step_ms": 1})
        assert not corrected.is_error, corrected.content[0].text
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        assert unknown.value.code == -32602


@pytest.mark.parametrize("mode", ERAS)
async def test_progress_callback(cordon, mode):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async with cordon.client(mode) as client:
        result = await client.call_tool(
            "reindex", {"collection": "books", "step_ms": 50}, progress_callback=on_progress
        )
    assert result.content[0].text == "Reindexed 120 documents in books"
    assert seen, "progress arrived"
    assert all(a[0] < b[0] for a, b in zip(seen, seen[1:])), seen
    assert all(total == 120 for _, total, _ in seen)
    assert seen[-1][2] == "Indexed 120 of 120 documents"


@pytest.mark.parametrize("mode", ERAS)
async def test_cancel_releases_the_lock(cordon, mode):
    async with cordon.client(mode) as client:
        task = asyncio.create_task(client.call_tool("reindex", {"collection": "archive", "step_ms": 60000}))
        await wait_for_locks(client, lambda held: "archive" in held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for_locks(client, lambda held: held == [], timeout=3.0)
        assert (await client.call_tool("echo", {"text": "after"})).content[0].text == "after"


@pytest.mark.parametrize("mode", ERAS)
async def test_read_timeout_cancels_and_cleanup_releases_the_hold(cordon, mode):
    async with cordon.client(mode) as client:
        with pytest.raises(MCPError) as error:
            await client.call_tool("order_book", {"title": "Dune"}, read_timeout_seconds=0.5)
        assert error.value.code == REQUEST_TIMEOUT
        await wait_for_locks(client, lambda held: held == [], timeout=3.0)


async def test_hard_stop_of_spin_stops_the_cpu_and_releases_the_lock(cordon):
    async with cordon.client("2026-07-28") as client:
        task = asyncio.create_task(client.call_tool("spin", {"seconds": 600}))
        await wait_for_locks(client, lambda held: "spin" in held)
        pid = cordon.pid()
        # On a busy machine spin gets less than a core: wait for 0.3 s of CPU, not 0.5 s of time.
        before, deadline = cpu_seconds(pid), time.monotonic() + 5.0
        while cpu_seconds(pid) - before < 0.3:
            assert time.monotonic() < deadline, "spin burns CPU while it runs"
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until_cpu_stops(pid)
        assert await locks(client) == []


@pytest.mark.parametrize("mode", ERAS)
async def test_two_hundred_concurrent_calls(cordon, mode):
    async with cordon.client(mode) as client:
        texts = [f"call {i}" for i in range(200)]
        results = await asyncio.gather(*(client.call_tool("echo", {"text": text}) for text in texts))
        assert [result.content[0].text for result in results] == texts
