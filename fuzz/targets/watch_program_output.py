"""The host's reading of what the watch program in a sandbox prints (sandbox/operations/file_watch.py):
its output cut into lines (LineSplitter, as it arrives in chunks) and each line read as an
event (parsed).

The lines are the sandbox's to write. A line that is not an event is dropped (None); an event
has exactly the shape the watch stream promises its clients. The first byte of the input says
where the output is cut into chunks, as the engine's reads could cut it.
"""

from __future__ import annotations

from typing import Any

from jupyter_sandbox.sandbox.operations.file_watch import (
    ENTRY_FIELDS,
    ENTRY_TYPES,
    MAX_LINE,
    LineSplitter,
    parsed,
)

MAX_LEN = 16384


def fuzz_one_input(data: bytes) -> None:
    if not data:
        return
    # At most 64 chunks: feeding byte by byte finds nothing more and makes each input slow.
    output = data[1:]
    step = max(data[0] + 1, len(output) // 64)
    splitter = LineSplitter()
    lines: list[bytes] = []
    for start in range(0, len(output), step):
        lines += splitter.feed(output[start : start + step])
    for line in lines:
        assert len(line) <= MAX_LINE, len(line)
        assert b"\n" not in line
        event = parsed(line)
        if event is not None:
            _check(*event)


def _check(name: str, fields: dict[str, Any]) -> None:
    assert isinstance(fields.get("path"), str), fields
    if name == "ready":
        assert set(fields) == {"path"}, fields
        return
    assert name == "change", name
    assert set(fields) == {"type", "path", "entry"}, fields
    if fields["type"] == "removed":
        assert fields["entry"] is None, fields
        return
    assert fields["type"] in ("created", "modified"), fields
    entry = fields["entry"]
    assert set(entry) == set(ENTRY_FIELDS), entry
    assert entry["type"] in ENTRY_TYPES, entry
    for field, kind in ENTRY_FIELDS.items():
        assert type(entry[field]) is kind, (field, entry)
