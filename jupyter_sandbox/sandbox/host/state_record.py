"""The state file (``state.json`` in a sandbox's host directory): its typed record, its version,
its reader and writer.

The file is the contract between the processes that share a sandbox: the server (REST actions,
the culler, the pool, snapshots, network control), the proxy kernel (attached, busy, activity),
the lifeline and the reaper, and the host egress proxy (which only reads the policy). Only the
host writes it: it lives outside ``io/``, in the 0700 host directory (host/sandbox_dir.py), so a
sandbox can neither read nor forge it; a corrupt file is a host fault (a disk, a bug), not an
attack.

:class:`SandboxState` names every key and its type, so mypy checks each ``state.get("key")``.
:func:`read_state` checks the file against it: a file with no version is version 1 (every file
written before the version existed); a value of the wrong type makes the whole file corrupt,
the error a file that is not JSON gives (:class:`CorruptStateError`, a ValueError, which the
readers already handle: SandboxDirectory.read_state reads it as empty, the egress proxy as no
network); a newer version is refused with :class:`NewerStateError`, never read as empty, so that
an older process never overwrites what a newer one wrote. Keys the record does not name are kept
as they are: every write is a read-modify-write of the whole file, so dropping them would erase,
at the next write, a key that another process of a newer release (or another branch's feature)
added; code cannot use them unchecked, as mypy refuses a key the record does not name.

Bump :data:`STATE_VERSION` only when a key changes its type or meaning; a new key needs no bump.
"""

from __future__ import annotations

import json
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypedDict

from jupyter_sandbox.protocol.errors import SandboxError

STATE_VERSION = 1
# Bytes of a state file read at most: it is read on the server's event loop, by every listing,
# quota count and culler pass, for every owner's sandboxes. What a request may store in it is
# bounded to stay well under: metadata of 64 entries and 72 KiB (even as
# JSON's six-byte escapes, under half a MiB), background commands' records of up to 8 KiB each
# (sandbox/operations/background.py), a network policy of 256 host patterns each way.
MAX_STATE_BYTES = 1024**2
VERSION_KEY = "version"  # in the file only: the reader takes it off, the writer puts it on


class SandboxState(TypedDict, total=False):
    """One sandbox's state file, by key; who writes each is in docs/architecture.md.

    Times are ISO 8601 stamps in UTC (host/clock.py). Nested records (limits, workspace,
    network, container, attestation...) are checked by their own parsers where they are read.
    """

    # -- the sandbox's creation (starting.py) --
    owner: str
    created: str
    last_activity: str
    context: str | None
    ephemeral: bool
    runtime: str
    limits: dict[str, Any]  # SandboxLimits.as_settings()
    workspace: dict[str, Any]  # {"mode": ..., "note": ...}
    notebook: str | None
    bridged: bool  # its kernel listens behind the bridge (memory snapshots)
    pool: str  # the warm pool key of a pool member
    container: dict[str, Any]  # the engine's SandboxInfo, as a dict
    attestation: dict[str, Any]  # AttestationReport.as_dict()
    # -- kernels: a restart's generation (sandbox_dir.py), the proxy kernel's records --
    generation: int
    kernel_pid: int
    kernel_generation: int
    kernel_id: str
    attached: str
    busy: bool
    # -- the warm pool's claim, deadlines and timeouts (pool.py, culler.py, REST, E2B) --
    claimed: str
    expires: str | None
    paused_at_timeout: str | None
    timeout_action: Literal["pause"]
    metadata: dict[str, str]
    # -- network (network/control.py, network/asks.py) --
    network: dict[str, Any]  # NetworkPolicy.as_dict()
    network_token: str
    forwarder_spawn: str | None
    # -- operations: ports, background commands, port links --
    port_opener: str
    background_commands: dict[str, dict[str, Any]]
    port_links_generation: int
    # -- memory snapshots (snapshots/memory.py) --
    checkpointed: str | None
    memory_snapshots: dict[str, dict[str, Any]]
    # -- the E2B API (e2b_api/control_plane.py) --
    e2b_template: str
    e2b_timeout: float
    e2b_auto_resume: bool


class CorruptStateError(SandboxError, ValueError):
    """A state file that is not a JSON object of the record's keys and types (a ValueError,
    as a file that is not JSON raises, so that its readers treat both alike)."""

    code = "corrupt_state"


class StateTooLargeError(CorruptStateError):
    """A state file larger than MAX_STATE_BYTES: refused unread, as a corrupt one is."""

    code = "state_too_large"


class NewerStateError(SandboxError):
    """A state file written by a newer jupyter-sandbox than the one reading it."""

    code = "newer_state"


def read_state(path: Path) -> SandboxState:
    """The state file at ``path``, its types checked; unknown keys are kept as they are.

    OSError (FileNotFoundError among them) when it cannot be read, CorruptStateError when it
    is not a JSON object of :class:`SandboxState`'s types, NewerStateError when a newer
    release wrote it; StateTooLargeError, a CorruptStateError, when it is larger than
    MAX_STATE_BYTES (nothing of it read)."""
    with open(path, "rb") as f:
        # Its size before any of it is read, and a bounded read should it grow meanwhile.
        size = os.fstat(f.fileno()).st_size
        raw = b"" if size > MAX_STATE_BYTES else f.read(MAX_STATE_BYTES + 1)
    size = max(size, len(raw))
    if size > MAX_STATE_BYTES:
        raise StateTooLargeError(
            f"the state file {path} has {size} bytes, more than the {MAX_STATE_BYTES} a state "
            "file may hold: it is not read (a host fault or a bug: remove the sandbox)"
        )
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise CorruptStateError(f"the state file {path} is not JSON: {exc}") from None
    return parse_state(data, str(path))


def parse_state(data: Any, where: str = "the state file") -> SandboxState:
    """``data`` (a JSON value) as a state record, checked as :func:`read_state` says."""
    if not isinstance(data, dict):
        raise CorruptStateError(f"{where} is not a JSON object")
    data = dict(data)  # the caller's stays as it was
    version = data.pop(VERSION_KEY, 1)
    if type(version) is not int or version < 1:
        raise CorruptStateError(f"{where} has no valid version: {version!r}")
    if version > STATE_VERSION:
        raise NewerStateError(
            f"{where} is of version {version}, written by a newer jupyter-sandbox than this one "
            f"(which reads versions up to {STATE_VERSION}): upgrade jupyter-sandbox here "
            "(the server, the kernel's environment and the CLI alike)"
        )
    for key, value in data.items():
        expected = _KEY_TYPES.get(key)
        if expected is not None and not _is_of(value, expected):
            raise CorruptStateError(f"{where}: {key} is {_kind(value)}, not {expected}")
    state: SandboxState = data  # checked key by key above
    return state


def state_text(state: SandboxState) -> bytes:
    """What the state file holds for ``state``: its JSON with the current version stamped."""
    stamped = {**state, VERSION_KEY: STATE_VERSION}
    return json.dumps(stamped, indent=1, sort_keys=True).encode()


def _is_of(value: Any, expected: Any) -> bool:
    """Whether the JSON ``value`` is of the annotation ``expected`` (the forms SandboxState
    uses: plain types, unions, Literal, dict[str, X], Any)."""
    if expected is Any:
        return True
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_is_of(value, option) for option in typing.get_args(expected))
    if origin is Literal:
        return value in typing.get_args(expected)
    if origin is dict:
        _, values = typing.get_args(expected)
        return isinstance(value, dict) and all(_is_of(v, values) for v in value.values())
    if expected is type(None):
        return value is None
    if isinstance(value, bool):  # JSON true is no number, though bool is an int in Python
        return expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


# Evaluated once (the annotations are strings here): key -> the annotation it must match.
_KEY_TYPES: dict[str, Any] = typing.get_type_hints(SandboxState)
