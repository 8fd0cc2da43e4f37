"""The SDK's own tests run natively, from the source tree (no install needed)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import cordon_guest  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_registry():
    """Each test defines its own tools: start from none and leave none behind."""
    cordon_guest._tools.clear()
    cordon_guest._cleanup = None
    yield
    cordon_guest._tools.clear()
    cordon_guest._cleanup = None
