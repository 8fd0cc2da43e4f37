"""__NAME__: a Cordon tool written in Python (see README.md to build, test and serve it).

`import_items` shows what a Cordon tool can count on: progress for the client, a check for
cancellation between steps, and a cleanup handler that undoes what a stopped call left
behind, told what to undo by the note the call left.
"""

import time

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


@tool(read_only=True, idempotent=True)
def echo(text: str) -> str:
    """Returns the text it is given.

    Args:
        text: The text to return.
    """
    return text


@tool
def import_items(batch: str, count: int = 5, step_ms: int = 200) -> str:
    """Imports a batch of items one at a time, reporting progress. A stopped import is
    rolled back by the cleanup handler.

    Args:
        batch: The name of the batch to import.
        count: How many items it holds.
        step_ms: How long each item takes, in milliseconds.
    """
    if count < 0 or step_ms < 0:
        raise ToolError("count and step_ms must not be negative")
    # If the call is stopped from here on, cleanup gets this note back.
    set_cleanup_note(batch)
    for item in range(1, count + 1):
        check_cancelled()  # raises Cancelled once the caller cancelled or time ran out
        time.sleep(step_ms / 1000)  # one item's work; a stop wakes this sleep at once
        check_cancelled()
        progress(item, count, f"Imported {item} of {count} items")
    clear_cleanup_note()  # complete: nothing to undo
    return f"Imported {count} items from {batch}"


@cleanup
def roll_back(context: CleanupContext) -> None:
    """Runs once, in a fresh instance, after a stopped call."""
    if context.note_text:
        log("warn", f"{context.tool} stopped ({context.reason}): rolling back batch {context.note_text}")
