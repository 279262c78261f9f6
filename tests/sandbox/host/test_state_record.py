"""The state file's typed, versioned record: today's files read as they are, wrong types and
newer versions refused, the version stamped on every write."""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import jupyter_sandbox
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.protocol.requests import METADATA, string_map
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.state_record import (
    MAX_STATE_BYTES,
    STATE_VERSION,
    VERSION_KEY,
    CorruptStateError,
    NewerStateError,
    SandboxState,
    StateTooLargeError,
    parse_state,
    read_state,
)
from jupyter_sandbox.sandbox.network.policy import NetworkPolicy
from jupyter_sandbox.sandbox.operations.background import MAX_STORED_ARGV, BackgroundCommands
from tests.python_ast import parse

# A state file a runc sandbox on main wrote (kernel attached, one cell run), its network token
# replaced: written before the version existed, so it has none.
TODAY = Path(__file__).with_name("state-v1.json")
SANDBOX_ID = "0123456789ab"


@pytest.fixture
def directory(state_dir: Path) -> SandboxDirectory:
    # conftest's state_dir, short: pytest's tmp_path under xdist can be too long for sockets.
    directory = SandboxDirectory(state_dir, SANDBOX_ID)
    directory.create(os.getuid())
    return directory


def test_a_file_of_today_reads_as_it_is(directory: SandboxDirectory) -> None:
    shutil.copy(TODAY, directory.state_file)
    written = json.loads(TODAY.read_text())
    assert VERSION_KEY not in written  # no version: version 1
    assert read_state(directory.state_file) == written
    assert directory.read_state() == written


def test_a_file_of_today_names_only_keys_of_the_record() -> None:
    assert set(json.loads(TODAY.read_text())) <= set(SandboxState.__annotations__)


def test_a_write_stamps_the_version_and_reads_back_the_same(directory: SandboxDirectory) -> None:
    state: SandboxState = json.loads(TODAY.read_text())
    directory.write_state(state)
    assert json.loads(directory.state_file.read_text())[VERSION_KEY] == STATE_VERSION
    assert directory.read_state() == state  # the version is the file's, not the record's
    directory.update_state(busy=True)
    assert directory.read_state() == {**state, "busy": True}


def test_the_version_a_file_says_is_accepted(directory: SandboxDirectory) -> None:
    directory.state_file.write_text(json.dumps({VERSION_KEY: STATE_VERSION, "busy": False}))
    assert read_state(directory.state_file) == {"busy": False}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("busy", "yes"),
        ("generation", True),  # JSON true is no number
        ("generation", "3"),
        ("generation", 2.5),
        ("owner", None),
        ("context", 5),
        ("metadata", {"team": 1}),
        ("background_commands", {"abc": "not a record"}),
        ("timeout_action", "kill"),
        ("e2b_timeout", True),
        ("limits", []),
    ],
)
def test_a_key_of_the_wrong_type_makes_the_file_corrupt(
    directory: SandboxDirectory, key: str, value: Any
) -> None:
    directory.state_file.write_text(json.dumps({"owner": "alice", key: value}))
    with pytest.raises(CorruptStateError, match=key):
        read_state(directory.state_file)
    # As a file that is not JSON: SandboxDirectory reads both as empty, as it always has.
    assert directory.read_state() == {}
    directory.state_file.write_text("{not json")
    with pytest.raises(CorruptStateError):
        read_state(directory.state_file)
    assert directory.read_state() == {}


@pytest.mark.parametrize("version", ["1", 0, -1, True, 1.0, None])
def test_a_version_that_is_no_version_makes_the_file_corrupt(
    directory: SandboxDirectory, version: Any
) -> None:
    directory.state_file.write_text(json.dumps({VERSION_KEY: version}))
    with pytest.raises(CorruptStateError, match="version"):
        read_state(directory.state_file)


def test_a_newer_version_is_refused_with_a_word_to_upgrade(directory: SandboxDirectory) -> None:
    newer = json.dumps({VERSION_KEY: STATE_VERSION + 1, "owner": "alice", "busy": "someday"})
    directory.state_file.write_text(newer)
    with pytest.raises(NewerStateError, match="upgrade jupyter-sandbox") as raised:
        read_state(directory.state_file)
    assert isinstance(raised.value, SandboxError)
    assert not isinstance(raised.value, ValueError)  # no reader takes it for a corrupt file
    with pytest.raises(NewerStateError):
        directory.read_state()
    # Never read as empty and written over: what the newer release wrote stays.
    with pytest.raises(NewerStateError):
        directory.update_state(busy=True)
    assert directory.state_file.read_text() == newer


def test_keys_the_record_does_not_name_are_kept(directory: SandboxDirectory) -> None:
    directory.state_file.write_text(json.dumps({"owner": "alice", "added_later": [1, "two"]}))
    assert read_state(directory.state_file) == {"owner": "alice", "added_later": [1, "two"]}
    directory.update_state(busy=False)  # a read-modify-write erases nothing
    assert json.loads(directory.state_file.read_text()) == {
        "owner": "alice",
        "added_later": [1, "two"],
        "busy": False,
        VERSION_KEY: STATE_VERSION,
    }


def test_not_an_object_is_corrupt(directory: SandboxDirectory) -> None:
    directory.state_file.write_text("[]")
    with pytest.raises(CorruptStateError, match="not a JSON object"):
        read_state(directory.state_file)
    assert directory.read_state() == {}


def test_a_missing_file_is_an_os_error_and_empty_for_the_directory(
    directory: SandboxDirectory,
) -> None:
    with pytest.raises(FileNotFoundError):
        read_state(directory.state_file)
    assert directory.read_state() == {}


def test_a_state_file_past_the_cap_is_refused_unread(
    directory: SandboxDirectory, caplog: pytest.LogCaptureFixture
) -> None:
    """A state file larger than MAX_STATE_BYTES is corrupt for its readers, before a byte of
    it is read (a sparse file of 4 GiB: read, it would take that much memory), and logged."""
    directory.write_state({"context": "c1"})
    with open(directory.state_file, "r+b") as f:
        f.truncate(4 * 1024**3)
    with pytest.raises(StateTooLargeError, match=f"has {4 * 1024**3} bytes, more than"):
        read_state(directory.state_file)
    with caplog.at_level(logging.ERROR):
        assert directory.read_state() == {}
    assert f"sandbox {SANDBOX_ID}: the state file" in caplog.text
    directory.state_file.write_bytes(b" " * MAX_STATE_BYTES + b"{}")  # JSON, but too large
    with pytest.raises(StateTooLargeError):
        read_state(directory.state_file)
    directory.state_file.write_bytes(b" " * (MAX_STATE_BYTES - 2) + b"{}")  # at the cap: read
    assert read_state(directory.state_file) == {}


def test_the_largest_state_requests_can_make_is_under_the_cap(
    directory: SandboxDirectory,
) -> None:
    """Every field a request stores, at its largest and in the characters JSON writes longest
    (a control character: six bytes), still leaves the state file readable."""
    worst = "\x01"
    key_room = 128
    value = worst * ((METADATA.total_bytes - METADATA.entries * key_room) // METADATA.entries)
    metadata = {f"{n:03d}".ljust(key_room, "k"): value for n in range(METADATA.entries)}
    assert string_map(metadata, "metadata", METADATA) == metadata
    argv, cwd = [worst * ((MAX_STORED_ARGV - 20) // 12)], "/" + worst * ((MAX_STORED_ARGV) // 12)
    assert MAX_STORED_ARGV - 12 < len(json.dumps([argv, cwd])) <= MAX_STORED_ARGV
    record = {"argv": argv, "cwd": cwd, "started": "2026-01-01T00:00:00.000000+00:00"}
    record.update(spawn="f" * 64, mark="0" * 32)
    commands = {
        f"{n:012x}": record for n in range(BackgroundCommands.max_per_sandbox.default_value)
    }
    label = "a" * 61
    host = f"*.{label}.{label}.{label}.{label[:57]}.example:65535"
    policy = NetworkPolicy.from_dict({"mode": "ask", "allow": [host] * 256, "deny": [host] * 256})
    state = {
        **json.loads(TODAY.read_text()),
        "metadata": metadata,
        "background_commands": commands,
        "network": policy.as_dict(),
        "e2b_template": "t" * 256,
    }
    directory.write_state(parse_state(state))
    assert directory.state_file.stat().st_size <= MAX_STATE_BYTES
    assert read_state(directory.state_file)["metadata"] == metadata


# Modules whose ``state`` is something else: the engine's record of a container.
OTHER_STATES = {"jupyter_sandbox/sandbox/backends/docker/records.py"}


def test_every_key_the_code_reads_by_name_is_in_the_record() -> None:
    """mypy checks the type of ``state.get("key")`` but lets an unknown key through (its value
    is ``object``): this catches a misspelt key wherever the package reads one by name."""
    package = Path(jupyter_sandbox.__file__).parent
    root = package.parent
    read: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(root))
        if where in OTHER_STATES:
            continue
        for node in ast.walk(parse(path.read_text(), where)):
            key = _key_read(node)
            if key is not None:
                read.setdefault(key, []).append(f"{where}:{getattr(node, 'lineno', '?')}")
    unknown = {
        key: places for key, places in read.items() if key not in SandboxState.__annotations__
    }
    assert not unknown
    assert len(read) >= 25  # the scan finds the reads (about 30 keys today)


def _key_read(node: ast.AST) -> str | None:
    """The literal key of ``state.get("key")``, ``state["key"]`` or ``X.read_state(...).get(
    "key")`` at ``node``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        reads = node.func.attr == "get" and bool(node.args) and _is_state(node.func.value)
        key = node.args[0] if reads else None
    elif isinstance(node, ast.Subscript) and _is_state(node.value):
        key = node.slice
    else:
        return None
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return None


def _is_state(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "state"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "read_state"
    )
