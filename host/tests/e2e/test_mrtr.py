"""Tools that ask the client for input (MRTR, 2026-07-28) through the official Python SDK
client (mcp 2.3.0), over stdio and Streamable HTTP: the client answers the server's
`InputRequiredResult` with its own callbacks and retries by itself, with the sealed
`requestState`. `delete_collection` asks for a confirmation (accept, decline, cancel); the
conformance fixture asks the client's model (sampling) and its roots."""

import json

import pytest
from conftest import REPO, serving, write_config
from mcp_types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent

pytestmark = pytest.mark.anyio

FIXTURE = REPO / "target" / "guests" / "conformance-fixture.wasm"


def answering(action: str, content=None):
    """An elicitation callback that answers every form with `action` (and `content`), and
    the messages it was asked."""
    asked = []

    async def callback(context, params):
        asked.append(params.message)
        return ElicitResult(action=action, content=content)

    return callback, asked


@pytest.mark.parametrize(
    "action, content, answer",
    [
        ("accept", {"confirm": True}, "Deleted books"),
        ("accept", {"confirm": False}, "books not deleted"),
        ("decline", None, "books not deleted"),
        ("cancel", None, "books not deleted"),
    ],
)
async def test_delete_collection_acts_only_on_an_accepted_confirmation(cordon, action, content, answer):
    callback, asked = answering(action, content)
    async with cordon.client("2026-07-28", elicitation_callback=callback) as client:
        result = await client.call_tool("delete_collection", {"collection": "books"})
        assert not result.is_error, result.content[0].text
        assert result.content[0].text == answer
        assert asked == ["Delete books?"]


async def test_a_client_that_cannot_confirm_gets_a_tool_error(cordon):
    async with cordon.client("2026-07-28") as client:
        result = await client.call_tool("delete_collection", {"collection": "books"})
        assert result.is_error
        assert "cannot ask" in result.content[0].text


@pytest.fixture(params=["stdio", "http"])
def fixture_server(request, tmp_path):
    assert FIXTURE.is_file(), f"{FIXTURE} is missing: run `cargo xtask guests`"
    config = write_config(tmp_path)
    config.write_text(config.read_text() + f"\n[[components]]\npath = {json.dumps(str(FIXTURE))}\n")
    with serving(request.param, config, tmp_path) as server:
        yield server


async def test_sampling_and_roots_are_answered_by_the_client(fixture_server):
    sampled = []

    async def sampling(context, params):
        sampled.append(params.messages[0].content.text)
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="Paris"), model="test")

    async def roots(context):
        return ListRootsResult(roots=[Root(uri="file:///srv/project", name="project")])

    async with fixture_server.client("2026-07-28", sampling_callback=sampling, list_roots_callback=roots) as client:
        result = await client.call_tool("test_input_required_result_sampling", {})
        assert result.content[0].text == "The model answered: Paris"
        assert sampled == ["What is the capital of France?"]
        result = await client.call_tool("test_input_required_result_list_roots", {})
        assert result.content[0].text == "The client has 1 root(s): file:///srv/project"
