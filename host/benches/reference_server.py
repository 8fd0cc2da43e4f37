"""The reference server for the benchmarks: the same `echo` tool, written with the official
Python SDK (mcp 2.3.0), served on stdio, or on Streamable HTTP with `http PORT`."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("reference-echo")


@server.tool()
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
