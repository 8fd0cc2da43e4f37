"""The reference server for the stdio benchmark: the same `echo` tool, written with the
official Python SDK (mcp 2.3.0), served on stdio."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("reference-echo")


@server.tool()
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


if __name__ == "__main__":
    server.run()
