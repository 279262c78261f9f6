"""The host's reading of the kernel bridge's answer file (snapshots/kernel_bridge.py), which the
sandbox can overwrite with anything: what is not a strict, bounded JSON object is no answer yet."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.snapshots.kernel_bridge import MAX_ANSWER_BYTES, _read_answer


def _directory_answering(tmp_path: Path, answer: bytes) -> SandboxDirectory:
    directory = SandboxDirectory(tmp_path, "0123456789ab")
    directory.io.mkdir(parents=True)
    (directory.io / "bridge-state").write_bytes(answer)
    return directory


def test_an_answer_is_read(tmp_path: Path) -> None:
    directory = _directory_answering(tmp_path, b'{"id": "abc", "ok": true}')
    assert _read_answer(directory) == {"id": "abc", "ok": True}


@pytest.mark.parametrize(
    "answer",
    [
        b"[" * 60_000,  # json.loads raised RecursionError, out of the snapshot's wait
        b'{"id": "abc", "ok": NaN}',
        b'{"id": "abc", "ok": true' + b" " * MAX_ANSWER_BYTES + b"}",
        b"[]",
    ],
)
def test_an_answer_the_host_cannot_read_strictly_is_none(tmp_path: Path, answer: bytes) -> None:
    assert _read_answer(_directory_answering(tmp_path, answer)) == {}
