"""The example tools' resource and prompt through the official Python SDK client
(mcp 2.3.0), over stdio and Streamable HTTP, in both protocol eras: list and read the
resource, list and get the prompt, complete its argument. Each read and get runs in a
fresh instance of the component (cordon:tool@0.2.0)."""

import pytest
from mcp import MCPError
from mcp_types import PromptReference

pytestmark = pytest.mark.anyio

ERAS = ["2026-07-28", "legacy"]


@pytest.mark.parametrize("mode", ERAS)
async def test_list_and_read_a_resource(cordon, mode):
    async with cordon.client(mode) as client:
        resources = await client.list_resources()
        assert [str(resource.uri) for resource in resources.resources] == ["examples://guide"]
        assert resources.resources[0].mime_type == "text/markdown"
        assert (await client.list_resource_templates()).resource_templates == []
        read = await client.read_resource("examples://guide")
        assert str(read.contents[0].uri) == "examples://guide"
        assert read.contents[0].text.startswith("# The example tools")
        with pytest.raises(MCPError) as missing:
            await client.read_resource("examples://nothing-here")
        # 2026-07-28 says -32602 (SEP-2164); 2025-11-25's resources page, -32002.
        assert missing.value.error.code == (-32602 if mode == "2026-07-28" else -32002)
        assert missing.value.error.data == {"uri": "examples://nothing-here"}


@pytest.mark.parametrize("mode", ERAS)
async def test_get_a_prompt_and_complete_its_argument(cordon, mode):
    async with cordon.client(mode) as client:
        prompts = await client.list_prompts()
        [prompt] = prompts.prompts
        assert prompt.name == "reindex_collection"
        assert [(argument.name, argument.required) for argument in prompt.arguments] == [("collection", True)]
        got = await client.get_prompt("reindex_collection", {"collection": "films"})
        assert got.messages[0].role == "user"
        assert '"films"' in got.messages[0].content.text
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("reindex_collection", {})
        assert missing.value.error.code == -32602 and "collection" in missing.value.error.message
        completion = await client.complete(
            PromptReference(type="ref/prompt", name="reindex_collection"), {"name": "collection", "value": "b"}
        )
        assert completion.completion.values == ["books"]
