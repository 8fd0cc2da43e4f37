"""Cordon's example tools in Python, one component (built by `cargo xtask guests` into
`target/guests/example-python.wasm`):

- `echo(text)` returns the text.
- `reindex(collection, total=120, step_ms=100)` indexes in steps of 40, reporting progress
  and checking for cancellation between steps, while it holds a lock on the collection.
- `locks()` lists the locks currently held, so a client can see that cleanup ran.
- `spin(seconds)` burns CPU and never checks for cancellation: only a hard stop ends it.
- `ratio(numerator, denominator)` divides; a zero denominator raises ZeroDivisionError,
  which the client sees as the call's error text.
- `summarize(values, unit="none")` returns structured output (a dataclass) with its schema.

Locks are files in the tool's data directory (`/data`, preopened by the host), so they
outlive the instance. A call releases its lock when it returns; after a stop, the cleanup
handler releases the lock named in the call's cleanup note.
"""

import os
import secrets
import time
from dataclasses import dataclass
from enum import Enum
from typing import Annotated

from cordon_guest import (
    CleanupContext,
    Tool,  # noqa: F401 - the component's export: componentize-py looks it up here
    ToolError,
    check_cancelled,
    cleanup,
    clear_cleanup_note,
    log,
    progress,
    set_cleanup_note,
    tool,
)

LOCK_DIR = "/data/locks"
LOCK_SUFFIX = ".lock"


def lock_path(name: str) -> str:
    """The file holding lock `name`: bytes outside `[A-Za-z0-9_-]` are escaped as `.xx`."""
    plain = "".join(
        chr(byte) if chr(byte).isascii() and (chr(byte).isalnum() or chr(byte) in "-_") else f".{byte:02x}"
        for byte in name.encode()
    )
    return f"{LOCK_DIR}/{plain}{LOCK_SUFFIX}"


def lock_name(file_name: str):
    """The lock a file name in LOCK_DIR stands for, or None for a name lock_path never makes."""
    if not file_name.endswith(LOCK_SUFFIX):
        return None
    escaped, name, i = file_name[: -len(LOCK_SUFFIX)], bytearray(), 0
    while i < len(escaped):
        if escaped[i] == ".":
            try:
                name.append(int(escaped[i + 1 : i + 3], 16))
            except ValueError:
                return None
            i += 3
        else:
            name += escaped[i].encode()
            i += 1
    try:
        return name.decode()
    except UnicodeDecodeError:
        return None


def staged_path(token: str) -> str:
    """Where `Lock` writes a lock's contents before linking it into place; the name never
    parses as a lock (`lock_name`), so `locks` does not list it."""
    return f"{LOCK_DIR}/{token}.staged"


def stop_point() -> None:
    """A place where the host may stop the call: tests stop there, one place after another,
    to check that the cleanup handler undoes each. In the component it does nothing."""


def remove(path: str) -> bool:
    """Remove a file; whether it was there."""
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        return False


class Lock:
    """A lock file in the data directory, held for a `with` block; if the call is stopped,
    the cleanup handler releases it (`release_stopped`).

    The host may stop a call anywhere, so taking a lock leaves the handler what it needs at
    every point and never lets it release another call's lock: the note (`"<token> <name>"`)
    is left before the lock exists, and the lock file appears at once with this call's token
    inside (a hard link to a file written beforehand), so the handler removes it only if it
    holds the token."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = lock_path(name)

    def __enter__(self) -> "Lock":
        try:
            os.makedirs(LOCK_DIR, exist_ok=True)
        except OSError as error:
            raise ToolError(f"no data directory for locks ({LOCK_DIR}): {error.strerror}") from None
        token = secrets.token_hex(8)
        set_cleanup_note(f"{token} {self.name}")
        stop_point()
        staged = staged_path(token)
        with open(staged, "w") as file:
            file.write(token)
        stop_point()
        try:
            os.link(staged, self.path)
            refused = None
        except OSError as error:
            refused = error
        stop_point()
        remove(staged)
        if refused is not None:
            clear_cleanup_note()
            if isinstance(refused, FileExistsError):
                raise ToolError(f"{self.name} is locked by another call") from None
            raise refused
        return self

    def __exit__(self, *_) -> None:
        remove(self.path)
        clear_cleanup_note()


def release_stopped(note: str):
    """After a stop: remove what the stopped call's `Lock` left, given its note; the name of
    the lock it released, or None if the call held none."""
    token, _, name = note.partition(" ")
    if not name:
        return None
    remove(staged_path(token))
    path = lock_path(name)
    try:
        with open(path) as file:
            held = file.read() == token  # another call's lock holds another token
    except FileNotFoundError:
        return None
    return name if held and remove(path) else None


@tool(read_only=True, idempotent=True)
def echo(text: str) -> str:
    """Returns the text it is given.

    Args:
        text: The text to return.
    """
    return text


REINDEX_STEP = 40


@tool
def reindex(collection: str, total: int = 120, step_ms: int = 100) -> str:
    """Reindexes a collection in steps of 40 documents, reporting progress; holds a lock on
    the collection while it runs.

    Args:
        collection: The collection to reindex; it is locked while the call runs.
        total: How many documents to index.
        step_ms: How long each step of 40 documents takes, in milliseconds.
    """
    if total < 0 or step_ms < 0:
        raise ToolError("total and step_ms must not be negative")
    with Lock(collection):
        done = 0
        while done < total:
            check_cancelled()
            # A WASI clock wait: the host can stop the guest inside it, and wakes it at
            # once on a stop, since this tool checks for cancellation.
            time.sleep(step_ms / 1000)
            check_cancelled()  # a woken sleep did not do its step
            done = min(done + REINDEX_STEP, total)
            progress(done, total, f"Indexed {done} of {total} documents")
    return f"Reindexed {total} documents in {collection}"


@tool(read_only=True)
def locks() -> list[str]:
    """Lists the locks currently held, as a JSON array of names."""
    try:
        names = os.listdir(LOCK_DIR)
    except FileNotFoundError:
        return []
    return sorted(name for name in map(lock_name, names) if name is not None)


@tool
def spin(seconds: Annotated[float, "How long to burn CPU, in seconds."]) -> str:
    """Burns CPU for the given number of seconds without ever checking for cancellation;
    holds the lock `spin`."""
    if not 0 <= seconds <= 86_400:
        raise ToolError(f"{seconds} seconds is too long a spin")
    with Lock("spin"):
        start = time.monotonic()
        state, rounds = 0x9E3779B9, 0
        while time.monotonic() - start < seconds:
            for _ in range(1000):
                state = (state * 1103515245 + 12345) & 0xFFFFFFFF
            rounds += 1
    return f"Spun for {time.monotonic() - start:.3f} s ({rounds} rounds, state {state:x})"


@tool(read_only=True, idempotent=True)
def ratio(numerator: float, denominator: float) -> str:
    """Divides numerator by denominator. A zero denominator raises ZeroDivisionError, which
    the caller sees as the error text.

    Args:
        numerator: The number to divide.
        denominator: The number to divide by.
    """
    return f"{numerator / denominator:g}"


class Unit(Enum):
    """The unit the values are in."""

    NONE = "none"
    SECONDS = "seconds"
    BYTES = "bytes"


@dataclass
class Summary:
    """Statistics of a list of values.

    Attributes:
        count: How many values there were.
        mean: Their mean, or null for no values.
        minimum: The smallest, or null for no values.
        maximum: The largest, or null for no values.
        unit: The unit they are in.
    """

    count: int
    mean: float | None
    minimum: float | None
    maximum: float | None
    unit: Unit


@tool(read_only=True, idempotent=True)
def summarize(values: list[float], unit: Unit = Unit.NONE) -> Summary:
    """Summarizes a list of numbers: count, mean, minimum and maximum, as structured output.

    Args:
        values: The numbers to summarize.
        unit: The unit they are in.
    """
    if not values:
        return Summary(0, None, None, None, unit)
    return Summary(len(values), sum(values) / len(values), min(values), max(values), unit)


@cleanup
def release_lock(context: CleanupContext) -> None:
    """Releases the lock the stopped call held (its note names it)."""
    name = release_stopped(context.note_text or "")
    if name is not None:
        log("info", f"cleanup after {context.tool} ({context.reason}): released {name}")
