"""Run tools natively, without Wasm, in a test host that records what they ask of Cordon.

    from cordon_guest.testing import TestHost
    import app  # the module that defines the tools

    def test_reindex_reports_progress():
        with TestHost() as host:
            result = host.call("reindex", {"collection": "books", "step_ms": 0})
        assert result.text == "Reindexed 120 documents in books"
        assert host.progress[-1] == (120, 120, "Indexed 120 of 120 documents")

    def test_a_cancelled_reindex_leaves_a_note_for_cleanup():
        with TestHost(cancel_after_progress=1) as host:
            with pytest.raises(Cancelled):
                host.call("reindex", {"collection": "books", "step_ms": 0})
            host.cleanup("reindex", {"collection": "books"}, reason="cancelled")

`call` checks the arguments against the tool's schema as far as Python types go (the
host checks the full JSON Schema); it returns the `CallResult` and raises `ToolError` (or
`Cancelled`) as the component would report them, a result the component could not send
(content that is not content, structured output that is not JSON) included.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import cordon_guest
from cordon_guest import _host


class TestHost:
    """A host for native tests: use it as a context manager around calls.

    Args:
        cancelled: Whether `cancelled()` is true from the start.
        cancel_after_progress: Turn `cancelled()` true after this many progress reports.
        time_left: Seconds `time_left()` reports (None: no limit).

    Attributes:
        progress: Every `(done, total, message)` reported, in order.
        logs: Every `(level, message)` logged, in order.
        note: The cleanup note as it stands (b"" when cleared or never set).
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self,
        *,
        cancelled: bool = False,
        cancel_after_progress: Optional[int] = None,
        time_left: Optional[float] = None,
    ) -> None:
        self.is_cancelled = cancelled
        self.cancel_after_progress = cancel_after_progress
        self.time_left: Optional[float] = time_left
        self.progress: list[tuple[float, Optional[float], Optional[str]]] = []
        self.logs: list[tuple[str, str]] = []
        self.note: bytes = b""
        self._previous: Any = None

    def __enter__(self) -> "TestHost":
        self._previous = _host.current
        _host.current = self
        return self

    def __exit__(self, *_: Any) -> None:
        _host.current = self._previous

    def cancel(self) -> None:
        """Make `cancelled()` true from now on, as a client's cancel would."""
        self.is_cancelled = True

    def call(self, tool: str, arguments: Optional[dict[str, Any]] = None) -> cordon_guest.CallResult:
        """Call `tool` with `arguments`, as the host would."""
        # The host sends JSON, which has no NaN or Infinity.
        result = cordon_guest._call(tool, json.dumps(arguments or {}, allow_nan=False))
        # Encoded as the component does, so a result it could not send fails here too.
        cordon_guest._encoded(tool, result)
        return result

    def cleanup(
        self,
        tool: str,
        arguments: Optional[dict[str, Any]] = None,
        *,
        reason: str = "cancelled",
        note: Optional[bytes] = None,
        call_id: str = "test",
    ) -> None:
        """Run the cleanup handler as the host would after a stopped call of `tool`; the note
        is the one the call left (`self.note`) unless given."""
        if reason not in cordon_guest.STOP_REASONS:
            raise ValueError(f"reason {reason!r} is not one of {', '.join(cordon_guest.STOP_REASONS)}")
        left = self.note if note is None else note
        context = cordon_guest.CleanupContext(
            call_id=call_id,
            tool=tool,
            arguments=arguments or {},
            reason=reason,
            note=left or None,
        )
        cordon_guest._run_cleanup(context)

    @staticmethod
    def tools() -> list[dict[str, Any]]:
        """The tools as the host lists them: name, title, description, schemas, annotations
        and requirements, schemas parsed."""
        return [
            {
                "name": spec.name,
                "title": spec.title,
                "description": spec.description,
                "input_schema": json.loads(spec.input_schema),
                "output_schema": None if spec.output_schema is None else json.loads(spec.output_schema),
                "annotations": {key: value for key, value in spec.annotations.items() if value is not None},
                "requires": spec.requires,
            }
            for spec in cordon_guest._list()
        ]

    # The host interface (`cordon_guest._host.Host`).

    def report_progress(self, done: float, total: Optional[float], message: Optional[str]) -> None:
        self.progress.append((done, total, message))
        if self.cancel_after_progress is not None and len(self.progress) >= self.cancel_after_progress:
            self.is_cancelled = True

    def cancelled(self) -> bool:
        return self.is_cancelled

    def time_left_ms(self) -> Optional[int]:
        if self.is_cancelled:
            return 0
        return None if self.time_left is None else int(self.time_left * 1000)

    def set_cleanup_note(self, note: bytes) -> None:
        self.note = note

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))
