"""Native tests of __NAME__'s tools: run them with `python -m pytest` (no Wasm needed)."""

import pytest

import app  # noqa: F401 - defines the tools
from cordon_guest import Cancelled
from cordon_guest.testing import TestHost


def test_the_tools_are_listed_with_their_schemas():
    tools = {entry["name"]: entry for entry in TestHost.tools()}
    assert set(tools) == {"echo", "import_items"}
    assert tools["import_items"]["input_schema"]["required"] == ["batch"]


def test_import_reports_progress_and_leaves_nothing_to_undo():
    with TestHost() as host:
        result = host.call("import_items", {"batch": "b1", "count": 3, "step_ms": 0})
    assert result.text == "Imported 3 items from b1"
    assert host.progress[-1] == (3, 3, "Imported 3 of 3 items")
    assert host.note == b""


def test_a_cancelled_import_is_rolled_back():
    with TestHost(cancel_after_progress=1) as host:
        with pytest.raises(Cancelled):
            host.call("import_items", {"batch": "b2", "step_ms": 0})
        assert host.note == b"b2"
        host.cleanup("import_items", {"batch": "b2"}, reason="cancelled")
    assert host.logs == [("warn", "import_items stopped (cancelled): rolling back batch b2")]
