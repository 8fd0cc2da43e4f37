"""Type hints to JSON Schema, one hint kind at a time, and arguments back into the types."""

import dataclasses
import enum
from typing import Annotated, Any, List, Literal, NotRequired, Optional, Sequence, TypedDict, Union

import pytest

from cordon_guest._schema import SchemaError, from_json, function_schema, type_schema


def schema_of(function):
    return function_schema(function)[0]


@pytest.mark.parametrize(
    "hint, expected",
    [
        (str, {"type": "string"}),
        (int, {"type": "integer"}),
        (float, {"type": "number"}),
        (bool, {"type": "boolean"}),
        (type(None), {"type": "null"}),
        (Any, {}),
    ],
)
def test_scalars(hint, expected):
    assert type_schema(hint) == expected


def test_lists_sets_and_tuples():
    assert type_schema(list[int]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(List[str]) == {"type": "array", "items": {"type": "string"}}
    assert type_schema(Sequence[float]) == {"type": "array", "items": {"type": "number"}}
    assert type_schema(list) == {"type": "array"}
    assert type_schema(set[str]) == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert type_schema(tuple[int, ...]) == {"type": "array", "items": {"type": "integer"}}
    assert type_schema(tuple[str, int]) == {
        "type": "array",
        "prefixItems": [{"type": "string"}, {"type": "integer"}],
        "minItems": 2,
        "maxItems": 2,
    }


def test_dicts_have_string_keys():
    assert type_schema(dict[str, int]) == {"type": "object", "additionalProperties": {"type": "integer"}}
    with pytest.raises(SchemaError, match="keys are strings"):
        type_schema(dict[int, int])


def test_optional_and_unions():
    assert type_schema(Optional[str]) == {"type": ["string", "null"]}
    assert type_schema(int | None) == {"type": ["integer", "null"]}
    assert type_schema(Union[int, list[str]]) == {
        "anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"}}]
    }


def test_literals_and_enums():
    assert type_schema(Literal["fast", "slow"]) == {"enum": ["fast", "slow"], "type": "string"}
    assert type_schema(Literal[1, "one"]) == {"enum": [1, "one"]}

    class Color(enum.Enum):
        """A primary color."""

        RED = "red"
        BLUE = "blue"

    class Level(enum.IntEnum):
        LOW = 1
        HIGH = 2

    assert type_schema(Color) == {"enum": ["red", "blue"], "type": "string", "description": "A primary color."}
    assert type_schema(Level) == {"enum": [1, 2], "type": "integer"}


@dataclasses.dataclass
class Point:
    """A point on the plane.

    Attributes:
        x: Across.
        y: Up, from the bottom
            edge.
    """

    x: float
    y: float = 0.0
    tags: list[str] = dataclasses.field(default_factory=list)


class Filters(TypedDict):
    """What to keep."""

    kind: Annotated[str, "The kind of thing."]
    limit: NotRequired[int]


def test_dataclasses_with_defaults_and_attribute_docs():
    assert type_schema(Point) == {
        "type": "object",
        "description": "A point on the plane.",
        "properties": {
            "x": {"type": "number", "description": "Across."},
            "y": {"type": "number", "description": "Up, from the bottom edge.", "default": 0.0},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        },
        "required": ["x"],
    }


def test_typed_dicts_with_not_required_keys():
    assert type_schema(Filters) == {
        "type": "object",
        "description": "What to keep.",
        "properties": {
            "kind": {"type": "string", "description": "The kind of thing."},
            "limit": {"type": "integer"},
        },
        "required": ["kind"],
    }


def test_a_dataclass_without_a_docstring_has_no_made_up_description():
    @dataclasses.dataclass
    class Bare:
        a: int

    assert "description" not in type_schema(Bare)


@dataclasses.dataclass
class Node:
    children: list["Node"]


def test_recursive_classes_are_refused_by_name():
    with pytest.raises(SchemaError, match="Node refers to itself"):
        type_schema(Node)


def test_a_type_without_a_schema_is_refused_naming_the_parameter():
    def tool(when: bytes) -> str:
        """Doc."""

    with pytest.raises(SchemaError, match="parameter when: bytes has no JSON Schema"):
        function_schema(tool)


def test_function_parameters_defaults_and_docstring():
    def search(query: str, limit: int = 10, mode: Literal["any", "all"] = "any", near: Optional[Point] = None):
        """Searches the catalogue.

        Longer text, on two
        lines.

        Args:
            query: What to look for.
            limit (int): At most this many
                results.

        Returns:
            Matches.
        """

    schema, parameters, description = function_schema(search)
    assert description == "Searches the catalogue.\n\nLonger text, on two lines."
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string", "description": "What to look for."}
    assert schema["properties"]["limit"] == {"type": "integer", "description": "At most this many results.", "default": 10}
    assert schema["properties"]["mode"] == {"enum": ["any", "all"], "type": "string", "default": "any"}
    assert schema["properties"]["near"]["anyOf"][1] == {"type": "null"}
    assert schema["properties"]["near"]["default"] is None
    assert [(p.name, p.required) for p in parameters] == [("query", True), ("limit", False), ("mode", False), ("near", False)]


def test_annotated_text_wins_over_the_docstring():
    def tool(text: Annotated[str, "From Annotated."]):
        """Doc.

        Args:
            text: From the docstring.
        """

    assert schema_of(tool)["properties"]["text"]["description"] == "From Annotated."


def test_a_tool_without_parameters_has_an_empty_object_schema():
    def tool():
        """Doc."""

    assert schema_of(tool) == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    "signature, problem",
    [
        ("def tool(*values: int): pass", "name every parameter"),
        ("def tool(**values: int): pass", "name every parameter"),
        ("def tool(value: int, /): pass", "positional-only"),
        ("def tool(value): pass", "has no type hint"),
        ("def tool(value: 'Missing'): pass", "cannot be read"),
    ],
)
def test_parameters_the_schema_cannot_describe_are_refused(signature, problem):
    namespace = {}
    exec(signature, namespace)
    with pytest.raises(SchemaError, match=problem):
        function_schema(namespace["tool"])


@dataclasses.dataclass
class Limit:
    ceiling: float = float("inf")


class Level(enum.Enum):
    UNSET = float("nan")


@pytest.mark.parametrize(
    "signature, problem",
    [
        ("def tool(x: float = float('inf')): pass", r"parameter x: its default is not JSON: inf is not JSON \(it has no NaN or Infinity\)"),
        ("def tool(x: list[float] = [1.0, float('nan')]): pass", "parameter x: its default is not JSON: nan"),
        ("def tool(x: float = -float('inf')): pass", "-inf is not JSON"),
        ("def tool(x: Limit): pass", "field Limit.ceiling: its default is not JSON: inf"),
        ("def tool(x: Level): pass", "the value nan is not JSON"),
        ("def tool(x: object = object()): pass", "parameter x: its default is not JSON: a object is not JSON"),
    ],
)
def test_defaults_and_values_json_cannot_hold_are_refused(signature, problem):
    # `json.dumps` would write them as NaN or Infinity, and the host refuses such a schema.
    namespace = {"Limit": Limit, "Level": Level}
    exec(signature, namespace)
    with pytest.raises(SchemaError, match=problem):
        function_schema(namespace["tool"])


class Mode(enum.Enum):
    FAST = "fast"


@pytest.mark.parametrize(
    "hint, value, expected",
    [
        (int, 3, 3),
        (int, 3.0, 3),
        (float, 2, 2.0),
        (Optional[int], None, None),
        (Literal["a", "b"], "b", "b"),
        (Mode, "fast", Mode.FAST),
        (list[Mode], ["fast"], [Mode.FAST]),
        (tuple[str, int], ["a", 1], ("a", 1)),
        (set[int], [1, 2], {1, 2}),
        (dict[str, Mode], {"k": "fast"}, {"k": Mode.FAST}),
        (Point, {"x": 1, "ignored": True}, Point(1.0)),
        (Filters, {"kind": "k", "other": 1}, {"kind": "k"}),
        (Union[int, str], "s", "s"),
        (Annotated[int, "doc"], 4, 4),
    ],
)
def test_arguments_are_read_into_the_declared_types(hint, value, expected):
    assert from_json(hint, value, "arg") == expected


@pytest.mark.parametrize(
    "hint, value, problem",
    [
        (int, "3", "arg: expected an integer, got a string"),
        (int, True, "expected an integer, got a boolean"),
        (bool, 1, "expected a boolean"),
        (Point, {"y": 1}, "x"),
        (Mode, "slow", "expected one of"),
        (tuple[str, int], ["a"], "expected 2 items"),
        (list[int], [1, "x"], r"arg\[1\]: expected an integer"),
    ],
)
def test_arguments_of_the_wrong_type_are_refused_by_path(hint, value, problem):
    with pytest.raises(TypeError, match=problem):
        from_json(hint, value, "arg")
