"""What running a command in a sandbox costs: ``SandboxManager.exec`` of a trivial command, and
a command as REST's ``POST /api/sandboxes/{id}/commands`` runs it (``commands.run_command``).

Every snapshot, restore and attestation starts a command in its sandbox through an engine exec,
so this fixed cost is paid before any byte moves (docs/snapshots.md, "Fixed costs"). For each
runtime, one sandbox; ``--runs`` execs of each command, interleaved, timed from the call to its
result (the exec's creation, start, output and exit status included):

- ``true``: the engine's and runtime's own cost, with the supervisor that every caller's
  command runs under (its kill reaches all the command started: sandbox/backends/docker/exec_deadline.py);
- ``true, unsupervised``: the same without it, as the host's own programs run (tar, the files
  program);
- ``tar -c -C /workspace .``: what a persist of an empty workspace starts with;
- ``python3 -c pass`` through ``run_command``: what agent code pays for a Python one-liner
  run as a command rather than in the kernel (the sandbox's state checked first, the
  interpreter started inside the sandbox);
- ``first piece``: a streamed command (``command_stream.stream_command``, as REST's
  ``"stream": true`` runs it, without the HTTP) from the call to its first output;
- ``stream 64M``: the same streaming 64 MiB of output (``head -c``) to its result.

Prints the median and p90 of each, in milliseconds, and the streaming rate. Needs the Docker
engine and the image:

    .venv/bin/python benchmarks/exec.py --runtime runc --runtime runsc --runs 30
"""

from __future__ import annotations

import time

from timing import per_runtime

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.command_stream import stream_command
from jupyter_sandbox.sandbox.operations.commands import CommandRequest, run_command

OWNER = "benchmark"
PURPOSE = "benchmark:exec"
COMMANDS = {"true": ["true"], "tar -c": ["tar", "-c", "-C", "/workspace", "."]}
PYTHON = CommandRequest(["python3", "-c", "pass"])
STREAMED = 64 * 1024**2
FIRST_PIECE = CommandRequest(["/bin/sh", "-c", "echo go; sleep 0.2"], stream=True)
BULK = CommandRequest(["head", "-c", str(STREAMED), "/dev/zero"], stream=True)
UNSUPERVISED = "true, unsupervised"
NAMES = [*COMMANDS, UNSUPERVISED, "python3 -c", "first piece", "stream 64M"]


async def streamed(manager: SandboxManager, sandbox_id: str, request: CommandRequest) -> float:
    """Seconds from the call to the first output (FIRST_PIECE) or to the result (BULK, having
    checked that every byte came)."""
    start = time.perf_counter()
    first: float | None = None
    received = 0
    async for name, data in stream_command(manager, OWNER, sandbox_id, request):
        if name == "stdout":
            first = first or time.perf_counter() - start
            received += len(data["text"])
        elif name != "result" or data["exit_code"] != 0:
            raise RuntimeError(f"streaming failed: {name} {data}")
    if request is FIRST_PIECE and first is not None:
        return first
    if request is BULK and received == STREAMED:
        return time.perf_counter() - start
    raise RuntimeError(f"streamed {received} bytes, first after {first} s")


async def measure(runtime: str, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    manager = SandboxManager.from_config()
    try:
        sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)
        try:
            for _ in range(runs + 1):  # the first of each warms the engine up: not counted
                for name, argv in COMMANDS.items():
                    start = time.perf_counter()
                    result = await manager.exec(
                        OWNER, sandbox.sandbox_id, argv, ExecOptions(timeout=60)
                    )
                    samples[name].append(time.perf_counter() - start)
                    if result.exit_code != 0:
                        raise RuntimeError(f"{name} failed: {result.stderr!r}")
                start = time.perf_counter()
                result = await manager.exec(
                    OWNER, sandbox.sandbox_id, ["true"], ExecOptions(timeout=60, supervised=False)
                )
                samples[UNSUPERVISED].append(time.perf_counter() - start)
                if result.exit_code != 0:
                    raise RuntimeError(f"unsupervised true failed: {result.stderr!r}")
                start = time.perf_counter()
                ran = await run_command(manager, OWNER, sandbox.sandbox_id, PYTHON)
                samples["python3 -c"].append(time.perf_counter() - start)
                if ran.exit_code != 0:
                    raise RuntimeError(f"python3 -c pass failed: {ran.stderr!r}")
                samples["first piece"].append(
                    await streamed(manager, sandbox.sandbox_id, FIRST_PIECE)
                )
                samples["stream 64M"].append(await streamed(manager, sandbox.sandbox_id, BULK))
        finally:
            await manager.remove(OWNER, sandbox.sandbox_id)
    finally:
        await manager.close()
    return {name: values[1:] for name, values in samples.items()}


def main() -> None:
    per_runtime(
        __doc__,
        title="SandboxManager.exec, {runs} runs of each command",
        column="command",
        names=NAMES,
        runs_help="execs of each command",
        measure=measure,
        streamed=("stream 64M", STREAMED),
    )


if __name__ == "__main__":
    main()
