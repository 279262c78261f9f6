"""Rows 6 and 9: memory bombs (heap and /dev/shm) and disk fills (/workspace, /tmp and the
host directories a sandbox writes to)."""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.host.size_caps import can_cap
from jupyter_sandbox.sandbox.limits import parse_size
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.kernel_client import execute
from tests.security.conftest import assert_unaffected, errno_name, run

pytestmark = pytest.mark.integration


@pytest.mark.checklist(
    row=6,
    attack="memory bomb: 1 GiB in a 256 MiB sandbox, and a /dev/shm fill",
    expected="the sandbox is OOM-killed inside its own limit and the death is named; no swap; "
    "/dev/shm is bounded; the host and other sandboxes are unaffected",
)
async def test_row06_memory_bomb(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    neighbour: Sandbox,
    observe: Callable[[str], None],
) -> None:
    hog = await manager.create("alice", runtime=runtime, limits={"memory": "256m"}, purpose=purpose)
    inspected = manager.backend.engine.client.api.inspect_container(  # type: ignore[attr-defined]
        f"jupyter-sandbox-{hog.sandbox_id}"
    )["HostConfig"]
    assert inspected["MemorySwap"] == inspected["Memory"] == parse_size("256m", "memory")  # no swap
    shm = await run(
        hog,
        "import os\nwritten = 0\n"
        "try:\n"
        "    with open('/dev/shm/fill', 'wb') as f:\n"
        "        while written < 512 * 2**20:\n"
        "            f.write(b'x' * 2**20); written += 2**20\n"
        "        f.flush()\n"
        "except OSError as e:\n    print(e.errno, written)\nelse:\n    print('unbounded', written)\n"
        "os.unlink('/dev/shm/fill')",
    )
    assert errno_name(shm.split()[0]) == "ENOSPC", shm
    cell = asyncio.ensure_future(
        execute(hog.connection_info, "b = bytearray(1024**3); b[::4096] = b'x' * (1024**3 // 4096)")
    )
    try:
        cause = await _death_of(manager, hog)
    finally:
        cell.cancel()
    assert "more memory than its limit" in cause
    await assert_unaffected(neighbour)
    observe(
        f"/dev/shm full (ENOSPC) after {int(shm.split()[1]) >> 20} MiB; heap bomb ended the sandbox "
        f"({cause}); MemorySwap = Memory; neighbour answers"
    )


async def _death_of(manager: SandboxManager, sandbox: Sandbox, timeout: float = 90) -> str:
    for _ in range(int(timeout * 2)):
        info = await manager.get("alice", sandbox.sandbox_id)
        if not info.running:
            return info.death_cause()
        await asyncio.sleep(0.5)
    pytest.fail(f"the memory bomb was not stopped within {timeout} s")


DISK_FILL = """
import os
def fill(path, cap):
    written = 0
    try:
        with open(path, 'wb') as f:
            while written < cap:
                f.write(b'\\0' * 2**20); written += 2**20
            f.flush()
    except OSError as e:
        return e.errno, written
    finally:
        os.unlink(path)
    return 'unbounded', written
print({'workspace': fill('/workspace/fill', 3 * 2**30), 'tmp': fill('/tmp/fill', 3 * 2**30)})
"""


@pytest.mark.checklist(
    row=9,
    attack="disk fill of /workspace and /tmp (dd if=/dev/zero)",
    expected="ENOSPC at the sandbox's own caps; the host disk is untouched; space is usable "
    "again once freed",
)
async def test_row09_disk_fill(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    neighbour: Sandbox,
    observe: Callable[[str], None],
) -> None:
    sandbox = await manager.create(
        "alice",
        runtime=runtime,
        limits={"workspace_size": "256m", "tmp_size": "256m", "memory": "1g"},
        purpose=purpose,
    )
    host_free = shutil.disk_usage("/var/lib/docker").free
    seen = ast.literal_eval(await run(sandbox, DISK_FILL, timeout=180))
    for where, (result, written) in seen.items():
        assert errno_name(result) == "ENOSPC", (where, seen)
        assert written <= 300 * 2**20, (where, seen)  # the 256 MiB caps, not the host's disk
    # Memory-backed: the host's disk did not take the writes (allow for others' activity).
    assert host_free - shutil.disk_usage("/var/lib/docker").free < 200 * 2**20
    assert await run(sandbox, "open('/workspace/after', 'w').write('ok'); print('ok')") == "ok"
    await assert_unaffected(neighbour)
    observe(
        f"/workspace full after {seen['workspace'][1] >> 20} MiB, /tmp after "
        f"{seen['tmp'][1] >> 20} MiB (ENOSPC); host disk unchanged; writable again once freed"
    )


HOST_DIRECTORY_FILL = DISK_FILL.replace("'tmp': fill('/tmp/fill'", "'io': fill('/run/sandbox/fill'")


@pytest.mark.skipif(not can_cap(), reason="capping the host's directories needs root")
@pytest.mark.checklist(
    row=9,
    attack="disk fill of the two host directories a sandbox writes to: a copy-on-write "
    "/workspace (the notebook's directory) and /run/sandbox (its kernel's socket directory)",
    expected="ENOSPC at the workspace size and at io_size; the state directory's disk is "
    "untouched; the notebook's directory is unchanged",
)
async def test_row09_disk_fill_of_the_host_directories(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    neighbour: Sandbox,
    observe: Callable[[str], None],
    tmp_path: Path,
) -> None:
    (tmp_path / "data.csv").write_text("a,b\n1,2\n")
    manager.settings.io_size = "128m"
    sandbox = await manager.create(
        "alice",
        runtime=runtime,
        limits={"workspace_size": "256m", "memory": "1g"},
        launch_dir=str(tmp_path),
        purpose=purpose,
    )
    host_free = shutil.disk_usage(manager.settings.state_path).free
    seen = ast.literal_eval(await run(sandbox, HOST_DIRECTORY_FILL, timeout=180))
    assert errno_name(seen["workspace"][0]) == "ENOSPC", seen
    assert seen["workspace"][1] <= 256 * 2**20, seen
    assert errno_name(seen["io"][0]) == "ENOSPC", seen
    assert seen["io"][1] <= 128 * 2**20, seen
    assert host_free - shutil.disk_usage(manager.settings.state_path).free < 200 * 2**20
    assert os.listdir(tmp_path) == ["data.csv"]  # copy-on-write: nothing reached it
    assert await run(sandbox, "print(open('/workspace/data.csv').read().split()[1])") == "1,2"
    await assert_unaffected(neighbour)
    observe(
        f"copy-on-write /workspace full after {seen['workspace'][1] >> 20} MiB, /run/sandbox "
        f"after {seen['io'][1] >> 20} MiB (ENOSPC, tmpfs caps); the state directory's disk and "
        "the notebook's directory unchanged"
    )
