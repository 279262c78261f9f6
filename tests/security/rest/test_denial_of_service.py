"""Denial of service between users: while one owner (alice) floods a shared server, another
(bob) is still answered within a stated bound. Two real owners, one real server, both runtimes.

What bob asks each time: the list of his sandboxes, a file of his read, ``1+1`` executed in his
interpreter, and a directory watch of his opened up to its ``ready``. Each is timed alone
before the flood (the figures the report gives as "quiet") and under it; the bound asserted is
several times what was measured under load on the 2-core CI machine (benchmarks/fairness.py
measures both, larger), and far below the 27.6 s a list took when one owner's seventeen
streamed commands held every engine thread (issue 31).

Alice's floods are real requests over HTTP to 127.0.0.1: event streams and commands are raw
connections held open (closing one is a client leaving, which stops what it started), so that
the flood lasts exactly as long as the measurement.
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient

from jupyter_sandbox.server_extension import SandboxExtension
from tests.memory_growth import peak_growth
from tests.server_extension.conftest import Fetch, api
from tests.server_extension.test_auth_and_spec import with_named_users

pytestmark = pytest.mark.integration

ALICE = {"headers": {"Authorization": "token alice"}}
BOB = {"headers": {"Authorization": "token bob"}}
# The most seconds any one of bob's requests may take under alice's flood. Measured on the
# 2-core machine with others' tests running (load average 10 to 17; this test and
# benchmarks/fairness.py), the worst of bob's four: 2.0 s under the streams and commands
# (quiet: up to 1.2 s), 2.6 s under the uploads, on either runtime; before the fix a list took
# 27.6 s under seventeen streamed commands, and a ninth watch was refused.
BOUND = 10.0
# How long alice's held requests would last if nothing ended them (seconds); they end when the
# test closes their connections or removes her sandbox.
HELD = 120


@pytest.fixture
def jp_server_config(
    jp_server_config: dict[str, Any], runtime: str, tmp_path: Path
) -> dict[str, Any]:
    config = with_named_users(jp_server_config)
    return {
        **config,
        "SandboxSettings": {**config["SandboxSettings"], "runtime": runtime},
        "SandboxExtension": {**config["SandboxExtension"], "fast_kernel_start": False},
        "SandboxQuotas": {"max_sandboxes": 0, "max_memory": "", "max_cpus": 0.0},
        "Snapshots": {"snapshot_dir": str(tmp_path / "snapshots"), "max_snapshots": 0},
    }


class HeldRequest:
    """A request over its own connection, its answer read up to a marker and then held open;
    :meth:`close` is the client leaving."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.status = 0
        self.seen = b""

    @classmethod
    async def open(
        cls,
        server_url: str,
        method: str,
        path: str,
        user: str,
        body: Any = None,
        *,
        upload: int | None = None,
    ) -> HeldRequest:
        """``body`` sent as JSON; or, with ``upload``, the head of an upload of that many bytes
        and none of its body yet (the caller sends it on ``writer``, or not)."""
        url = urllib.parse.urlsplit(server_url)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        data = b"" if body is None else json.dumps(body).encode()
        kind = "application/json" if upload is None else "application/octet-stream"
        head = (
            f"{method} {url.path}{path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Authorization: token {user}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(data) if upload is None else upload}\r\n\r\n"
        )
        writer.write(head.encode() + data)
        await writer.drain()
        return cls(reader, writer)

    async def read_until(self, marker: bytes, timeout: float) -> bool:
        """Read until ``marker`` is seen (True) or the answer ends without it (False)."""
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {marker!r} within {timeout} s: {self.seen[:300]!r}")
            try:
                chunk = await asyncio.wait_for(self.reader.read(65536), left)
            except TimeoutError:
                raise TimeoutError(
                    f"no {marker!r} within {timeout} s: {self.seen[:300]!r}"
                ) from None
            if not chunk:
                return False
            self.seen += chunk
            if not self.status and b"\r\n" in self.seen:
                self.status = int(self.seen.split(b" ", 2)[1])
        return True

    async def close(self) -> None:
        self.writer.close()
        await asyncio.gather(self.writer.wait_closed(), return_exceptions=True)


async def make_sandbox(fetch: Fetch, who: dict[str, Any]) -> str:
    status, made = await api(fetch, "POST", body={}, **who)
    assert status == 201, made
    return str(made["id"])


async def bobs_requests(fetch: Fetch, server_url: str, sandbox_id: str) -> dict[str, float]:
    """Seconds each of bob's four requests took, each checked for its right answer."""
    took: dict[str, float] = {}
    started = time.monotonic()
    status, listed = await api(fetch, "GET", **BOB)
    took["list"] = time.monotonic() - started
    assert (status, [s["id"] for s in listed]) == (200, [sandbox_id])

    started = time.monotonic()
    read = await fetch(
        "api", "sandboxes", sandbox_id, "files", "content", params={"path": "mine.txt"}, **BOB
    )
    took["file read"] = time.monotonic() - started
    assert read.body == b"intact"

    started = time.monotonic()
    status, ran = await api(fetch, "POST", sandbox_id, "execute", body={"code": "1+1"}, **BOB)
    took["execute 1+1"] = time.monotonic() - started
    assert status == 200, ran
    assert [output["data"]["text/plain"] for output in ran["outputs"]] == ["2"], ran

    started = time.monotonic()
    watch = await HeldRequest.open(
        server_url, "GET", f"api/sandboxes/{sandbox_id}/files/watch?path=.", "bob"
    )
    try:
        assert await watch.read_until(b"event: ready", BOUND * 4), watch.seen[:300]
        took["watch"] = time.monotonic() - started
        assert watch.status == 200
    finally:
        await watch.close()
    return took


def worst(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: max(run[name] for run in runs) for name in runs[0]}


def figures(took: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in took.items())


@pytest.fixture
async def bobs_sandbox(jp_fetch: Fetch) -> str:
    sandbox_id = await make_sandbox(jp_fetch, BOB)
    status, _ = await api(
        jp_fetch,
        "PUT",
        sandbox_id,
        "files",
        "content",
        body="intact",
        params={"path": "mine.txt"},
        **BOB,
    )
    assert status in (200, 201, 204)
    return sandbox_id


@pytest.fixture
async def held() -> AsyncIterator[list[HeldRequest]]:
    """Alice's held requests, closed (the client leaving) whatever the test's end."""
    requests: list[HeldRequest] = []
    yield requests
    await asyncio.gather(*(request.close() for request in requests))


@pytest.mark.resilience(
    scenario="denial of service: owner A floods one server with streamed commands, directory "
    "watches, followed output (SSE), long commands and concurrent execute requests",
    expected=f"owner B's list, file read, execute of 1+1 and watch each answer within {BOUND:g} s "
    "(27.6 s for a list before); A's streams and watches past A's own caps get 429, B's do not",
)
async def test_one_owners_streams_watches_and_commands_do_not_hold_up_another(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    bobs_sandbox: str,
    held: list[HeldRequest],
    observe: Callable[..., None],
) -> None:
    quiet = worst([await bobs_requests(jp_fetch, server_url, bobs_sandbox) for _ in range(2)])
    alices = await make_sandbox(jp_fetch, ALICE)
    base = f"api/sandboxes/{alices}"
    files = extension.manager.files

    # Event streams, more than her caps allow: first watches, past her own cap of watches
    # (eight watches of one user's once refused every other user's), then streamed commands
    # and followed output, past her cap of event streams.
    watches = files.max_watches_per_owner
    streams: list[tuple[str, str, Any]] = [("GET", f"{base}/files/watch?path=.", None)] * (
        watches + 2
    )
    command = {"command": f"echo go; sleep {HELD}", "stream": True}
    more: list[tuple[str, str, Any]] = [("POST", f"{base}/commands", command)] * 10
    for _ in range(4):
        status, started = await api(
            jp_fetch,
            "POST",
            alices,
            "commands",
            body={"command": f"echo go; sleep {HELD}", "background": True},
            **ALICE,
        )
        assert status == 201, started
        more.append(("GET", f"{base}/commands/{started['id']}/output?follow=true", None))
    for batch in (streams, more):
        opened = [
            await HeldRequest.open(server_url, method, path, "alice", body)
            for method, path, body in batch
        ]
        held.extend(opened)
        assert all(
            await asyncio.gather(*(request.read_until(b"\r\n\r\n", 60) for request in opened))
        )
    refusals = [request for request in held if request.status == 429]
    accepted = sum(request.status == 200 for request in held)
    # (In any order: the server takes the requests concurrently.)
    assert sorted(request.status for request in held[: watches + 2]) == [200] * watches + [429] * 2
    for request in refusals:
        assert await request.read_until(b'"code": "too_many_', 10), request.seen
    codes = {
        code: sum(b"too_many_" + code in r.seen for r in refusals)
        for code in (b"watches", b"streams")
    }
    assert codes[b"watches"] == 2  # her watch cap, not the server's: bob's watch works below
    assert accepted == extension.max_event_streams_per_owner, [r.status for r in held]
    assert len(refusals) == len(held) - accepted
    # Commands run to their end, and code runs, each held by its own request: more than her
    # share of the engine's threads for long calls.
    for _ in range(24):
        body = {"command": f"sleep {HELD}", "timeout": HELD}
        held.append(await HeldRequest.open(server_url, "POST", f"{base}/commands", "alice", body))
    for _ in range(12):
        body = {"code": f"import time; time.sleep({HELD})"}
        held.append(await HeldRequest.open(server_url, "POST", f"{base}/execute", "alice", body))
    long_share = extension.manager.backend.engine.long_share  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while long_share.held.get("alice", 0) < long_share.per_owner:
        assert time.monotonic() < deadline, f"alice holds {long_share.held} of {long_share.total}"
        await asyncio.sleep(0.2)

    flooded = worst([await bobs_requests(jp_fetch, server_url, bobs_sandbox) for _ in range(2)])
    waiting = long_share.waiting()
    for name, seconds in flooded.items():
        assert seconds < BOUND, f"bob's {name} took {seconds:.1f} s under alice's flood"
    # The flood ends: her sandbox removed (ending every command, stream and watch in it).
    # (Ending some fifty commands and streams at once takes the engine a while when loaded.)
    status, _ = await api(jp_fetch, "DELETE", alices, request_timeout=180, **ALICE)
    assert status == 204
    observe(
        f"alice held {accepted} event streams, {watches} of them watches ({codes[b'watches']} "
        f"more watches and {codes[b'streams']} more streams refused with 429: her own caps), "
        f"{long_share.per_owner} long engine calls ({waiting} more of hers waiting) and 12 "
        f"execute requests; bob, quiet: {figures(quiet)}; under the flood: {figures(flooded)} "
        "(the worst of 2 rounds each)",
        cases=len(held),
    )


def archive(size: int) -> bytes:
    """A plain tar of one file of ``size`` bytes."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        member = tarfile.TarInfo("data.bin")
        member.size = size
        tar.addfile(member, io.BytesIO(bytes(size)))
    return out.getvalue()


@pytest.mark.resilience(
    scenario="denial of service: owner A floods one server with archive uploads to "
    "/api/snapshots and file uploads to its sandbox, many at once",
    expected=f"owner B's list, file read, execute of 1+1 and watch each answer within {BOUND:g} "
    "s; A's archive scans and file uploads take turns with A's own",
)
async def test_one_owners_uploads_and_archive_scans_do_not_hold_up_another(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    bobs_sandbox: str,
    observe: Callable[..., None],
) -> None:
    quiet = worst([await bobs_requests(jp_fetch, server_url, bobs_sandbox) for _ in range(2)])
    alices = await make_sandbox(jp_fetch, ALICE)
    tar = archive(4 * 1024**2)
    stop = asyncio.Event()
    done = {"archive uploads": 0, "file uploads": 0}

    # Alice's own HTTP client: bob's requests must not queue behind hers in the test's client
    # (tornado's allows 10 at once), only, if at all, in the server.
    alices_client = AsyncHTTPClient(force_instance=True, max_clients=20)

    async def upload(method: str, path: str) -> None:
        response = await alices_client.fetch(
            server_url + path, method=method, body=tar, request_timeout=120, **ALICE
        )
        assert response.code in (200, 201, 204), response.body[:300]

    async def upload_archives() -> None:
        while not stop.is_set():
            await upload("POST", "api/snapshots")
            done["archive uploads"] += 1

    async def upload_files(n: int) -> None:
        while not stop.is_set():
            await upload("PUT", f"api/sandboxes/{alices}/files/content?path=up-{n}.bin")
            done["file uploads"] += 1

    flood = [asyncio.ensure_future(upload_archives()) for _ in range(6)]
    flood += [asyncio.ensure_future(upload_files(n)) for n in range(6)]
    jobs, uploads = extension.archive_jobs, extension.uploads
    try:
        deadline = time.monotonic() + 30
        # Both kinds under way, and more of hers waiting their turn.
        while (jobs.held.get("alice", 0), uploads.held.get("alice", 0)) != (
            jobs.per_owner,
            uploads.per_owner,
        ) or not (jobs.waiting() and uploads.waiting()):
            assert time.monotonic() < deadline, f"alice's uploads: {jobs.held}, {uploads.held}"
            await asyncio.sleep(0.05)
        flooded = worst([await bobs_requests(jp_fetch, server_url, bobs_sandbox) for _ in range(2)])
    finally:
        stop.set()
        await asyncio.gather(*flood, return_exceptions=True)
        alices_client.close()
    for task in flood:
        task.result()  # none of alice's uploads failed: they were slowed, not refused
    for name, seconds in flooded.items():
        assert seconds < BOUND, f"bob's {name} took {seconds:.1f} s under alice's uploads"
    observe(
        f"alice uploaded {done['archive uploads']} archives of 4 MiB (6 at a time, "
        f"{jobs.per_owner} scanned at once) and {done['file uploads']} files of 4 MiB (6 at a "
        f"time, {uploads.per_owner} written at once) meanwhile; bob, quiet: {figures(quiet)}; under the flood: {figures(flooded)} "
        "(the worst of 2 rounds each)",
        cases=sum(done.values()),
    )


@pytest.mark.checklist(
    row=75,
    attack="one owner sends more file uploads (PUT files/content) than its share of upload "
    "turns, two of them stalled after their head, a third of 64 MiB",
    expected="the stalled two hold that owner's turns; the third's body is not read (its "
    "sender stalls) until a turn is free, then it is written; another owner's upload is "
    "answered meanwhile",
)
async def test_an_uploads_body_is_read_only_once_its_owner_has_a_turn(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    bobs_sandbox: str,
    held: list[HeldRequest],
    observe: Callable[..., None],
) -> None:
    """The server read every upload's body whole into its memory before the upload waited for
    its owner's turn: one owner's many uploads held memory and the network from all."""
    alices = await make_sandbox(jp_fetch, ALICE)
    uploads = extension.uploads
    for n in range(uploads.per_owner):
        path = f"api/sandboxes/{alices}/files/content?path=stalled-{n}.bin"
        held.append(await HeldRequest.open(server_url, "PUT", path, "alice", upload=1024))
    deadline = time.monotonic() + BOUND
    while uploads.held.get("alice", 0) < uploads.per_owner:
        assert time.monotonic() < deadline, f"alice's stalled uploads hold {uploads.held}"
        await asyncio.sleep(0.05)

    size = 64 * 1024**2
    third = await HeldRequest.open(
        server_url,
        "PUT",
        f"api/sandboxes/{alices}/files/content?path=big.bin",
        "alice",
        upload=size,
    )
    held.append(third)
    third.writer.write(bytes(size))
    with pytest.raises(TimeoutError):  # the server reads none of it: the sender stalls
        await asyncio.wait_for(third.writer.drain(), 3)
    assert uploads.waiting() == 1
    unsent = third.writer.transport.get_write_buffer_size()
    assert unsent > size // 2, f"only {unsent} of {size} bytes left to send"

    started = time.monotonic()  # bob's turn is his own
    status, entry = await api(
        jp_fetch,
        "PUT",
        bobs_sandbox,
        "files",
        "content",
        body="bob's",
        params={"path": "bobs.txt"},
        **BOB,
    )
    bobs = time.monotonic() - started
    assert (status, entry["size"]) == (200, 5), entry
    assert bobs < BOUND

    await held[0].close()  # a stalled client leaves: its turn goes to the waiting upload
    await asyncio.wait_for(third.writer.drain(), 60)
    assert await third.read_until(b'"size": ' + str(size).encode(), 120), third.seen[:300]
    assert third.status == 200
    observe(
        f"with alice's {uploads.per_owner} turns held by stalled uploads, {unsent} of the 64 MiB "
        f"of her third upload stayed unsent for 3 s (the server read none of it); bob's upload "
        f"was answered in {bobs:.2f} s; once a stalled client left, the 64 MiB were written",
        cases=uploads.per_owner + 2,
    )


@pytest.mark.checklist(
    row=138,
    attack="one owner downloads a 32 MiB file of its sandbox (GET files/content) over six "
    "connections at once and never reads the answers",
    expected="the server's memory grows by less than the file (it held every file read whole, "
    "twice at its peak, until its client read it): the downloads stream in that owner's turns "
    "and wait for the client; another owner's requests, a file read among them, are answered "
    "meanwhile; once the clients leave every turn is free",
)
async def test_downloads_a_client_never_reads_hold_neither_memory_nor_another_owner(
    jp_fetch: Fetch,
    server_url: str,
    extension: SandboxExtension,
    bobs_sandbox: str,
    held: list[HeldRequest],
    observe: Callable[..., None],
) -> None:
    size, connections = 32 * 1024**2, 6
    alices = await make_sandbox(jp_fetch, ALICE)
    try:
        status, ran = await api(
            jp_fetch,
            "POST",
            alices,
            "commands",
            body={"command": f"head -c {size} /dev/urandom > /workspace/big.bin"},
            **ALICE,
        )
        assert (status, ran["exit_code"]) == (200, 0), ran
        path = f"api/sandboxes/{alices}/files/content?path=big.bin"
        with peak_growth() as growth:
            for _ in range(connections):
                held.append(await HeldRequest.open(server_url, "GET", path, "alice"))
            # Two answers begun (their heads read, and at most 64 KiB of their bodies): the
            # server has its part of the file ready to send, whichever way it sends it.
            begun = [asyncio.ensure_future(r.read_until(b"\r\n\r\n", 120)) for r in held]
            deadline = time.monotonic() + 120
            while sum(task.done() for task in begun) < 2:
                assert time.monotonic() < deadline, "no download of alice's began"
                await asyncio.sleep(0.05)
            flooded = worst(
                [await bobs_requests(jp_fetch, server_url, bobs_sandbox) for _ in range(2)]
            )
            grew = growth()
        for task in begun:
            task.cancel()
        await asyncio.gather(*begun, return_exceptions=True)
        assert grew < size, f"the server grew by {grew / 2**20:.0f} MiB"
        downloads = extension.downloads
        assert [r.status for r in held if r.status] == [200] * downloads.per_owner
        assert downloads.held.get("alice") == downloads.per_owner
        assert downloads.waiting() == connections - downloads.per_owner
        for name, seconds in flooded.items():
            assert seconds < BOUND, f"bob's {name} took {seconds:.1f} s under alice's downloads"

        for request in held:
            await request.close()  # the clients leave: their turns and waits go with them
        deadline = time.monotonic() + BOUND
        while downloads.held.get("alice") or downloads.waiting():
            assert time.monotonic() < deadline, f"left: {downloads.held}, {downloads.waiting()}"
            await asyncio.sleep(0.05)
    finally:
        status, _ = await api(jp_fetch, "DELETE", alices, request_timeout=180, **ALICE)
        assert status == 204
    observe(
        f"alice's {connections} downloads of {size // 2**20} MiB, never read: the server grew by "
        f"{grew / 2**20:.1f} MiB at most ({downloads.per_owner} streaming, the rest waiting "
        f"their turn); bob: {figures(flooded)} (the worst of 2 rounds)",
        cases=connections,
    )
