"""Kernel start to ready through a Jupyter server: warm pool vs no pool vs a local kernel.

Starts a real ``jupyter server`` (127.0.0.1, this checkout's extension) and times, ``--runs``
times each, from ``POST /api/kernels`` until the kernel's ``kernel_info_reply`` arrives over the
server's websocket, exactly the path JupyterLab takes when a notebook opens:

- ``pool``: Sandboxed Python with the warm pool on (``WarmPool.size``, refilled in the
  background; between two starts the benchmark waits ``--gap`` seconds, a person's pace, so the
  pool can refill);
- ``no pool``: Sandboxed Python, every start creates its sandbox (``WarmPool.size = 0``);
- ``local``: the plain ``python3`` kernel of this interpreter.

The server finds this checkout's kernelspec (``JUPYTER_PATH``), not an installed copy, so its
kernels start through this checkout's launcher; with ``SandboxExtension.fast_kernel_start`` on
(the default; ``--no-fast-start`` turns it off) the launcher has them forked by the server's
zygote. Each kernel is deleted after its measurement (not timed). Prints p50 and p99 of each and the
targets: with the pool, p50 <= 0.5x and p99 <= 1.0x the local kernel's. Needs the Docker engine
and the sandbox image. From the checkout:

    .venv/bin/python benchmarks/pool.py --runs 30 --runtime runsc [--json pool.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_client.session import Session
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

TARGETS = {"p50": 0.5, "p99": 1.0}  # pool start / local start
KERNELSPEC = Path(__file__).parents[1] / "kernelspec" / "sandboxed-python"


class Server:
    """A jupyter server subprocess and the few REST calls the benchmark makes."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.http = AsyncHTTPClient()

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        request = HTTPRequest(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            body=None if body is None else json.dumps(body),
            request_timeout=180,
        )
        response = await self.http.fetch(request)
        return json.loads(response.body) if response.body else None

    async def time_start(self, kernel_name: str) -> float:
        """Seconds from asking for a kernel to its first kernel_info_reply, via the websocket."""
        start = time.perf_counter()
        kernel = await self.call("POST", "/api/kernels", {"name": kernel_name})
        try:
            ws_url = self.url.replace("http", "ws", 1)
            ws = await websocket_connect(
                f"{ws_url}/api/kernels/{kernel['id']}/channels?token={self.token}"
            )
            request = Session().msg("kernel_info_request")
            request["channel"] = "shell"
            ws.write_message(json.dumps(request, default=str))
            while True:
                raw = await ws.read_message()
                if raw is None:
                    raise RuntimeError(f"kernel {kernel_name} closed its websocket")
                msg = json.loads(raw)
                parent = msg.get("parent_header", {}).get("msg_id")
                if parent == request["header"]["msg_id"] and msg["msg_type"] == "kernel_info_reply":
                    elapsed = time.perf_counter() - start
                    ws.close()
                    return elapsed
        finally:
            await self.call("DELETE", f"/api/kernels/{kernel['id']}")


@contextmanager
def jupyter_server(
    runtime: str, pool_size: int, state_dir: Path, fast_start: bool
) -> Iterator[Server]:
    """A jupyter server subprocess on 127.0.0.1 with its own config; stopped on the way out."""
    config_dir = Path(tempfile.mkdtemp(prefix="jsbx-bench-config-"))
    root_dir = Path(tempfile.mkdtemp(prefix="jsbx-bench-root-"))
    data_dir = Path(tempfile.mkdtemp(prefix="jsbx-bench-data-"))
    shutil.copytree(KERNELSPEC, data_dir / "kernels" / KERNELSPEC.name)
    (config_dir / "jupyter_sandbox_config.py").write_text(
        f"c.SandboxSettings.state_dir = {str(state_dir)!r}\n"
        f"c.SandboxSettings.runtime = {runtime!r}\n"
        f"c.WarmPool.size = {pool_size}\n"
        f"c.SandboxExtension.fast_kernel_start = {fast_start!r}\n"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config_dir), "JUPYTER_PATH": str(data_dir)}
    argv = [
        sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
    ]  # fmt: skip
    with open(config_dir / "server.log", "w") as log:
        # Started in its root dir, as a person starts jupyter lab: kernels opened without a
        # notebook path run there, so the pool's default key serves them.
        process = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root_dir
        )
        try:
            yield Server(f"http://127.0.0.1:{port}", token)
        finally:
            process.terminate()  # the extension drains its pool on the way out
            process.wait(timeout=120)
            for directory in (config_dir, root_dir, data_dir):
                shutil.rmtree(directory, ignore_errors=True)


async def wait_until_up(server: Server) -> None:
    for _ in range(300):
        try:
            await server.call("GET", "/api/status")
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError("the jupyter server did not answer within 30 s")


async def measure(
    kind: str, runs: int, runtime: str, gap: float, pool_size: int, fast_start: bool
) -> list[float]:
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-b-", dir="/tmp"))
    size = pool_size if kind == "pool" else 0
    kernel = "python3" if kind == "local" else "sandboxed-python"
    times = []
    try:
        with jupyter_server(runtime, size, state_dir, fast_start) as server:
            await wait_until_up(server)
            if kind == "pool":
                await asyncio.sleep(gap * 2)  # the first fill
            for i in range(runs):
                times.append(await server.time_start(kernel))
                print(f"  {kind:8} run {i + 1:3}: {times[-1] * 1000:7.0f} ms", file=sys.stderr)
                if kind == "pool":
                    await asyncio.sleep(gap)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    return times


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--runtime", choices=("runsc", "runc"), default="runsc")
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--gap", type=float, default=4.0, help="seconds between pooled starts")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--no-fast-start",
        dest="fast_start",
        action="store_false",
        help="SandboxExtension.fast_kernel_start = False: no zygote, every kernel a new process",
    )
    parser.add_argument(
        "--kinds",
        default="no pool,pool",
        help="what to measure besides the local kernel (always measured), comma-separated",
    )
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for kind in ["local", *(k for k in args.kinds.split(",") if k != "local")]:
        times = asyncio.run(
            measure(kind, args.runs, args.runtime, args.gap, args.pool_size, args.fast_start)
        )
        results[kind] = {
            "p50_ms": statistics.median(times) * 1000,
            "p99_ms": percentile(times, 99) * 1000,
            "runs": len(times),
        }
    local = results["local"]
    print(f"\nkernel start to ready through the server, {args.runtime}, {args.runs} runs each")
    print(f"{'':10}{'p50 ms':>10}{'p99 ms':>10}{'p50/local':>11}{'p99/local':>11}")
    for kind, figures in results.items():
        print(
            f"{kind:10}{figures['p50_ms']:10.0f}{figures['p99_ms']:10.0f}"
            f"{figures['p50_ms'] / local['p50_ms']:11.2f}{figures['p99_ms'] / local['p99_ms']:11.2f}"
        )
    pool = results["pool"]
    for name, target in TARGETS.items():
        ratio = pool[f"{name}_ms"] / local[f"{name}_ms"]
        verdict = "met" if ratio <= target else "MISSED"
        print(f"target pool {name} <= {target}x local: {ratio:.2f}x {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"runtime": args.runtime, **results}, indent=1))


if __name__ == "__main__":
    main()
