"""`jupyter sandbox run` as a person without a Jupyter Server runs it: Python code in a real
sandbox's kernel (runc is enough: the runtime is the core's concern, tested there)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.cli.cli_processes import interrupted

pytestmark = [pytest.mark.integration, pytest.mark.runc]


def run_command(state_dir: Path, *args: str) -> list[str]:
    return [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "run"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice"),
        *args,
    ]


async def sandbox_run(
    state_dir: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``jupyter sandbox run``; ``stdin`` is text piped in (else /dev/null: never this
    process's own input, which may never end)."""
    source = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return await asyncio.to_thread(
        subprocess.run,
        run_command(state_dir, *args),
        capture_output=True,
        text=True,
        timeout=300,
        **source,  # type: ignore[arg-type]
    )


async def new_sandbox(manager: SandboxManager, purpose: str) -> str:
    return (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id


async def test_runs_keep_their_state_and_code_comes_from_stdin(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    defined = await sandbox_run(state_dir, sandbox_id, "x = 41")
    assert (defined.returncode, defined.stdout, defined.stderr) == (0, "", "")
    # A second process, the same interpreter: x is still there. The last expression's value
    # is printed as its text, after what the code printed.
    used = await sandbox_run(
        state_dir, sandbox_id, "import sys\nprint('err', file=sys.stderr)\nx + 1"
    )
    assert (used.returncode, used.stdout, used.stderr) == (0, "42\n", "err\n")

    piped = await sandbox_run(state_dir, sandbox_id, stdin="y = x * 2\nprint(y)\n")
    assert (piped.returncode, piped.stdout) == (0, "82\n"), piped.stderr
    dash = await sandbox_run(state_dir, sandbox_id, "-", stdin="\ufeffprint('ü', y)")  # a BOM
    assert (dash.returncode, dash.stdout) == (0, "ü 82\n"), dash.stderr
    # Code starting with "-" goes after "--", as options end there.
    negative = await sandbox_run(state_dir, sandbox_id, "--", "-x")
    assert (negative.returncode, negative.stdout) == (0, "-41\n"), negative.stderr

    displayed = await sandbox_run(
        state_dir,
        sandbox_id,
        "from IPython.display import display\n"
        "display({'image/png': 'iVBORw0KGgo='}, raw=True)\n"  # 8 bytes of PNG, base64
        "display({'text/plain': 'shown', 'text/html': '<b>shown</b>'}, raw=True)",
    )
    assert displayed.returncode == 0, displayed.stderr
    assert displayed.stdout == "shown\n"
    assert displayed.stderr == "[image/png output not shown: 8 bytes]\n"

    for empty in ("   \n", ""):
        nothing = await sandbox_run(state_dir, sandbox_id, stdin=empty)
        assert nothing.returncode == 1
        assert nothing.stderr.startswith("error: no code to run: give it as an argument")
    latin1 = await asyncio.to_thread(
        subprocess.run,
        run_command(state_dir, sandbox_id),
        input=b"print('\xfc')",
        capture_output=True,
    )
    assert latin1.returncode == 1
    assert latin1.stderr.startswith(b"error: the code on standard input is not UTF-8 text")


async def test_an_exception_is_status_1_with_its_traceback(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    failed = await sandbox_run(state_dir, sandbox_id, "print('before')\nz = 1 / 0")
    assert (failed.returncode, failed.stdout) == (1, "before\n"), failed.stderr
    assert "Traceback (most recent call last)" in failed.stderr
    assert "----> 2 z = 1 / 0" in failed.stderr
    assert failed.stderr.endswith("ZeroDivisionError: division by zero\n"), failed.stderr
    assert "\x1b[" not in failed.stderr  # no terminal colours
    # The interpreter lives on: the next run works.
    after = await sandbox_run(state_dir, sandbox_id, "print('after')")
    assert (after.returncode, after.stdout) == (0, "after\n"), after.stderr


async def test_a_run_past_its_timeout_is_interrupted_with_status_124(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    started = time.monotonic()
    slow = await sandbox_run(
        state_dir,
        "--timeout=1",
        sandbox_id,
        "import time\nkept = 'yes'\nprint('sleeping', flush=True)\ntime.sleep(120)",
    )
    assert slow.returncode == 124, slow.stderr
    assert slow.stdout == "sleeping\n"
    assert "KeyboardInterrupt" in slow.stderr  # where it was when interrupted
    assert slow.stderr.endswith(
        "error: the code ran past its 1s and was interrupted (--timeout gives it longer)\n"
    )
    assert time.monotonic() - started < 30
    # Interrupted, not restarted: what it did before the interrupt is still there.
    after = await sandbox_run(state_dir, "--timeout=30", sandbox_id, "print(kept)")
    assert (after.returncode, after.stdout) == (0, "yes\n"), after.stderr

    # Code that ignores the interrupt runs on (kernel_execution.INTERRUPT_GRACE, 5 s, later the
    # run gives up on it), and the next run waits for it.
    deaf = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(9)"
    stuck = await sandbox_run(state_dir, "--timeout=1", sandbox_id, deaf)
    assert (stuck.returncode, stuck.stdout) == (124, ""), stuck.stderr
    # (after the core's own warning, logged as the run gives up)
    assert stuck.stderr.endswith(
        "error: the code ran past its 1s and did not stop when interrupted: it still runs, and "
        f"later runs wait for it ('jupyter sandbox restart {sandbox_id}' gives the sandbox a "
        "fresh interpreter)\n"
    )
    waited = time.monotonic()
    after = await sandbox_run(state_dir, "--timeout=30", sandbox_id, "print(kept)")
    assert (after.returncode, after.stdout) == (0, "yes\n"), after.stderr
    assert time.monotonic() - waited > 1.5  # behind the rest of the sleep


async def test_an_unknown_sandbox_or_bad_arguments_are_clear_errors(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    unknown = await sandbox_run(state_dir, "0123456789ab", "print(1)")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr == "error: no sandbox 0123456789ab\n"
    malformed = await sandbox_run(state_dir, "nope", "print(1)")
    assert malformed.returncode == 1
    assert malformed.stderr.startswith("error: no sandbox 'nope': ids are 12 hex digits")
    usage = await sandbox_run(state_dir)
    assert usage.returncode == 2
    assert "usage: jupyter sandbox run [--timeout=SECONDS] SANDBOX_ID" in usage.stderr

    sandbox_id = await new_sandbox(manager, purpose)
    bad = await sandbox_run(state_dir, "--timeout=0", sandbox_id, "print(1)")
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.startswith("error: timeout must be a number of seconds above 0")
    await manager.pause("alice", sandbox_id)
    paused = await sandbox_run(state_dir, sandbox_id, "print(1)")
    assert paused.returncode == 1
    assert paused.stderr == f"error: sandbox {sandbox_id} is paused: resume it first\n"


async def test_output_comes_as_printed_and_an_interrupt_reaches_the_sandbox(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = await new_sandbox(manager, purpose)
    code = "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')"

    def lines_as_they_come() -> tuple[list[tuple[float, str]], int]:
        with subprocess.Popen(
            run_command(state_dir, sandbox_id, code),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        ) as process:
            assert process.stdout is not None
            arrived = [(time.monotonic(), line) for line in process.stdout]
            return arrived, process.wait(timeout=60)

    arrived, status = await asyncio.to_thread(lines_as_they_come)
    assert ([line for _, line in arrived], status) == (["first\n", "second\n"], 0)
    assert arrived[1][0] - arrived[0][0] >= 1.5, arrived  # the first before the code ended

    # Ctrl-C here interrupts the code in the sandbox (the next run does not wait behind it).
    forever = "import time\nprint('started', flush=True)\ntime.sleep(600)"
    status, err = await interrupted(run_command(state_dir, sandbox_id, forever), "started\n")
    assert (status, err) == (130, "interrupted: the code was interrupted in the sandbox too\n")
    after = await sandbox_run(state_dir, "--timeout=20", sandbox_id, "print('free')")
    assert (after.returncode, after.stdout) == (0, "free\n"), after.stderr

    # A reader that stops (| head) interrupts the code too, and the CLI ends quietly (SIGPIPE's
    # status), as exec does.
    command = run_command(state_dir, sandbox_id, "--", "while True: print('y', flush=True)")
    pipeline = " ".join(f"'{arg}'" for arg in command[:-1]) + ' "$CODE" | head -n 2'
    cut = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-o", "pipefail", "-c", pipeline],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CODE": command[-1]},
    )
    assert (cut.returncode, cut.stdout, cut.stderr) == (141, "y\ny\n", ""), cut
    after = await sandbox_run(state_dir, "--timeout=20", sandbox_id, "print('free again')")
    assert (after.returncode, after.stdout) == (0, "free again\n"), after.stderr
