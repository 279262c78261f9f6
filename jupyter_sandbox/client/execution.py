"""Python run in a sandbox's live interpreter: ``POST /api/sandboxes/{id}/execute``, whose
answer (``CodeResult`` in openapi.yaml) becomes an :class:`Execution`.

:meth:`Sandbox.run_code <jupyter_sandbox.client.Sandbox.run_code>` calls :func:`run_code`. With
a callback, the run is streamed (``"stream": true``): each piece of output goes to its callback
as it comes and is also gathered here by the rules the server gathers a plain answer with
(protocol/cell_output.py: ``clear_output`` clears, ``update_display_data`` replaces in place),
so the Execution is the same either way. An exception the code raised is data (``error``, ``status`` "error"), as in a
notebook; :meth:`Execution.raise_for_error` turns it into :class:`CodeFailedError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jupyter_sandbox.client.errors import error_from_answer
from jupyter_sandbox.client.transport import Transport
from jupyter_sandbox.protocol.cell_output import CellOutput

TextCallback = Callable[[str], None]
# Receives the display event whole: type (display_data, execute_result or
# update_display_data), data (the MIME bundle), metadata, transient.
DisplayCallback = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class CodeError:
    """The exception the code raised: its class name, its value and IPython's traceback, its
    lines as plain text."""

    ename: str
    evalue: str
    traceback: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.ename}: {self.evalue}"


@dataclass
class Execution:
    """How a run ended, as the API answered it: the kernel's ``status`` ("ok", "error",
    "aborted"), its ``execution_count``, what the code printed (``stdout``, ``stderr``) and
    displayed (``outputs``: MIME bundles, ``execute_result`` for the last expression), the
    exception (``error``), whether it ran past its timeout (``timed_out``; ``still_running`` if
    it ignored the interrupt), and the seconds it took (``duration``) of which it waited for
    code ahead of it (``queued``)."""

    status: str
    execution_count: int | None
    stdout: str
    stderr: str
    outputs: list[dict[str, Any]]
    error: CodeError | None
    timed_out: bool
    still_running: bool
    duration: float
    queued: float

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> Execution:
        """The Execution of a CodeResult (a plain answer, or a stream's result event)."""
        error = answer.get("error")
        return cls(
            status=answer["status"],
            execution_count=answer.get("execution_count"),
            stdout=answer.get("stdout", ""),
            stderr=answer.get("stderr", ""),
            outputs=list(answer.get("outputs", [])),
            error=None if error is None else CodeError(**error),
            timed_out=bool(answer.get("timed_out")),
            still_running=bool(answer.get("still_running")),
            duration=float(answer.get("duration", 0.0)),
            queued=float(answer.get("queued", 0.0)),
        )

    @property
    def ok(self) -> bool:
        """The code ran to its end without raising."""
        return self.status == "ok"

    @property
    def text(self) -> str | None:
        """The text/plain of the last expression's value (``execute_result``), as ``Out[N]``
        shows it; None when the code ended on a statement or raised."""
        for output in self.outputs:
            if output.get("type") == "execute_result":
                text = output.get("data", {}).get("text/plain")
                return text if isinstance(text, str) else None
        return None

    def raise_for_error(self) -> Execution:
        """Raise :class:`CodeFailedError` unless the code ran to its end without raising;
        this Execution otherwise (``sandbox.run_code(code).raise_for_error().text``)."""
        if not self.ok:
            raise CodeFailedError(self)
        return self


class CodeFailedError(Exception):
    """The code raised, ran past its timeout, or was aborted: raised by
    :meth:`Execution.raise_for_error`, never by ``run_code`` itself. ``execution`` is the run,
    ``error`` its exception (None for an aborted run)."""

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        self.error = execution.error
        super().__init__(_why(execution))


def _why(execution: Execution) -> str:
    error = execution.error
    if execution.still_running:
        return (
            f"the code ran past its timeout and ignored the interrupt ({error}); it still runs "
            "in the interpreter and later runs wait for it: restart the interpreter "
            "(sandbox.restart()) to end it"
        )
    if execution.timed_out:
        return f"the code ran past its timeout and was interrupted ({error}); state is kept"
    if error is None:
        return f"the run ended with status {execution.status!r} without running to its end"
    last = error.traceback[-1] if error.traceback else str(error)
    return f"the code raised {error} (its traceback ends: {last})"


def run_code(
    transport: Transport,
    sandbox_id: str,
    code: str,
    timeout: float,
    on_stdout: TextCallback | None = None,
    on_stderr: TextCallback | None = None,
    on_display: DisplayCallback | None = None,
) -> Execution:
    """Run ``code`` in the sandbox's interpreter to its end (see Sandbox.run_code). The HTTP
    wait allows the run's own ``timeout`` on top of the transport's, since the plain answer
    comes only when the code has ended."""
    body: dict[str, Any] = {"code": code, "timeout": timeout}
    wait = timeout + transport.timeout
    if on_stdout is None and on_stderr is None and on_display is None:
        return Execution.from_answer(
            transport.call("POST", "sandboxes", sandbox_id, "execute", body=body, timeout=wait)
        )
    callbacks: dict[str, Callable[[dict[str, Any]], None]] = {}
    if on_stdout is not None:
        callbacks["stdout"] = _text_of(on_stdout)
    if on_stderr is not None:
        callbacks["stderr"] = _text_of(on_stderr)
    if on_display is not None:
        callbacks["display"] = on_display
    shown = CellOutput()  # as the server gathers a plain answer's output
    events = transport.events(
        "sandboxes", sandbox_id, "execute", body={**body, "stream": True}, timeout=wait
    )
    # Closed however the loop ends: a callback that raises closes the connection, and the
    # server interrupts the code rather than run it on for nobody.
    with contextlib.closing(events):
        for event in events:
            if event.name == "result":
                return Execution.from_answer({**event.data, **shown.answer()})
            if event.name == "error":
                raise error_from_answer(None, event.data, f"the run in sandbox {sandbox_id}")
            shown.add(event.name, event.data)
            callback = callbacks.get(event.name)
            if callback is not None:
                callback(event.data)
    raise AssertionError("unreachable: Transport.events ends with a final event or raises")


def _text_of(callback: TextCallback) -> Callable[[dict[str, Any]], None]:
    return lambda data: callback(data.get("text", ""))
