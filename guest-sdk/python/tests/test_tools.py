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


def test_a_default_json_cannot_hold_fails_at_definition():
    with pytest.raises(SchemaError, match=r"^tool scale, parameter factor: its default is not JSON: inf is not JSON"):

        @tool
        def scale(factor: float = float("inf")) -> str:
            """Scales."""
            return str(factor)

    assert TestHost.tools() == []


def test_a_python_exception_is_the_call_s_error_text_and_its_traceback_goes_to_stderr(capsys):
    @tool
    def divide(a: float, b: float) -> str:
        """Divides."""
        return str(a / b)

    with TestHost() as host:
        with pytest.raises(ToolError) as raised:
            host.call("divide", {"a": 1, "b": 0})
    assert str(raised.value).startswith("ZeroDivisionError: float division by zero (test_tools.py, line ")
    assert str(raised.value).endswith(", in divide)")
    assert host.logs == [], "a log line may reach the client: the traceback must not"
    traceback = capsys.readouterr().err
    assert "Traceback" in traceback and "return str(a / b)" in traceback


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


def test_a_failing_cleanup_handler_is_logged_and_raised_so_the_host_reports_it_failed(capsys):
    @cleanup
    def broken(context: CleanupContext) -> None:
        raise RuntimeError("disk gone")

    with TestHost() as host:
        with pytest.raises(RuntimeError, match="disk gone"):
            host.cleanup("any", reason="trapped", note=b"x")
    assert host.logs == []
    assert "RuntimeError: disk gone" in capsys.readouterr().err, "stderr is the operator's log"


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


@dataclasses.dataclass
class Positive:
    value: int

    def __post_init__(self) -> None:
        if self.value == 0:
            raise ToolError("zero is not welcome")
        if self.value < 0:
            raise ValueError(f"{self.value} is not positive")


def test_any_exception_while_reading_the_arguments_is_the_call_s_error(capsys):
    @tool
    def take(number: Positive) -> str:
        """Takes a positive number."""
        return str(number.value)

    @tool
    def anything(value: list) -> str:
        """Takes any list."""
        return "taken"

    with TestHost() as host:
        assert host.call("take", {"number": {"value": 2}}).text == "2"
        with pytest.raises(ToolError) as raised:
            host.call("take", {"number": {"value": -1}})
        assert str(raised.value).startswith("invalid arguments: number: ValueError: -1 is not positive (test_tools.py")
        assert str(raised.value).endswith(", in __post_init__)")
        assert "Traceback" in capsys.readouterr().err
        with pytest.raises(ToolError, match="^zero is not welcome$"):
            host.call("take", {"number": {"value": 0}})
        # Nesting deeper than Python's parser recurses (the host's schema check comes first
        # in a component; a native caller may send anything).
        deep = '{"value": ' + "[" * 100_000 + "]" * 100_000 + "}"
        with pytest.raises(ToolError, match="^invalid arguments: RecursionError: "):
            cordon_guest._call("anything", deep)
    assert host.logs == []


def test_any_exception_while_converting_the_result_is_the_call_s_error():
    @tool
    def cyclic() -> object:
        """Returns a list that holds itself."""
        loop: list = []
        loop.append(loop)
        return loop

    with TestHost() as host, pytest.raises(ToolError, match="^tool cyclic returned what JSON cannot hold: RecursionError: "):
        host.call("cyclic")


@pytest.mark.parametrize(
    "result, problem",
    [
        (CallResult(content=["plain str"]), "a str is not content"),
        (CallResult(content=[Text(7)]), "Text.text must be str, not int"),
        (CallResult(content=[Image("png", "image/png")]), "Image.data must be bytes, not str"),
        (CallResult(structured={"when": object()}), "a object is not JSON"),
        (CallResult(structured=[float("nan")]), r"nan is not JSON \(it has no NaN or Infinity\)"),
    ],
)
def test_a_result_the_component_cannot_send_fails_natively_too(result, problem):
    @tool
    def malformed() -> CallResult:
        """Returns what it is given."""
        return result

    with TestHost() as host, pytest.raises(ToolError, match=f"^tool malformed returned a malformed result: {problem}"):
        host.call("malformed")


def test_a_result_with_optional_fields_unset_or_bytes_of_any_kind_is_sent():
    from cordon_guest import EmbeddedResource, ResourceLink

    @tool
    def shapes() -> CallResult:
        """Every item with its optional fields unset."""
        return CallResult(
            [
                ResourceLink("file:///a", "a"),
                EmbeddedResource("file:///b", blob=bytearray(b"b")),
                Image(memoryview(b"i"), "image/png"),
            ],
            structured={"n": 1},
            is_error=1,
        )

    with TestHost() as host:
        assert len(host.call("shapes").content) == 3
        content, structured, is_error = cordon_guest._encoded("shapes", host.call("shapes"))
    assert (structured, is_error) == ('{"n": 1}', True)


def test_nan_and_infinity_in_a_result_are_the_call_s_error_not_json_the_host_refuses():
    @tool
    def ratio() -> float:
        """A number."""
        return float("inf")

    @tool
    def stats() -> dict[str, float]:
        """Structured output."""
        return {"mean": float("nan")}

    with TestHost() as host:
        with pytest.raises(ToolError, match=r"^tool ratio returned what JSON cannot hold: inf is not JSON \(it has no NaN or Infinity\)$"):
            host.call("ratio")
        with pytest.raises(ToolError, match=r"^tool stats returned what JSON cannot hold: nan is not JSON"):
            host.call("stats")
