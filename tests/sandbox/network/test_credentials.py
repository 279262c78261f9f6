"""The credential store: validation, write-only listing, 0600 files, host matching."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.network.credentials import (
    CredentialNotFoundError,
    CredentialStore,
    credential_names,
)

SECRET = "s3cr3t-value-4f9a"


def test_set_list_never_shows_values_and_file_is_0600(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds")
    store.set("alice", "api", {"hosts": ["api.example.com"], "headers": {"X-API-Key": SECRET}})
    listed = store.describe("alice")
    assert listed == [{"name": "api", "hosts": ["api.example.com"], "headers": ["X-API-Key"]}]
    assert SECRET not in repr(listed)
    (path,) = (tmp_path / "creds").iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "creds").stat().st_mode) == 0o700
    assert store.describe("bob") == []


def test_headers_only_for_named_hosts(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.set(
        "alice",
        "idx",
        {"hosts": ["*.example.com:8080"], "basic": {"username": "u", "password": "p"}},
    )
    assert store.headers_for("alice", "pkg.example.com", 8080) == [("Authorization", "Basic dTpw")]
    assert store.headers_for("alice", "pkg.example.com", 80) == []
    assert store.headers_for("alice", "example.com.evil.org", 8080) == []
    assert store.headers_for("bob", "pkg.example.com", 8080) == []


@pytest.mark.parametrize(
    "body",
    [
        {"hosts": ["a.example.com"], "headers": {"X-Key": "a\r\nHost: evil.org"}},
        {"hosts": ["a.example.com"], "headers": {"Host": "x"}},
        {"hosts": ["*"], "headers": {"X-Key": "v"}},
        {"hosts": [], "headers": {"X-Key": "v"}},
        {"hosts": ["a.example.com"]},
        {
            "hosts": ["a.example.com"],
            "headers": {"X": "v"},
            "basic": {"username": "u", "password": "p"},
        },
        {"hosts": ["a.example.com"], "basic": {"username": "u:x", "password": "p"}},
        {"hosts": ["a.example.com"], "headers": {"X": "v"}, "extra": 1},
    ],
)
def test_invalid_bodies_refused_without_echoing_values(tmp_path: Path, body: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        CredentialStore(tmp_path).set("alice", "c", body)
    assert "Send {" in caught.value.message
    assert "evil.org" not in caught.value.message  # a refused value is never echoed


def test_remove(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path)
    store.set("alice", "api", {"hosts": ["api.example.com"], "headers": {"X-Key": "v"}})
    store.remove("alice", "api")
    assert store.describe("alice") == []
    with pytest.raises(CredentialNotFoundError):
        store.remove("alice", "api")


def test_any_owner_name_stays_inside_the_store(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "creds")
    for owner in ("alice@example.com", "../../etc/x", "Bob Smith"):
        store.set(owner, "c", {"hosts": ["a.example.com"], "headers": {"X-Key": owner}})
    assert store.headers_for("../../etc/x", "a.example.com", 443) == [("X-Key", "../../etc/x")]
    assert len(list((tmp_path / "creds").iterdir())) == 3
    assert list(tmp_path.iterdir()) == [tmp_path / "creds"]


def test_headers_for_names_the_credentials_and_never_gives_a_header_twice(
    tmp_path: Path,
) -> None:
    store = CredentialStore(tmp_path)
    store.set("alice", "b-second", {"hosts": ["api.example.com"], "headers": {"X-Key": "two"}})
    store.set("alice", "a-first", {"hosts": ["*.example.com"], "headers": {"x-key": "one"}})
    store.set("alice", "other", {"hosts": ["other.example.org"], "headers": {"X-Other": "o"}})
    headers = store.headers_for("alice", "api.example.com", 80)
    assert headers == [("x-key", "one")]
    assert credential_names(headers) == ["a-first"]
    assert credential_names(store.headers_for("alice", "nothing.example.net", 80)) == []
    assert credential_names([("X-Key", "v")]) == []  # a plain list names nothing
