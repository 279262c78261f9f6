"""Requests held by an ``ask`` policy, and the owner's decisions on them.

The host proxy (egress_proxy.py, a process of its own per sandbox) holds a request whose host
the policy neither allows nor denies, before any lookup, and the server (REST, the Lab) lists
and decides it. The two meet in the sandbox's host directory, which the sandbox never sees (it
sees only ``io/``), so code in the sandbox can neither read a held request nor decide one::

    <state>/<id>/egress-asks/          0700, made by the proxy at its start (emptied then)
        <request_id>.json              the held request, written by the proxy (atomically)
        <request_id>.decision          the decision: {"decision", "by", "decided_at"}

A decision file is made whole beside its place and then hard-linked there, which fails if one
is there already: whoever links first decides, the owner or the proxy (its timeout, a change of
the policy that decides the request, a program that left), and a second decision of the same
request is refused (404: it is no longer pending). The proxy looks for the decision every ``POLL_SECONDS`` while it holds a
request (at most ``NetworkSettings.max_pending_requests`` at once), and removes both files when
it lets the request go, however that happens.

Decisions: ``once`` lets this request through; ``sandbox`` adds its ``host:port`` to the
sandbox's allow patterns, in the state file where the policy lives (so it lasts as the policy
does), and lets it through; ``deny`` refuses it. Every decision reaches the audit (audit.py)
with ``decision``, ``by`` and ``decided_at``, written by the proxy, the audit's one writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import re
import secrets
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidRequestError, NetworkRequestNotFoundError
from jupyter_sandbox.protocol.strict_json import loads
from jupyter_sandbox.sandbox.host.clock import now, now_iso
from jupyter_sandbox.sandbox.host.private_paths import make_private_dir
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, write_json_atomic
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.network.policy import policy_of_state

ASKS_DIR = "egress-asks"
DECISIONS = ("once", "sandbox", "deny")
TIMEOUT = "timeout"  # the decision, and its "by", when nobody answered in time
WITHDRAWN = "withdrawn"  # the sandbox's program closed its connection before a decision
REQUEST_ID = re.compile(r"^[0-9a-f]{16}$")
# Seconds between two looks of the proxy for a held request's decision: what a decision waits
# for at most before its request goes on (the target is 50 ms, benchmarks/network.py --asks).
POLL_SECONDS = 0.01
# Seconds between two looks of a follower (GET .../network/requests?follow=true) at the list.
FOLLOW_SECONDS = 0.05
# Seconds without a change after which a follower is sent a ping, so that neither its read
# timeout nor a proxy's idle timeout cuts a quiet stream (as background_follow.py does).
HEARTBEAT = 15.0
MAX_RECORD_BYTES = 4096


@dataclass(frozen=True)
class Decision:
    """What became of a held request: ``decision`` (once, sandbox, deny, timeout, ``policy``
    when a change of the policy decided it meanwhile, ``withdrawn`` when the sandbox's program
    gave up first), ``by`` whom, and when."""

    decision: str
    by: str
    decided_at: str

    def audit_fields(self) -> dict[str, str]:
        return {"decision": self.decision, "by": self.by, "decided_at": self.decided_at}


def _record_path(directory: Path, request_id: str) -> Path:
    return directory / f"{request_id}.json"


def _decision_path(directory: Path, request_id: str) -> Path:
    return directory / f"{request_id}.decision"


def _read_json(path: Path) -> dict[str, Any] | None:
    """A record of this directory, or None when it is gone or not one (never a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        raw = os.read(fd, MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    try:
        data = loads(raw, max_bytes=MAX_RECORD_BYTES)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _link_decision(directory: Path, request_id: str, decision: Decision) -> bool:
    """Make ``decision`` the request's, unless it has one already (False then)."""
    target = _decision_path(directory, request_id)
    staged = directory / f".{request_id}.{secrets.token_hex(4)}.decision"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(decision.audit_fields()).encode())
    finally:
        os.close(fd)
    try:
        os.link(staged, target)  # fails if a decision is there: the first one stands
    except FileExistsError:
        return False
    finally:
        staged.unlink(missing_ok=True)
    return True


def _read_decision(directory: Path, request_id: str) -> Decision | None:
    data = _read_json(_decision_path(directory, request_id))
    if data is None:
        return None
    decision, by, decided_at = (data.get(key) for key in ("decision", "by", "decided_at"))
    if not (isinstance(decision, str) and isinstance(by, str) and isinstance(decided_at, str)):
        return None
    return Decision(decision, by, decided_at)


class HeldRequests:
    """The proxy's side: holds requests until a decision, its timeout or a policy change."""

    def __init__(self, root: Path, *, timeout: float, max_pending: int) -> None:
        self.directory = root / ASKS_DIR
        self.timeout = timeout
        self.max_pending = max_pending
        self.pending = 0

    def clear(self) -> None:
        """Make the directory, and empty it of what an earlier proxy of the sandbox left (its
        held requests ended with it)."""
        make_private_dir(self.directory)
        for entry in self.directory.iterdir():
            entry.unlink(missing_ok=True)

    @property
    def full(self) -> bool:
        return self.pending >= self.max_pending

    async def hold(
        self,
        host: str,
        port: int,
        method: str,
        decided_by_policy: Callable[[], bool],
        withdrawn: Callable[[], bool],
    ) -> Decision:
        """Hold one request until it is decided; ``decided_by_policy`` says whether the policy
        now decides it without asking (another request's "sandbox" decision allowed its host,
        the policy was replaced), which ends the wait with ``decision: "policy"``, and
        ``withdrawn`` whether its program closed the connection (``"withdrawn"``: its owner is
        no longer asked about it)."""
        request_id = secrets.token_hex(8)
        asked = now()
        record = {
            "request_id": request_id,
            "host": host,
            "port": port,
            "method": method,
            "asked_at": asked.isoformat(timespec="milliseconds"),
            "expires_at": (asked + datetime.timedelta(seconds=self.timeout)).isoformat(
                timespec="milliseconds"
            ),
        }
        self.pending += 1
        try:
            write_json_atomic(_record_path(self.directory, request_id), record)
            deadline = time.monotonic() + self.timeout
            while True:
                decision = _read_decision(self.directory, request_id)
                if decision is not None:
                    return decision
                if decided_by_policy():
                    changed = Decision("policy", "policy", now_iso("milliseconds"))
                    if _link_decision(self.directory, request_id, changed):
                        return changed
                if withdrawn():
                    gone = Decision(WITHDRAWN, "sandbox", now_iso("milliseconds"))
                    if _link_decision(self.directory, request_id, gone):
                        return gone
                if time.monotonic() >= deadline:
                    timed_out = Decision(TIMEOUT, TIMEOUT, now_iso("milliseconds"))
                    if _link_decision(self.directory, request_id, timed_out):
                        return timed_out
                    # else the owner's came first: it stands, and is read next time
                await asyncio.sleep(POLL_SECONDS)
        finally:
            self.pending -= 1
            for path in (
                _record_path(self.directory, request_id),
                _decision_path(self.directory, request_id),
            ):
                with contextlib.suppress(OSError):
                    path.unlink()


def pending_requests(root: Path) -> list[dict[str, Any]]:
    """The requests the sandbox's proxy holds now, undecided, oldest first (empty when its
    proxy does not run: the requests a proxy held end with it)."""
    directory = root / ASKS_DIR
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for name in names:
        request_id = name.removesuffix(".json")
        if not name.endswith(".json") or not REQUEST_ID.match(request_id):
            continue
        if _decision_path(directory, request_id).exists():
            continue
        record = _read_json(directory / name)
        if record is not None and record.get("request_id") == request_id:
            found.append(record)
    found.sort(key=lambda record: str(record.get("asked_at")))
    return found


def decide(directory: SandboxDirectory, request_id: str, decision: str, by: str) -> dict[str, Any]:
    """Decide a held request of the sandbox as ``by``; the request, with its decision.

    NetworkRequestNotFoundError when the sandbox holds no such request (never held, decided
    already, timed out); InvalidRequestError for a decision that is none of DECISIONS."""
    if decision not in DECISIONS:
        raise InvalidRequestError(
            f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}"
        )
    asks = directory.root / ASKS_DIR
    missing = NetworkRequestNotFoundError(
        f"sandbox {directory.sandbox_id} holds no request {request_id!r} (it was decided, "
        "timed out, or never held): GET .../network/requests lists those waiting"
    )
    if not REQUEST_ID.match(request_id):
        raise missing
    record = _read_json(_record_path(asks, request_id))
    if record is None or _decision_path(asks, request_id).exists():
        raise missing
    host, port = str(record["host"]), int(record["port"])
    if decision == "sandbox":  # refused before anything is decided if the policy has no room
        policy_of_state(directory.read_state()).allowing(host, port)
    made = Decision(decision, by, now_iso("milliseconds"))
    # The decision file decides: the proxy's own (a timeout, a policy change, a program that
    # left) may have come first, and then this one is not made.
    if not _link_decision(asks, request_id, made):
        raise missing
    if not _record_path(asks, request_id).exists():  # its proxy stopped meanwhile
        _decision_path(asks, request_id).unlink(missing_ok=True)
        raise missing
    if decision == "sandbox":
        # After the decision: the proxy, seeing the host allowed first, would otherwise make
        # it a decision of the policy's and refuse the owner's.
        def allow(state: SandboxState) -> SandboxState:
            policy = policy_of_state(state)
            return {**state, "network": policy.allowing(host, port).as_dict()}

        directory.modify_state(allow)
    return {**record, **made.audit_fields()}


async def follow_pending(
    current: Callable[[], list[dict[str, Any]]],
) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
    """``("requests", {"requests": [...]})`` with the pending requests at once and again each
    time they change, and ``("ping", {})`` after HEARTBEAT seconds without a change, until the
    caller closes it; ``current`` lists them (and raises when the sandbox is gone: the caller
    makes that the stream's last event)."""
    last: list[str] | None = None
    quiet_since = time.monotonic()
    while True:
        requests = current()
        ids = [str(request.get("request_id")) for request in requests]
        if ids != last:
            last = ids
            quiet_since = time.monotonic()
            yield "requests", {"requests": requests}
        elif time.monotonic() - quiet_since >= HEARTBEAT:
            quiet_since = time.monotonic()
            yield "ping", {}
        await asyncio.sleep(FOLLOW_SECONDS)
