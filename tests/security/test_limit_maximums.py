"""Row 49: limits above the administrator's maximums asked for by a kernel
(JUPYTER_SANDBOX_LIMITS, as a kernelspec made by install-kernel --limits sets it), through the
proxy kernel as JupyterLab starts it. The REST API's rows are 45 and 46 (rest/)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import purpose_label
from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


@pytest.mark.checklist(
    row=49,
    attack="a kernel asking for limits above the maximums: JUPYTER_SANDBOX_LIMITS "
    "pids=4194304, then tmp_size=100t (issue 31: both were accepted)",
    expected="no sandbox is made; the kernel's cells fail with the message naming the maximum "
    "and its setting; a kernel asking for what is allowed runs",
)
def test_row49_a_kernel_asking_past_the_maximums_gets_no_sandbox(
    request: pytest.FixtureRequest, runtime: str, observe: Callable[..., None]
) -> None:
    purpose = purpose_label(request.node.nodeid)
    asked = [("pids=4194304", "max_pids_limit"), ("tmp_size=100t", "max_tmp_size")]
    refusals = []
    with sandbox_kernel_env(purpose, max_pids_limit=512, max_tmp_size="512m") as state_dir:
        for limits, setting in asked:
            with running_kernel(
                notebook_dir(state_dir),
                JUPYTER_SANDBOX_RUNTIME=runtime,
                JUPYTER_SANDBOX_LIMITS=limits,
            ) as (_, kc):
                out, reply = run(kc, "1")
            assert reply["status"] == "error"
            assert f"(c.SandboxSettings.{setting})" in out, out
            refusals.append(out.strip().splitlines()[-1])
            assert containers_under(state_dir) == []
        with running_kernel(
            notebook_dir(state_dir),
            JUPYTER_SANDBOX_RUNTIME=runtime,
            JUPYTER_SANDBOX_LIMITS="pids=512,tmp_size=512m",
        ) as (_, kc):
            assert value_of(kc, "6 * 7") == "42"
    observe(f"no sandbox made; the cells said: {refusals[0][:200]}", cases=len(asked))
