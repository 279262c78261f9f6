"""Rows 1, 5, 7, 8 and 11: processes, fork and thread bombs, runaway commands, daemons, FDs."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.security.conftest import assert_unaffected, errno_name, run

pytestmark = pytest.mark.integration

RUNC_EXEC_INIT = "runc:[2:INIT]"
LIST_PROCESSES = (
    "import glob\n"
    "print({int(p.split('/')[2]): open(p).read().strip() for p in glob.glob('/proc/[0-9]*/comm')})"
)

# Every process forks 12 times (4096 wanted); refusals are reported through a pipe. The bomb
# runs in its own session so that it can end itself, all of it, with killpg.
FORK_BOMB = """
import os, time
readable, writable = os.pipe()
top = os.getpid()
for _ in range(12):
    try:
        os.fork()
    except OSError as e:
        os.write(writable, bytes([e.errno]))
if os.getpid() != top:
    time.sleep(120)
    os._exit(0)
time.sleep(2)
os.set_blocking(readable, False)
seen = sorted(set(os.read(readable, 1 << 16)))
print(seen, sum(1 for p in os.listdir('/proc') if p.isdigit()), flush=True)
os.killpg(0, 9)
"""


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process on the host that sandbox code will try to signal."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield process
    process.kill()
    process.wait()


@pytest.mark.checklist(
    row=1,
    attack="ls /proc, ps, kill -9 of a host pid",
    expected="only the sandbox's processes are visible; host processes cannot be signalled",
)
async def test_row01_pid_namespace(
    sandbox: Sandbox, host_process: subprocess.Popen[bytes], observe: Callable[[str], None]
) -> None:
    visible = ast.literal_eval(await run(sandbox, LIST_PROCESSES))
    # runc's init of an exec the engine is starting in the sandbox (a fresh sandbox's network
    # forwarder, seen in CI) is in the sandbox's namespace until it becomes the exec's program:
    # the list is read again once that exec has started, and then checked as it stands.
    for _ in range(10):
        if RUNC_EXEC_INIT not in visible.values():
            break
        await asyncio.sleep(0.2)
        visible = ast.literal_eval(await run(sandbox, LIST_PROCESSES))
    assert set(visible.values()) <= {"docker-init", "python", "python3", "tini"}, visible
    assert max(visible) < 1000  # the sandbox's own pid numbering, not the host's
    outcome = await run(
        sandbox,
        f"import os\ntry:\n    os.kill({host_process.pid}, 9)\nexcept OSError as e:\n"
        "    print(e.errno)\nelse:\n    print('sent')",
    )
    assert outcome != "sent"
    assert host_process.poll() is None  # the host process lives on
    observe(
        f"{len(visible)} processes visible ({', '.join(sorted(set(visible.values())))}); "
        f"kill -9 of host pid {host_process.pid}: {errno_name(outcome)}; host process alive"
    )


@pytest.mark.checklist(
    row=5,
    attack="fork bomb",
    expected="fork fails with EAGAIN at the pids limit; the kernel, the host and other "
    "sandboxes stay responsive",
)
async def test_row05_fork_bomb(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    neighbour: Sandbox,
    observe: Callable[[str], None],
) -> None:
    sandbox = await manager.create("alice", runtime=runtime, limits={"pids": 64}, purpose=purpose)
    # The bomb's report goes to a file, not a pipe: under gVisor a process still forking when
    # the bomb kills its group can escape the kill (its fork loop takes 4-6 s there), and as a
    # pipe's writer it would keep the cell waiting for the end of the pipe for its 120 s.
    out = await run(
        sandbox,
        "import os, subprocess, sys\n"
        "with open('/tmp/bomb.out', 'w') as report:\n"
        "    try:\n"
        f"        subprocess.run([sys.executable, '-c', {FORK_BOMB!r}], stdout=report,\n"
        "                       stderr=subprocess.DEVNULL, start_new_session=True, timeout=90)\n"
        "    except subprocess.TimeoutExpired:  # say which processes were left, and how\n"
        "        stats = [open(f'/proc/{p}/stat').read()[:60] for p in os.listdir('/proc')\n"
        "                 if p.isdigit()]\n"
        "        raise RuntimeError(f'the bomb did not end: {stats}') from None\n"
        "print(open('/tmp/bomb.out').read())",
        timeout=120,
    )
    refused, peak = out.rsplit(" ", 1)
    assert [errno_name(e) for e in ast.literal_eval(refused)] == ["EAGAIN"], out
    assert int(peak) <= 64
    assert await run(sandbox, "print('still here')") == "still here"
    await assert_unaffected(neighbour)
    observe(
        f"a 2^12 fork tree peaked at {peak} processes (pids limit 64), forks refused with "
        "EAGAIN; kernel and neighbour answer"
    )


@pytest.mark.checklist(
    row=7,
    attack="CPU spin past the exec time limit, with background children: one in the process "
    "group with an empty environment, one in a session of its own",
    expected="the time limit fires, the process group and every child are killed inside the "
    "sandbox, the next exec works",
)
async def test_row07_cpu_spin_past_the_exec_timeout(
    sandbox: Sandbox, manager: SandboxManager, observe: Callable[[str], None]
) -> None:
    # One child keeps the process group but empties its environment (where the exec's mark
    # is, exec_deadline.py); the other keeps the environment but leaves the process group and
    # the session, as a daemon would (a process-group kill, such as coreutils' timeout does,
    # would not reach it).
    escape = (
        'import os, time; os.setsid(); open("/tmp/escaped", "w").write(str(os.getpid())); '
        "time.sleep(300)"
    )
    spin = ["sh", "-c", f"env -i sleep 300 & python -c '{escape}' & while :; do :; done"]
    result = await manager.exec("alice", sandbox.sandbox_id, spin, ExecOptions(timeout=2))
    assert result.timed_out
    listing = ["python", "-c", LIST_PROCESSES]
    after = await manager.exec("alice", sandbox.sandbox_id, listing, ExecOptions(timeout=30))
    running = ast.literal_eval(after.stdout.decode())
    names = set(running.values())
    assert not names & {"sh", "sleep"}, names
    escaped = await manager.exec(
        "alice", sandbox.sandbox_id, ["cat", "/tmp/escaped"], ExecOptions(timeout=10)
    )
    assert int(escaped.stdout) not in running, running
    observe(f"exec timed out after 2 s; left running afterwards: {', '.join(sorted(names))}")


@pytest.mark.checklist(
    row=8,
    attack="a background process and a setsid daemon left behind, then a kernel restart",
    expected="both are killed when the kernel restarts; the workspace is kept",
)
async def test_row08_daemons_do_not_survive_a_kernel_restart(
    sandbox: Sandbox, manager: SandboxManager, observe: Callable[[str], None]
) -> None:
    pids = await run(
        sandbox,
        "import subprocess\n"
        "plain = subprocess.Popen(['sleep', '600'])\n"
        "daemon = subprocess.Popen(['sleep', '601'], start_new_session=True)\n"
        "open('/workspace/kept.txt', 'w').write('kept')\n"
        "print(plain.pid, daemon.pid)",
    )
    restarted = await manager.restart_kernel("alice", sandbox.sandbox_id)
    alive = await run(
        restarted,
        f"import os\nprint([p for p in ({pids.replace(' ', ', ')}) if os.path.exists(f'/proc/{{p}}')])",
    )
    assert alive == "[]"
    assert await run(restarted, "print(open('/workspace/kept.txt').read())") == "kept"
    observe("background process and setsid daemon both gone after restart; workspace file kept")


@pytest.mark.checklist(
    row=11,
    attack="file-descriptor exhaustion and a thread bomb",
    expected="EMFILE at the nofile limit and a refused thread at the pids limit, inside the "
    "sandbox only; the kernel and other sandboxes work on",
)
async def test_row11_fd_and_thread_exhaustion(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    neighbour: Sandbox,
    observe: Callable[[str], None],
) -> None:
    sandbox = await manager.create("alice", runtime=runtime, limits={"pids": 128}, purpose=purpose)
    fds = await run(
        sandbox,
        "import os\nopened = []\n"
        "try:\n    while True: opened.append(os.open('/dev/null', os.O_RDONLY))\n"
        "except OSError as e:\n    print(e.errno, len(opened))\n"
        "for fd in opened: os.close(fd)",
    )
    fd_errno, fd_count = fds.split()
    assert errno_name(fd_errno) == "EMFILE"
    threads = await run(
        sandbox,
        "import threading\nstop = threading.Event(); made = []\n"
        "try:\n"
        "    for _ in range(5000):\n"
        "        t = threading.Thread(target=stop.wait); t.start(); made.append(t)\n"
        "except RuntimeError as e:\n    print('refused', len(made))\n"
        "stop.set()\n"
        "for t in made: t.join()",
        timeout=120,
    )
    verdict, thread_count = threads.split()
    assert verdict == "refused", threads
    assert int(thread_count) < 128
    assert await run(sandbox, "print(1 + 1)") == "2"
    await assert_unaffected(neighbour)
    observe(
        f"EMFILE after {fd_count} descriptors; thread {thread_count} refused (pids limit 128); "
        "kernel and neighbour answer"
    )
