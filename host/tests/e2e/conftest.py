"""Fixtures for driving `cordon serve` with the official Python SDK client, over stdio and
over Streamable HTTP.

Every test gets a fresh server on the example tools (built by `cargo xtask guests`). Over
stdio it runs through recorder.py; over HTTP the client's transport records each body.
After the test, every message the server sent is validated against the official MCP schema
of its request's revision (2026-07-28, or 2025-11-25 for a legacy client).
"""

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx2
import jsonschema
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

HERE = Path(__file__).parent
REPO = HERE.parents[2]
SCHEMA = json.loads((HERE.parent / "schema" / "mcp-2026-07-28.schema.json").read_text())
LEGACY_SCHEMA = json.loads((HERE.parent / "schema" / "mcp-2025-11-25.schema.json").read_text())
CORDON = Path(os.environ.get("CORDON_BIN", REPO / "target" / "debug" / "cordon"))
TOOLS = REPO / "target" / "guests" / "example-tools.wasm"

# The schema definition each response must match, by request method.
RESPONSE_SCHEMAS = {
    "tools/call": "CallToolResultResponse",
    "tools/list": "ListToolsResultResponse",
    "server/discover": "DiscoverResultResponse",
    "subscriptions/listen": "SubscriptionsListenResultResponse",
    "resources/list": "ListResourcesResultResponse",
    "resources/templates/list": "ListResourceTemplatesResultResponse",
    "resources/read": "ReadResourceResultResponse",
    "prompts/list": "ListPromptsResultResponse",
    "prompts/get": "GetPromptResultResponse",
    "completion/complete": "CompleteResultResponse",
}

# 2025-11-25 names the results, not the responses that carry them.
LEGACY_RESULT_SCHEMAS = {
    "tools/call": "CallToolResult",
    "tools/list": "ListToolsResult",
    "initialize": "InitializeResult",
    "ping": "EmptyResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "completion/complete": "CompleteResult",
}

# The requests a server sends a 2025-11-25 client during a call, by method.
LEGACY_REQUEST_SCHEMAS = {
    "elicitation/create": "ElicitRequest",
    "sampling/createMessage": "CreateMessageRequest",
    "roots/list": "ListRootsRequest",
}

# The schema definition each notification must match, by method.
NOTIFICATION_SCHEMAS = {
    "notifications/progress": "ProgressNotification",
    "notifications/subscriptions/acknowledged": "SubscriptionsAcknowledgedNotification",
    "notifications/tools/list_changed": "ToolListChangedNotification",
    "notifications/prompts/list_changed": "PromptListChangedNotification",
    "notifications/resources/list_changed": "ResourceListChangedNotification",
    "notifications/cancelled": "CancelledNotification",
}


def validator(definition: str, schema: dict = SCHEMA) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{definition}"})


@dataclass
class Cordon:
    """A running server to connect to, over stdio or HTTP, and its recorded messages."""

    transport: str
    log: Path
    params: StdioServerParameters | None = None
    url: str | None = None
    http_pid: int | None = None

    def pid(self) -> int:
        if self.http_pid is not None:
            return self.http_pid
        return int(Path(str(self.log) + ".pid").read_text())

    @contextlib.asynccontextmanager
    async def client(self, mode: str, **callbacks):
        """A connected client in `mode`; `callbacks` (e.g. `elicitation_callback`) go to
        `Client` as they are."""
        if self.transport == "stdio":
            async with Client(self.params, mode=mode, **callbacks) as client:
                yield client
            return
        http = httpx2.AsyncClient(
            transport=RecordingTransport(httpx2.AsyncHTTPTransport(), self.log),
            timeout=httpx2.Timeout(30, read=300),
        )
        async with http, Client(streamable_http_client(self.url, http_client=http), mode=mode, **callbacks) as client:
            yield client


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Passes requests through and appends each request body and response body to the log."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, log: Path):
        self.inner, self.log = inner, log

    async def handle_async_request(self, request):
        body = request.content.decode("utf-8", "replace") if request.method == "POST" else ""
        if body:
            append(self.log, {"dir": "in", "line": body})
        response = await self.inner.handle_async_request(request)
        log, content_type = self.log, response.headers.get("content-type", "")

        class Tee(httpx2.AsyncByteStream):
            def __init__(self, inner):
                self.inner, self.data = inner, b""

            async def __aiter__(self):
                async for chunk in self.inner:
                    self.data += chunk
                    yield chunk

            async def aclose(self):
                await self.inner.aclose()
                append(log, {"dir": "http", "content_type": content_type, "body": self.data.decode("utf-8", "replace")})

        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=Tee(response.stream),
            extensions=response.extensions,
            request=request,
        )


def append(log: Path, entry: dict) -> None:
    with open(log, "a") as file:
        file.write(json.dumps(entry) + "\n")


@pytest.fixture
def anyio_backend():
    return "asyncio"


def write_config(tmp_path: Path, component_keys: str = "", behind_a_balancer: bool = False) -> Path:
    """A config serving the example tools; `component_keys` are TOML lines added to their
    `[[components]]` table (e.g. `allow_http = [...]`). A server with no balancer in front
    exits at once on SIGTERM (`close_delay_ms = 0`); one behind a balancer keeps the
    default delay, as shipped."""
    assert CORDON.is_file(), f"{CORDON} is missing: build it (cargo xtask test does)"
    assert TOOLS.is_file(), f"{TOOLS} is missing: run `cargo xtask guests`"
    config = tmp_path / "cordon.toml"
    config.write_text(
        "[server]\ncache = false\nmax_concurrent_calls = 256\nprogress_interval_ms = 10\n\n"
        "[http]\nsse_after_ms = 200\n"
        f"{'' if behind_a_balancer else 'close_delay_ms = 0'}\n\n"
        f"[[components]]\npath = {json.dumps(str(TOOLS))}\ndata_dir = \"data\"\n"
        f"{component_keys}"
        "limits = { grace_ms = 250, idle_timeout_ms = 0, max_duration_ms = 120000 }\n"
    )
    return config


@pytest.fixture(params=["stdio", "http"])
def cordon(request, tmp_path: Path):
    with serving(request.param, write_config(tmp_path), tmp_path) as server:
        yield server


@contextlib.contextmanager
def serving(transport: str, config: Path, tmp_path: Path):
    """`cordon serve` on `config` over `transport` ("stdio" or "http"); afterwards, every
    message it sent is checked against the schema."""
    log = tmp_path / "messages.jsonl"
    log.touch()
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable,
            args=[str(HERE / "recorder.py"), str(log), str(CORDON), "serve", "--stdio", "--config", str(config)],
            env={"CORDON_LOG": "warn"},
        )
        yield Cordon("stdio", log, params=params)
    else:
        with http_server(config) as (url, pid):
            yield Cordon("http", log, url=url, http_pid=pid)
    check_log(log)


@contextlib.contextmanager
def http_server(config: Path, args: tuple = ()):
    """`cordon serve --http` on a free port (and `args`, e.g. --tls-cert): yields its URL
    (https:// when it serves TLS) and its pid."""
    server = subprocess.Popen(
        [str(CORDON), "serve", "--http", "127.0.0.1:0", "--config", str(config), *args],
        stderr=subprocess.PIPE,
        env={**os.environ, "CORDON_LOG": "info"},
    )
    for line in server.stderr:
        found = re.search(rb"(https?)://127\.0\.0\.1:(\d+)/mcp", line)
        if found:
            break
    else:
        raise AssertionError("the HTTP server exited before listening")
    threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
    try:
        scheme, port = found.group(1).decode(), found.group(2).decode()
        yield f"{scheme}://127.0.0.1:{port}/mcp", server.pid
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def http_url(tmp_path: Path):
    """The URL of a fresh `cordon serve --http` on the example tools."""
    with http_server(write_config(tmp_path)) as (url, _pid):
        yield url


def sent_messages(entry: dict) -> list:
    """The JSON-RPC messages in one recorded server output."""
    if entry["dir"] == "out":
        return [json.loads(entry["line"])] if entry["line"].strip() else [None]
    if entry["content_type"].startswith("text/event-stream"):
        return [json.loads(line[len("data: "):]) for line in entry["body"].splitlines() if line.startswith("data: ")]
    if entry["content_type"].startswith("application/json") and entry["body"]:
        return [json.loads(entry["body"])]
    return []


def check_log(log: Path) -> None:
    """Every message the server sent is one valid MCP message; responses match their method."""
    message_schema = validator("JSONRPCMessage")
    legacy_message_schema = validator("JSONRPCMessage", LEGACY_SCHEMA)
    methods, sent = {}, 0
    for entry in map(json.loads, log.read_text().splitlines()):
        if entry["dir"] == "in":
            message = json.loads(entry["line"]) if entry["line"].strip() else None
            if isinstance(message, dict) and "id" in message and "method" in message:
                meta = (message.get("params") or {}).get("_meta") or {}
                legacy = "io.modelcontextprotocol/protocolVersion" not in meta
                methods[json.dumps(message["id"])] = (message["method"], legacy)
            continue
        for message in sent_messages(entry):
            sent += 1
            assert message is not None, "the server sent an empty line"
            if "id" in message and "method" in message:
                # A request to the client: its ids are the server's own, not the client's.
                legacy_message_schema.validate(message)
                validator(LEGACY_REQUEST_SCHEMAS[message["method"]], LEGACY_SCHEMA).validate(message)
                continue
            method, legacy = methods.get(json.dumps(message.get("id")), (None, False))
            (legacy_message_schema if legacy else message_schema).validate(message)
            if "error" in message:
                validator("JSONRPCErrorResponse").validate(message)
            elif "id" in message:
                if legacy:
                    validator("JSONRPCResultResponse", LEGACY_SCHEMA).validate(message)
                    validator(LEGACY_RESULT_SCHEMAS.get(method, "Result"), LEGACY_SCHEMA).validate(message["result"])
                else:
                    validator(RESPONSE_SCHEMAS.get(method, "JSONRPCResultResponse")).validate(message)
            elif message.get("method") in NOTIFICATION_SCHEMAS:
                validator(NOTIFICATION_SCHEMAS[message["method"]]).validate(message)
    assert sent > 0, "the server sent nothing"
