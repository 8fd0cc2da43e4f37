"""Refusals a real HTTP client can read. httpx's async client, the Python SDK's HTTP
transport, writes a whole request body before it reads the answer; a server that refuses
early (413 on the Content-Length) and closes at once resets the connection under it, and
the client sees a ReadError instead of the status. The server reads and discards the rest
first (issue 9)."""

import httpx2
import pytest

from conftest import validator

pytestmark = pytest.mark.anyio

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/list",
}
LIST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/list",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}


@pytest.mark.parametrize("size", [5 << 20, 8 << 20])  # over the default 4 MiB limit
async def test_an_oversized_body_is_answered_413_and_the_server_serves_on(http_url, size):
    body = b'{"pad":"' + b"x" * size + b'"}'
    async with httpx2.AsyncClient(timeout=30) as client:
        for _ in range(3):
            response = await client.post(http_url, content=body, headers=HEADERS)
            assert response.status_code == 413, response.text
            assert "limit is 4194304 bytes" in response.json()["error"]
        listed = await client.post(http_url, json=LIST, headers=HEADERS)
        assert listed.status_code == 200, listed.text
        validator("ListToolsResultResponse").validate(listed.json())
        assert "echo" in [tool["name"] for tool in listed.json()["result"]["tools"]]
