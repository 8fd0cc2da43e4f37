"""Tenants seen by the official Python SDK client (mcp 2.3.0): it connects to
`cordon serve --http` with an API key as a bearer token (httpx's `Authorization`
header), lists its tenant's tools (`cacheScope: "private"`) and calls one; without the key the server answers 401 with its challenge. Every message the
server sent is checked against the schema."""

import json
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import RecordingTransport, check_log, http_server, write_config

pytestmark = pytest.mark.anyio

KEY = "e2e-acme-key-4f1c9a7b"


def tenant_config(tmp_path: Path) -> Path:
    """The example tools, named `tools`, for tenant `acme`, whose key is in $E2E_ACME_KEYS."""
    config = write_config(tmp_path)
    text = config.read_text().replace('data_dir = "data"\n', 'name = "tools"\ndata_dir = "data"\n')
    config.write_text(
        text
        + "\n[[tenants]]\nname = \"acme\"\ncomponents = [\"tools\"]\napi_keys = { env = \"E2E_ACME_KEYS\" }\n"
        + "max_concurrent_calls = 8\ncalls_per_second = 50\n"
    )
    return config


async def test_the_sdk_client_connects_with_a_bearer_key_and_sees_its_tenants_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("E2E_ACME_KEYS", KEY)
    log = tmp_path / "messages.jsonl"
    log.touch()
    with http_server(tenant_config(tmp_path)) as (url, _pid):
        async with httpx2.AsyncClient(timeout=30) as plain:
            refused = await plain.post(url, json={}, headers={"Accept": "application/json, text/event-stream"})
            assert refused.status_code == 401
            challenge = refused.headers["www-authenticate"]
            # API keys alone publish no protected resource metadata to point at.
            assert challenge == 'Bearer realm="mcp"'
            wrong = await plain.post(url, json={}, headers={"Authorization": "Bearer not-the-key"})
            assert wrong.status_code == 401 and "not-the-key" not in wrong.text

        http = httpx2.AsyncClient(
            transport=RecordingTransport(httpx2.AsyncHTTPTransport(), log),
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=httpx2.Timeout(30, read=120),
        )
        async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert "echo" in tools
            result = await client.call_tool("echo", {"text": "for acme"})
            assert result.content[0].text == "for acme"
    lists = [
        json.loads(line) for entry in map(json.loads, log.read_text().splitlines())
        if entry["dir"] == "http" for line in [entry["body"].removeprefix("data: ").strip()]
        if line.startswith("{") and '"tools":[' in line
    ]
    assert lists and all(message["result"]["cacheScope"] == "private" for message in lists)
    check_log(log)
