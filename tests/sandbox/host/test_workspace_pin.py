"""The workspace directory is opened within its root and mounted as opened (workspace_pin.py):
a symbolic link swapped in after the check never makes a sandbox show what lies outside."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.container_spec import container_name
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.size_caps import can_cap
from jupyter_sandbox.sandbox.host.workspace_pin import open_within, pin_workspace
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.workspace.plan import plan_workspace
from tests.conftest import manager_config, remove_everything_under
from tests.sandbox.snapshots.workspace_files import OWNER, sh

needs_mounts = pytest.mark.skipif(not can_cap(), reason="pinning mounts: root, engine's namespace")

RENAME_EXCHANGE = 2
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def tree() -> Iterator[Path]:
    """``root/inside`` (marker "inside"), ``outside`` (marker "outside") beside the root, and
    ``root/swap``, a link to ``outside`` that exchange() trades places with ``inside``."""
    base = Path(tempfile.mkdtemp(prefix="jsbx-pin-", dir="/tmp"))
    base.chmod(0o755)  # the sandbox's uid reads the files
    for name in ("root/inside", "outside"):
        (base / name).mkdir(parents=True)
        (base / name / "marker").write_text(name.split("/")[-1])
        (base / name).chmod(0o755)
    (base / "root").chmod(0o755)
    (base / "root" / "swap").symlink_to(base / "outside")
    yield base
    shutil.rmtree(base)


def mount_sources(sandbox_id: str) -> str:
    """What the engine was told to mount for the sandbox: its binds and volumes' options."""
    client = docker.from_env(version="auto")
    container = client.api.inspect_container(container_name(sandbox_id))
    found = [m.get("Source", "") for m in container["Mounts"]]
    for mount in container["Mounts"]:
        if mount.get("Type") == "volume":
            options = client.api.inspect_volume(mount["Name"]).get("Options") or {}
            found.append(options.get("o", ""))
    return "\n".join(found)


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (renameat2 RENAME_EXCHANGE): a directory and a link."""
    if _libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def test_a_link_on_the_way_is_refused_and_a_directory_is_opened(tree: Path) -> None:
    root = str(tree / "root")
    fd = open_within(str(tree / "root" / "inside"), root)
    os.close(fd)
    for path in [str(tree / "root" / "swap"), str(tree / "outside"), f"{root}/inside/../.."]:
        with pytest.raises(InvalidSettingError):
            open_within(path, root)


def test_a_plan_without_a_root_is_left_as_it_is(tree: Path, tmp_path: Path) -> None:
    plan = plan_workspace("copy-on-write", str(tree / "root" / "inside"))
    assert pin_workspace(plan, tmp_path / "pin") == plan
    assert not (tmp_path / "pin").exists()


def test_a_directory_outside_its_root_is_not_planned(tree: Path) -> None:
    plan = plan_workspace("copy-on-write", str(tree / "root" / "swap"), str(tree / "root"))
    assert (plan.mode, plan.source) == ("none", None)
    assert "outside" in plan.note


@needs_mounts
@pytest.mark.parametrize("mode", ["copy-on-write", "read-write"])
def test_removing_the_sandbox_directory_keeps_the_users_files(
    tree: Path, state_dir: Path, mode: str
) -> None:
    root = str(tree / "root")
    plan = plan_workspace(mode, str(tree / "root" / "inside"), root)
    directory = SandboxDirectory(state_dir, "pinned")
    directory.root.mkdir(mode=0o700)
    pinned = pin_workspace(plan, directory.workspace_source)
    assert pinned.source == str(directory.workspace_source)
    assert (directory.workspace_source / "marker").read_text() == "inside"
    directory.remove()
    assert not directory.root.exists()
    assert (tree / "root" / "inside" / "marker").read_text() == "inside"


RUNTIMES = [
    pytest.param("runc", marks=[pytest.mark.runc, pytest.mark.integration]),
    pytest.param("runsc", marks=[pytest.mark.runsc, pytest.mark.integration]),
]


@needs_mounts
@pytest.mark.parametrize("runtime_name", RUNTIMES)
@pytest.mark.checklist(
    row=124,
    attack="the user swaps their checked working directory for a symbolic link to a directory "
    "outside their root: after the check and before the engine mounts it, and racing "
    "(renameat2 exchanges) all through several sandbox starts",
    expected="a start after the swap is refused; while racing, each sandbox is refused, shows "
    "no workspace, or shows the directory inside: never the one outside",
)
async def test_a_link_swapped_in_after_the_check_is_never_mounted(
    tree: Path, state_dir: Path, runtime_name: str, purpose: str, observe: Any
) -> None:
    manager = SandboxManager.from_config(manager_config(state_dir, runtime=runtime_name))
    root, inside, swap = str(tree / "root"), tree / "root" / "inside", tree / "root" / "swap"
    racing = threading.Event()

    def flip() -> None:
        while racing.is_set():
            exchange(inside, swap)

    seen: list[str] = []
    try:
        # Unraced: the engine mounts the pinned directory, and the sandbox sees it.
        sandbox = await manager.create(
            OWNER, launch_dir=str(inside), workspace_root=root, purpose=purpose
        )
        pin = SandboxDirectory(state_dir, sandbox.sandbox_id).workspace_source
        assert str(pin) in mount_sources(sandbox.sandbox_id)
        assert await sh(manager, sandbox.sandbox_id, "cat /workspace/marker") == "inside"
        await manager.remove(OWNER, sandbox.sandbox_id)

        # Checked while "inside" is the directory, swapped before the sandbox is made.
        request = manager.check_request(OWNER, launch_dir=str(inside), workspace_root=root)
        assert request.workspace.source == str(inside)
        exchange(inside, swap)
        with pytest.raises(InvalidSettingError, match="changed while its sandbox started"):
            await manager.start_sandbox(request, purpose=purpose)
        assert await manager.list_sandboxes(OWNER) == []
        exchange(inside, swap)  # back: "inside" is the directory again

        racing.set()
        flipper = threading.Thread(target=flip)
        flipper.start()
        try:
            for _ in range(4):
                try:
                    sandbox = await manager.create(
                        OWNER, launch_dir=str(inside), workspace_root=root, purpose=purpose
                    )
                except InvalidSettingError:
                    seen.append("refused")
                    continue
                shown = await sh(manager, sandbox.sandbox_id, "cat /workspace/marker || true")
                seen.append(shown or "empty")
                await manager.remove(OWNER, sandbox.sandbox_id)
        finally:
            racing.clear()
            flipper.join()
        assert "outside" not in seen, seen
        assert (tree / "outside" / "marker").read_text() == "outside"
        observe(f"swap after the check: refused; 4 starts while racing: {seen}", cases=5)
    finally:
        racing.clear()
        await remove_everything_under(manager, state_dir)
        await manager.close()
