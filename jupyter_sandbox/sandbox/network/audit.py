"""The egress audit of one sandbox: every decision the host proxy made, as JSON lines.

``<state>/<id>/network-audit.jsonl`` is written by the sandbox's host proxy only (the sandbox
never sees its host directory beyond ``io/``) and rotated at ``audit_max_bytes`` to
``network-audit.1.jsonl``, so a chatty sandbox cannot fill the disk. Entries::

    {"time": "...", "sandbox": "<id>", "host": "pypi.org", "port": 443, "method": "CONNECT",
     "allowed": true, "rule": "allow pypi.org", "address": "151.101.0.223"}

A request an ``ask`` policy held (asks.py) also has the decision on it: ``decision`` (once,
sandbox, deny, timeout, policy when a change of the policy decided it, withdrawn when the
sandbox's program closed its connection first), ``by`` (the user who decided, or ``timeout``)
and ``decided_at``. A request the proxy added an owner's credentials to names them:
``credential`` (the credential's name, or a list of names when several applied), never a value.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path
from typing import Any

from jupyter_sandbox.sandbox.host.clock import now_iso

AUDIT_FILE = "network-audit.jsonl"
ROTATED_FILE = "network-audit.1.jsonl"


class AuditLog:
    """Appends decisions to a sandbox's audit file; rotates it past ``max_bytes``."""

    def __init__(self, root: Path, sandbox_id: str, max_bytes: int) -> None:
        self.path = root / AUDIT_FILE
        self.rotated = root / ROTATED_FILE
        self.sandbox_id = sandbox_id
        self.max_bytes = max_bytes

    def record(
        self,
        *,
        host: str,
        port: int,
        method: str,
        allowed: bool,
        rule: str,
        address: str | None = None,
        asked: dict[str, str] | None = None,
        credentials: list[str] | None = None,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "time": now_iso("milliseconds"),
            "sandbox": self.sandbox_id,
            "host": host[:255],
            "port": port,
            "method": method[:16],
            "allowed": allowed,
            "rule": rule,
        }
        if address is not None:
            entry["address"] = address
        if asked is not None:
            entry.update(asked)
        if credentials:
            # One credential: its name as a string, as the docs show; several: a list.
            entry["credential"] = credentials[0] if len(credentials) == 1 else list(credentials)
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        try:
            if self.path.stat().st_size + len(line) > self.max_bytes:
                os.replace(self.path, self.rotated)
        except FileNotFoundError:
            pass
        # One write of a whole line with O_APPEND: readers never see half an entry.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return entry


def read_audit(root: Path, limit: int = 1000) -> list[dict[str, Any]]:
    """The last ``limit`` entries of a sandbox's audit, oldest first."""
    entries: deque[dict[str, Any]] = deque(maxlen=max(0, limit))
    for path in (root / ROTATED_FILE, root / AUDIT_FILE):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(entry, dict):
                        entries.append(entry)
        except FileNotFoundError:
            continue
    return list(entries)
