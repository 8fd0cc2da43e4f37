"""The official Python SDK client (mcp 2.3.0) hears of a reload: `Client.listen()` over
stdio and over Streamable HTTP (2026-07-28), after SIGHUP makes the server serve one more
component. The `cordon` fixture checks every message the server sent against the schema."""

import json
import os
import signal

import anyio
import pytest
from mcp.client.subscriptions import ToolsListChanged

from conftest import REPO

pytestmark = pytest.mark.anyio

HOSTILE = REPO / "target" / "guests" / "hostile.wasm"


async def test_a_reload_reaches_a_listening_client(cordon, tmp_path):
    assert HOSTILE.is_file(), f"{HOSTILE} is missing: run `cargo xtask guests`"
    async with cordon.client("2026-07-28") as client:
        before = [tool.name for tool in (await client.list_tools()).tools]
        async with client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored.tools_list_changed
            config = tmp_path / "cordon.toml"
            config.write_text(config.read_text() + f"\n[[components]]\npath = {json.dumps(str(HOSTILE))}\n")
            os.kill(cordon.pid(), signal.SIGHUP)
            with anyio.fail_after(20):
                event = await subscription.__aiter__().__anext__()
            assert isinstance(event, ToolsListChanged), event
        after = [tool.name for tool in (await client.list_tools()).tools]
        assert after[: len(before)] == before and "park" in after[len(before):], after
