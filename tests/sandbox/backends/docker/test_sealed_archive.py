"""The sealed archive (sandbox/backends/docker/sealed_archive.py) past its time limit: the
snapshot fails, and the sandbox is left as it was: no archiver left running as uid 0 (runsc:
the killer reaches it), not left frozen (runc: thawed whatever happened)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import SnapshotFailedError
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.sandbox.snapshots.workspace_files import OWNER, sh

pytestmark = pytest.mark.integration

# Every process of the sandbox whose program is one the sealed archiver runs.
ARCHIVERS = r"""
import json, os
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
        except OSError:
            continue
        if argv0 in (b"/bin/tar", b"/usr/bin/setpriv", b"/usr/bin/env"):
            found.append(argv0.decode())
print(json.dumps(found))
"""


async def test_a_sealed_archive_past_its_time_limit_leaves_nothing_behind(
    manager: SandboxManager, runtime: str, purpose: str, tmp_path: Path
) -> None:
    snapshots = manager.snapshots
    snapshots.snapshot_dir = str(tmp_path / "snapshots")
    # runsc: 150 MiB take seconds to archive in gVisor, past a tenth of a second, so the killer
    # must reach a running archiver. runc: the host reads a tmpfs so fast that a tenth of a
    # second can be enough (a full CI run saw it finish), so the walk starts past its limit:
    # what is tested there is the thaw, whatever happened.
    snapshots.timeout = 0.1 if runtime == "runsc" else 0.000_001
    sandbox = await manager.create(
        OWNER, runtime=runtime, purpose=purpose, limits={"workspace_size": "400m"}
    )
    await sh(manager, sandbox.sandbox_id, "head -c 150M /dev/urandom > /workspace/big.bin")
    assert manager.backend.why_not_sealed(runtime) == ""  # the sealed archive is what is timed
    with pytest.raises(SnapshotFailedError, match="longer than"):
        await snapshots.persist(OWNER, sandbox.sandbox_id)
    assert (await manager.get(OWNER, sandbox.sandbox_id)).running  # not left paused
    assert json.loads(await sh(manager, sandbox.sandbox_id, f"python3 -I -c '{ARCHIVERS}'")) == []
    assert snapshots.list_snapshots(OWNER) == []
