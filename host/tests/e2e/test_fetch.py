"""The example tool `fetch` (outbound HTTP through `cordon_guest::http`) with the official
Python SDK client, over stdio and over Streamable HTTP: a local HTTP server on 127.0.0.1
is granted to the tools component (`allow_http`); a GET to it answers "200 <body>", one to
anything not granted is a tool error saying "denied" that never reaches the server, and the
default config grants nothing. A fetch waiting on a server that never answers, or that
stops in the middle of the body, is cancelled by the client, and the host closes its
connection."""

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import serving, write_config

pytestmark = pytest.mark.anyio

BODY = "hello from 127.0.0.1 ✓"


class Origin:
    """A local HTTP server: `/hello` answers BODY, `/silent` never answers and `/stall` stops
    after five bytes of the body, each until the client goes away (which it records). Every
    path asked for is recorded, and `waiting` is set once a `/silent` or `/stall` answer has
    written all it will write."""

    def __init__(self):
        self.paths: list[str] = []
        self.silent_closed = threading.Event()
        self.waiting = threading.Event()
        self.stop = threading.Event()
        origin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                origin.paths.append(self.path)
                if self.path == "/silent":
                    return self.wait_for_close()
                if self.path == "/stall":  # headers and five bytes of a hundred, then nothing
                    self.send_response(200)
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    self.wfile.write(b"hello")
                    self.wfile.flush()
                    return self.wait_for_close()
                body = BODY.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def wait_for_close(self):
                origin.waiting.set()
                self.connection.settimeout(0.05)
                while not origin.stop.is_set():
                    try:
                        if self.connection.recv(1, socket.MSG_PEEK) == b"":
                            origin.silent_closed.set()
                            return
                    except TimeoutError:
                        continue
                    except OSError:
                        origin.silent_closed.set()
                        return

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def origin():
    server = Origin()
    yield server
    server.close()


@pytest.fixture(params=["stdio", "http"])
def granted(request, tmp_path, origin):
    """`cordon serve` with the local server's origin granted to the tools component."""
    config = write_config(tmp_path, f"allow_http = [{json.dumps(origin.url)}]\n")
    with serving(request.param, config, tmp_path) as server:
        yield server


async def fetch(client, url: str, **arguments):
    result = await client.call_tool("fetch", {"url": url, **arguments})
    return result.is_error, result.content[0].text


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_a_granted_origin_answers_status_and_body(granted, origin, mode):
    async with granted.client(mode) as client:
        assert await fetch(client, f"{origin.url}/hello") == (False, f"200 {BODY}")
        # Cut to max_bytes: "hello" is five bytes.
        assert await fetch(client, f"{origin.url}/hello", max_bytes=5) == (False, "200 hello")
        # A cut through the three-byte check mark drops it whole.
        cut = len(BODY.encode()) - 1
        assert await fetch(client, f"{origin.url}/hello", max_bytes=cut) == (False, f"200 {BODY[:-1]}")
    assert origin.paths == ["/hello"] * 3


async def test_what_is_not_granted_is_denied_before_any_connection(granted, origin):
    refused = [
        f"http://localhost:{origin.port}/by-host",  # another host name for the same server
        f"https://127.0.0.1:{origin.port}/by-scheme",
        f"http://127.0.0.1:{origin.port + 1 if origin.port < 65535 else 1}/by-port",
        "http://10.0.0.1/private",
    ]
    async with granted.client("2026-07-28") as client:
        for url in refused:
            is_error, text = await fetch(client, url)
            assert is_error and "denied" in text, (url, text)
        assert await fetch(client, f"{origin.url}/hello") == (False, f"200 {BODY}")
    assert origin.paths == ["/hello"], "no refused request reached the server"


async def test_the_default_config_grants_nothing(cordon, origin):
    async with cordon.client("2026-07-28") as client:
        is_error, text = await fetch(client, f"{origin.url}/hello")
    assert is_error and "denied" in text, text
    assert origin.paths == []


async def wait_until(condition, timeout: float, what: str) -> float:
    """Poll `condition` without blocking the event loop (the client sends its cancel from
    it); the seconds it took."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, what
        await asyncio.sleep(0.01)
    return time.monotonic() - start


@pytest.mark.parametrize("path", ["/silent", "/stall"])  # waiting for the response, for its body
async def test_a_cancelled_fetch_closes_its_connection_and_the_server_serves_on(granted, origin, path):
    async with granted.client("2026-07-28") as client:
        task = asyncio.create_task(client.call_tool("fetch", {"url": f"{origin.url}{path}"}))
        # Cancel once the request is at the server (a cancel sent earlier, while the server
        # still compiles the component, would stop the call before it connects) and, for
        # /stall, the headers and the first bytes are on their way back to the guest.
        await wait_until(origin.waiting.is_set, 10.0, "the request reached the server")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The guest sees the cancel in its wait and returns; at worst the hard stop (grace
        # 250 ms) drops the request. Either way the host closes the connection.
        await wait_until(origin.silent_closed.is_set, 3.0, "the connection to the server was closed")
        assert await fetch(client, f"{origin.url}/hello") == (False, f"200 {BODY}")
    assert origin.paths == [path, "/hello"]
