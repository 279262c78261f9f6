"""Row 10: an output flood from a cell, through the proxy kernel as JupyterLab reaches it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import purpose_label
from ..kernel.kernels import run, running_kernel, value_of
from ..kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration

FLOOD_MB = 64


def peak_memory_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return -1


@pytest.mark.checklist(
    row=10,
    attack=f"output flood: a cell printing {FLOOD_MB} MB",
    expected="what reaches the frontend is cut at the cell output cap with a notice saying why; "
    "the cell and the kernel run on; the proxy's memory stays bounded",
)
def test_row10_output_flood_is_capped(
    request: pytest.FixtureRequest, runtime: str, observe: Callable[..., None]
) -> None:
    purpose = purpose_label(request.node.nodeid)
    with (
        sandbox_kernel_env(purpose, max_cell_output="1m") as state_dir,
        running_kernel(notebook_dir(state_dir), JUPYTER_SANDBOX_RUNTIME=runtime) as (km, kc),
    ):
        out, reply = run(
            kc,
            f"line = 'x' * 2**20\nfor _ in range({FLOOD_MB}): print(line)\nprint('cell ended')",
            timeout=240,
        )
        assert reply["status"] == "ok"
        assert "this cell's output passed 1m" in out
        assert len(out.encode()) < 2**20 + 1024
        assert "cell ended" not in out  # past the cap: not shown, yet the cell finished
        assert value_of(kc, "6 * 7") == "42"
        peak = peak_memory_mb(km.provisioner.pid)  # type: ignore[union-attr]
    observe(
        f"{FLOOD_MB} MB printed; {len(out.encode()) >> 10} KiB reached the frontend, ending with "
        f"the notice; the cell finished and the kernel answered; proxy peak memory {peak} MB",
        cases=1,
    )
