"""JSON Schemas from Python type hints, and arguments from JSON back into those types.

A tool's parameters become the properties of its input schema. What each type hint becomes:

- `str`, `int`, `float`, `bool`: `string`, `integer`, `number`, `boolean`
- `list[T]` (`List`, `Sequence`, `set`, `frozenset`), `tuple[T, ...]`: an array of `T`;
  `tuple[A, B]`: an array of exactly those items
- `dict[str, T]`: an object whose values are `T`
- `Optional[T]`, `T | None`: `T` or `null`; other unions: `anyOf`
- `Literal["a", "b"]` and `Enum` classes: `enum` of the values
- dataclasses and `TypedDict` classes: objects with their fields as properties
- `Any`: any JSON value
- `Annotated[T, "text"]`: `T`, described by the text

A parameter without a default is required; a default is shown as `default` (so it must be
JSON: not NaN or Infinity, which JSON has no numbers for). Descriptions
come from `Annotated` text first, then from the docstring's `Args:` section (or
`Attributes:` for a class). Recursive classes and types not listed are refused with an
error that names the parameter, when the tool is defined (so at build time).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
import re
import typing
from collections.abc import Sequence
from typing import Any, Callable, Literal, Union

# `types.UnionType` is the type of `int | None` (Python 3.10+).
from types import NoneType, UnionType

__all__ = ["SchemaError", "Parameter", "function_schema", "type_schema", "from_json", "to_json"]


class SchemaError(TypeError):
    """A type hint that has no JSON Schema, or a tool definition the host would refuse."""


@dataclasses.dataclass
class Parameter:
    """One parameter of a tool function, as the schema and the call see it."""

    name: str
    hint: Any
    required: bool
    default: Any


def function_schema(function: Callable[..., Any]) -> tuple[dict[str, Any], list[Parameter], str]:
    """The input schema of `function`'s parameters, the parameters, and the description
    its docstring gives (the text before the first section such as `Args:`)."""
    where = f"tool {function.__name__}"
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as error:  # a forward reference that does not resolve, a typo
        raise SchemaError(f"{where}: its type hints cannot be read: {error}") from error
    docs = _docstring_sections(inspect.getdoc(function) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    parameters: list[Parameter] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise SchemaError(f"{where}: *{parameter.name} has no schema; name every parameter")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise SchemaError(f"{where}: {parameter.name} is positional-only; arguments come by name")
        if parameter.name not in hints:
            raise SchemaError(f"{where}: parameter {parameter.name} has no type hint")
        hint = hints[parameter.name]
        schema = type_schema(hint, f"{where}, parameter {parameter.name}")
        _describe(schema, hint, docs["args"].get(parameter.name))
        has_default = parameter.default is not parameter.empty
        if has_default:
            schema["default"] = _default(parameter.default, f"{where}, parameter {parameter.name}")
        else:
            required.append(parameter.name)
        properties[parameter.name] = schema
        parameters.append(Parameter(parameter.name, hint, not has_default, parameter.default))
    root: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        root["required"] = required
    return root, parameters, docs["summary"]


def type_schema(hint: Any, where: str = "type", _seen: tuple[type, ...] = ()) -> dict[str, Any]:
    """The JSON Schema of one type hint; `where` names it in errors."""
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = type_schema(arguments[0], where, _seen)
        _describe(schema, hint, None)
        return schema
    if _is_required_marker(origin):
        return type_schema(arguments[0], where, _seen)
    if hint is Any or hint is object:
        return {}
    if hint is NoneType or hint is None:
        return {"type": "null"}
    # bool before int: bool is a subclass of int.
    for python, json_type in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if hint is python:
            return {"type": json_type}
    if origin is Literal:
        return _enum_schema(list(arguments), where)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        schema = _enum_schema([member.value for member in hint], where)
        summary = _docstring_sections(_own_doc(hint))["summary"]
        if summary:
            schema["description"] = summary
        return schema
    if origin in (Union, UnionType):
        return _union_schema(arguments, where, _seen)
    if origin in (list, set, frozenset, Sequence) or hint in (list, set, frozenset):
        schema: dict[str, Any] = {"type": "array"}
        if arguments:
            schema["items"] = type_schema(arguments[0], where, _seen)
        if origin in (set, frozenset) or hint in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple or hint is tuple:
        if not arguments or (len(arguments) == 2 and arguments[1] is Ellipsis):
            schema = {"type": "array"}
            if arguments:
                schema["items"] = type_schema(arguments[0], where, _seen)
            return schema
        items = [type_schema(argument, where, _seen) for argument in arguments]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if origin is dict or hint is dict:
        if arguments and arguments[0] is not str:
            raise SchemaError(f"{where}: JSON object keys are strings, not {_name(arguments[0])}")
        schema = {"type": "object"}
        if arguments:
            schema["additionalProperties"] = type_schema(arguments[1], where, _seen)
        return schema
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or typing.is_typeddict(hint)):
        if hint in _seen:
            raise SchemaError(f"{where}: {hint.__name__} refers to itself; recursive types have no schema here")
        return _class_schema(hint, where, _seen + (hint,))
    raise SchemaError(
        f"{where}: {_name(hint)} has no JSON Schema (use str, int, float, bool, list, dict, "
        "Optional, Literal, an Enum, a dataclass or a TypedDict)"
    )


def _default(value: Any, where: str) -> Any:
    """A default as JSON for the schema; one JSON cannot hold (a NaN, an Infinity) is
    refused here, at build time: the host refuses a schema that is not JSON."""
    try:
        return to_json(value)
    except TypeError as error:
        raise SchemaError(f"{where}: its default is not JSON: {error}") from None


def _enum_schema(values: list[Any], where: str) -> dict[str, Any]:
    for value in values:
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            raise SchemaError(f"{where}: the value {value!r} is not JSON")
        if isinstance(value, float) and not math.isfinite(value):
            raise SchemaError(f"{where}: the value {value!r} is not JSON (it has no NaN or Infinity)")
    schema: dict[str, Any] = {"enum": values}
    kinds = {_json_type(value) for value in values}
    if len(kinds) == 1:
        schema["type"] = kinds.pop()
    return schema


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "string"


def _union_schema(arguments: tuple[Any, ...], where: str, seen: tuple[type, ...]) -> dict[str, Any]:
    arms = [type_schema(argument, where, seen) for argument in arguments]
    # `Optional[str]` as `type: [string, null]`, as schemars writes `Option<String>`: simpler
    # for clients than an anyOf of two.
    simple = [arm for arm in arms if set(arm) == {"type"} and isinstance(arm["type"], str)]
    if len(simple) == len(arms):
        return {"type": [arm["type"] for arm in arms]}
    return {"anyOf": arms}


def _class_schema(cls: type, where: str, seen: tuple[type, ...]) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as error:  # a forward reference that does not resolve
        raise SchemaError(f"{where}: the type hints of {cls.__name__} cannot be read: {error}") from error
    docs = _docstring_sections(_own_doc(cls))
    properties: dict[str, Any] = {}
    required: list[str] = []
    if dataclasses.is_dataclass(cls):
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            hint = hints[field.name]
            field_where = f"{where}, field {cls.__name__}.{field.name}"
            schema = type_schema(hint, field_where, seen)
            _describe(schema, hint, docs["args"].get(field.name))
            if field.default is not dataclasses.MISSING:
                schema["default"] = _default(field.default, field_where)
            elif field.default_factory is not dataclasses.MISSING:
                schema["default"] = _default(field.default_factory(), field_where)
            else:
                required.append(field.name)
            properties[field.name] = schema
    else:
        for name, hint in hints.items():
            schema = type_schema(hint, f"{where}, key {cls.__name__}.{name}", seen)
            _describe(schema, hint, docs["args"].get(name))
            properties[name] = schema
            if name in cls.__required_keys__:  # type: ignore[attr-defined]
                required.append(name)
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if docs["summary"]:
        schema["description"] = docs["summary"]
    return schema


def _own_doc(cls: type) -> str:
    """A class's own docstring: not the one a dataclass makes up (`Point(x: int)`), nor a
    base class's."""
    doc = cls.__dict__.get("__doc__") or ""
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return ""
    if isinstance(cls, type) and issubclass(cls, enum.Enum) and doc in ("An enumeration.", ""):
        return ""
    return inspect.cleandoc(doc)


def _describe(schema: dict[str, Any], hint: Any, docstring_text: str | None) -> None:
    """Describe the schema by `Annotated[..., "text"]`, else by the docstring's entry (which
    says what a parameter is for, so it replaces the description of its class)."""
    texts = []
    if typing.get_origin(hint) is typing.Annotated:
        texts = [item for item in typing.get_args(hint)[1:] if isinstance(item, str)]
    if texts:
        schema["description"] = " ".join(texts)
    elif docstring_text:
        schema["description"] = docstring_text


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Attributes|Fields|Keys|Returns|Raises|Yields|Example|Examples|Notes?):\s*$")


def _docstring_sections(doc: str) -> dict[str, Any]:
    """The summary (text before the first section) and the entries of a Google-style
    `Args:`/`Attributes:` section, `name: text` or `name (type): text`, continued by
    deeper-indented lines."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    entry_indent = None
    for line in doc.splitlines():
        match = _SECTION.match(line.strip()) if not line.startswith((" ", "\t")) else None
        if match:
            section = match.group(1)
            current = None
            entry_indent = None
            continue
        if section is None:
            summary.append(line)
            continue
        if section not in ("Args", "Arguments", "Parameters", "Attributes", "Fields", "Keys"):
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        entry = re.match(r"^\s*\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(\([^)]*\))?\s*:\s*(.*)$", line)
        if entry and (entry_indent is None or indent <= entry_indent):
            entry_indent = indent
            current = entry.group(1)
            args[current] = entry.group(3).strip()
        elif current is not None:
            args[current] = f"{args[current]} {line.strip()}".strip()
    text = "\n".join(summary).strip()
    # One paragraph per blank line; lines within a paragraph are joined.
    paragraphs = [" ".join(part.split()) for part in re.split(r"\n\s*\n", text) if part.strip()]
    return {"summary": "\n\n".join(paragraphs), "args": args}


def _is_required_marker(origin: Any) -> bool:
    """`Required[...]`/`NotRequired[...]` of a TypedDict (Python 3.11+)."""
    names = ("Required", "NotRequired", "ReadOnly")
    return any(origin is getattr(typing, name, object()) for name in names)


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or repr(hint)


# Arguments: JSON values (already checked against the schema by the host) into the types
# the tool function declares.


def from_json(hint: Any, value: Any, where: str) -> Any:
    """`value` (parsed JSON) as the type `hint` says; `where` names it in errors."""
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated or _is_required_marker(origin):
        return from_json(arguments[0], value, where)
    if hint is Any or hint is object:
        return value
    if hint is NoneType or hint is None:
        if value is not None:
            raise TypeError(f"{where}: expected null, got {_json_name(value)}")
        return None
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{where}: expected a boolean, got {_json_name(value)}")
        return value
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: expected an integer, got {_json_name(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where}: expected a number, got {_json_name(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise TypeError(f"{where}: expected a string, got {_json_name(value)}")
        return value
    if origin is Literal:
        if value not in arguments:
            raise TypeError(f"{where}: expected one of {list(arguments)!r}, got {value!r}")
        return value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise TypeError(f"{where}: expected one of {[m.value for m in hint]!r}, got {value!r}") from None
    if origin in (Union, UnionType):
        if value is None and NoneType in arguments:
            return None
        failures = []
        for arm in arguments:
            if arm is NoneType:
                continue
            try:
                return from_json(arm, value, where)
            except TypeError as error:
                failures.append(str(error))
        raise TypeError("; ".join(failures))
    if origin in (list, set, frozenset, Sequence, tuple) or hint in (list, set, frozenset, tuple):
        if not isinstance(value, list):
            raise TypeError(f"{where}: expected an array, got {_json_name(value)}")
        if origin is tuple and arguments and not (len(arguments) == 2 and arguments[1] is Ellipsis):
            if len(value) != len(arguments):
                raise TypeError(f"{where}: expected {len(arguments)} items, got {len(value)}")
            return tuple(from_json(arm, item, f"{where}[{i}]") for i, (arm, item) in enumerate(zip(arguments, value)))
        item_hint = arguments[0] if arguments else Any
        items = [from_json(item_hint, item, f"{where}[{i}]") for i, item in enumerate(value)]
        container = origin if origin in (set, frozenset, tuple) else hint if hint in (set, frozenset, tuple) else list
        return container(items)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {_json_name(value)}")
        value_hint = arguments[1] if arguments else Any
        return {key: from_json(value_hint, item, f"{where}.{key}") for key, item in value.items()}
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or typing.is_typeddict(hint)):
        if not isinstance(value, dict):
            raise TypeError(f"{where}: expected an object, got {_json_name(value)}")
        hints = typing.get_type_hints(hint, include_extras=True)
        if dataclasses.is_dataclass(hint):
            fields = {field.name: hints[field.name] for field in dataclasses.fields(hint) if field.init}
            known = {name: from_json(fields[name], item, f"{where}.{name}") for name, item in value.items() if name in fields}
            try:
                return hint(**known)
            except TypeError as error:  # a required field missing
                raise TypeError(f"{where}: {error}") from None
            # Anything else its `__post_init__` raises goes up to the call, which reports it.
        return {name: from_json(hints[name], item, f"{where}.{name}") for name, item in value.items() if name in hints}
    raise TypeError(f"{where}: cannot read a {_name(hint)} from JSON")


def _json_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object", NoneType: "null"}.get(type(value), type(value).__name__)


def to_json(value: Any) -> Any:
    """`value` as plain JSON data: dataclasses become objects, enums their values, tuples
    and sets arrays. Anything else JSON cannot hold is refused with a TypeError: NaN and
    Infinity too, which `json` would write although JSON has no such numbers (and the host
    refuses them)."""
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(f"{value!r} is not JSON (it has no NaN or Infinity)")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a {type(value).__name__} is not JSON")


def is_object_type(hint: Any) -> bool:
    """Whether values of `hint` are JSON objects with a schema: a dataclass or a `TypedDict`."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return is_object_type(typing.get_args(hint)[0])
    return isinstance(hint, type) and (dataclasses.is_dataclass(hint) or typing.is_typeddict(hint))


def is_container_type(hint: Any) -> bool:
    """Whether values of `hint` are a list, tuple, set or dict: structured output too, when
    a schema describes them (never `None`, which is an empty result, nor a `str`, which is
    text). MCP 2026-07-28 takes any JSON value as structured output; a 2025-11-25 client is
    sent the objects only, and reads the rest from the text."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        return is_container_type(typing.get_args(hint)[0])
    return origin in (list, tuple, set, frozenset, dict, Sequence) or hint in (list, tuple, set, frozenset, dict)

