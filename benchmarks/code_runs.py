"""What running code in a sandbox's live kernel from the host costs (sandbox/operations/code_runs.py, as
REST's ``POST /api/sandboxes/{id}/execute`` and ``jupyter sandbox run`` do it, without HTTP).

For each runtime, one sandbox; ``--runs`` of each (interleaved, but for ``execute pass``, run
first), timed from the call to its result:

- ``run pass``: ``run_code`` of ``pass``: the sandbox's state checked, the ready client the
  run before kept taken from the manager's pool (kernel_link/clients.py), the execute_request and
  its reply;
- ``run, new client``: the same with ``KernelClients.max_idle = 0`` (another manager): a client
  connected to the kernel through pinned sockets and iopub joined for the run, as every run
  made one before the pool;
- ``execute pass``: the same request on a client already connected (kernel_execution.execute
  alone): the protocol's own cost, so the difference is what the rest of a run costs;
- ``python3 -c``: ``python3 -c pass`` as a command (``run_command``), what agent code pays
  for a one-liner without the kernel (and without its state);
- ``first piece``: ``stream_code`` of a print then a 0.2 s sleep, from the call to the print;
- ``stream 16M``: ``stream_code`` printing 16 MiB (256 writes of 64 KiB) to its result.

Prints the median and p90 of each in milliseconds, and the streaming rate. Needs the Docker
engine and the image:

    .venv/bin/python benchmarks/code_runs.py --runtime runc --runtime runsc --runs 30
"""

from __future__ import annotations

import time

from timing import per_runtime
from traitlets.config import Config

from jupyter_sandbox.sandbox.kernel_link.execution import execute
from jupyter_sandbox.sandbox.kernel_link.link import ready_client
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import (
    CONNECT_TIMEOUT,
    CodeRequest,
    run_code,
    stream_code,
)
from jupyter_sandbox.sandbox.operations.commands import CommandRequest, run_command

OWNER = "benchmark"
PURPOSE = "benchmark:code-runs"
STREAMED = 16 * 1024**2
PASS = CodeRequest("pass")
PYTHON = CommandRequest(["python3", "-c", "pass"])
FIRST_PIECE = CodeRequest("import time\nprint('go', flush=True)\ntime.sleep(0.2)", stream=True)
BULK = CodeRequest(
    f"import sys\nfor _ in range({STREAMED // 65536}):\n    sys.stdout.write('x' * 65536)",
    stream=True,
)
NAMES = ["run pass", "run, new client", "execute pass", "python3 -c", "first piece", "stream 16M"]


async def streamed(manager: SandboxManager, sandbox_id: str, request: CodeRequest) -> float:
    """Seconds from the call to the first output (FIRST_PIECE) or to the result (BULK, having
    checked that every byte came)."""
    start = time.perf_counter()
    first: float | None = None
    received = 0
    async for name, data in stream_code(manager, OWNER, sandbox_id, request):
        if name == "stdout":
            first = first or time.perf_counter() - start
            received += len(data["text"])
        elif name != "result" or data["status"] != "ok":
            raise RuntimeError(f"streaming failed: {name} {data}")
    if request is FIRST_PIECE and first is not None:
        return first
    if request is BULK and received == STREAMED:
        return time.perf_counter() - start
    raise RuntimeError(f"streamed {received} characters, first after {first} s")


async def measure(runtime: str, runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    manager = SandboxManager.from_config()
    unpooled = Config()
    unpooled.KernelClients.max_idle = 0
    fresh = SandboxManager.from_config(unpooled)

    async def alive() -> str | None:
        return None

    try:
        sandbox = await manager.create(OWNER, runtime=runtime, purpose=PURPOSE)
        sandbox_id = sandbox.sandbox_id
        try:
            # Its own phase: a client held through the others would have to read past all
            # their output (its iopub hears every run) before its own.
            connection = manager.kernel_connection(sandbox_id)
            async with ready_client(connection, timeout=CONNECT_TIMEOUT, still_running=alive) as (
                client,
                _,
            ):
                for _ in range(runs + 1):  # the first of each warms up: not counted
                    start = time.perf_counter()
                    outcome = await execute(
                        client,
                        "pass",
                        timeout=60,
                        output=lambda name, data: None,
                        still_running=alive,
                        on_reason=RuntimeError,
                    )
                    samples["execute pass"].append(time.perf_counter() - start)
                    if outcome.status != "ok":
                        raise RuntimeError(f"pass failed: {outcome.error}")
            for _ in range(runs + 1):
                start = time.perf_counter()
                ran = await run_code(manager, OWNER, sandbox_id, PASS)
                samples["run pass"].append(time.perf_counter() - start)
                if ran.status != "ok":
                    raise RuntimeError(f"pass failed: {ran.error}")
                start = time.perf_counter()
                ran = await run_code(fresh, OWNER, sandbox_id, PASS)
                samples["run, new client"].append(time.perf_counter() - start)
                if ran.status != "ok":
                    raise RuntimeError(f"pass failed: {ran.error}")
                start = time.perf_counter()
                command = await run_command(manager, OWNER, sandbox_id, PYTHON)
                samples["python3 -c"].append(time.perf_counter() - start)
                if command.exit_code != 0:
                    raise RuntimeError(f"python3 -c pass failed: {command.stderr!r}")
                samples["first piece"].append(await streamed(manager, sandbox_id, FIRST_PIECE))
                samples["stream 16M"].append(await streamed(manager, sandbox_id, BULK))
        finally:
            await manager.remove(OWNER, sandbox_id)
    finally:
        await fresh.close()
        await manager.close()
    return {name: values[1:] for name, values in samples.items()}


def main() -> None:
    per_runtime(
        __doc__,
        title="code run in the sandbox's kernel, {runs} runs of each",
        column="run",
        names=NAMES,
        runs_help="runs of each",
        measure=measure,
        streamed=("stream 16M", STREAMED),
    )


if __name__ == "__main__":
    main()
