"""The server's keys in the state directory and the MACs made with them (server_key.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from jupyter_sandbox.e2b_api.keys import AccessTokens
from jupyter_sandbox.server_extension.port_links import PortLinks
from jupyter_sandbox.server_extension.server_key import KEY_BYTES, MAC_BYTES, state_key


def test_a_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    key = state_key(state, "some.key")
    assert len(key) == KEY_BYTES
    assert stat.S_IMODE((state / "some.key").stat().st_mode) == 0o600
    assert state_key(state, "some.key") == key  # a restarted server signs as before


def test_a_key_cut_short_is_refused(tmp_path: Path) -> None:
    (tmp_path / "some.key").write_bytes(b"x" * (KEY_BYTES - 1))
    with pytest.raises(OSError, match="shorter than"):
        state_key(tmp_path, "some.key")


def test_each_credential_has_its_own_key(tmp_path: Path) -> None:
    links = PortLinks.in_state_directory(tmp_path)
    tokens = AccessTokens.in_state_directory(tmp_path)
    assert {path.name for path in tmp_path.iterdir()} == {"port-links.key", "e2b-access.key"}
    message = b"alice\0abc"
    assert links.mac(message) != tokens.mac(message)
    assert len(links.mac(message)) == MAC_BYTES * 4 // 3
    # Another server (another state directory) cannot make this server's links.
    other = PortLinks.in_state_directory(tmp_path / "other")
    assert not other.valid(links.token("alice", "abc", 8000, 0), "alice", "abc", 8000, 0)
    assert links.valid(links.token("alice", "abc", 8000, 0), "alice", "abc", 8000, 0)
