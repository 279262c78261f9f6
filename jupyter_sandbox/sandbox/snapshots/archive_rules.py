"""The rules every member of a workspace archive must pass before any of it is written.

Checked on the host, member by member, from the headers alone: nothing is extracted here
(never ``tarfile.extractall`` on the host). :class:`ArchiveRules` holds what the members seen
so far imply (their names, the directories above them, the symlinks) so that duplicates,
members under a symlink and links leaving the root are caught whatever the members' order.

Each refusal is an :class:`UnsafeArchiveError` naming the member and one of these rules:

``absolute-path``, ``parent-traversal``, ``windows-separator``, ``windows-drive``,
``non-canonical-path``, ``name-not-utf8``, ``name-too-long``, ``hardlink``, ``device``,
``fifo``, ``sparse-file``, ``unsupported-type``, ``symlinked-root``, ``root-not-directory``,
``duplicate``, ``under-symlink``, ``under-file``, ``path-conflict``, ``link-absolute``,
``link-escape``, ``link-loop``; and, for archives whose names would take more memory or time
than any workspace's, ``name-bytes`` and ``link-steps`` (ArchiveTooLargeError).
"""

from __future__ import annotations

import posixpath
import re
import tarfile
from collections import deque

from jupyter_sandbox.protocol.snapshot_errors import ArchiveTooLargeError, UnsafeArchiveError, shown

ROOT = "."
_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_PATH = 4096
MAX_COMPONENT = 255
# Symlinks followed while resolving one link target, as the kernel's ELOOP limit.
MAX_LINK_HOPS = 40
# What the names an archive's members make the host hold (their own, the directories above
# them, link targets) may take, counting each name's bytes and ENTRY_BYTES for the entry: a
# hostile archive of 100,000 members with deep 4 KiB paths would otherwise hold gigabytes.
# A workspace of 100,000 files of 80-byte names takes about 40 MB.
MAX_NAME_BYTES = 256 * 1024**2
ENTRY_BYTES = 100
# Path components looked at (and joined) while resolving every link of one archive together:
# each link may hop MAX_LINK_HOPS times through 4 KiB targets, so the product is bounded here
# instead (a few seconds of work; a workspace's links take a small fraction of it).
MAX_LINK_STEPS = 20_000_000
# Said where a link leaves the workspace: a virtualenv in /workspace has such links.
_LINK_HINT = "; Snapshots.allow_external_symlinks = True keeps such links as they are"
# Modes kept on restore: rwx for the owner, r-x for the rest. Setuid, setgid, sticky and
# group/world write bits are dropped.
SAFE_MODE_BITS = 0o755


def normalized_name(raw: str, *, what: str = "name", member: str | None = None) -> str:
    """``raw`` as a canonical relative path ('.' for the root), or UnsafeArchiveError.

    GNU tar writes members as './a/b' (and directories with a trailing '/'); both forms are
    accepted and mean 'a/b'. Anything else that is not plain 'a/b' is refused.
    """
    member = raw if member is None else member
    if "\\" in raw:
        raise UnsafeArchiveError(member, "windows-separator", f"{what} contains a backslash")
    if _DRIVE.match(raw):
        raise UnsafeArchiveError(member, "windows-drive", f"{what} starts with a drive letter")
    if raw.startswith("/"):
        raise UnsafeArchiveError(member, "absolute-path", f"{what} is an absolute path")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeArchiveError(
            member.encode("utf-8", "backslashreplace").decode(),
            "name-not-utf8",
            f"{what} is not valid UTF-8",
        ) from None
    name = raw
    while name.startswith("./"):
        name = name[2:]
    if name.endswith("/"):
        name = name[:-1]
    if name in ("", "."):
        return ROOT
    parts = name.split("/")
    if ".." in parts:
        raise UnsafeArchiveError(member, "parent-traversal", f"{what} contains '..'")
    if "" in parts or "." in parts:
        raise UnsafeArchiveError(
            member, "non-canonical-path", f"{what} has an empty or '.' component"
        )
    if len(name.encode()) > MAX_PATH or any(len(p.encode()) > MAX_COMPONENT for p in parts):
        raise UnsafeArchiveError(member, "name-too-long", f"{what} is longer than the OS allows")
    return name


def member_kind(info: tarfile.TarInfo) -> str:
    """'file', 'dir' or 'symlink'; every other kind of member is refused here."""
    if info.issparse():
        raise UnsafeArchiveError(info.name, "sparse-file", "sparse files are not restored")
    if info.isreg():
        return "file"
    if info.isdir():
        return "dir"
    if info.issym():
        return "symlink"
    if info.islnk():
        raise UnsafeArchiveError(info.name, "hardlink", "hard links are not restored")
    if info.ischr() or info.isblk():
        raise UnsafeArchiveError(info.name, "device", "device files are not restored")
    if info.isfifo():
        raise UnsafeArchiveError(info.name, "fifo", "FIFOs are not restored")
    raise UnsafeArchiveError(
        info.name, "unsupported-type", f"member type {info.type!r} is not restored"
    )


class ArchiveRules:
    """Admits the members of one archive in order; :meth:`finish` checks what needs them all.

    ``allow_external_links``: symlinks may point outside the workspace (e.g. a virtualenv's
    ``bin/python -> /usr/local/bin/python3``). They are then restored as they are and resolve
    inside the sandbox only; members under a symlink stay refused either way.
    """

    def __init__(self, *, allow_external_links: bool = False) -> None:
        self.allow_external_links = allow_external_links
        self.kinds: dict[str, str] = {}  # canonical name -> file | dir | symlink
        self.implied_dirs: set[str] = set()  # every directory above some member
        self.links: dict[str, str] = {}  # symlink name -> its target
        self.name_bytes = 0  # what the three above hold, as MAX_NAME_BYTES counts it
        self.link_steps = 0

    def admit(self, info: tarfile.TarInfo) -> tuple[str, str]:
        """Check one member; returns its canonical name and kind."""
        name = normalized_name(info.name)
        kind = member_kind(info)
        if name == ROOT:
            if kind == "symlink":
                raise UnsafeArchiveError(info.name, "symlinked-root", "the root is a symlink")
            if kind != "dir":
                raise UnsafeArchiveError(info.name, "root-not-directory", "the root is a file")
        if name in self.kinds:
            raise UnsafeArchiveError(info.name, "duplicate", "appears twice in the archive")
        if kind != "dir" and name in self.implied_dirs:
            rule = "under-symlink" if kind == "symlink" else "path-conflict"
            raise UnsafeArchiveError(
                info.name, rule, "replaces a directory that other members are in"
            )
        # Nearest parent first, stopping at one already known: its own parents were checked
        # when it was added, so each member costs its name's length plus the new directories.
        new_dirs = []
        end = len(name)
        while (cut := name.rfind("/", 0, end)) > 0:
            parent = name[:cut]
            if parent in self.implied_dirs:
                break
            parent_kind = self.kinds.get(parent)
            if parent_kind == "symlink":
                raise UnsafeArchiveError(
                    info.name, "under-symlink", f"lies under the symlink {shown(parent)!r}"
                )
            if parent_kind == "file":
                raise UnsafeArchiveError(
                    info.name, "under-file", f"lies under the file {shown(parent)!r}"
                )
            new_dirs.append(parent)
            end = cut
        self._hold(info.name, len(name) + sum(map(len, new_dirs)), 1 + len(new_dirs))
        self.implied_dirs.update(new_dirs)
        if kind == "symlink":
            self._check_link_target(info, name)
            self._hold(info.name, len(info.linkname), 1)
        self.kinds[name] = kind
        return name, kind

    def _hold(self, member: str, chars: int, entries: int) -> None:
        self.name_bytes += chars + entries * ENTRY_BYTES
        if self.name_bytes > MAX_NAME_BYTES:
            raise ArchiveTooLargeError(
                member,
                "name-bytes",
                f"the members' names take more than {MAX_NAME_BYTES} bytes to check",
            )

    def _check_link_target(self, info: tarfile.TarInfo, name: str) -> None:
        target = info.linkname
        if not target:
            raise UnsafeArchiveError(info.name, "link-escape", "symlink with an empty target")
        if "\\" in target or _DRIVE.match(target):
            raise UnsafeArchiveError(
                info.name, "windows-separator", "symlink target is a Windows path"
            )
        if self.allow_external_links:
            self.links[name] = target
            return
        if target.startswith("/"):
            raise UnsafeArchiveError(
                info.name,
                "link-absolute",
                f"symlink to the absolute path {shown(target)!r}{_LINK_HINT}",
            )
        lexical = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        if lexical == ".." or lexical.startswith("../"):
            raise UnsafeArchiveError(
                info.name,
                "link-escape",
                f"symlink target {shown(target)!r} leaves the workspace{_LINK_HINT}",
            )
        self.links[name] = target

    def finish(self) -> None:
        """Checks that need every member: a link whose target, followed through the other
        links of the archive, leaves the root (``a -> .`` then ``b -> a/../x``)."""
        if self.allow_external_links:
            return
        for name, target in self.links.items():
            self._resolve(name, target)

    def _resolve(self, name: str, target: str) -> None:
        current = _parents_list(name)
        pending = deque(target.split("/"))
        hops = 0
        while pending:
            part = pending.popleft()
            self.link_steps += 1 + len(current)  # the join below costs the path's length
            if self.link_steps > MAX_LINK_STEPS:
                raise ArchiveTooLargeError(
                    name, "link-steps", "the symlinks take too long to follow to their targets"
                )
            if part in ("", "."):
                continue
            if part == "..":
                if not current:
                    raise UnsafeArchiveError(
                        name,
                        "link-escape",
                        f"symlink target {shown(target)!r} leaves the workspace",
                    )
                current.pop()
                continue
            candidate = "/".join([*current, part])
            if candidate in self.links:
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise UnsafeArchiveError(name, "link-loop", "symlinks that loop")
                pending.extendleft(reversed(self.links[candidate].split("/")))
                continue
            current.append(part)


def _parents_list(name: str) -> list[str]:
    return name.split("/")[:-1] if name != ROOT else []


def safe_mode(mode: int) -> int:
    return mode & SAFE_MODE_BITS
