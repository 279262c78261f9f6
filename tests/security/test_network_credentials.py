"""Credentials the host proxy injects into plain HTTP, on both runtimes (issue 37, items 1 and 4).

Security checklist rows 116-119. An owner's credentials (sandbox/network/credentials.py) are
written to the store the manager's proxies read (``NetworkSettings.credentials_dir``, a test
directory); the sandbox's code then makes requests through its forwarder with urllib, requests
(pip's vendored copy: the image has no other), curl (/usr/bin/curl, by its absolute path) and pip
against a simple index served here with basic auth required. Upstream servers listen on
the host's 127.0.0.1 only, reached through the test-only ``allow_loopback_for_tests`` and
``test_host_addresses``; each records the headers of every request it gets.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import logging
import tempfile
import zipfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.network.audit import AUDIT_FILE
from jupyter_sandbox.sandbox.network.control import PROXY_LOG
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.sandbox.programs import image_programs
from tests.conftest import (
    BOTH_RUNTIMES,
    manager_config,
    purpose_label,
    remove_everything_under,
    remove_state_dir,
)
from tests.sandbox.network.servers import serving

pytestmark = pytest.mark.asyncio(loop_scope="module")
OWNER = "alice"
TOKEN = "tok-a1b2c3d4e5f60718-injected"  # the header credential's secret
PASSWORD = "pw-99f0e1d2c3b4a596-index"  # the index's basic-auth password
BASIC = base64.b64encode(f"reader:{PASSWORD}".encode()).decode()
SECRETS = (TOKEN, PASSWORD, BASIC)
POLICY = {"mode": "allowlist", "allow": ["api.test", "other.test", "index.test"]}
WHEEL = "credpkg-1.0-py3-none-any.whl"


def wheel_bytes() -> bytes:
    """A pure-Python wheel of ``credpkg`` 1.0, made here (no build tool, no network)."""
    files = {
        "credpkg/__init__.py": b"VALUE = 42\n",
        "credpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: credpkg\nVersion: 1.0\n",
        "credpkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    )
    record += "credpkg-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("credpkg-1.0.dist-info/RECORD", record)
    return buffer.getvalue()


class Upstream(http.server.ThreadingHTTPServer):
    """Records each request's Host and headers; answers ``/redirect?to=URL`` with a 302, the
    simple index under ``/simple/`` and the wheel under ``/packages/`` (both only with the
    index's basic auth: 401 otherwise), anything else with a fixed 200 that echoes nothing."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.wheel = wheel_bytes()
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def authorizations(self) -> list[list[str]]:
        return [request["authorization"] for request in self.seen]


class _UpstreamHandler(http.server.BaseHTTPRequestHandler):
    server: Upstream

    def do_GET(self) -> None:
        self.server.seen.append(
            {
                "path": self.path,
                "host": self.headers.get("Host", ""),
                "authorization": self.headers.get_all("Authorization") or [],
                "x-api-key": self.headers.get_all("X-Api-Key") or [],
                "headers": str(self.headers),
            }
        )
        if self.path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("Location", self.path.removeprefix("/redirect?to="))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith(("/simple/", "/packages/")):
            if self.headers.get_all("Authorization") != [f"Basic {BASIC}"]:
                self._answer(401, b"unauthorized\n", [("WWW-Authenticate", 'Basic realm="i"')])
                return
            if self.path.startswith("/packages/"):
                self._answer(200, self.server.wheel, [("Content-Type", "application/zip")])
                return
            digest = hashlib.sha256(self.server.wheel).hexdigest()
            page = (
                f'<html><body><a href="/packages/{WHEEL}#sha256={digest}">{WHEEL}</a></body></html>'
            )
            self._answer(200, page.encode(), [("Content-Type", "text/html")])
            return
        self._answer(200, b"hello from the upstream\n", [("Content-Type", "text/plain")])

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


# Run in the sandbox: each client's request, the status and body it got, kept in a file too
# (so that the search of the filesystem covers what the programs received).
CLIENTS = r"""
import json, os, socket, sys, urllib.error, urllib.request
from pip._vendor import requests
def by_urllib(url, headers):
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return [r.status, r.read().decode("latin-1")]
    except urllib.error.HTTPError as e:
        return [e.code, e.reason + " " + e.read().decode("latin-1")]
    except Exception as e:
        return [-1, f"{type(e).__name__}: {e}"]
def by_requests(url, headers):
    try:
        r = requests.get(url, headers=headers, timeout=30)
        return [r.status_code, r.reason + " " + r.text]
    except Exception as e:
        return [-1, f"{type(e).__name__}: {e}"]
def by_curl(url, headers):
    import subprocess
    argv = ["/usr/bin/curl", "-sS", "--max-time", "30", "-w", "\n%{http_code}"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    done = subprocess.run(argv + [url], capture_output=True, text=True, timeout=60)
    body, _, code = done.stdout.rpartition("\n")
    return [int(code) if code.isdigit() else -1, body + done.stderr]
def raw(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(data.encode("latin-1"))
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    return [0, got.decode("latin-1")]
calls = json.loads(sys.argv[1])
results = [globals()[kind](*args) for kind, args in calls]
for where in ("/workspace", "/tmp"):
    try:
        with open(os.path.join(where, "responses.json"), "w") as f:
            json.dump(results, f)
        break
    except OSError:
        continue
print(json.dumps(results))
"""

# Run in the sandbox after the requests: every place its user can read that holds a secret.
SEARCH = r"""
import json, os, sys
secrets = [s.encode() for s in json.loads(sys.stdin.read())]  # never in its argv
found, files = [], 0
def look(path, limit=64 * 1024 * 1024):
    global files
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except OSError:
        return
    files += 1
    if any(s in data for s in secrets):
        found.append(path)
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("environ", "cmdline"):
            look(f"/proc/{pid}/{name}")
for top, dirs, names in os.walk("/"):
    if top == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for name in names:
        path = os.path.join(top, name)
        if os.path.isfile(path) and not os.path.islink(path):
            look(path)
print(json.dumps({"found": found, "files": files}))
"""


@pytest.fixture(scope="module")
def api() -> Iterator[Upstream]:
    with serving(Upstream()) as server:
        yield server


@pytest.fixture(scope="module")
def other() -> Iterator[Upstream]:
    with serving(Upstream()) as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cred_manager() -> AsyncIterator[SandboxManager]:
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    store = Path(tempfile.mkdtemp(prefix="jsbx-credentials-", dir="/tmp"))
    config = manager_config(state_dir)
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.credentials_dir = str(store / "credentials")
    config.NetworkSettings.test_host_addresses = {
        name: "127.0.0.1" for name in ("api.test", "other.test", "index.test", "unlisted.test")
    }
    manager = SandboxManager.from_config(config)
    try:
        yield manager
    finally:
        for info in await manager.list_sandboxes(OWNER):
            await manager.remove(OWNER, info.sandbox_id)
        await remove_everything_under(manager, state_dir)
        await manager.close()
        remove_state_dir(state_dir)
        remove_state_dir(store)


@pytest.fixture(scope="module", params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box(cred_manager: SandboxManager, runtime: str) -> AsyncIterator[Sandbox]:
    sandbox = await cred_manager.create(
        OWNER, runtime=runtime, purpose=purpose_label(f"{__name__}[{runtime}]"), network=POLICY
    )
    try:
        yield sandbox
    finally:
        await cred_manager.remove(OWNER, sandbox.sandbox_id)


def store_of(manager: SandboxManager) -> CredentialStore:
    return CredentialStore(manager.network.credentials_path)


@pytest.fixture
def credentials(cred_manager: SandboxManager) -> Iterator[CredentialStore]:
    """The owner's credentials: a header for api.test, basic auth for the index, and one for
    a host the policy does not allow; all removed afterwards."""
    store = store_of(cred_manager)
    store.set(OWNER, "gh", {"hosts": ["api.test"], "headers": {"Authorization": f"Bearer {TOKEN}"}})
    basic = {"username": "reader", "password": PASSWORD}
    store.set(OWNER, "index", {"hosts": ["index.test"], "basic": basic})
    store.set(OWNER, "stray", {"hosts": ["unlisted.test"], "headers": {"X-Api-Key": TOKEN}})
    try:
        yield store
    finally:
        for name in ("gh", "index", "stray"):
            if any(item["name"] == name for item in store.describe(OWNER)):
                store.remove(OWNER, name)


async def run_clients(
    manager: SandboxManager, box: Sandbox, calls: list[tuple[str, list[Any]]]
) -> list[list[Any]]:
    result = await manager.exec(
        OWNER,
        box.sandbox_id,
        [image_programs.PYTHON, "-c", CLIENTS, json.dumps(calls)],
        ExecOptions(timeout=120),
    )
    assert result.exit_code == 0, result.stderr
    answers: list[list[Any]] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return answers


@pytest.mark.checklist(
    row=116,
    attack="sandboxed code calls an API the owner holds a credential for, with urllib, requests, "
    "curl and pip (a simple index with basic auth), sending its own Authorization header too",
    expected="the upstream gets the owner's header, one copy (the sandbox's is replaced); pip "
    "installs from the index; the audit names the credential used",
)
async def test_row116_the_credential_reaches_the_upstream_once(
    cred_manager: SandboxManager,
    box: Sandbox,
    api: Upstream,
    credentials: CredentialStore,
    observe: Callable[..., None],
) -> None:
    api.seen.clear()
    url = f"http://api.test:{api.port}/v1/user"
    forged = {"Authorization": "Bearer chosen-by-the-sandbox"}
    answers = await run_clients(
        cred_manager,
        box,
        [
            ("by_urllib", [url, {}]),
            ("by_requests", [url, {}]),
            ("by_curl", [url, {}]),
            ("by_urllib", [url, forged]),
            ("by_requests", [url, forged]),
            ("by_curl", [url, forged]),
        ],
    )
    assert [status for status, _ in answers] == [200] * 6, answers
    assert api.authorizations() == [[f"Bearer {TOKEN}"]] * 6
    assert all("chosen-by-the-sandbox" not in request["headers"] for request in api.seen)
    index = f"http://index.test:{api.port}/simple/"
    pip = await cred_manager.exec(
        OWNER,
        box.sandbox_id,
        [
            image_programs.PYTHON,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-cache-dir",
            "--index-url",
            index,
            "--trusted-host",
            "index.test",
            "credpkg",
        ],
        ExecOptions(timeout=180),
    )
    assert pip.exit_code == 0, pip.stdout.decode() + pip.stderr.decode()
    imported = await cred_manager.exec(
        OWNER,
        box.sandbox_id,
        [
            image_programs.PYTHON,
            "-c",
            "import credpkg; print(credpkg.VALUE)",
        ],
        ExecOptions(timeout=60),
    )
    assert imported.stdout.decode().strip() == "42"
    pip_requests = [r for r in api.seen if r["path"].startswith(("/simple/", "/packages/"))]
    assert pip_requests
    assert all(r["authorization"] == [f"Basic {BASIC}"] for r in pip_requests)
    audit = await cred_manager.network_audit(OWNER, box.sandbox_id, 1000)
    used = {
        entry.get("credential") for entry in audit if entry["host"] in ("api.test", "index.test")
    }
    assert used == {"gh", "index"}
    observe(
        f"6 requests (urllib, requests, curl, each also with a forged Authorization) reached the "
        f"upstream with one injected header; pip installed credpkg through {len(pip_requests)} "
        "basic-auth requests; the audit names gh and index",
        cases=8,
    )


@pytest.mark.checklist(
    row=117,
    attack="after using the credentials, the sandbox's code searches /proc/*/environ and "
    "cmdline, every file it can read, the responses and the proxy's error answers for the "
    "values; the owner looks in the audit, the logs and a workspace snapshot",
    expected="the values are nowhere: not in the sandbox, not in an answer of the proxy, not "
    "in the audit, the proxy's log, the server's log or the snapshot",
)
async def test_row117_the_value_is_nowhere_the_sandbox_or_the_logs_can_see(
    cred_manager: SandboxManager,
    box: Sandbox,
    api: Upstream,
    credentials: CredentialStore,
    caplog: pytest.LogCaptureFixture,
    observe: Callable[..., None],
) -> None:
    caplog.set_level(logging.DEBUG)
    port = api.port
    answers = await run_clients(
        cred_manager,
        box,
        [
            ("by_urllib", [f"http://api.test:{port}/", {}]),
            ("by_requests", [f"http://index.test:{port}/simple/", {}]),
            # The proxy's own answers: a refusal, a bad request, a failed connection.
            ("by_urllib", [f"http://unlisted.test:{port}/", {}]),
            ("raw", [f"GET http://api.test:{port}/ HTTP/1.1\r\nX: a\nY: b\r\n\r\n"]),
            ("by_urllib", ["http://api.test:1/", {}]),
            ("raw", [f"GET http://api.test:{port}/ HTTP/1.1\r\nHost: api.test\r\n\r\n"]),
        ],
    )
    statuses = [status for status, _ in answers]
    assert statuses[:3] == [200, 200, 403], answers
    assert "400" in answers[3][1].split("\r\n")[0]
    assert statuses[4] in (502, -1), answers
    assert "hello from the upstream" in answers[5][1]
    text = json.dumps(answers)
    assert not any(secret in text for secret in SECRETS)
    searched = await cred_manager.exec(
        OWNER,
        box.sandbox_id,
        [image_programs.PYTHON, "-c", SEARCH],
        ExecOptions(timeout=600, stdin=json.dumps(SECRETS).encode()),
    )
    assert searched.exit_code == 0, searched.stderr
    result = json.loads(searched.stdout.decode().strip().splitlines()[-1])
    assert result["found"] == []
    assert result["files"] > 1000  # it did read the image's files, not nothing
    root = SandboxDirectory(cred_manager.settings.state_path, box.sandbox_id).root
    host_side = (root / AUDIT_FILE).read_text()
    if (root / PROXY_LOG).exists():
        host_side += (root / PROXY_LOG).read_text()
    host_side += json.dumps(await cred_manager.network_audit(OWNER, box.sandbox_id, 1000))
    host_side += caplog.text
    assert '"credential": "gh"' in host_side  # the audit names it
    assert not any(secret in host_side for secret in SECRETS)
    archive = await cred_manager.snapshots.persist_bytes(OWNER, box.sandbox_id)
    assert b"hello from the upstream" in archive or len(archive) > 0
    assert not any(secret.encode() in archive for secret in SECRETS)
    observe(
        f"searched /proc/*/environ and cmdline and {result['files']} files: no value; a 403, a "
        "400 and a 502 of the proxy, the audit, the proxy's log, the server's log and a "
        "workspace snapshot hold none",
        cases=8,
    )


@pytest.mark.checklist(
    row=118,
    attack="get a credential sent elsewhere: a host the rule does not name, a redirect from the "
    "credential's host to another, a Host header naming the credential's host on a request for "
    "another, the credential's host by its IP address",
    expected="only a request whose URI names the credential's host carries it: the other "
    "server, the redirect's target and the Host trick get none; the IP literal is refused",
)
async def test_row118_never_to_another_host(
    cred_manager: SandboxManager,
    box: Sandbox,
    api: Upstream,
    other: Upstream,
    credentials: CredentialStore,
    observe: Callable[..., None],
) -> None:
    api.seen.clear()
    other.seen.clear()
    elsewhere = f"http://other.test:{other.port}/landing"
    redirect = f"http://api.test:{api.port}/redirect?to={elsewhere}"
    answers = await run_clients(
        cred_manager,
        box,
        [
            ("by_urllib", [elsewhere, {}]),
            ("by_urllib", [redirect, {}]),
            ("by_requests", [redirect, {}]),
            ("raw", [f"GET {elsewhere} HTTP/1.1\r\nHost: api.test:{api.port}\r\n\r\n"]),
            # urllib would not use the proxy for 127.0.0.1: ask the proxy itself.
            ("raw", [f"GET http://127.0.0.1:{api.port}/ HTTP/1.1\r\n\r\n"]),
        ],
    )
    assert [status for status, _ in answers[:3]] == [200, 200, 200], answers
    assert "hello from the upstream" in answers[3][1]
    assert answers[4][1].startswith("HTTP/1.1 403 "), answers
    # api.test saw the two redirecting requests, each with the credential; other.test saw four
    # requests (direct, two redirected, the Host trick), none with it, each for its own name.
    assert api.authorizations() == [[f"Bearer {TOKEN}"]] * 2
    assert len(other.seen) == 4
    assert all(request["authorization"] == [] for request in other.seen)
    assert all(request["host"] == f"other.test:{other.port}" for request in other.seen)
    assert not any(TOKEN in request["headers"] for request in other.seen)
    observe(
        "the other host, 2 redirects to it and a Host header naming the credential's host got "
        "no credential; 127.0.0.1 by address: 403",
        cases=5,
    )


@pytest.mark.checklist(
    row=119,
    attack="the owner holds a credential for a host the sandbox's policy does not allow; the "
    "sandbox asks for that host, then a credential is removed while the sandbox runs",
    expected="the request is refused as before (403, the server never contacted), the "
    "credential does not open the host; a removed credential is not sent on the next request",
)
async def test_row119_a_credential_never_opens_a_host(
    cred_manager: SandboxManager,
    box: Sandbox,
    api: Upstream,
    credentials: CredentialStore,
    observe: Callable[..., None],
) -> None:
    api.seen.clear()
    answers = await run_clients(
        cred_manager, box, [("by_urllib", [f"http://unlisted.test:{api.port}/", {}])]
    )
    assert answers[0][0] == 403, answers
    assert "not in allowlist" in answers[0][1]
    assert api.seen == []
    credentials.remove(OWNER, "gh")
    answers = await run_clients(
        cred_manager, box, [("by_urllib", [f"http://api.test:{api.port}/", {}])]
    )
    assert answers[0][0] == 200
    assert api.authorizations() == [[]]
    audit = await cred_manager.network_audit(OWNER, box.sandbox_id, 5)
    assert audit[-1]["host"] == "api.test"
    assert "credential" not in audit[-1]
    observe(
        "unlisted.test with a credential for it: 403, no connection; after removing gh the "
        "next request to api.test went without it",
        cases=2,
    )
