"""Fixtures for driving `cordon serve --stdio` with the official Python SDK client.

Every test gets a fresh server on the example tools (built by `cargo xtask guests`), run
through recorder.py; after the test, every message the server sent is validated against
the official MCP 2026-07-28 schema.
"""

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest
from mcp import StdioServerParameters

HERE = Path(__file__).parent
REPO = HERE.parents[2]
SCHEMA = json.loads((HERE.parent / "schema" / "mcp-2026-07-28.schema.json").read_text())
CORDON = Path(os.environ.get("CORDON_BIN", REPO / "target" / "debug" / "cordon"))
TOOLS = REPO / "target" / "guests" / "example-tools.wasm"

# The schema definition each response must match, by request method.
RESPONSE_SCHEMAS = {
    "tools/call": "CallToolResultResponse",
    "tools/list": "ListToolsResultResponse",
    "server/discover": "DiscoverResultResponse",
}


def validator(definition: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**SCHEMA, "$ref": f"#/$defs/{definition}"})


@dataclass
class Cordon:
    """A server to connect to: its parameters, its recorded log, its pid file."""

    params: StdioServerParameters
    log: Path

    def pid(self) -> int:
        return int(Path(str(self.log) + ".pid").read_text())


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def cordon(tmp_path: Path):
    assert CORDON.is_file(), f"{CORDON} is missing: build it (cargo xtask test does)"
    assert TOOLS.is_file(), f"{TOOLS} is missing: run `cargo xtask guests`"
    config = tmp_path / "cordon.toml"
    config.write_text(
        "[server]\ncache = false\nmax_concurrent_calls = 256\nprogress_interval_ms = 10\n\n"
        f"[[components]]\npath = {json.dumps(str(TOOLS))}\ndata_dir = \"data\"\n"
        "limits = { grace_ms = 250, idle_timeout_ms = 0, max_duration_ms = 120000 }\n"
    )
    log = tmp_path / "messages.jsonl"
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(HERE / "recorder.py"), str(log), str(CORDON), "serve", "--stdio", "--config", str(config)],
        env={"CORDON_LOG": "warn"},
    )
    yield Cordon(params, log)
    check_log(log)


def check_log(log: Path) -> None:
    """Every line the server sent is one valid MCP message; responses match their method."""
    message_schema = validator("JSONRPCMessage")
    methods, sent = {}, 0
    for entry in map(json.loads, log.read_text().splitlines()):
        message = json.loads(entry["line"]) if entry["line"].strip() else None
        if entry["dir"] == "in":
            if isinstance(message, dict) and "id" in message and "method" in message:
                methods[json.dumps(message["id"])] = message["method"]
            continue
        sent += 1
        assert message is not None, "the server sent an empty line"
        message_schema.validate(message)
        if "error" in message:
            validator("JSONRPCErrorResponse").validate(message)
        elif "id" in message:
            method = methods.get(json.dumps(message["id"]))
            validator(RESPONSE_SCHEMAS.get(method, "JSONRPCResultResponse")).validate(message)
        elif message.get("method") == "notifications/progress":
            validator("ProgressNotification").validate(message)
    assert sent > 0, "the server sent nothing"
