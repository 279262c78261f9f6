"""Kernels started with no server (as nbconvert, papermill and jupyter_client scripts start
them) keep a warm pool for the next ones: the second kernel of a request claims a member."""

from __future__ import annotations

import asyncio
import getpass
import time
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.lifecycle.pool_directory import PoolDirectory
from jupyter_sandbox.sandbox.lifecycle.pool_keeper import stop_keeper
from tests.conftest import BOTH_RUNTIMES
from tests.kernel.kernels import running_kernel, value_of
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration
REFILL_SECONDS = 90.0  # a runsc member takes seconds to start; a loaded CI machine, more


def banner_and_value(state_dir: Path, runtime: str) -> tuple[str, str]:
    """One kernel's banner and the value of 6 * 7 in it, the kernel shut down after."""
    with running_kernel(notebook_dir(state_dir), JUPYTER_SANDBOX_RUNTIME=runtime) as (_, kc):
        banner = kc.kernel_info(reply=True)["content"]["banner"]
        return banner, value_of(kc, "6 * 7")


def wait_for_member(state_dir: Path) -> str:
    """The id of the first warm member the keeper made."""
    pool = PoolDirectory(state_dir)
    deadline = time.monotonic() + REFILL_SECONDS
    while time.monotonic() < deadline:
        for key in pool.pool_keys():
            for member in pool.tickets(key):
                return member
        time.sleep(0.2)
    raise AssertionError(f"no warm member within {REFILL_SECONDS:g}s")


@pytest.mark.parametrize("runtime", BOTH_RUNTIMES)
async def test_the_next_headless_kernel_claims_a_member_the_first_one_had_kept(
    purpose: str, runtime: str
) -> None:
    with sandbox_kernel_env(purpose, headless_pool=True) as state_dir:
        _, first = await asyncio.to_thread(banner_and_value, state_dir, runtime)
        member = await asyncio.to_thread(wait_for_member, state_dir)
        banner, second = await asyncio.to_thread(banner_and_value, state_dir, runtime)

        assert first == second == "42"
        assert f"sandbox {member}" in banner  # the pool's member, not a new sandbox
        assert stop_keeper(state_dir, getpass.getuser())  # drains what it refilled since
        assert containers_under(state_dir) == []


async def test_an_idle_keeper_removes_its_members_and_exits(purpose: str) -> None:
    with sandbox_kernel_env(purpose, headless_pool=True, idle_timeout=15.0) as state_dir:
        await asyncio.to_thread(banner_and_value, state_dir, "runc")
        await asyncio.to_thread(wait_for_member, state_dir)
        lock = PoolDirectory(state_dir).refill_lock_path(getpass.getuser())
        deadline = time.monotonic() + 90
        while PoolDirectory(state_dir).refiller_running(getpass.getuser()):
            assert time.monotonic() < deadline, f"the keeper still holds {lock}"
            await asyncio.sleep(0.2)
        assert containers_under(state_dir) == []


async def test_with_the_headless_pool_off_no_member_is_made(purpose: str) -> None:
    with sandbox_kernel_env(purpose) as state_dir:
        await asyncio.to_thread(banner_and_value, state_dir, "runc")
        await asyncio.sleep(3)  # a keeper would have started its member by now
        assert not PoolDirectory(state_dir).refiller_running(getpass.getuser())
        assert containers_under(state_dir) == []
