"""Which launch directories /workspace may show, and what a running sandbox sees of them."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.workspace.plan import plan_workspace
from tests.conftest import manager_config, remove_everything_under
from tests.sandbox.snapshots.workspace_files import OWNER, sh


def test_a_notebook_folder_is_shown_in_the_chosen_mode(tmp_path: Path) -> None:
    for mode in ("copy-on-write", "read-only", "read-write"):
        plan = plan_workspace(mode, str(tmp_path))
        assert (plan.mode, plan.source, plan.note) == (mode, str(tmp_path.resolve()), "")


@pytest.mark.parametrize(
    ("directory", "reason"),
    [
        ("/", "filesystem root"),
        ("/etc", "system directory"),
        ("/proc/self", "system directory"),
        (str(Path.home()), "home directory"),
    ],
)
def test_sensitive_directories_are_never_shown(directory: str, reason: str) -> None:
    plan = plan_workspace("copy-on-write", directory)
    assert plan.mode == "none"
    assert plan.source is None
    assert reason in plan.note


def test_a_folder_holding_the_credentials_store_is_never_shown(tmp_path: Path) -> None:
    store = tmp_path / "data" / "sandbox-credentials"
    store.mkdir(parents=True)
    for launched in (tmp_path, tmp_path / "data", store):
        plan = plan_workspace("copy-on-write", str(launched), host_only=(store,))
        assert (plan.mode, plan.source) == ("none", None)
        assert "which only the host may read" in plan.note
    beside = tmp_path / "notebooks"
    beside.mkdir()
    assert plan_workspace("read-only", str(beside), host_only=(store,)).source == str(
        beside.resolve()
    )


def test_a_launch_directory_that_cannot_be_resolved_shows_nothing(tmp_path: Path) -> None:
    """A link loop (or a link swapped while it is read) is a note, not an error of the start."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    plan = plan_workspace("copy-on-write", str(loop / "notes"))
    assert (plan.mode, plan.source) == ("none", None)
    assert "could not be resolved" in plan.note


def test_no_launch_directory_or_mode_none_shows_nothing(tmp_path: Path) -> None:
    assert plan_workspace("copy-on-write", None).source is None
    assert plan_workspace("none", str(tmp_path)).source is None


def test_overlay_unsafe_names_fall_back_to_read_only(tmp_path: Path) -> None:
    odd = tmp_path / "a,b:c"
    odd.mkdir()
    plan = plan_workspace("copy-on-write", str(odd))
    assert plan.mode == "read-only"
    assert "shown read-only" in plan.note


@pytest.mark.skipif(os.geteuid() != 0, reason="making a system user needs root")
def test_another_users_home_directory_is_never_shown() -> None:
    """A gateway's kernels run for hub users, whose Lab opens in their own home (the gateway's
    default user root): that home is refused as the server's own is; a folder in it is shown."""
    name = f"jsbx-home-{secrets.token_hex(3)}"
    home = Path(tempfile.mkdtemp(prefix="jsbx-home-", dir="/tmp")) / name
    subprocess.run(["useradd", "--create-home", "--home-dir", str(home), name], check=True)
    try:
        notes = home / "notes"
        notes.mkdir()
        shutil.chown(notes, name, name)
        refused = plan_workspace("copy-on-write", str(home), within=str(home))
        assert (refused.mode, refused.source) == ("none", None)
        assert "home directory" in refused.note
        shown = plan_workspace("copy-on-write", str(notes), within=str(home))
        assert (shown.mode, shown.source) == ("copy-on-write", str(notes))
    finally:
        subprocess.run(["userdel", name], check=True)
        shutil.rmtree(home.parent)


# -- files the host adds while a sandbox runs ---------------------------------------------------

# Lists each folder named on its command line three ways: os.listdir, glob and ls (by its full
# path); a folder that does not exist (yet) lists as null.
LIST_PROGRAM = """
import glob, json, os, subprocess, sys
found = {}
for folder in sys.argv[1:]:
    if not os.path.isdir(folder):
        found[folder] = None
        continue
    found[folder] = {
        "listdir": sorted(os.listdir(folder)),
        "glob": sorted(os.path.basename(p) for p in glob.glob(folder + "/*")),
        "ls": sorted(subprocess.run(["/bin/ls", "-A", folder], capture_output=True, text=True, check=True).stdout.split()),
    }
print(json.dumps(found))
"""
SANDBOX_PYTHON = "/opt/sandbox/bin/python"
# An upper bound on how long a change on the host takes to show (the refresher acts within a
# fraction of a second; this is for a loaded test machine), never a timing assertion: how long
# it takes is measured in benchmarks/workspace_listing.py.
LISTING_WAIT_SECONDS = 20.0

# Under gVisor a copy-on-write /workspace is the kernel's overlayfs seen through gVisor's
# sentry, which keeps each directory it has read open, and overlayfs keeps a merged directory's
# listing while it is open: without the host's refresher (sandbox/workspace/refresh.py) these
# tests fail on runsc-copy-on-write (issue 36, item 1).


@pytest.fixture
def notebook_folder() -> Iterator[Path]:
    """A notebook's folder as users have it: readable by others, a file and a sub-folder."""
    path = Path(tempfile.mkdtemp(prefix="jsbx-nb-", dir="/tmp"))
    (path / "old.csv").write_text("a\n1\n")
    (path / "sub").mkdir()
    for folder in (path, path / "sub"):
        folder.chmod(0o777)  # read-write mode: the sandbox's uid may write here
    (path / "old.csv").chmod(0o644)
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def listings(
    manager: SandboxManager, sandbox_id: str, folders: list[str]
) -> dict[str, dict[str, list[str]] | None]:
    result = await manager.exec(OWNER, sandbox_id, [SANDBOX_PYTHON, "-c", LIST_PROGRAM, *folders])
    assert result.exit_code == 0, result.stderr.decode()
    found: dict[str, dict[str, list[str]] | None] = json.loads(result.stdout)
    return found


async def files_section(manager: SandboxManager, sandbox_id: str, folder: str) -> list[str]:
    """What the Files section (the REST files listing) shows of /workspace/``folder``."""
    entries = (await manager.files.list(OWNER, sandbox_id, f"/workspace/{folder}"))["entries"]
    return sorted(entry["name"] for entry in entries)


async def wait_for_listings(
    manager: SandboxManager, sandbox_id: str, expected: dict[str, list[str]]
) -> None:
    """Wait until each folder of ``expected`` (relative to /workspace) lists exactly those names,
    by every way a user lists it; fail with what differs past LISTING_WAIT_SECONDS."""
    deadline = time.monotonic() + LISTING_WAIT_SECONDS
    while True:
        paths = {f"/workspace/{folder}".rstrip("/"): folder for folder in expected}
        found = await listings(manager, sandbox_id, list(paths))
        wrong: dict[str, Any] = {}
        for path, folder in paths.items():
            ways = found[path] or {}
            ways["files section"] = await files_section(manager, sandbox_id, folder)
            for way, names in ways.items():
                if names != expected[folder]:
                    wrong[f"{path} by {way}"] = names
        if not wrong:
            return
        assert time.monotonic() < deadline, (expected, wrong)
        await asyncio.sleep(0.2)


def add_on_the_host(folder: Path) -> None:
    """What an upload in Lab or a download in a terminal does: new files in the folder."""
    (folder / "uploaded.csv").write_text("b\n2\n")
    (folder / "sub" / "downloaded.csv").write_text("c\n3\n")


def change_on_the_host(folder: Path) -> None:
    """What a user does next in a host terminal or Lab's file browser: remove, rename, and
    make new folders (one beside, one inside a folder the sandbox has written to)."""
    (folder / "old.csv").unlink()
    (folder / "sub" / "downloaded.csv").rename(folder / "sub" / "renamed.csv")
    (folder / "fresh").mkdir()
    (folder / "fresh" / "inner.csv").write_text("d\n")
    (folder / "sub" / "deeper").mkdir()
    (folder / "sub" / "deeper" / "deep.csv").write_text("e\n")


def expected_after_adding(made_inside: list[str]) -> dict[str, list[str]]:
    return {"": ["old.csv", "sub", "uploaded.csv"], "sub": sorted(["downloaded.csv", *made_inside])}


def expected_after_changing(made_inside: list[str]) -> dict[str, list[str]]:
    return {
        "": ["fresh", "sub", "uploaded.csv"],
        "sub": sorted(["deeper", "renamed.csv", *made_inside]),
        "fresh": ["inner.csv"],
        "sub/deeper": ["deep.csv"],
    }


def mode_cases() -> list[Any]:
    cases = []
    for runtime in ("runc", "runsc"):
        for mode in ("copy-on-write", "read-only", "read-write"):
            marks = [getattr(pytest.mark, runtime), pytest.mark.integration]
            cases.append(pytest.param(runtime, mode, marks=marks, id=f"{runtime}-{mode}"))
    return cases


@pytest.mark.parametrize(("runtime_name", "mode"), mode_cases())
async def test_files_the_host_adds_removes_and_renames_after_the_start_are_listed(
    state_dir: Path, notebook_folder: Path, runtime_name: str, mode: str, purpose: str
) -> None:
    manager = SandboxManager.from_config(manager_config(state_dir, workspace_mode=mode))
    try:
        sandbox = await manager.create(
            OWNER, runtime=runtime_name, launch_dir=str(notebook_folder), purpose=purpose
        )
        sandbox_id = sandbox.sandbox_id
        # Listed once before, as the Files section or a notebook's first cell would; where the
        # sandbox may write, it also writes in the sub-folder (which the overlay then merges).
        await wait_for_listings(manager, sandbox_id, {"": ["old.csv", "sub"], "sub": []})
        made_inside = []
        if mode != "read-only":
            await sh(manager, sandbox_id, "echo x > /workspace/sub/made-inside.txt")
            made_inside.append("made-inside.txt")
        add_on_the_host(notebook_folder)
        await wait_for_listings(manager, sandbox_id, expected_after_adding(made_inside))
        change_on_the_host(notebook_folder)
        await wait_for_listings(manager, sandbox_id, expected_after_changing(made_inside))
        # Renamed content is the host's, read by its new name.
        assert (await sh(manager, sandbox_id, "cat /workspace/sub/renamed.csv")) == "c\n3\n"
    finally:
        await remove_everything_under(manager, state_dir)
        await manager.close()


@pytest.mark.integration
@pytest.mark.parametrize(
    "runtime_name",
    [
        pytest.param("runc", marks=pytest.mark.runc),
        pytest.param("runsc", marks=pytest.mark.runsc),
    ],
)
async def test_a_claimed_pool_member_lists_files_added_after_it_was_made(
    state_dir: Path, notebook_folder: Path, runtime_name: str, purpose: str
) -> None:
    manager = SandboxManager.from_config(manager_config(state_dir, runtime=runtime_name))
    config = Config()
    config.WarmPool.size = 1
    pool = WarmPool(manager, OWNER, launch_dir=str(notebook_folder), purpose=purpose, config=config)
    try:
        [member] = await pool.refill()
        # The member's own start read the folder (its probe and kernel start there); a write
        # of its own merges the sub-folder too.
        await wait_for_listings(manager, member, {"": ["old.csv", "sub"], "sub": []})
        await sh(manager, member, "echo x > /workspace/sub/made-inside.txt")
        add_on_the_host(notebook_folder)
        change_on_the_host(notebook_folder)
        sandbox = await manager.create(OWNER, context="c1", launch_dir=str(notebook_folder))
        assert sandbox.sandbox_id == member
        await wait_for_listings(manager, member, expected_after_changing(["made-inside.txt"]))
    finally:
        await remove_everything_under(manager, state_dir)
        await manager.close()
