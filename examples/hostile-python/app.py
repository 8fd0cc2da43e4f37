"""Hostile tools in Python: what a CPython guest can do to its host, and what the host
must contain (built by `cargo xtask guests` into `target/guests/hostile-python.wasm`;
`host/tests/python_guest.rs` runs each against the runtime's limits):

- `hog(mb)` keeps allocating and touching 1 MiB blocks until it holds `mb` MiB.
- `recurse()` calls itself without end.
- `nest(depth)` builds lists nested `depth` deep (without recursion) and prints them,
  which recurses in C.
- `shout(mb)` returns a text of `mb` MiB.
- `flood(count)` reports progress `count` times, as fast as it can.
- `doomed(cleanup)` leaves `cleanup` as its note, reports progress once and spins until it
  is stopped; its cleanup then aborts the interpreter (`"abort"`), spins forever
  (`"spin"`) or recurses without end (`"recurse"`).
- `echo(text)` returns the text: the well-behaved call that must still work after each.
"""

import os

from cordon_guest import (
    CleanupContext,
    Tool,  # noqa: F401 - the component's export: componentize-py looks it up here
    cleanup,
    progress,
    set_cleanup_note,
    tool,
)

MIB = 1 << 20


@tool
def echo(text: str) -> str:
    """Returns the text it is given.

    Args:
        text: The text to return.
    """
    return text


@tool
def hog(mb: int) -> str:
    """Allocates and touches 1 MiB blocks until it holds `mb` MiB.

    Args:
        mb: How many MiB to hold.
    """
    blocks = []
    for index in range(mb):
        blocks.append(bytearray(b"\xa5") * MIB)
    return f"held {len(blocks)} MiB"


def _recurse(depth: int) -> int:
    return _recurse(depth + 1) + 1


@tool
def recurse() -> str:
    """Calls itself without end."""
    return str(_recurse(0))


@tool
def nest(depth: int) -> str:
    """Builds lists nested `depth` deep and returns the length of their text.

    Args:
        depth: How deep.
    """
    value: list = []
    for _ in range(depth):
        value = [value]
    return str(len(repr(value)))


@tool
def shout(mb: int) -> str:
    """Returns a text of `mb` MiB.

    Args:
        mb: How many MiB.
    """
    return "x" * (mb * MIB)


@tool
def flood(count: int) -> str:
    """Reports progress `count` times, as fast as it can.

    Args:
        count: How many reports.
    """
    for done in range(1, count + 1):
        progress(done, count)
    return f"reported {count} times"


@tool
def doomed(cleanup: str) -> str:
    """Leaves `cleanup` as its note and spins until it is stopped.

    Args:
        cleanup: What its cleanup does: "abort", "spin" or "recurse".
    """
    set_cleanup_note(cleanup)
    progress(0, message="spinning")  # the note is left: a test may stop it now
    state = 1
    while True:
        state = (state * 1103515245 + 12345) & 0xFFFFFFFF


@cleanup
def misbehave(context: CleanupContext) -> None:
    """Does what the stopped call's note says."""
    if context.note_text == "abort":
        os.abort()
    elif context.note_text == "spin":
        while True:
            pass
    elif context.note_text == "recurse":
        _recurse(0)
