"""# cordon-guest: write Cordon tools in Python

A Cordon tool is a typed Python function inside a WebAssembly component, built with
componentize-py. The host runs every call in a fresh instance, can stop it at any
instruction, and afterwards runs your cleanup handler in another fresh instance.

    from cordon_guest import Tool, tool, cleanup, progress, check_cancelled
    from cordon_guest import set_cleanup_note, clear_cleanup_note, CleanupContext, log

    @tool(read_only=True)
    def echo(text: str) -> str:
        \"\"\"Returns the text it is given.

        Args:
            text: The text to return.
        \"\"\"
        return text

    @tool
    def import_file(path: str, steps: int = 10) -> str:
        \"\"\"Imports a file, in steps.\"\"\"
        set_cleanup_note(path)             # if the call is stopped, cleanup gets it back
        for step in range(1, steps + 1):
            check_cancelled()              # raises Cancelled once the call should stop
            ...                            # one step of real work
            progress(step, steps, f"step {step} of {steps}")
        clear_cleanup_note()               # complete: nothing to undo
        return f"imported {path}"

    @cleanup
    def undo(context: CleanupContext) -> None:
        if context.note_text:
            log("warn", f"rolling back {context.note_text}")

`Tool` must be importable from the module you build (`from cordon_guest import Tool`): it
is the component's export, which componentize-py looks up there.

- `@tool` turns a function into a tool: its name, its description (the docstring), and its
  input schema, generated from the type hints (see `cordon_guest._schema` for each kind),
  with parameter descriptions from the docstring's `Args:` section or `Annotated[T, "text"]`.
  The host checks every call's arguments against the schema before an instance starts.
- Return a `str` (text), a dataclass, `TypedDict`, list or dict (structured output, with
  its schema advertised as the tool's output schema, and its JSON as text), a `CallResult`,
  or `None`; anything else JSON can hold is sent as JSON text.
- `raise ToolError("...")` fails the call with a message the model sees; any other
  exception does too (its type and message; the traceback goes to stderr, which only the
  operator's log gets).
- Everything runs when the component is built: module-level code, imports and the schemas
  are snapshotted, so a call starts with them ready, and a mistake in a tool's definition
  fails the build. Import what a tool needs at the top of the module: a call has no
  file system (unless the operator grants `/data`) to import from.

Outside a component (tests, a plain `python` run), the same functions work against a
native host: `cordon_guest.testing.TestHost` records progress, logs and notes and lets a
test cancel the call or set the time left.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import traceback
import typing
from typing import Any, Callable, Optional, TypeVar, Union, overload

from . import _host
from ._schema import (
    SchemaError,
    from_json,
    function_schema,
    is_container_type,
    is_object_type,
    to_json,
    type_schema,
)

__all__ = [
    "Tool",
    "tool",
    "cleanup",
    "progress",
    "cancelled",
    "check_cancelled",
    "time_left",
    "set_cleanup_note",
    "clear_cleanup_note",
    "log",
    "LogHandler",
    "ToolError",
    "Cancelled",
    "SchemaError",
    "CleanupContext",
    "CallResult",
    "Text",
    "Image",
    "Audio",
    "ResourceLink",
    "EmbeddedResource",
]

# What runs a call asks of the host.


def progress(done: float, total: Optional[float] = None, message: Optional[str] = None) -> None:
    """Report progress: `done` out of `total` (if known), with a message for people.

    `done` must grow between reports; the host drops reports that do not grow and
    coalesces bursts. Every report also resets the tool's idle timeout.
    """
    _host.current.report_progress(float(done), None if total is None else float(total), message or None)


def cancelled() -> bool:
    """True once the call should stop: the client cancelled it, a timeout passed or the host
    is shutting down. Return promptly then; after a short grace period the host stops the
    call anyway (and runs the cleanup handler).

    Once a call has asked, a stop also ends a wait it is parked in (a `time.sleep`) at once:
    ask again after every wait.
    """
    return _host.current.cancelled()


def check_cancelled() -> None:
    """Raise `Cancelled` once the call should stop; call it between units of work."""
    if _host.current.cancelled():
        raise Cancelled()


def time_left() -> Optional[float]:
    """Seconds left before the host stops this call, or None when no limit applies."""
    milliseconds = _host.current.time_left_ms()
    return None if milliseconds is None else milliseconds / 1000


def set_cleanup_note(note: Union[str, bytes]) -> None:
    """Leave a note for the cleanup handler, kept by the host outside the instance: what it
    needs to undo this call (a lock name, a reservation id). A new note replaces the last;
    an empty one clears it. A note over the tool's limit (64 KiB by default) traps the call.

    The host may stop a call between any two instructions, so leave the note *before* the
    effect it undoes, and let the handler tell whether the effect happened: a lock file
    taken after the note, say, holds a token the note names too, so the handler never
    releases a lock this call did not take (the Python example's `Lock` does this).
    """
    _host.current.set_cleanup_note(note.encode() if isinstance(note, str) else bytes(note))


def clear_cleanup_note() -> None:
    """Clear the cleanup note: nothing is left to undo."""
    _host.current.set_cleanup_note(b"")


def log(level: str, message: str) -> None:
    """Write a line to the operator's log, tagged with the tool's name. `level` is one of
    `trace`, `debug`, `info`, `warn`, `error`.

    The line also reaches the client (a `notifications/message`) when the client asked for
    that level or a more severe one: keep secrets and internals out of it, or write them to
    `sys.stderr`, which only the operator's log gets."""
    if level not in _host.LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(_host.LEVELS)}")
    _host.current.log(level, message)


class LogHandler(logging.Handler):
    """Send Python `logging` records through `log` (so to the operator's log, and to a client
    that asked for their level): `logging.getLogger().addHandler(LogHandler())`."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            level = "error"
        elif record.levelno >= logging.WARNING:
            level = "warn"
        elif record.levelno >= logging.INFO:
            level = "info"
        elif record.levelno >= logging.DEBUG:
            level = "debug"
        else:
            level = "trace"
        try:
            _host.current.log(level, self.format(record))
        except Exception:
            self.handleError(record)


# Errors.


class ToolError(Exception):
    """A failure the model sees as the call's error text (`isError: true`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Cancelled(ToolError):
    """Raised by `check_cancelled()` once the call should stop. Let it propagate: the call
    then ends as stopped and the cleanup handler runs."""

    def __init__(self) -> None:
        super().__init__("cancelled")


# Results.


@dataclasses.dataclass
class Text:
    """Text for the model."""

    text: str


@dataclasses.dataclass
class Image:
    """An image: its bytes and media type (`image/png`)."""

    data: bytes
    mime_type: str


@dataclasses.dataclass
class Audio:
    """An audio clip: its bytes and media type (`audio/wav`)."""

    data: bytes
    mime_type: str


@dataclasses.dataclass
class ResourceLink:
    """A link to a resource the client may fetch."""

    uri: str
    name: str
    description: Optional[str] = None
    mime_type: Optional[str] = None


@dataclasses.dataclass
class EmbeddedResource:
    """A resource whose contents travel in the result: set exactly one of `text`, `blob`."""

    uri: str
    mime_type: Optional[str] = None
    text: Optional[str] = None
    blob: Optional[bytes] = None


Content = Union[Text, Image, Audio, ResourceLink, EmbeddedResource]


@dataclasses.dataclass
class CallResult:
    """A tool's full result: content for the model, optional structured JSON of any type
    (which must match the tool's output schema), and whether it is an error the model
    should see."""

    content: list[Content] = dataclasses.field(default_factory=list)
    structured: Any = None
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text items, joined by newlines (handy in tests)."""
        return "\n".join(item.text for item in self.content if isinstance(item, Text))


# Cleanup.


@dataclasses.dataclass
class CleanupContext:
    """What the cleanup handler is told about the stopped call."""

    call_id: str
    """The host's id of the stopped call."""
    tool: str
    """The tool that was called."""
    arguments: Any
    """The call's arguments (parsed JSON; None if they were not JSON)."""
    reason: str
    """Why it stopped: `cancelled`, `idle-timeout`, `max-duration`, `trapped`,
    `out-of-memory` or `shutdown`."""
    note: Optional[bytes]
    """The last note the call left with `set_cleanup_note`, if any."""
    trap_message: Optional[str] = None
    """The trap's message when `reason` is `trapped`."""

    @property
    def note_text(self) -> Optional[str]:
        """The note as UTF-8 text, if there is one and it is text."""
        if not self.note:
            return None
        try:
            return self.note.decode()
        except UnicodeDecodeError:
            return None


# Returned as they are, never as structured output.
_RESULT_TYPES = (CallResult, Text, Image, Audio, ResourceLink, EmbeddedResource)

STOP_REASONS = ("cancelled", "idle-timeout", "max-duration", "trapped", "out-of-memory", "shutdown")

# The registry: filled when the module that defines the tools is imported (at build time).

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
# The host refuses larger schemas (MAX_SCHEMA_BYTES in host/src/runtime/component.rs).
_MAX_SCHEMA_BYTES = 64 << 10
F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class _ToolSpec:
    name: str
    title: Optional[str]
    description: str
    input_schema: str
    output_schema: Optional[str]
    annotations: dict[str, Optional[bool]]
    requires: list[str]
    function: Callable[..., Any]
    parameters: list[Any]
    return_hint: Any


_tools: dict[str, _ToolSpec] = {}
_cleanup: Optional[Callable[[CleanupContext], None]] = None


@overload
def tool(function: F) -> F: ...


@overload
def tool(
    *,
    name: Optional[str] = None,
    title: Optional[str] = None,
    description: Optional[str] = None,
    read_only: Optional[bool] = None,
    destructive: Optional[bool] = None,
    idempotent: Optional[bool] = None,
    open_world: Optional[bool] = None,
    requires: Optional[list[str]] = None,
) -> Callable[[F], F]: ...


def tool(
    function: Optional[F] = None,
    *,
    name: Optional[str] = None,
    title: Optional[str] = None,
    description: Optional[str] = None,
    read_only: Optional[bool] = None,
    destructive: Optional[bool] = None,
    idempotent: Optional[bool] = None,
    open_world: Optional[bool] = None,
    requires: Optional[list[str]] = None,
) -> Any:
    """Make `function` a tool of this component: `@tool` or `@tool(read_only=True, ...)`.

    Args:
        name: The tool's name (the function's by default): 1-128 of `A-Z a-z 0-9 _ - .`.
        title: A display name for people.
        description: What the tool does, for the model (the docstring's text by default).
        read_only: Hint: the tool changes nothing.
        destructive: Hint: the tool may overwrite or delete data.
        idempotent: Hint: calling it twice with the same arguments has no further effect.
        open_world: Hint: the tool talks to an open world (e.g. the web).
        requires: Client capabilities the tool needs (e.g. `sampling`); calls from clients
            without them are refused before the tool runs.

    The function is returned unchanged, so tests can call it directly. A definition the
    host would refuse (a bad or repeated name, a type without a schema) raises
    `SchemaError` here, so the component fails to build rather than to load.
    """

    def register(function: F) -> F:
        tool_name = function.__name__ if name is None else name
        if not _NAME.fullmatch(tool_name):
            raise SchemaError(f"tool name {tool_name!r} must be 1-128 characters of A-Z a-z 0-9 _ - .")
        if tool_name in _tools:
            raise SchemaError(f"two tools are named {tool_name!r}")
        input_schema, parameters, summary = function_schema(function)
        text = description if description is not None else summary
        if not text:
            raise SchemaError(f"tool {tool_name}: give it a docstring or a description, for the model")
        return_hint = _return_hint(function)
        output_schema = None
        objects = is_object_type(return_hint) and return_hint not in _RESULT_TYPES
        if objects or is_container_type(return_hint):
            try:
                output_schema = json.dumps(type_schema(return_hint, f"tool {tool_name}, return type"), allow_nan=False)
            except SchemaError:
                # A container JSON holds but no schema describes (`dict[int, str]`, a
                # recursive type) is sent as text only; a class must have a schema.
                if objects:
                    raise
        encoded_input = json.dumps(input_schema, allow_nan=False)
        for which, schema in (("input", encoded_input), ("output", output_schema)):
            if schema is not None and len(schema.encode()) > _MAX_SCHEMA_BYTES:
                raise SchemaError(f"tool {tool_name}: its {which} schema is over the host's 64 KiB")
        _tools[tool_name] = _ToolSpec(
            name=tool_name,
            title=title,
            description=text,
            input_schema=encoded_input,
            output_schema=output_schema,
            annotations={
                "read_only": read_only,
                "destructive": destructive,
                "idempotent": idempotent,
                "open_world": open_world,
            },
            requires=list(requires or []),
            function=function,
            parameters=parameters,
            return_hint=return_hint,
        )
        return function

    return register(function) if function is not None else register


def cleanup(function: Callable[[CleanupContext], None]) -> Callable[[CleanupContext], None]:
    """Make `function` the component's cleanup handler (one per component).

    It runs exactly once, in a fresh instance with a short time budget (about a second by
    default), after a call that did not finish on its own terms: one the host stopped by
    force or that trapped, and one that raised after it was asked to stop (the
    `check_cancelled()` path). A call that returns normally, even after a cancel, is
    complete: no cleanup runs. It must be idempotent and rely only on state outside the
    instance: files in `/data` and the note left with `set_cleanup_note`. An exception it
    raises goes to the operator's log and fails the cleanup.
    """
    global _cleanup
    if _cleanup is not None and _cleanup is not function:
        raise SchemaError(f"two cleanup handlers: {_cleanup.__name__} and {function.__name__}")
    _cleanup = function
    return function


def _return_hint(function: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(function, include_extras=True).get("return")
    except Exception:
        return None


# What the component's exports do, in plain Python (the `Tool` export below, and
# `cordon_guest.testing`, call these).


def _list() -> list[_ToolSpec]:
    return list(_tools.values())


def _call(name: str, arguments: str) -> CallResult:
    """Run tool `name` with `arguments` (JSON text). Raises ToolError for a failure the
    client should see."""
    spec = _tools.get(name)
    if spec is None:
        raise ToolError(f"unknown tool: {name}")
    try:
        values = json.loads(arguments)
    except json.JSONDecodeError as error:
        raise ToolError(f"invalid arguments: {error}") from None
    except Exception as error:  # noqa: BLE001 - nesting too deep, an integer too long: not a trap
        raise ToolError(f"invalid arguments: {_describe_exception(error)}") from None
    if not isinstance(values, dict):
        raise ToolError("invalid arguments: expected a JSON object")
    keywords = {}
    for parameter in spec.parameters:
        if parameter.name in values:
            try:
                keywords[parameter.name] = from_json(parameter.hint, values[parameter.name], parameter.name)
            except ToolError:
                raise  # the author's own words, from a dataclass's `__post_init__`
            except TypeError as error:
                raise ToolError(f"invalid arguments: {error}") from None
            except Exception as error:  # noqa: BLE001 - a `__post_init__` that raises, a RecursionError
                raise ToolError(f"invalid arguments: {parameter.name}: {_describe_exception(error)}") from None
        elif parameter.required:
            raise ToolError(f"invalid arguments: missing {parameter.name}")
    try:
        returned = spec.function(**keywords)
    except ToolError:
        raise
    except BaseException as error:  # noqa: BLE001 - every failure becomes the call's error text
        raise ToolError(_describe_exception(error)) from error
    return _result(spec, returned)


def _describe_exception(error: BaseException) -> str:
    """`ZeroDivisionError: division by zero (app.py, line 12, in ratio)`, for the client; the
    traceback goes to stderr, which only the operator's log gets (a `log` line may reach
    the client, and a traceback shows the code and its paths)."""
    frames = traceback.extract_tb(error.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" ({last.filename.rsplit('/', 1)[-1]}, line {last.lineno}, in {last.name})"
    try:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        # The instance is dropped when the call returns: nothing may wait in a buffer.
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a write that fails must not hide the error itself
        pass
    message = str(error)
    if isinstance(error, MemoryError) and not message:
        # Inside a component: the host refused to grow linear memory past the tool's limit.
        message = "out of memory (the call reached its memory limit, `memory_mb` in the operator's config)"
    return f"{type(error).__name__}: {message}{where}" if message else f"{type(error).__name__}{where}"


def _result(spec: _ToolSpec, returned: Any) -> CallResult:
    if isinstance(returned, CallResult):
        return returned
    if returned is None:
        return CallResult()
    if isinstance(returned, str):
        return CallResult([Text(returned)])
    if isinstance(returned, (Text, Image, Audio, ResourceLink, EmbeddedResource)):
        return CallResult([returned])
    try:
        value = to_json(returned)
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except TypeError as error:
        raise ToolError(f"tool {spec.name} returned what JSON cannot hold: {error}") from None
    except Exception as error:  # noqa: BLE001 - a cycle (RecursionError), an integer too long to write
        raise ToolError(f"tool {spec.name} returned what JSON cannot hold: {_describe_exception(error)}") from None
    if spec.output_schema is not None:
        return CallResult([Text(text)], structured=value)
    return CallResult([Text(text)])


def _encoded(name: str, result: CallResult) -> tuple[list[Content], Optional[str], bool]:
    """What the component sends for `result`: its content items, checked, its structured
    output as JSON text, and its error flag. A result the host cannot take raises
    ToolError, so the call fails with a message rather than trapping the instance (and
    `TestHost.call` runs this too, so it fails natively as well)."""
    try:
        content = list(result.content)
        for item in content:
            _check_content(item)
        structured = None
        if result.structured is not None:
            structured = json.dumps(to_json(result.structured), allow_nan=False)
    except TypeError as error:
        raise ToolError(f"tool {name} returned a malformed result: {error}") from None
    except Exception as error:  # noqa: BLE001 - a cycle (RecursionError): the tool's error
        raise ToolError(f"tool {name} returned a malformed result: {_describe_exception(error)}") from None
    return content, structured, bool(result.is_error)


_BYTES = (bytes, bytearray, memoryview)


def _check_content(item: Any) -> None:
    """Raise TypeError unless `item` is a content item whose fields the WIT types take: a
    field the component cannot lower would trap it."""
    if not isinstance(item, (Text, Image, Audio, ResourceLink, EmbeddedResource)):
        raise TypeError(f"a {type(item).__name__} is not content (Text, Image, Audio, ResourceLink, EmbeddedResource)")
    for field in dataclasses.fields(item):
        value = getattr(item, field.name)
        # The fields that default to None are the optional ones.
        if value is None and field.default is None:
            continue
        binary = field.name in ("data", "blob")
        if not isinstance(value, _BYTES if binary else str):
            kind = "bytes" if binary else "str"
            raise TypeError(f"{type(item).__name__}.{field.name} must be {kind}, not {type(value).__name__}")


def _run_cleanup(context: CleanupContext) -> None:
    if _cleanup is None:
        return
    try:
        _cleanup(context)
    except BaseException as error:
        # Its traceback to stderr (the operator's log), then raised on: the component traps
        # and the host reports the cleanup as failed (as a Rust handler's panic or a
        # JavaScript handler's throw), so the operator's log and metrics never count it
        # completed.
        _describe_exception(error)
        raise


# The component's export, as componentize-py generates it for `interface tool`.

if _host.IN_COMPONENT:
    from componentize_py_types import Err as _Err

    _types = _host.wit_types

    class Tool(_host.wit_exports.Tool):
        """The component's export (`interface tool`): import it into the module you build."""

        def list(self) -> Any:
            return [
                _types.ToolInfo(
                    name=spec.name,
                    title=spec.title,
                    description=spec.description,
                    input_schema=spec.input_schema,
                    output_schema=spec.output_schema,
                    annotations=(
                        _types.ToolAnnotations(**spec.annotations)
                        if any(value is not None for value in spec.annotations.values())
                        else None
                    ),
                    requires=spec.requires,
                )
                for spec in _list()
            ]

        def call(self, name: str, arguments: str) -> Any:
            # Only an `Err` is the call's error: any exception that escapes traps the
            # instance, and the host reports a crash instead of the tool's error.
            try:
                content, structured, is_error = _encoded(name, _call(name, arguments))
                return _types.CallResult(
                    content=[_wit_content(item) for item in content],
                    structured=structured,
                    is_error=is_error,
                )
            except ToolError as error:
                raise _Err(error.message) from None
            except Exception as error:  # noqa: BLE001 - whatever else escaped is the call's error too
                raise _Err(f"tool {name} failed: {_describe_exception(error)}") from None

        def cleanup(self, context: Any) -> None:
            reason = type(context.reason).__name__.split("_", 1)[1]
            reason = re.sub(r"(?<!^)(?=[A-Z])", "-", reason).lower()
            try:
                arguments = json.loads(context.arguments)
            except ValueError:
                arguments = None
            _run_cleanup(
                CleanupContext(
                    call_id=context.call_id,
                    tool=context.tool,
                    arguments=arguments,
                    reason=reason,
                    note=context.note,
                    trap_message=context.reason.value if reason == "trapped" else None,
                )
            )

    def _wit_content(item: Content) -> Any:
        if isinstance(item, Text):
            return _types.Content_Text(item.text)
        if isinstance(item, Image):
            return _types.Content_Image(_types.Media(bytes(item.data), item.mime_type))
        if isinstance(item, Audio):
            return _types.Content_Audio(_types.Media(bytes(item.data), item.mime_type))
        if isinstance(item, ResourceLink):
            return _types.Content_ResourceLink(
                _types.ResourceLink(item.uri, item.name, item.description, item.mime_type)
            )
        if isinstance(item, EmbeddedResource):
            blob = None if item.blob is None else bytes(item.blob)
            return _types.Content_EmbeddedResource(
                _types.EmbeddedResource(item.uri, item.mime_type, item.text, blob)
            )
        raise TypeError(f"{type(item).__name__} is not content (Text, Image, Audio, ResourceLink, EmbeddedResource)")

else:

    class Tool:  # type: ignore[no-redef]
        """The component's export; outside a component, a placeholder (use
        `cordon_guest.testing` to call tools natively)."""
