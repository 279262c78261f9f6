"""The settings of snapshots (``c.Snapshots.*`` in jupyter_sandbox_config.py).

:class:`SnapshotSettings` is the base of :class:`~.service.Snapshots`; traitlets reads
``c.Snapshots.x`` and ``c.SnapshotSettings.x`` alike.
"""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Enum, Float, Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.sandbox.snapshots.archive_scan import ArchiveLimits
from jupyter_sandbox.sandbox.snapshots.storage import SnapshotStore


class SnapshotSettings(LoggingConfigurable):
    """Where snapshots are kept, their caps, and how archives move."""

    snapshot_dir = Unicode(
        config=True,
        help="""Host directory of stored snapshots: one 0700 directory per owner inside.
        Default: <jupyter data dir>/sandbox-snapshots (snapshots outlive the sandboxes and the
        server, unlike the runtime directory that holds the sandboxes' state).""",
    )
    max_archive_bytes = Integer(
        2 * 1024**3,
        config=True,
        help="""Largest snapshot archive in bytes, made or uploaded (0: no cap). A persist
        whose archive grows past it is stopped and nothing is stored.""",
    )
    max_members = Integer(
        100_000,
        config=True,
        help="Most files, directories and links one archive may hold (0: no cap).",
    )
    max_expanded_bytes = Integer(
        4 * 1024**3,
        config=True,
        help="""Most bytes the members of one archive may declare in all, headers included
        (0: no cap). Checked from each header before its data is read, so an archive
        declaring a huge file is refused at once.""",
    )
    allow_external_symlinks = Bool(
        False,
        config=True,
        help="""Accept symlinks whose target leaves /workspace (an absolute path, or '..'
        past the root), e.g. a virtualenv's bin/python. They are restored as they are and
        resolve only inside the sandbox; members under any symlink stay refused. False
        (strict): such an archive is refused, naming the link.""",
    )
    max_snapshots = Integer(
        100,
        config=True,
        help="""Most snapshots one owner may keep (0: no cap). A persist or import past it is
        refused (quota_exceeded) before the sandbox is touched; delete old snapshots first.""",
    )
    transport = Enum(
        ("host-dir", "exec"),
        default_value="host-dir",
        config=True,
        help="""How archives move between a sandbox and the host. 'host-dir': tar in the
        sandbox writes to (or reads from) the sandbox's own host directory, its /run/sandbox
        bind mount, and the host copies from (or writes to) it with O_NOFOLLOW/O_EXCL; this
        needs up to max_archive_bytes of temporary space there (a tmpfs of
        SandboxSettings.io_size when the host's writes are capped); an archive to restore
        that does not fit there goes over the exec stream instead. 'exec':
        streamed over the engine's exec socket, nothing written outside the snapshot
        directory, but several times slower (docs/explanation/performance.md; every byte crosses a
        pipe in dockerd and, under gVisor, gVisor's slow pipes). Both check every member on the
        host and unpack inside the sandbox.""",
    )
    timeout = Float(
        600.0,
        config=True,
        help="""Seconds one persist or restore (the tar inside the sandbox) may take; also
        the most one reading of an archive on the host (its scan, or scan and clean copy) may
        take, whatever its headers say.""",
    )

    @default("snapshot_dir")
    def _default_snapshot_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "sandbox-snapshots")

    @property
    def store(self) -> SnapshotStore:
        return SnapshotStore(Path(self.snapshot_dir))

    @property
    def limits(self) -> ArchiveLimits:
        return ArchiveLimits(
            max_bytes=self.max_archive_bytes,
            max_members=self.max_members,
            max_expanded_bytes=self.max_expanded_bytes,
            allow_external_links=self.allow_external_symlinks,
            max_seconds=self.timeout,
        )
