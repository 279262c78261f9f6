"""Load: many Sandboxed Python kernels at once, each running many cells that print tagged lines;
no output may be lost, duplicated or delivered to the wrong kernel. The REST API's latency is
measured meanwhile (recorded, not asserted: timings belong to benchmarks).

CI runs 10 kernels x 30 cells. The full size of the security battery is 50 x 100:
``JUPYTER_SANDBOX_LOAD=50x100 .venv/bin/pytest tests/security/rest/test_load.py``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_pool import start_kernel

pytestmark = [pytest.mark.integration, pytest.mark.runc]

KERNELS, CELLS = (int(n) for n in os.environ.get("JUPYTER_SANDBOX_LOAD", "10x30").split("x"))
LINES = 3


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    return {
        **jp_server_config,
        "SandboxQuotas": {"max_sandboxes": 0, "max_memory": "", "max_cpus": 0.0},
    }


async def run_cells(serverapp: Any, kernel_id: str, tag: str) -> list[str]:
    """Run CELLS cells in one kernel; return every stream line it delivered, in order."""
    client = serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    received: list[str] = []  # stream texts; a line may be split across two messages
    try:
        await client.wait_for_ready(timeout=120)
        for cell in range(CELLS):
            msg_id = client.execute(
                f"for line in range({LINES}): print('{tag}:{cell}:' + str(line))"
            )
            while True:
                msg = await client.get_iopub_msg(timeout=120)
                if msg["msg_type"] == "stream":
                    received.append(msg["content"]["text"])
                if (
                    msg["parent_header"].get("msg_id") == msg_id
                    and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "idle"
                ):
                    break
            reply = await client.get_shell_msg(timeout=120)
            assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
    return "".join(received).splitlines()


async def poll_rest(fetch: Fetch, latencies: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        status, _ = await api(fetch, "GET")
        assert status == 200
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.05)


@pytest.mark.resilience(
    scenario=f"load: {KERNELS} concurrent kernels x {CELLS} cells of tagged output",
    expected="no output lost, duplicated or delivered to another kernel; the REST API answers",
)
async def test_concurrent_kernels_lose_and_mix_no_output(
    kernel_env: dict[str, str],
    jp_fetch: Fetch,
    jp_serverapp: Any,
    extension: SandboxExtension,
    observe: Callable[..., None],
) -> None:
    kernel_ids = await asyncio.gather(
        *(start_kernel(jp_fetch, jp_serverapp, f"load-{i}.ipynb") for i in range(KERNELS))
    )
    latencies: list[float] = []
    stop = asyncio.Event()
    poller = asyncio.ensure_future(poll_rest(jp_fetch, latencies, stop))
    started = time.perf_counter()
    try:
        outputs = await asyncio.gather(
            *(run_cells(jp_serverapp, kid, f"k{i}") for i, kid in enumerate(kernel_ids))
        )
    finally:
        stop.set()
        await poller
        for kernel_id in kernel_ids:
            await jp_serverapp.kernel_manager.shutdown_kernel(kernel_id)
    elapsed = time.perf_counter() - started

    for i, lines in enumerate(outputs):
        expected = [f"k{i}:{c}:{line}" for c in range(CELLS) for line in range(LINES)]
        assert lines == expected, f"kernel {i}: {len(lines)} lines, first wrong: " + next(
            (got for got, want in zip(lines, expected, strict=False) if got != want),
            "(missing lines)",
        )
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    observe(
        f"{KERNELS * CELLS * LINES} tagged lines from {KERNELS} kernels in {elapsed:.0f} s: none "
        f"lost, duplicated or misdelivered; REST list p50 {cuts[49] * 1000:.0f} ms, p99 "
        f"{cuts[98] * 1000:.0f} ms over {len(latencies)} calls under that load",
        cases=KERNELS * CELLS,
    )
