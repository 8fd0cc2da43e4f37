"""The `@tool` and `@cleanup` decorators, calls and results, and the native test host."""

import dataclasses
import logging
from typing import TypedDict

import pytest

import cordon_guest
from cordon_guest import (
    CallResult,
    Cancelled,
    CleanupContext,
    Image,
    LogHandler,
    SchemaError,
    Text,
    ToolError,
    check_cancelled,
    cleanup,
    progress,
    set_cleanup_note,
    time_left,
    tool,
)
from cordon_guest.testing import TestHost


def test_a_tool_is_listed_with_its_schema_description_and_hints():
    @tool(title="Echo", read_only=True, requires=["sampling"])
    def echo(text: str) -> str:
        """Returns the text.

        Args:
            text: The text.
        """
        return text

    [listed] = TestHost.tools()
    assert listed == {
        "name": "echo",
        "title": "Echo",
        "description": "Returns the text.",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The text."}},
            "required": ["text"],
        },
        "output_schema": None,
        "annotations": {"read_only": True},
        "requires": ["sampling"],
    }
    assert echo("direct") == "direct", "the decorated function stays callable"


@dataclasses.dataclass
class Total:
    """A sum."""

    value: int


class Pair(TypedDict):
    left: int
    right: int


def test_object_return_types_are_structured_output_with_a_schema():
    @tool
    def add(a: int, b: int) -> Total:
        """Adds."""
        return Total(a + b)

    @tool
    def split(value: int) -> Pair:
        """Splits."""
        return {"left": value // 2, "right": value - value // 2}

    tools = {entry["name"]: entry for entry in TestHost.tools()}
    assert tools["add"]["output_schema"] == {
        "type": "object",
        "description": "A sum.",
        "properties": {"value": {"type": "integer"}},
        "required": ["value"],
    }
    assert tools["split"]["output_schema"]["required"] == ["left", "right"]
    with TestHost() as host:
        result = host.call("add", {"a": 2, "b": 3})
        assert result.structured == {"value": 5}
        assert result.text == '{"value": 5}'
        assert host.call("split", {"value": 5}).structured == {"left": 2, "right": 3}


def test_lists_and_dicts_are_structured_output_of_any_json_type():
    @tool
    def listing() -> list:
        """A list."""
        return ["a", 1]

    @tool
    def names() -> list[str]:
        """Names."""
        return ["b", "a"]

    @tool
    def counts() -> dict[str, int]:
        """Counts."""
        return {"a": 1}

    @tool
    def by_number() -> dict[int, str]:
        """Keys JSON writes as strings, which no schema here describes: text only."""
        return {1: "one"}

    tools = {entry["name"]: entry for entry in TestHost.tools()}
    assert tools["by_number"]["output_schema"] is None
    assert tools["listing"]["output_schema"] == {"type": "array"}
    assert tools["names"]["output_schema"] == {"type": "array", "items": {"type": "string"}}
    assert tools["counts"]["output_schema"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    with TestHost() as host:
        assert host.call("listing").content == [Text('["a", 1]')]
        assert host.call("listing").structured == ["a", 1]
        assert host.call("names").structured == ["b", "a"]
        assert host.call("counts").structured == {"a": 1}
        assert host.call("by_number").content == [Text('{"1": "one"}')]
        assert host.call("by_number").structured is None


def test_other_returns_become_text_json_or_nothing():
    @tool
    def number() -> int:
        """A number, sent as JSON text."""
        return 7

    @tool
    def nothing() -> None:
        """Nothing."""

    @tool
    def picture() -> CallResult:
        """A picture."""
        return CallResult([Text("here"), Image(b"\x89PNG", "image/png")])

    @tool
    def opaque() -> object:
        """Not JSON."""
        return object()

    with TestHost() as host:
        assert host.call("number").content == [Text("7")]
        assert host.call("number").structured is None, "no output schema for a number"
        assert host.call("nothing").content == []
        assert host.call("picture").content[1] == Image(b"\x89PNG", "image/png")
        with pytest.raises(ToolError, match="opaque returned what JSON cannot hold: a object is not JSON"):
            host.call("opaque")


@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "must be 1-128 characters"),
        ("has space", "must be 1-128"),
        ("x" * 129, "must be 1-128"),
        ("trailing\n", "must be 1-128"),
    ],
)
def test_names_the_host_would_refuse_fail_at_definition(name, problem):
    with pytest.raises(SchemaError, match=problem):

        @tool(name=name)
        def anything() -> str:
            """Doc."""
            return ""


def test_a_second_tool_of_the_same_name_or_a_missing_description_is_refused():
    @tool
    def once() -> str:
        """Doc."""
        return ""

    with pytest.raises(SchemaError, match="two tools are named 'once'"):

        @tool(name="once")
        def again() -> str:
            """Doc."""
            return ""

    with pytest.raises(SchemaError, match="give it a docstring"):

        @tool
        def undocumented() -> str:
            return ""


def test_a_schema_over_the_host_s_limit_fails_at_definition():
    from typing import Literal

    Huge = Literal[tuple(f"choice-{i:05}" for i in range(5000))]

    with pytest.raises(SchemaError, match="input schema is over the host's 64 KiB"):

        @tool
        def pick(choice: Huge) -> str:  # type: ignore[valid-type]
            """Picks."""
            return choice


def test_a_python_exception_is_the_call_s_error_text_and_its_traceback_is_logged():
    @tool
    def divide(a: float, b: float) -> str:
        """Divides."""
        return str(a / b)

    with TestHost() as host:
        with pytest.raises(ToolError) as raised:
            host.call("divide", {"a": 1, "b": 0})
    assert str(raised.value).startswith("ZeroDivisionError: float division by zero (test_tools.py, line ")
    assert str(raised.value).endswith(", in divide)")
    [(level, traceback)] = host.logs
    assert level == "error" and "Traceback" in traceback and "return str(a / b)" in traceback


def test_tool_errors_and_bad_arguments_are_the_error_text_as_given():
    @tool
    def picky(count: int) -> str:
        """Picky."""
        raise ToolError(f"{count} is not welcome")

    with TestHost() as host:
        with pytest.raises(ToolError, match="^3 is not welcome$"):
            host.call("picky", {"count": 3})
        with pytest.raises(ToolError, match="invalid arguments: count: expected an integer, got a string"):
            host.call("picky", {"count": "3"})
        with pytest.raises(ToolError, match="invalid arguments: missing count"):
            host.call("picky", {})
        with pytest.raises(ToolError, match="unknown tool: nope"):
            host.call("nope")
    assert host.logs == [], "a ToolError is the tool's own words: nothing to log"


def test_progress_cancellation_time_left_and_the_note_reach_the_host():
    @tool
    def work(steps: int) -> str:
        """Works in steps."""
        set_cleanup_note("job-7")
        for step in range(1, steps + 1):
            check_cancelled()
            progress(step, steps, f"step {step}")
        return f"{time_left()}"

    with TestHost(time_left=2.5) as host:
        assert host.call("work", {"steps": 3}).text == "2.5"
    assert host.progress == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    assert host.note == b"job-7"

    with TestHost(cancel_after_progress=2) as host:
        with pytest.raises(Cancelled, match="cancelled"):
            host.call("work", {"steps": 5})
        assert len(host.progress) == 2
        assert cordon_guest.time_left() == 0, "nothing is left once cancelled"


def test_the_cleanup_handler_gets_the_note_the_call_left():
    seen = []

    @tool
    def hold(name: str) -> str:
        """Holds."""
        set_cleanup_note(name)
        check_cancelled()
        return "held"

    @cleanup
    def release(context: CleanupContext) -> None:
        seen.append((context.tool, context.arguments, context.reason, context.note_text))

    with TestHost(cancelled=True) as host:
        with pytest.raises(Cancelled):
            host.call("hold", {"name": "lock-a"})
        host.cleanup("hold", {"name": "lock-a"}, reason="max-duration")
    assert seen == [("hold", {"name": "lock-a"}, "max-duration", "lock-a")]
    with pytest.raises(SchemaError, match="two cleanup handlers"):

        @cleanup
        def another(context: CleanupContext) -> None:
            pass

    with pytest.raises(ValueError, match="not one of"):
        TestHost().cleanup("hold", reason="bored")


def test_a_failing_cleanup_handler_is_logged_and_raised_so_the_host_reports_it_failed():
    @cleanup
    def broken(context: CleanupContext) -> None:
        raise RuntimeError("disk gone")

    with TestHost() as host:
        with pytest.raises(RuntimeError, match="disk gone"):
            host.cleanup("any", reason="trapped", note=b"x")
    assert host.logs[0][0] == "error" and "RuntimeError: disk gone" in host.logs[0][1]


def test_log_levels_and_the_logging_handler():
    logger = logging.getLogger("cordon-test")
    logger.addHandler(LogHandler())
    logger.setLevel(logging.DEBUG)
    with TestHost() as host:
        cordon_guest.log("warn", "careful")
        logger.info("from logging")
        logger.error("bad")
        with pytest.raises(ValueError, match="not one of"):
            cordon_guest.log("loud", "x")
    assert host.logs == [("warn", "careful"), ("info", "from logging"), ("error", "bad")]


def test_outside_a_test_host_calls_print_and_are_never_cancelled(capsys):
    progress(1, 2, "half")
    cordon_guest.log("info", "hello")
    assert cordon_guest.cancelled() is False and time_left() is None
    assert capsys.readouterr().err == "progress 1/2: half\nINFO hello\n"


def test_the_shipped_wit_is_the_repository_s():
    from pathlib import Path

    shipped = Path(cordon_guest.__file__).parent / "wit" / "cordon.wit"
    repository = Path(__file__).resolve().parents[3] / "wit" / "cordon.wit"
    assert shipped.read_text() == repository.read_text(), "copy wit/cordon.wit into the package"


def test_running_out_of_memory_says_which_limit():
    @tool
    def hungry() -> str:
        """Allocates past the limit (as a component does when the host refuses to grow)."""
        raise MemoryError()

    with TestHost() as host, pytest.raises(ToolError, match=r"^MemoryError: out of memory \(the call reached its memory limit, `memory_mb`"):
        host.call("hungry")
