"""A 2025-11-25 client (the official Python SDK, mcp 2.3.0, `mode="legacy"`) asked for
input during a call, over stdio and Streamable HTTP: the server sends `elicitation/create`,
`sampling/createMessage` and `roots/list` as requests on the call's stream, the client's
callbacks answer them, and the tool's next round gets the answers. `delete_collection`
(the example tools) acts only on an accepted confirmation; the conformance fixture's
tools ask the client's model and its roots."""

import json

import pytest
from mcp_types import (
    CreateMessageResult,
    ElicitResult,
    ListRootsResult,
    Root,
    TextContent,
)

from conftest import REPO, serving, write_config

pytestmark = pytest.mark.anyio

FIXTURE = REPO / "target" / "guests" / "conformance-fixture.wasm"


@pytest.fixture(params=["stdio", "http"])
def asking(request, tmp_path):
    """A server on the example tools and the conformance fixture."""
    assert FIXTURE.is_file(), f"{FIXTURE} is missing: run `cargo xtask guests`"
    config = write_config(tmp_path)
    with config.open("a") as text:
        text.write(f"\n[[components]]\npath = {json.dumps(str(FIXTURE))}\n")
    with serving(request.param, config, tmp_path) as server:
        yield server


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (ElicitResult(action="accept", content={"confirm": True}), "Deleted films"),
        (ElicitResult(action="accept", content={"confirm": False}), "films not deleted"),
        (ElicitResult(action="decline"), "films not deleted"),
        (ElicitResult(action="cancel"), "films not deleted"),
    ],
)
async def test_delete_collection_asks_the_user_first(asking, answer, said):
    asked = []

    async def elicit(context, params):
        asked.append(params)
        return answer

    async with asking.client("legacy", elicitation_callback=elicit) as session:
        result = await session.call_tool("delete_collection", {"collection": "films"})
    assert [params.message for params in asked] == ["Delete films?"]
    assert asked[0].requested_schema["properties"]["confirm"]["type"] == "boolean"
    assert not result.is_error, result
    assert result.content[0].text == said


async def test_sampling_is_answered_by_the_clients_model(asking):
    async def sample(context, params):
        assert params.messages[0].content.text == "What is 2 + 2?"
        assert params.max_tokens == 100
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="4"), model="test")

    async with asking.client("legacy", sampling_callback=sample) as session:
        result = await session.call_tool("test_sampling", {"prompt": "What is 2 + 2?"})
    assert result.content[0].text == "LLM response: 4"


async def test_roots_are_listed_by_the_client(asking):
    async def roots(context):
        return ListRootsResult(roots=[Root(uri="file:///home/ada", name="home")])

    async with asking.client("legacy", list_roots_callback=roots) as session:
        result = await session.call_tool("test_input_required_result_list_roots", {})
    assert "file:///home/ada" in result.content[0].text, result


async def test_a_prompt_that_asks_is_answered_by_the_clients_callback(asking):
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"context": "from the user"})

    async with asking.client("legacy", elicitation_callback=elicit) as session:
        result = await session.get_prompt("test_input_required_result_prompt", {})
    assert asked == ["What context should the prompt use?"]
    assert result.messages[0].content.text == "Use this context: from the user"
