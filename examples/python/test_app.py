"""Native tests of the Python example's locks (no Wasm needed): `cargo xtask test` runs
them with `python -m pytest` in this folder, the SDK on `PYTHONPATH`."""

import json
import os

import pytest

import app
from cordon_guest import ToolError
from cordon_guest.testing import TestHost

STOP_POINTS = 3
"""How many stop points taking a lock passes."""


class Stopped(BaseException):
    """The test's stand-in for the host's hard stop: nothing after it runs."""


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(app, "LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def take(monkeypatch, name: str, stop):
    """Take lock `name`, stopped at stop point `stop` (None: not stopped)."""
    passed = 0

    def stop_point() -> None:
        nonlocal passed
        if passed == stop:
            raise Stopped
        passed += 1

    monkeypatch.setattr(app, "stop_point", stop_point)
    try:
        return app.Lock(name).__enter__()
    finally:
        monkeypatch.setattr(app, "stop_point", lambda: None)


def test_cleanup_undoes_a_stop_anywhere_in_taking_a_lock_and_never_releases_another_call_s(
    lock_dir, monkeypatch
):
    with TestHost() as host:

        def locks() -> list:
            return json.loads(host.call("locks").text)

        def clean_up() -> None:
            host.cleanup("reindex", {"collection": "books"})

        # Stopped at each point while taking a free lock, or while holding it (the `with`
        # block never exits): the cleanup handler leaves nothing behind.
        for stop in range(STOP_POINTS):
            with pytest.raises(Stopped):
                take(monkeypatch, "books", stop)
            clean_up()
            assert (locks(), os.listdir(lock_dir)) == ([], []), f"stopped at point {stop}"
        take(monkeypatch, "books", None)
        clean_up()
        assert (locks(), os.listdir(lock_dir)) == ([], []), "stopped holding the lock"
        # Those stopped after the link (the last point, and holding) released it.
        released = len(host.logs)
        assert released == 2

        # Another call holds it: a call stopped anywhere trying to take it, or refused, does
        # not release it in its cleanup.
        other = take(monkeypatch, "books", None)
        for stop in range(STOP_POINTS):
            with pytest.raises(Stopped):
                take(monkeypatch, "books", stop)
            clean_up()
            assert (locks(), len(os.listdir(lock_dir))) == (["books"], 1), f"stopped at point {stop}"
        with pytest.raises(ToolError, match="books is locked by another call"):
            take(monkeypatch, "books", None)
        assert host.note == b"", "a refused call leaves no note"
        clean_up()
        assert locks() == ["books"]
        assert len(host.logs) == released, "no cleanup above said it released a lock"
        other.__exit__(None, None, None)
        assert (locks(), os.listdir(lock_dir)) == ([], [])
