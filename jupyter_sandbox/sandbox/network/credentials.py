"""Credentials the egress proxy injects: stored per owner on the host, never in a sandbox.

A credential names the hosts it is for (the policy's host patterns) and either headers to add
or HTTP basic auth. Values are write-only: :meth:`CredentialStore.describe` returns names and hosts
alone. Each owner's file is 0600 in a 0700 directory of the host (issue 37, items 1 and 4).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_sandbox.protocol.errors import (
    CredentialNotFoundError,
    InvalidRequestError,
    SandboxError,
)
from jupyter_sandbox.sandbox.host.sandbox_dir import write_json_atomic
from jupyter_sandbox.sandbox.network.policy import HostPattern

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
# Headers the proxy itself sets or that frame the request: a credential must not rewrite them.
_FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "upgrade",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
        "keep-alive",
    }
)
# Bounds a hostile or mistaken request cannot exceed (bytes / counts).
_MAX_VALUE = 8192
_MAX_HOSTS = 32
_MAX_HEADERS = 16
_MAX_PER_OWNER = 64


def _invalid(name: str, what: str) -> InvalidRequestError:
    return InvalidRequestError(
        f'credential {name!r}: {what}. Send {{"hosts": ["api.example.com"], "headers": '
        '{"Authorization": "Bearer ..."}} or {"hosts": [...], "basic": {"username": ..., '
        '"password": ...}}'
    )


def _value(name: str, where: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_VALUE:
        raise _invalid(name, f"{where} must be a non-empty string of at most {_MAX_VALUE} bytes")
    if not value.isprintable() or not value.isascii():
        # CR/LF would let a value split the request into two (header injection).
        raise _invalid(name, f"{where} must be printable ASCII (no line breaks)")
    return value


@dataclass(frozen=True)
class Credential:
    """One owner's credential; ``headers`` holds the values, so it is never serialised out."""

    name: str
    hosts: tuple[HostPattern, ...]
    headers: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, name: str, data: Any) -> Credential:
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidRequestError(
                f"credential name {name!r} is malformed: use 1-64 lower-case letters, digits, "
                "'.', '_' or '-', starting with a letter or digit"
            )
        if not isinstance(data, dict):
            raise _invalid(name, "the body must be a JSON object")
        extra = set(data) - {"hosts", "headers", "basic"}
        if extra:
            raise _invalid(name, f"unknown field(s) {sorted(extra)}")
        hosts = data.get("hosts")
        if not isinstance(hosts, list) or not hosts or len(hosts) > _MAX_HOSTS:
            raise _invalid(name, f"'hosts' must be a list of 1 to {_MAX_HOSTS} host patterns")
        try:
            patterns = tuple(HostPattern.parse(host) for host in hosts)
        except SandboxError as error:
            raise _invalid(name, error.message) from None
        if ("headers" in data) == ("basic" in data):
            raise _invalid(name, "give exactly one of 'headers' and 'basic'")
        headers: list[tuple[str, str]] = []
        if "headers" in data:
            given = data["headers"]
            if not isinstance(given, dict) or not given or len(given) > _MAX_HEADERS:
                raise _invalid(name, f"'headers' must be an object of 1 to {_MAX_HEADERS} headers")
            for key, value in given.items():
                if not _HEADER_NAME.match(key) or key.lower() in _FORBIDDEN_HEADERS:
                    raise _invalid(name, f"header name {key!r} is not allowed")
                headers.append((key, _value(name, f"header {key!r}", value)))
        else:
            basic = data["basic"]
            if not isinstance(basic, dict) or set(basic) != {"username", "password"}:
                raise _invalid(name, '\'basic\' must be {"username": ..., "password": ...}')
            username = _value(name, "'basic.username'", basic["username"])
            password = _value(name, "'basic.password'", basic["password"])
            if ":" in username:
                raise _invalid(name, "'basic.username' must not contain ':'")
            token = base64.b64encode(f"{username}:{password}".encode()).decode()
            headers.append(("Authorization", f"Basic {token}"))
        return cls(name, patterns, tuple(headers))

    def applies_to(self, host: str, port: int) -> bool:
        return any(pattern.matches(host, port) for pattern in self.hosts)

    def public(self) -> dict[str, Any]:
        """What listing shows: never a value."""
        return {
            "name": self.name,
            "hosts": [str(pattern) for pattern in self.hosts],
            "headers": sorted({key for key, _ in self.headers}),
        }

    def _stored(self) -> dict[str, Any]:
        return {
            "hosts": [str(pattern) for pattern in self.hosts],
            "headers": [[key, value] for key, value in self.headers],
        }


class CredentialStore:
    """Each owner's credentials in ``root/<sha256 of owner>.json`` (0600; ``root`` is 0700)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, owner: str) -> Path:
        # Owners are identity-provider user names (any text: '@', spaces, '/'): the file is
        # named by a digest so that no owner name can reach outside ``root`` or another's file.
        if not isinstance(owner, str) or not owner:
            raise InvalidRequestError("credentials need an owner: none was given")
        return self.root / f"{hashlib.sha256(owner.encode()).hexdigest()}.json"

    def _load(self, owner: str) -> dict[str, Credential]:
        path = self._path(owner)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        loaded: dict[str, Credential] = {}
        for name, entry in raw.items():
            loaded[name] = Credential(
                name,
                tuple(HostPattern.parse(host) for host in entry["hosts"]),
                tuple((key, value) for key, value in entry["headers"]),
            )
        return loaded

    def _save(self, owner: str, credentials: dict[str, Credential]) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        # A fresh temporary name, created 0600 (mkstemp): the values are never readable by
        # others, even briefly, and a link planted at a fixed name is never followed.
        stored = {name: item._stored() for name, item in credentials.items()}
        write_json_atomic(self._path(owner), stored)

    @contextlib.contextmanager
    def _changing(self, owner: str) -> Iterator[dict[str, Credential]]:
        """The owner's credentials, to change in place, saved at the end; one change of the
        store at a time (flock of its directory: no file beside the owners'), so two at once
        never lose one."""
        self._path(owner)  # the owner is checked before anything is made
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            credentials = self._load(owner)
            yield credentials
            self._save(owner, credentials)
        finally:
            os.close(fd)

    def put(self, owner: str, name: str, data: Any) -> tuple[Credential, bool]:
        """Set the credential ``name`` from ``data`` (its REST body); whether it is new."""
        credential = Credential.parse(name, data)
        with self._changing(owner) as credentials:
            created = name not in credentials
            if created and len(credentials) >= _MAX_PER_OWNER:
                raise InvalidRequestError(
                    f"at most {_MAX_PER_OWNER} credentials per owner: remove one first"
                )
            credentials[name] = credential
        return credential, created

    def set(self, owner: str, name: str, data: Any) -> Credential:
        return self.put(owner, name, data)[0]

    def describe(self, owner: str) -> list[dict[str, Any]]:
        return [item.public() for _, item in sorted(self._load(owner).items())]

    def remove(self, owner: str, name: str) -> None:
        with self._changing(owner) as credentials:
            if name not in credentials:
                raise CredentialNotFoundError(
                    f"no credential {name!r:.80}: 'jupyter sandbox credentials list' shows yours"
                )
            del credentials[name]

    def headers_for(self, owner: str, host: str, port: int) -> list[tuple[str, str]]:
        """The headers to add to a request to ``host:port`` (the caller checks the policy), as
        :class:`InjectedHeaders` (the credentials' names ride along for the audit). Two
        credentials naming the same header for one host: the first by name gives it, so a
        request never carries two copies."""
        injected = InjectedHeaders()
        taken: set[str] = set()
        for name, item in sorted(self._load(owner).items()):
            if not item.applies_to(host, port):
                continue
            used = False
            for key, value in item.headers:
                if key.lower() not in taken:
                    taken.add(key.lower())
                    injected.append((key, value))
                    used = True
            if used:
                injected.names.append(name)
        return injected


class InjectedHeaders(list[tuple[str, str]]):
    """The headers :meth:`CredentialStore.headers_for` gives, with the names of the
    credentials they came from in ``names``: what the audit records (never a value)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []


def credential_names(headers: list[tuple[str, str]]) -> list[str]:
    """The credentials' names behind ``headers`` (none known: an empty list)."""
    return list(headers.names) if isinstance(headers, InjectedHeaders) else []
