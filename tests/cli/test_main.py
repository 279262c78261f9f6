"""`jupyter sandbox <verb>` as a person runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import SandboxNotFoundError
from jupyter_sandbox.sandbox.doctor import orphans
from jupyter_sandbox.sandbox.manager import SandboxManager, default_owner
from tests.conftest import left_in_state_dir

pytestmark = pytest.mark.integration
JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli"]


def sandbox_cli(*args: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = [f"--SandboxSettings.state_dir={state_dir}"] if state_dir else []
    return subprocess.run(
        [*JUPYTER, *args, *extra], capture_output=True, text=True, timeout=300, check=False
    )


def test_no_verb_lists_the_verbs() -> None:
    result = sandbox_cli()
    assert result.returncode == 2
    for verb in ("doctor", "build-image", "list", "gc"):
        assert verb in result.stdout


def test_jupyter_finds_the_command() -> None:
    jupyter = Path(sys.executable).parent / "jupyter"
    result = subprocess.run([str(jupyter), "sandbox", "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.strip()


def test_doctor_passes_on_this_machine(state_dir: Path) -> None:
    result = sandbox_cli("doctor", state_dir=state_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK    kernel on runsc" in result.stdout
    assert "OK    kernel on runc" in result.stdout
    assert left_in_state_dir(state_dir) == []


def test_doctor_fails_naming_the_fix_when_the_image_is_missing(state_dir: Path) -> None:
    result = sandbox_cli(
        "doctor", "--SandboxSettings.image=jupyter-sandbox/absent:0", state_dir=state_dir
    )
    assert result.returncode == 1
    assert "FAIL  image" in result.stdout
    assert "fix: jupyter sandbox build-image" in result.stdout


def test_build_image_skips_an_up_to_date_image() -> None:
    result = sandbox_cli("build-image")
    assert result.returncode == 0, result.stderr
    assert "is up to date" in result.stdout


def test_list_and_gc_on_an_empty_state_dir(state_dir: Path) -> None:
    listed = sandbox_cli("list", state_dir=state_dir)
    assert listed.returncode == 0
    assert listed.stdout.startswith("SANDBOX")
    reaped = sandbox_cli("gc", state_dir=state_dir)
    assert reaped.returncode == 0
    assert reaped.stdout.startswith("removed 0 container(s)")
    assert reaped.stdout.rstrip().endswith("leftover build container(s)")


def test_errors_are_one_clear_line(state_dir: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    result = subprocess.run(
        [*JUPYTER, "list", f"--SandboxSettings.state_dir={state_dir}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: no Docker engine answers")
    assert "Traceback" not in result.stderr


async def test_list_says_what_each_sandbox_serves(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    named = await manager.create(default_owner(), runtime="runc", context="c1", purpose=purpose)
    listed = sandbox_cli("list", state_dir=state_dir)
    assert listed.returncode == 0, listed.stderr
    [row] = listed.stdout.splitlines()[1:]
    assert row.startswith(named.sandbox_id)
    assert "context c1 (detached)" in row


async def test_an_orphan_is_listed_as_one_reported_by_doctor_and_swept_by_the_next_verb(
    manager: SandboxManager, state_dir: Path, purpose: str, tmp_path: Path
) -> None:
    """An unnamed kernel's sandbox whose kernel process and lifeline are both gone (nobody
    holds its context), idle past the start timeout: with no server, the next verb removes it."""
    orphan = await manager.create(
        default_owner(),
        runtime="runc",
        context="kernel-0123456789abcdef",
        ephemeral=True,
        purpose=purpose,
    )
    # Its network forwarder starts beside the caller and records itself in the state file
    # (starting.py): let it finish before the state is aged.
    await asyncio.gather(*manager.forwarder_spawns.values())
    state_file = state_dir / orphan.sandbox_id / "state.json"
    long_ago = time.time() - 3600
    os.utime(state_file, (long_ago, long_ago))

    listed = sandbox_cli("list", state_dir=state_dir)
    assert listed.returncode == 0, listed.stderr
    [row] = listed.stdout.splitlines()[1:]
    assert row.startswith(orphan.sandbox_id)
    assert "orphan " in row
    assert row.endswith("(orphan: its kernel process is gone)")
    check = await orphans(manager)
    assert (check.status, check.fix.split()[:3]) == ("warn", ["jupyter", "sandbox", "gc"])
    assert orphan.sandbox_id in check.detail

    # Any verb that acts as an owner sweeps beside its own work; this one lists snapshots.
    verb = sandbox_cli(
        "snapshot",
        "list",
        f"--Snapshots.snapshot_dir={tmp_path / 'snapshots'}",
        state_dir=state_dir,
    )
    assert verb.returncode == 0, verb.stderr
    with pytest.raises(SandboxNotFoundError):
        await manager.get(default_owner(), orphan.sandbox_id)
    assert not (state_dir / orphan.sandbox_id).exists()
    assert (await orphans(manager)).status == "ok"
