"""What the proxy kernel's relay costs: a proxied client against one talking straight to the
same in-sandbox kernel, measured side by side in one run.

One sandboxed-python kernel is started with jupyter_client's KernelManager under a fresh named
context (JUPYTER_SANDBOX_CONTEXT); a second BlockingKernelClient connects directly to the
ipykernel in its sandbox (found with SandboxManager.find_context + attach). Each measurement
runs on one client, then the other (the order alternating), and the other client consumes the
same messages untimed, so each starts from quiet sockets. Messages are matched by parent msg_id.

- round trip: execute_request of ``pass`` until its execute_reply and its idle status
  (target: the proxy adds <= 0.5 ms, or proxied/direct <= 1.05);
- stream: one cell printing 100 chunks of 1 MiB (write + flush), until idle (target <= 1.10x);
- display: one cell showing 50 image/png display_data of 1 MiB of base64 each (<= 1.10x);
- kernel start: KernelManager start until wait_for_ready, sandboxed (a fresh context each time)
  against the local python3 kernel (informational).

Everything started is shut down and removed afterwards, also on error or Ctrl-C. From the
checkout, with the Docker engine, both runtimes and the sandbox image:

    .venv/bin/python benchmarks/relay.py [--runtime runsc] [--rounds 300] [--json relay.json]
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.settings import load_config

T = TypeVar("T")
OWNER = os.environ.get("JUPYTER_SANDBOX_OWNER") or getpass.getuser()  # as the proxy decides
TIMEOUT = 120.0  # seconds any one wait may take
WARMUP = 20  # untimed round trips on each client first
CHUNKS = 100  # of 1 MiB, for stream and display
STREAM_CELL = f"import sys\nfor _ in range({CHUNKS}):\n    sys.stdout.write('x' * (1 << 20))\n    sys.stdout.flush()"
PNG_SETUP = "import base64, os\nfrom IPython.display import display\n_png = base64.b64encode(os.urandom(3 << 18)).decode()"
PNG_CELL = f"for _ in range({CHUNKS // 2}):\n    display({{'image/png': _png}}, raw=True)"
EXPECTED = {STREAM_CELL: CHUNKS << 20, PNG_CELL: (CHUNKS // 2) << 20}  # bytes of output
BULK = {"stream": STREAM_CELL, "display": PNG_CELL}
TARGETS = {"round trip": "+0.5 ms or 1.05x", "stream": "<= 1.10x", "display": "<= 1.10x"}
seen: set[str] = set()  # ids of the sandboxes this run made, to check none is left


def with_manager(op: Callable[[SandboxManager], Awaitable[T]]) -> T:
    """One manager operation, configured as the kernel process is (load_config)."""

    async def run() -> T:
        manager = SandboxManager.from_config(load_config())
        try:
            return await op(manager)
        finally:
            await manager.close()

    return asyncio.run(run())


def remove_context(context: str) -> None:
    async def op(manager: SandboxManager) -> None:
        found = await manager.find_context(OWNER, context)
        if found is not None:
            seen.add(found.sandbox_id)
            await manager.remove(OWNER, found.sandbox_id)

    with_manager(op)


def connect_direct(stack: ExitStack, context: str) -> BlockingKernelClient:
    async def op(manager: SandboxManager) -> dict[str, Any]:
        found = await manager.find_context(OWNER, context)
        if found is None:
            raise RuntimeError(f"no running sandbox for context {context}")
        seen.add(found.sandbox_id)
        return (await manager.attach(OWNER, found.sandbox_id)).connection_info

    client = BlockingKernelClient()
    client.load_connection_info(with_manager(op))  # type: ignore[arg-type]
    client.start_channels(stdin=False, hb=False, control=False)
    stack.callback(client.stop_channels)
    client.wait_for_ready(timeout=TIMEOUT)
    return client


def start_kernel(
    stack: ExitStack, name: str, cwd: str, transport: str = "tcp", **env: str
) -> BlockingKernelClient:
    """Start a kernel and wait until it is ready; ``stack`` shuts it down (gracefully)."""
    km = KernelManager(kernel_name=name, transport=transport)
    if transport == "ipc":  # the kernel's sockets as <ip>-<port> in the launch directory
        km.ip = os.path.join(cwd, f"kernel-{uuid.uuid4().hex[:8]}")
    stack.callback(lambda: km.shutdown_kernel(now=False) if km.has_kernel else None)
    km.start_kernel(cwd=cwd, env={**os.environ, **env})
    client: BlockingKernelClient = km.client()
    client.start_channels()
    stack.callback(client.stop_channels)
    client.wait_for_ready(timeout=TIMEOUT)
    return client


def sandbox_env(context: str, runtime: str) -> dict[str, str]:
    env = {"CONTEXT": context, "RUNTIME": runtime, "PURPOSE": "benchmark", "LOG_LEVEL": "WARNING"}
    return {f"JUPYTER_SANDBOX_{name}": value for name, value in env.items()}


def wait_idle(client: BlockingKernelClient, msg_id: str) -> int:
    """Read iopub until ``msg_id``'s idle status; return the bytes of output it carried."""
    received = 0
    while True:
        msg = client.iopub_channel.get_msg(timeout=TIMEOUT)  # queue.Empty if none comes
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] == "stream":
            received += len(content["text"])
        elif msg["msg_type"] == "display_data":
            received += len(content["data"].get("image/png", ""))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            return received


def run_cell(client: BlockingKernelClient, code: str) -> tuple[float, str]:
    """Seconds from sending ``code`` until its idle status and execute_reply have arrived."""
    start = time.perf_counter()
    msg_id = client.execute(code)
    received = wait_idle(client, msg_id)
    reply = client.shell_channel.get_msg(timeout=TIMEOUT)
    while reply["parent_header"].get("msg_id") != msg_id:  # wait_for_ready's extra replies
        reply = client.shell_channel.get_msg(timeout=TIMEOUT)
    elapsed = time.perf_counter() - start
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content']}")
    if received != EXPECTED.get(code, 0):
        raise RuntimeError(f"got {received} bytes of output, not {EXPECTED.get(code, 0)}")
    return elapsed, msg_id


def side_by_side(
    clients: dict[str, BlockingKernelClient], code: str, samples: dict[str, list[float]], flip: bool
) -> None:
    """Run ``code`` once on each client; the other one consumes the messages, untimed."""
    for name in ("direct", "proxied") if flip else ("proxied", "direct"):
        elapsed, msg_id = run_cell(clients[name], code)
        wait_idle(clients["direct" if name == "proxied" else "proxied"], msg_id)
        samples[name].append(elapsed)


def measure(args: argparse.Namespace, cwd: str) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]]
    samples = {kind: {"proxied": [], "direct": []} for kind in ("round trip", *BULK)}
    samples["start"] = {"sandboxed": [], "local": []}
    with ExitStack() as stack:
        context = f"bench-relay-{uuid.uuid4().hex[:12]}"
        stack.callback(remove_context, context)  # a named context's sandbox outlives its kernel
        env = sandbox_env(context, args.runtime)
        proxied = start_kernel(stack, "sandboxed-python", cwd, args.transport, **env)
        clients = {"proxied": proxied, "direct": connect_direct(stack, context)}
        for i, code in enumerate([PNG_SETUP] + ["pass"] * WARMUP):  # untimed
            side_by_side(clients, code, {"proxied": [], "direct": []}, flip=i % 2 == 1)
        for i in range(args.rounds):
            side_by_side(clients, "pass", samples["round trip"], flip=i % 2 == 1)
        for i in range(args.bulk_runs):
            for kind, code in BULK.items():
                side_by_side(clients, code, samples[kind], flip=i % 2 == 1)
            print(f"bulk run {i + 1}/{args.bulk_runs} done", file=sys.stderr, flush=True)
    for i in range(args.start_runs):
        for kind in ("sandboxed", "local"):
            with ExitStack() as stack:
                env: dict[str, str] = {}
                if kind == "sandboxed":
                    env = sandbox_env(f"bench-start-{uuid.uuid4().hex[:12]}", args.runtime)
                    stack.callback(remove_context, env["JUPYTER_SANDBOX_CONTEXT"])
                start = time.perf_counter()
                start_kernel(stack, "sandboxed-python" if env else "python3", cwd, **env)
                samples["start"][kind].append(time.perf_counter() - start)
        print(f"start run {i + 1}/{args.start_runs} done", file=sys.stderr, flush=True)
    return samples


def summarize(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for kind, runs in samples.items():
        medians = {side: statistics.median(values) for side, values in runs.items()}
        ours, theirs = medians.values()
        row: dict[str, Any] = {"median": medians, "ratio": ours / theirs}
        if kind == "round trip":
            row["added"] = ours - theirs
            pairs = zip(runs["proxied"], runs["direct"], strict=True)
            row["paired_added"] = statistics.median(p - d for p, d in pairs)
            row["met"] = row["added"] <= 0.0005 or row["ratio"] <= 1.05
        elif kind in BULK:
            row["mb_per_s"] = {k: EXPECTED[BULK[kind]] / 1e6 / v for k, v in medians.items()}
            row["met"] = row["ratio"] <= 1.10
        summary[kind] = row
    return summary


def print_table(summary: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"runtime {args.runtime}, proxied over {args.transport}: {args.rounds} round trips, {args.bulk_runs} bulk runs, "
        f"{args.start_runs} kernel starts; medians, interleaved"
    )
    print(f"{'':<11} {'proxied':>17} {'direct':>17} {'ratio':>7} {'target':>17}  met")
    for kind, row in summary.items():
        cells = []
        for side, seconds in row["median"].items():
            if kind == "round trip":
                cells.append(f"{seconds * 1000:.3f} ms")
            elif kind == "start":
                cells.append(f"{side} {seconds:.2f} s")
            else:
                cells.append(f"{seconds:.2f} s {row['mb_per_s'][side]:.0f} MB/s")
        target = TARGETS.get(kind, "(info)")
        met = ("yes" if row["met"] else "NO") if "met" in row else ""
        print(f"{kind:<11} {cells[0]:>17} {cells[1]:>17} {row['ratio']:>6.3f}x {target:>17}  {met}")
    row = summary["round trip"]
    print(
        f"the proxy adds {row['added'] * 1000:.3f} ms to a round trip (median proxied - median "
        f"direct); median of the per-round differences {row['paired_added'] * 1000:.3f} ms"
    )


def leftovers() -> list[str]:
    async def op(manager: SandboxManager) -> list[str]:
        return [i.sandbox_id for i in await manager.list_sandboxes(OWNER) if i.sandbox_id in seen]

    return with_manager(op)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("runsc", "runc"), default="runsc")
    parser.add_argument(
        "--transport",
        choices=("tcp", "ipc"),
        default="tcp",
        help="the proxied client's transport (tcp, Jupyter's default; the direct client's is "
        "always ipc, the sandbox's Unix sockets)",
    )
    parser.add_argument("--rounds", type=int, default=300, help="round trips each (300)")
    parser.add_argument("--bulk-runs", type=int, default=5, help="stream/display runs each (5)")
    parser.add_argument("--start-runs", type=int, default=5, help="kernel starts each (5)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw numbers here")
    args = parser.parse_args()
    if min(args.rounds, args.bulk_runs, args.start_runs) < 1:
        parser.error("--rounds, --bulk-runs and --start-runs must be at least 1")

    try:
        with (
            tempfile.TemporaryDirectory(prefix="jsbx-bench-") as cwd,  # the kernels' launch dir
            tempfile.TemporaryDirectory(prefix="jsbx-bench-config-") as config_dir,
        ):
            # The stream measured is 100 MiB in one cell: above the per-cell output cap that
            # the proxy applies by default (SandboxSettings.max_cell_output, 20 MB).
            config = Path(config_dir, "jupyter_sandbox_config.py")
            config.write_text(
                f"c.SandboxSettings.max_cell_output = '{4 * EXPECTED[STREAM_CELL]}'\n"
            )
            os.environ["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
                filter(None, [config_dir, os.environ.get("JUPYTER_CONFIG_PATH")])
            )
            samples = measure(args, cwd)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        if seen and (left := leftovers()):
            print(f"LEAK: sandboxes {', '.join(left)} are still there", file=sys.stderr)
    summary = summarize(samples)
    print_table(summary, args)
    if args.json:
        result = {
            "runtime": args.runtime,
            "transport": args.transport,
            "unit": "seconds",
            "samples": samples,
        }
        result.update(summary=summary, output_bytes={k: EXPECTED[c] for k, c in BULK.items()})
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
