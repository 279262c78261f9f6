"""A run's output as a notebook cell shows it at its end, built from the run's output events.

Two places gather a code run's output: the server, for a run answered whole (code_runs.py), and
the Python client, for a streamed run whose events it turns back into the same answer
(client/execution.py). Both apply JupyterLab's rules here, once: ``clear_output`` clears what was
shown (with ``wait=True``, when the next output comes), and ``update_display_data`` replaces in
place each output of its display id. The module uses the standard library only, so the client
(itself stdlib-only) imports it without pulling in the server's packages.

The events are code_runs.py's: ``("stdout" | "stderr", {"text"})``, ``("display", {"type",
"data", "metadata", "transient"})`` and ``("clear", {"wait"})``; any other name is not output
(a later server may add events) and is ignored.
"""

from __future__ import annotations

import json
from typing import Any

OUTPUT_EVENTS = frozenset({"stdout", "stderr", "display", "clear"})


class CellOutput:
    """The output shown so far: ``stdout`` and ``stderr`` text, ``outputs`` (display MIME
    bundles in order), and ``size``, the bytes they hold (text, and display data as JSON), for
    a caller that caps them. An update counts only what it adds, so a display updated often (a
    progress bar) is counted once."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.outputs: list[dict[str, Any]] = []
        self.size = 0
        self._clear_on_next = False

    def add(self, name: str, data: dict[str, Any]) -> None:
        """Apply one event. A display is kept as a copy: an update changes the copy in place,
        never the dict the caller (or a callback it also gave the event to) holds."""
        if name not in OUTPUT_EVENTS:
            return
        if name == "clear":
            if data.get("wait"):  # clear_output(wait=True): cleared when the next output comes
                self._clear_on_next = True
            else:
                self._clear()
            return
        # An update changes what is shown in place: the pending clear waits for a new output
        # (as JupyterLab's output area does).
        if self._clear_on_next and data.get("type") != "update_display_data":
            self._clear_on_next = False
            self._clear()
        if name in ("stdout", "stderr"):
            getattr(self, name).append(data.get("text", ""))
            self.size += size_of(data)
        elif data.get("type") == "update_display_data":
            self._update(data)
        else:
            self.outputs.append(dict(data))
            self.size += size_of(data)

    def answer(self) -> dict[str, Any]:
        """The output fields of a code run's answer (CodeResult in openapi.yaml)."""
        return {
            "stdout": "".join(self.stdout),
            "stderr": "".join(self.stderr),
            "outputs": self.outputs,
        }

    def _update(self, data: dict[str, Any]) -> None:
        """Show ``data`` in place of each output of its display id; an update of nothing
        shown is ignored, as a notebook ignores it."""
        display_id = data.get("transient", {}).get("display_id")
        if not display_id:
            return
        for output in self.outputs:
            if output.get("transient", {}).get("display_id") == display_id:
                self.size += size_of(data) - size_of(output)
                output.update(data=data.get("data", {}), metadata=data.get("metadata", {}))

    def _clear(self) -> None:
        self.stdout, self.stderr, self.outputs, self.size = [], [], [], 0


def size_of(data: dict[str, Any]) -> int:
    """The bytes one event's output counts for: its text, or its display data as JSON."""
    if "text" in data:
        return len(data["text"])
    return len(json.dumps(data.get("data", {}))) if "data" in data else 0
