"""Sandbox.run, .start and .commands against a real server: a command run whole (env, cwd,
stdin, a failure, a timeout) and streamed to callbacks as it runs; background commands
followed to their end, waited for, listed and removed."""

from __future__ import annotations

import asyncio
import time

import pytest

from jupyter_sandbox.client import CommandNotFoundError, SandboxClient, SandboxFileNotFoundError

pytestmark = [pytest.mark.integration, pytest.mark.runc]

SCRIPT = """\
import os, sys, time
print("in", os.getcwd(), "GREETING", os.environ.get("GREETING"), flush=True)
print("stdin:", sys.stdin.read(), flush=True)
for step in range(3):
    print("step", step, flush=True)
    time.sleep(0.4)
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


async def test_a_command_run_whole_and_streamed(client: SandboxClient) -> None:
    pieces: list[tuple[str, str, float]] = []

    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            sandbox.files.write("/workspace/job/run.py", SCRIPT)
            command = ["python3", "/workspace/job/run.py"]
            whole = sandbox.run(command, env={"GREETING": "hi"}, cwd="/tmp", stdin="some input")
            assert (whole.exit_code, whole.ok, whole.timed_out) == (3, False, False)
            assert whole.stdout.splitlines() == [
                "in /tmp GREETING hi",
                "stdin: some input",
                "step 0",
                "step 1",
                "step 2",
            ]
            assert whole.stderr == "to stderr\n"
            assert whole.duration > 1.0

            # A string is run by /bin/sh -c, from /workspace.
            shell = sandbox.run("echo $((6 * 7)) in $(pwd) && exit 0")
            assert (shell.ok, shell.stdout) == (True, "42 in /workspace\n")
            late = sandbox.run("sleep 30", timeout=0.5)
            assert (late.timed_out, late.ok) == (True, False)
            with pytest.raises(SandboxFileNotFoundError):  # the command did not run
                sandbox.run("true", cwd="/no/such/directory")

            streamed = sandbox.run(
                "python3 job/run.py",
                on_stdout=lambda text: pieces.append(("stdout", text, time.monotonic())),
                on_stderr=lambda text: pieces.append(("stderr", text, time.monotonic())),
            )
            ended = time.monotonic()
            assert (streamed.exit_code, streamed.stderr) == (3, "to stderr\n")
            assert streamed.stdout == "".join(t for kind, t, _ in pieces if kind == "stdout")
            assert "step 2\n" in streamed.stdout
            # print() writes the text and its newline apart: one piece or two, as they come.
            assert "".join(t for kind, t, _ in pieces if kind == "stderr") == "to stderr\n"
            assert pieces[-1][0] == "stderr"
            assert ended - pieces[0][2] > 0.5, pieces  # the first piece came as it was printed
        assert client.list() == []

    await asyncio.to_thread(scenario)


async def test_background_commands_followed_waited_for_and_removed(client: SandboxClient) -> None:
    # A follower that ends is None here, not StopIteration: raised in the thread, that would
    # never reach the test (asyncio cannot set it on a future) and the test would hang.
    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            job = sandbox.start(
                "for i in 1 2 3; do echo line $i $NAME; sleep 0.4; done; echo done >&2; exit 7",
                env={"NAME": "job"},
            )
            assert (job.running, job.exit_code) == (True, None)
            assert job.command[:2] == ["/bin/sh", "-c"]
            pieces = list(job.follow())  # streamed by the server as it comes
            assert len(pieces) > 1  # followed as it ran, not read once at the end
            assert "".join(pieces) == "line 1 job\nline 2 job\nline 3 job\ndone\n"
            assert (job.running, job.exit_code) == (False, 7)  # known from the stream's end
            assert job.output(offset=5).text == "1 job\nline 2 job\nline 3 job\ndone\n"
            assert (
                "".join(job.follow(offset=11, poll_interval=0.1))
                == "line 2 job\nline 3 job\ndone\n"
            )

            server = sandbox.start(["sh", "-c", "echo listening; sleep 300"], cwd="/tmp")
            assert [c.id for c in sandbox.commands()] == [job.id, server.id]
            # A follower that stops early leaves the command running.
            following = server.follow()
            assert next(following, None) == "listening\n"
            following.close()
            assert server.refresh().running
            with pytest.raises(TimeoutError, match=r"still runs after 0\.5 s"):
                server.wait(timeout=0.5, poll_interval=0.1)
            assert server.refresh().running
            following = server.follow()
            assert next(following, None) == "listening\n"
            server.remove()  # stopped, with all it started, and forgotten
            with pytest.raises(CommandNotFoundError):  # the follower hears it
                next(following, None)
            with pytest.raises(CommandNotFoundError):
                server.refresh()
            assert job.wait(timeout=10) == 7
            job.remove()
            assert sandbox.commands() == []

            # A cwd the sandbox lacks is reported in the command's output; it ends with 127.
            lost = sandbox.start("true", cwd="/no/such/place")
            assert lost.wait(timeout=30) == 127
            assert "/no/such/place" in lost.output().text
            lost.remove()
        assert client.list() == []

    await asyncio.to_thread(scenario)
