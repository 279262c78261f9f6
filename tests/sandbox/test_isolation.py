"""What code inside a sandbox can see and do, on both runtimes (docs/explanation/design.md, "Isolation defaults").
Attacks (fork and memory bombs among them) are in tests/security/.

Every probe runs as user code in the sandbox's kernel, reached with plain jupyter_client.
The probes that only look (no file written, no process left, no state changed: a write they
try is one the sandbox refuses) share one sandbox per runtime (``probed``), since nothing one
does can change what another sees; the rest get a sandbox each.
"""

from __future__ import annotations

import io
import os
import platform
import tarfile
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from jupyter_sandbox.protocol.errors import SandboxConflictError, SandboxError
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.conftest import (
    BOTH_RUNTIMES,
    purpose_label,
    scratch_manager,
)
from tests.kernel_client import answers, output_of

pytestmark = pytest.mark.integration
# The probes of the shared sandbox run in the loop of its manager.
SHARED = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module", params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """Module-scoped here: one shared sandbox per runtime."""
    return str(request.param)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def probe_manager() -> AsyncIterator[SandboxManager]:
    async with scratch_manager() as manager:
        yield manager


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def probed(probe_manager: SandboxManager, runtime: str) -> AsyncIterator[Sandbox]:
    """The sandbox the probes that only look share."""
    sandbox = await probe_manager.create(
        "alice", runtime=runtime, purpose=purpose_label(f"{__name__}[{runtime}]")
    )
    try:
        yield sandbox
    finally:
        await probe_manager.remove("alice", sandbox.sandbox_id)


async def run(sandbox: Sandbox, code: str) -> str:
    return await output_of(sandbox.connection_info, code)


@SHARED
async def test_code_runs_in_the_kernel(probed: Sandbox) -> None:
    assert await run(probed, "print(6 * 7)") == "42"
    assert probed.kernel_info["language_info"]["name"] == "python"


@SHARED
async def test_kernel_is_not_root(probed: Sandbox, probe_manager: SandboxManager) -> None:
    uid, gid = (await run(probed, "import os; print(os.geteuid(), os.getegid())")).split()
    assert int(uid) != 0
    assert int(gid) != 0
    assert int(uid) == probe_manager.settings.effective_uid


@SHARED
async def test_no_capabilities(probed: Sandbox) -> None:
    status = await run(probed, "print(open('/proc/self/status').read())")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapPrm"], 16) == 0


@SHARED
async def test_no_new_privileges(probed: Sandbox) -> None:
    # PR_GET_NO_NEW_PRIVS = 39; gVisor has no NoNewPrivs line in /proc/self/status.
    out = await run(probed, "import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))")
    assert out == "1"


@SHARED
async def test_root_filesystem_is_read_only(probed: Sandbox) -> None:
    out = await run(
        probed,
        "for line in open('/proc/self/mountinfo'):\n"
        "    f = line.split()\n"
        "    if f[4] == '/': print(f[5])\n",
    )
    assert "ro" in out.split(",")
    err = await run(
        probed,
        "try:\n    open('/etc/written-by-sandbox', 'w')\nexcept OSError as e:\n    print(e.errno)",
    )
    assert int(err) in (13, 30)  # EACCES or EROFS: either way nothing is written


@SHARED
async def test_only_loopback_interface(probed: Sandbox) -> None:
    out = await run(
        probed,
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))",
    )
    assert out == "['lo']"


async def test_workspace_is_writable_and_capped(sandbox: Sandbox) -> None:
    out = await run(
        sandbox,
        "import os\n"
        "open('probe.txt', 'w').write('hello')\n"
        "s = os.statvfs('/workspace')\n"
        "print(os.getcwd(), open('/workspace/probe.txt').read(), s.f_blocks * s.f_frsize)",
    )
    cwd, content, size = out.split()
    assert (cwd, content) == ("/workspace", "hello")
    assert abs(int(size) - sandbox.limits.workspace_bytes) <= sandbox.limits.workspace_bytes * 0.05


@SHARED
async def test_runs_on_the_expected_kernel(probed: Sandbox) -> None:
    release = await run(probed, "import os; print(os.uname().release)")
    kernel_log = await run(
        probed,
        "import subprocess\n"
        "print(subprocess.run(['dmesg'], capture_output=True, text=True).stdout[:400])",
    )
    if probed.info.runtime == "runsc":
        assert "gVisor" in kernel_log
        assert release != platform.release()
    else:
        assert release == platform.release()
        assert "gVisor" not in kernel_log


async def test_host_environment_is_not_passed_in(
    manager: SandboxManager, runtime: str, purpose: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "host-secret-" + os.urandom(8).hex()
    monkeypatch.setenv("JUPYTER_TOKEN", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    sandbox = await manager.create("alice", runtime=runtime, purpose=purpose)
    env = await run(
        sandbox,
        "import os\n"
        "print(repr(dict(os.environ)))\n"
        "print(open('/proc/1/environ', 'rb').read() if os.access('/proc/1/environ', os.R_OK) else '')",
    )
    assert secret not in env
    assert "JUPYTER_TOKEN" not in env
    assert "'HOME': '/workspace'" in env


async def test_pause_freezes_and_resume_thaws(sandbox: Sandbox, manager: SandboxManager) -> None:
    await manager.pause("alice", sandbox.sandbox_id)
    assert (await manager.get("alice", sandbox.sandbox_id)).status == "paused"
    assert not await answers(sandbox.connection_info, timeout=1)
    # A command for a paused sandbox is a conflict (409 over REST), not an engine failure.
    with pytest.raises(SandboxConflictError, match="is paused"):
        await manager.exec("alice", sandbox.sandbox_id, ["true"])
    await manager.resume("alice", sandbox.sandbox_id)
    assert await answers(sandbox.connection_info, timeout=10)


async def test_archive_round_trip_through_the_workspace(
    sandbox: Sandbox, manager: SandboxManager
) -> None:
    payload = io.BytesIO()
    with tarfile.open(fileobj=payload, mode="w") as tar:
        for name, data in (("notes.txt", b"hello"), ("data/blob.bin", bytes(range(256)) * 64)):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    await manager.backend.put_archive(sandbox.sandbox_id, "/workspace", payload.getvalue())
    assert await run(sandbox, "print(open('notes.txt').read())") == "hello"
    out = await manager.backend.get_archive(sandbox.sandbox_id, "/workspace", max_bytes=10**6)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        blob = tar.extractfile("./data/blob.bin")
        assert blob is not None
        assert blob.read() == bytes(range(256)) * 64
    with pytest.raises(SandboxError, match="exceeds 1000 bytes"):
        await manager.backend.get_archive(sandbox.sandbox_id, "/workspace", max_bytes=1000)


@SHARED
async def test_exec_of_a_missing_program_says_so(
    probed: Sandbox, probe_manager: SandboxManager
) -> None:
    result = await probe_manager.exec(
        "alice", probed.sandbox_id, ["no-such-program", "-x"], ExecOptions(timeout=10)
    )
    assert result.exit_code == 126
    assert not result.timed_out
    assert b"'no-such-program' could not be started in the sandbox" in result.stderr


async def test_exec_timeout_kills_the_command(sandbox: Sandbox, manager: SandboxManager) -> None:
    result = await manager.exec(
        "alice", sandbox.sandbox_id, ["sleep", "100"], ExecOptions(timeout=1)
    )
    assert result.timed_out
    # The image has no ps: read the process names off /proc.
    listing = "import glob; print([open(p).read().strip() for p in glob.glob('/proc/[0-9]*/comm')])"
    ps = await manager.exec(
        "alice", sandbox.sandbox_id, ["python", "-c", listing], ExecOptions(timeout=10)
    )
    assert b"python" in ps.stdout
    assert b"sleep" not in ps.stdout
