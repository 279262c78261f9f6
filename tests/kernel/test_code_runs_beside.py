"""A notebook's kernel and code run from the host (sandbox/operations/code_runs.py, as REST's
``/execute`` does it) share one interpreter, and neither sees the other's output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.identity import default_owner
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import CodeRequest, run_code
from tests.conftest import manager_config
from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


@pytest.fixture
def env(purpose: str) -> Iterator[Path]:
    with sandbox_kernel_env(purpose) as state_dir:
        yield state_dir


async def test_a_run_from_the_host_uses_the_notebooks_interpreter(env: Path) -> None:
    owner = default_owner()
    manager = SandboxManager.from_config(manager_config(env))
    try:
        with running_kernel(notebook_dir(env), JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
            assert run(kc, "x = 1")[1]["status"] == "ok"
            [info] = await manager.list_sandboxes(owner)
            result = await run_code(
                manager, owner, info.sandbox_id, CodeRequest("x += 1\nprint('from the host')")
            )
            assert result.status == "ok"
            assert result.stdout == "from the host\n"
            # The notebook sees the variable the run changed, and only its own output: the
            # run's was published to every client, with the run's request as its parent.
            assert value_of(kc, "x") == "2"
            printed, reply = run(kc, "print('from the notebook')")
            assert (printed, reply["status"]) == ("from the notebook\n", "ok")
            again = await run_code(manager, owner, info.sandbox_id, CodeRequest("x"))
            assert again.outputs[0]["data"]["text/plain"] == "2"
            assert again.stdout == ""  # the notebook's print is not this run's
    finally:
        await manager.close()
