"""What the E2B-compatible API costs (jupyter_sandbox/e2b_api/), through a real ``jupyter
server`` (127.0.0.1, this checkout's extension, pool.py's) and the real ``e2b-code-interpreter``:

- ``run_code (E2B)``: ``Sandbox.run_code("pass")``, the NDJSON stream of /execute on the data
  plane, from the call to its Execution;
- ``execute (REST)``: our own ``POST /api/sandboxes/{id}/execute`` of ``pass`` on the same
  sandbox, over one kept-alive httpx connection (interleaved with the above);
- ``/execute (E2B route, httpx)``: the data plane's /execute of ``pass`` sent by httpx on the
  kept-alive connection of its own, as the REST call's: the server's share of the E2B figure, without the SDK's;
- ``create to first run_code``: ``Sandbox.create()`` then ``run_code("1")`` answered, with the
  warm pool on (``--pool`` members; ``--gap`` seconds between runs so that it refills); each
  sandbox killed after its run (not timed).

Prints p50 and p90 in milliseconds and the E2B/REST ratio (target <= 1.2x), and the create
targets (p50 <= 0.5 s on runc, <= 0.8 s on runsc). Needs the Docker engine and the image:

    .venv/bin/python benchmarks/e2b_api.py --runtime runc --runs 30
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from e2b_code_interpreter import Sandbox
from pool import jupyter_server, wait_until_up
from timing import p90

TARGETS = {"runc": 0.5, "runsc": 0.8}  # seconds, p50 of create to first run_code


def row(name: str, seconds: list[float]) -> str:
    return f"{name:26} p50 {statistics.median(seconds) * 1000:7.1f} ms  p90 {p90(seconds) * 1000:7.1f} ms"


def create_and_run(index: int, gap: float) -> float:
    """Seconds from Sandbox.create() to the answer of its first run_code; then a kill and a
    pause of ``gap`` seconds (neither timed)."""
    start = time.perf_counter()
    sandbox = Sandbox.create()
    try:
        assert sandbox.run_code("1").text == "1"
        seconds = time.perf_counter() - start
    finally:
        sandbox.kill()
    print(f"  create run {index + 1:3}: {seconds * 1000:7.0f} ms", file=sys.stderr)
    time.sleep(gap)
    return seconds


def round_trips(
    url: str, token: str, sandbox: Sandbox, runs: int
) -> tuple[list[float], list[float], list[float]]:
    """Seconds of each run_code of pass through the SDK, our REST /execute, and the E2B route
    sent by httpx, interleaved."""
    e2b, rest, route_alone = [], [], []
    data_plane = {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "E2b-Sandbox-Port": "49999",
        "X-Access-Token": sandbox._envd_access_token or "",
    }
    headers = {"Authorization": f"token {token}"}
    with (
        httpx.Client(base_url=url, headers=headers, timeout=60) as client,
        httpx.Client(base_url=url, headers=data_plane, timeout=60) as e2b_client,
    ):
        route = f"/api/sandboxes/{sandbox.sandbox_id}/execute"
        for _ in range(3):  # warm both paths
            sandbox.run_code("pass")
            client.post(route, json={"code": "pass"}).raise_for_status()
        for _ in range(runs):
            start = time.perf_counter()
            sandbox.run_code("pass")
            e2b.append(time.perf_counter() - start)
            start = time.perf_counter()
            client.post(route, json={"code": "pass"}).raise_for_status()
            rest.append(time.perf_counter() - start)
            start = time.perf_counter()
            e2b_client.post("/api/e2b/sandbox/execute", json={"code": "pass"}).raise_for_status()
            route_alone.append(time.perf_counter() - start)
    return e2b, rest, route_alone


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", default="runc", choices=("runc", "runsc"))
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--pool", type=int, default=2)
    parser.add_argument("--gap", type=float, default=3.0)
    args = parser.parse_args()
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-b-", dir="/tmp"))
    try:
        with jupyter_server(args.runtime, args.pool, state_dir, True) as server:
            asyncio.run(wait_until_up(server))
            os.environ.update(
                E2B_API_URL=f"{server.url}/api/e2b",
                E2B_SANDBOX_URL=f"{server.url}/api/e2b/sandbox",
                E2B_API_KEY=f"e2b_{server.token}",
            )
            time.sleep(args.gap * 2)  # the pool's first fill
            creates = [create_and_run(i, args.gap) for i in range(args.runs)]
            sandbox = Sandbox.create()
            try:
                e2b, rest, route_alone = round_trips(server.url, server.token, sandbox, args.runs)
            finally:
                sandbox.kill()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    print(f"{args.runtime}, {args.runs} runs")
    print(row("run_code (E2B)", e2b))
    print(row("execute (REST)", rest))
    print(row("/execute (E2B route, httpx)", route_alone))
    ratio = statistics.median(e2b) / statistics.median(rest)
    print(f"{'E2B / REST (p50)':26} {ratio:.2f}x  (target <= 1.2x)")
    print(row("create to first run_code", creates) + f"  (target p50 <= {TARGETS[args.runtime]} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
