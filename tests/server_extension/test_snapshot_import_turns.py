"""An archive import (``POST /api/snapshots``) reads its body only once its owner has an archive
turn, onto disk rather than into the server's memory, as a file upload does (row 75): raw
connections held open after their head, against a real server. No sandbox is needed: an
import goes to the owner's snapshot store."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient

from jupyter_sandbox.server_extension import SandboxExtension
from tests.security.rest.test_denial_of_service import (
    BOUND,
    HeldRequest,
    archive,
    held,  # noqa: F401  (a fixture, used by name)
)
from tests.server_extension.test_auth_and_spec import with_named_users

pytestmark = pytest.mark.integration

MAX_ARCHIVE = 128 * 1024**2  # Snapshots.max_archive_bytes here, under the server's body cap


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {
        **with_named_users(jp_server_config),
        "Snapshots": {
            "snapshot_dir": str(tmp_path / "snapshots"),
            "max_snapshots": 0,
            "max_archive_bytes": MAX_ARCHIVE,
        },
    }


@pytest.mark.checklist(
    row=137,
    attack="one owner sends more archive imports (POST /api/snapshots) than its share of "
    "archive turns, two of them stalled after their head, a third of 64 MiB, and one that "
    "declares more than an archive may hold",
    expected="the stalled two hold that owner's turns; the third's body is not read (its "
    "sender stalls) until a turn is free, then it is imported; another owner's import is "
    "answered meanwhile; the oversized one is refused 413 by its Content-Length, unread",
)
async def test_an_imports_body_is_read_only_once_its_owner_has_a_turn(
    server_url: str,
    extension: SandboxExtension,
    held: list[HeldRequest],  # noqa: F811
    observe: Callable[..., None],
) -> None:
    jobs = extension.archive_jobs
    for _ in range(jobs.per_owner):
        held.append(
            await HeldRequest.open(server_url, "POST", "api/snapshots", "alice", upload=1024)
        )
    deadline = time.monotonic() + BOUND
    while jobs.held.get("alice", 0) < jobs.per_owner:
        assert time.monotonic() < deadline, f"alice's stalled imports hold {jobs.held}"
        await asyncio.sleep(0.05)

    tar = archive(64 * 1024**2)
    third = await HeldRequest.open(server_url, "POST", "api/snapshots", "alice", upload=len(tar))
    held.append(third)
    third.writer.write(tar)
    with pytest.raises(TimeoutError):  # the server reads none of it: the sender stalls
        await asyncio.wait_for(third.writer.drain(), 3)
    assert jobs.waiting() == 1
    unsent = third.writer.transport.get_write_buffer_size()
    assert unsent > len(tar) // 2, f"only {unsent} of {len(tar)} bytes left to send"

    started = time.monotonic()  # bob's turn is his own
    response = await AsyncHTTPClient().fetch(
        f"{server_url}api/snapshots",
        method="POST",
        body=archive(1024),
        headers={"Authorization": "token bob"},
        raise_error=False,
    )
    assert response.code == 201, response.body
    assert time.monotonic() - started < BOUND

    too_large = await HeldRequest.open(
        server_url, "POST", "api/snapshots", "alice", upload=MAX_ARCHIVE + 1
    )
    held.append(too_large)
    assert await too_large.read_until(b"request_too_large", BOUND), too_large.seen[:300]
    assert too_large.status == 413
    assert b"Snapshots.max_archive_bytes" in too_large.seen

    await held[0].close()  # a stalled client leaves: its turn goes to the waiting import
    await asyncio.wait_for(third.writer.drain(), 60)
    assert await third.read_until(b'"sha256"', 120), third.seen[:300]
    assert third.status == 201, third.seen[:300]
    body = third.seen.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body[body.index(b"{") :])["size"] == len(tar)
    observe(
        f"{jobs.per_owner} stalled imports held alice's turns; her 64 MiB import stayed unread "
        "until one left, then was imported; bob's import answered; a body over the cap 413",
        cases=jobs.per_owner + 2,
    )
