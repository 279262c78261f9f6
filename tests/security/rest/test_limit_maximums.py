"""Rows 45 and 46 through the REST API: limits above the administrator's maximums, and the
limits that hold the host's resources counted in the owner's quota (issue 31: pids 4,194,304
and tmp_size 100t were accepted, and pids were counted nowhere)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from jupyter_sandbox.server_extension import SandboxExtension
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users

pytestmark = pytest.mark.integration

ALICE = {"headers": {"Authorization": "token alice"}}
MAXIMUMS = {
    "max_memory_limit": "2g",
    "max_cpus": 1.0,
    "max_pids_limit": 512,
    "max_nofile_limit": 4096,
    "max_tmp_size": "512m",
    "max_workspace_size": "2g",
}
# Each limit above its maximum, as issue 31 found them or as far past.
ABOVE = [
    ({"pids": 4_194_304}, "max_pids_limit", "512"),
    ({"tmp_size": "100t"}, "max_tmp_size", "512m"),
    ({"workspace_size": "100t"}, "max_workspace_size", "2g"),
    ({"memory": "1t"}, "max_memory_limit", "2g"),
    ({"cpus": 2}, "max_cpus", "1"),
    ({"nofile": 1 << 20}, "max_nofile_limit", "4096"),
]
QUOTAS = {"max_pids": 600, "max_tmp_size": "600m", "max_workspace_size": "1500m"}


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    config = with_named_users(jp_server_config)
    return {
        **config,
        "SandboxSettings": {**config["SandboxSettings"], **MAXIMUMS},
        "SandboxQuotas": QUOTAS,
    }


async def create(fetch: Fetch, runtime: str, limits: dict[str, Any]) -> tuple[int, Any]:
    return await api(fetch, "POST", body={"runtime": runtime, "limits": limits}, **ALICE)


@pytest.mark.checklist(
    row=45,
    attack="limits above the administrator's maximums in a REST create: pids 4194304, "
    "tmp_size 100t, workspace_size 100t, memory 1t, cpus 2, nofile 1048576",
    expected="each refused with a 400 naming the maximum and its setting, nothing made; a "
    "request at the maximums is made and holds them",
)
async def test_row45_limits_above_their_maximums_are_refused(
    jp_fetch: Fetch, extension: SandboxExtension, runtime: str, observe: Callable[..., None]
) -> None:
    for limits, setting, maximum in ABOVE:
        status, error = await create(jp_fetch, runtime, limits)
        assert (status, error["code"]) == (400, "invalid_setting"), (limits, error)
        assert f"maximum of {maximum} (c.SandboxSettings.{setting})" in error["message"], error
    assert await extension.manager.list_sandboxes("alice") == []
    at_most = {"pids": 512, "nofile": 4096, "tmp_size": "512m", "memory": "1g"}
    status, made = await create(jp_fetch, runtime, at_most)
    assert status == 201, made
    assert (made["limits"]["pids"], made["limits"]["tmp_size"]) == (512, 512 * 1024**2), made
    observe(
        f"{len(ABOVE)} limits above their maximums, each a 400 naming the maximum and setting "
        "(e.g. pids 4194304 over max_pids_limit 512); nothing made; a request at them made",
        cases=len(ABOVE),
    )


@pytest.mark.checklist(
    row=46,
    attack="one owner holding the host's pids and memory-backed filesystems over several "
    "sandboxes: pids, tmp_size and workspace_size summed past the owner's quota",
    expected="the create that would go past max_pids, max_tmp_size or max_workspace_size is "
    "refused with a 403 naming the quota; one within them is made",
)
async def test_row46_pids_and_memory_backed_filesystems_count_in_the_quota(
    jp_fetch: Fetch, runtime: str, observe: Callable[..., None]
) -> None:
    first = {"pids": 512, "tmp_size": "256m", "workspace_size": "1g"}
    status, made = await create(jp_fetch, runtime, first)
    assert status == 201, made
    past = [
        ({"pids": 256}, "max_pids"),  # 768 of 600
        ({"pids": 64, "tmp_size": "512m"}, "max_tmp_size"),  # 768m of 600m
        ({"pids": 64, "tmp_size": "256m", "workspace_size": "1g"}, "max_workspace_size"),
    ]
    for limits, quota in past:
        status, error = await create(jp_fetch, runtime, limits)
        assert (status, error["code"]) == (403, "quota_exceeded"), (limits, error)
        assert f"quota {quota}:" in error["message"], error
    within = {"pids": 64, "tmp_size": "256m", "workspace_size": "256m"}
    status, made = await create(jp_fetch, runtime, within)
    assert status == 201, made
    observe(
        f"quotas pids {QUOTAS['max_pids']}, tmp {QUOTAS['max_tmp_size']}, workspace "
        f"{QUOTAS['max_workspace_size']}: {len(past)} creates past one of them, each a 403 "
        "naming it; one within them made",
        cases=len(past),
    )
