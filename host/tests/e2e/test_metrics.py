"""Telemetry seen from outside: the official Python SDK client (mcp 2.3.0) calls
`cordon serve --http --metrics` over Streamable HTTP, then a real HTTP client scrapes
`/metrics` on the second listener and reads the calls counted there, with their
outcomes, and the probes."""

import asyncio
import contextlib
import os
import time
import re
import subprocess
import threading
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import CORDON, write_config

pytestmark = pytest.mark.anyio

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


@contextlib.contextmanager
def served_with_metrics(config: Path):
    """`cordon serve --http --metrics` on free ports: yields the MCP URL and the metrics
    listener's base URL, read from its log."""
    server = subprocess.Popen(
        [str(CORDON), "serve", "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--config", str(config)],
        stderr=subprocess.PIPE,
        env={**os.environ, "CORDON_LOG": "info"},
    )
    mcp = metrics = None
    for line in server.stderr:
        if found := re.search(rb"serving metrics on (http://127\.0\.0\.1:\d+)/metrics", line):
            metrics = found.group(1).decode()
        if found := re.search(rb"(http://127\.0\.0\.1:\d+/mcp)", line):
            mcp = found.group(1).decode()
            break
    assert mcp and metrics, "the server exited before listening"
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    try:
        yield mcp, metrics
    finally:
        server.terminate()
        server.wait(10)


def samples(text: str) -> dict[str, float]:
    """The exposition's samples, every line checked to be a comment or a sample."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE|UNIT|EOF)\b", line), line
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample: {line}"
        found[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return found


async def until(check, what: str, timeout: float = 10.0):
    """Wait for `check()` (async) to return something true, for at most `timeout`."""
    deadline = time.monotonic() + timeout
    while not (found := await check()):
        assert time.monotonic() < deadline, f"never {what}"
        await asyncio.sleep(0.01)
    return found


CALLS = 'cordon_calls_total{component="example-tools",tool="%s",outcome="ok"}'


async def test_calls_through_the_sdk_are_counted_in_the_metrics(tmp_path: Path):
    with served_with_metrics(write_config(tmp_path)) as (mcp_url, metrics_url):
        async with httpx2.AsyncClient(timeout=30) as http:

            async def ready():
                return (await http.get(f"{metrics_url}/readyz")).status_code == 200

            async def scraped():
                # A call is counted just after its answer is out: wait for the last one.
                response = await http.get(f"{metrics_url}/metrics")
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/plain")
                found = samples(response.text)
                return found if CALLS % "reindex" in found else None

            await until(ready, "ready")
            assert (await http.get(f"{metrics_url}/healthz")).status_code == 200
            assert (await http.get(f"{metrics_url}/mcp")).status_code == 404
            async with httpx2.AsyncClient(timeout=30) as mcp_http, Client(
                streamable_http_client(mcp_url, http_client=mcp_http), mode="2026-07-28"
            ) as client:
                for text in ["a", "b", "c"]:
                    result = await client.call_tool("echo", {"text": text})
                    assert result.content[0].text == text
                result = await client.call_tool("reindex", {"collection": "m", "total": 80, "step_ms": 10})
                assert not result.is_error
            found = await until(scraped, "counted the last call")
    assert found[CALLS % "echo"] == 3
    assert found[CALLS % "reindex"] == 1
    assert found['cordon_call_duration_seconds_count{component="example-tools",tool="echo"}'] == 3
    assert found["cordon_queue_wait_seconds_count"] == 4
    assert found["cordon_pool_slots"] == 256
    assert found["cordon_compile_cache_misses_total"] == 1
