"""Run a stdio MCP server and record every message in both directions.

    python recorder.py LOG COMMAND [ARGS...]

Lines from the client go to the server's stdin, lines from the server to our stdout, and
each line is appended to LOG as {"dir": "in" | "out", "line": ...}. The server's pid is
written to LOG.pid so tests can watch its CPU use. The log is checked against the MCP
schema after each test (see conftest.py).
"""

import json
import subprocess
import sys
import threading


def main() -> int:
    log_path, command = sys.argv[1], sys.argv[2:]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    with open(log_path + ".pid", "w") as pid_file:
        pid_file.write(str(server.pid))
    log = open(log_path, "a", buffering=1)
    lock = threading.Lock()

    def record(direction: str, line: bytes) -> None:
        with lock:
            log.write(json.dumps({"dir": direction, "line": line.decode("utf-8", "replace")}) + "\n")

    def pump_in() -> None:
        for line in sys.stdin.buffer:
            record("in", line.rstrip(b"\n"))
            try:
                server.stdin.write(line)
                server.stdin.flush()
            except BrokenPipeError:
                break
        try:
            server.stdin.close()
        except BrokenPipeError:
            pass

    threading.Thread(target=pump_in, daemon=True).start()
    for line in server.stdout:
        record("out", line.rstrip(b"\n"))
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main())
