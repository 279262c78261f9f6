"""A kernel started by plain jupyter_client, with no server, claims a warm pool member."""

from __future__ import annotations

import asyncio
import getpass

import pytest
from traitlets.config import Config

from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config
from tests.kernel.kernels import running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


async def test_a_kernel_claims_a_warm_member(purpose: str) -> None:
    with sandbox_kernel_env(purpose) as state_dir:
        manager = SandboxManager.from_config(manager_config(state_dir, runtime="runc"))
        pool = WarmPool(
            manager,
            getpass.getuser(),  # the kernel's owner when JUPYTER_SANDBOX_OWNER is unset
            launch_dir=str(notebook_dir(state_dir)),
            purpose=purpose,
            config=Config({"WarmPool": {"size": 1}}),
        )
        try:
            [member] = await pool.refill()

            def use_kernel() -> tuple[str, str]:
                with running_kernel(notebook_dir(state_dir), JUPYTER_SANDBOX_RUNTIME="runc") as (
                    _,
                    kc,
                ):
                    banner = kc.kernel_info(reply=True)["content"]["banner"]
                    return banner, value_of(kc, "6 * 7")

            banner, value = await asyncio.to_thread(use_kernel)

            assert f"sandbox {member}" in banner
            assert value == "42"
            assert containers_under(state_dir) == []  # an unnamed kernel's sandbox goes with it
            assert all(ids == [] for ids in pool.members().values())
        finally:
            await pool.drain()
            await manager.close()
