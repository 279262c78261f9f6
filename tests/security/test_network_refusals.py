"""What a program in a sandbox is told when the network policy refuses it: urllib, requests and
pip under none, an allowlist and open, on both runtimes (issue 36, item 3; rows 96-98).

Each refusal is a 403 whose reason phrase names the policy, the target and the rule, because
that is what these clients put in the error they raise (a proxy's body they never show). Under
none the forwarder inside the sandbox answers (no host proxy runs); otherwise the host proxy.

requests is not in the sandbox image: the test copies the host's own installed requests (and
what it imports) into the sandbox's workspace, unmodified. Targets are test names that the host
proxy resolves to 127.0.0.1 or 10.0.0.1 (``test_host_addresses``) and pypi.org, which under
none and an allowlist without it is refused before any lookup: nothing leaves the host.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import certifi
import charset_normalizer
import idna
import pytest
import pytest_asyncio
import requests
import urllib3

from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from tests.conftest import (
    BOTH_RUNTIMES,
    manager_config,
    purpose_label,
    remove_everything_under,
    remove_state_dir,
)
from tests.kernel_client import execute
from tests.sandbox.network.servers import RecordingServer, recording_server
from tests.security.forwarder import forwarder_listening

pytestmark = pytest.mark.asyncio(loop_scope="module")
OWNER = "alice"
REMEDY = "change it in the Sandboxes panel or with JUPYTER_SANDBOX_NETWORK"
# The reason phrase a refusal may take at most (forwarder.refusal_text's bounds, with room).
MAX_REASON = 400

# Each helper returns the text of the error the client raised, as a user would read it.
HELPERS = r"""
import json, socket, subprocess, sys, urllib.error, urllib.request
sys.path.insert(0, "/workspace/site")
import requests
def with_urllib(url):
    try:
        urllib.request.urlopen(url, timeout=30)
        return "no error"
    except urllib.error.HTTPError as e:
        return f"HTTPError: {e}"
    except urllib.error.URLError as e:
        return f"URLError: {e}"
def with_requests(url):
    try:
        requests.get(url, timeout=30).raise_for_status()
        return "no error"
    except requests.RequestException as e:
        return f"{type(e).__name__}: {e}"
def with_pip(package):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--retries", "1", "--timeout", "10",
         "--no-cache-dir", "--disable-pip-version-check", "--target", "/tmp/pip-target",
         package],
        capture_output=True, text=True, timeout=120,
    )
    return done.stdout + done.stderr
def status_line(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    try:
        s.sendall(data)
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        return got.split(b"\r\n")[0].decode("latin-1")
    finally:
        s.close()
"""


@pytest.fixture(scope="module")
def server() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    """A launch directory holding the host's requests and what it imports, under site/."""
    path = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    site = path / "site"
    for module in (requests, urllib3, idna, charset_normalizer, certifi):
        assert module.__file__ is not None
        shutil.copytree(Path(module.__file__).parent, site / module.__name__)
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def net_manager() -> AsyncIterator[SandboxManager]:
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    config = manager_config(state_dir)
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.test_host_addresses = {
        "allowed.test": "127.0.0.1",
        "unlisted.test": "127.0.0.1",
        "private.test": "10.0.0.1",
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


@pytest.fixture(scope="module", params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """Module-scoped (one sandbox per runtime); named ``runtime`` for the security report."""
    return str(request.param)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def box(net_manager: SandboxManager, runtime: str, workspace: Path) -> AsyncIterator[Sandbox]:
    sandbox = await net_manager.create(
        OWNER,
        runtime=runtime,
        launch_dir=str(workspace),
        purpose=purpose_label(f"{__name__}[{runtime}]"),
    )
    await forwarder_listening(net_manager, sandbox.sandbox_id)
    output, reply = await execute(sandbox.connection_info, HELPERS)
    assert reply["status"] == "ok", output
    try:
        yield sandbox
    finally:
        await net_manager.remove(OWNER, sandbox.sandbox_id)


async def run(box: Sandbox, expression: str) -> Any:
    output, reply = await execute(
        box.connection_info, f"print(json.dumps({expression}))", timeout=180
    )
    assert reply["status"] == "ok", output
    return json.loads(output.strip().splitlines()[-1])


def refusal(mode: str, target: str, rule: str = "") -> str:
    """The line every client must show (forwarder.refusal_text), without its remedy."""
    why = f" ({rule})" if rule else ""
    return f"jupyter-sandbox: network policy {mode}: {target} not allowed{why}; "


@pytest.mark.checklist(
    row=96,
    attack="a program using the proxy variables under the policy none (urllib, requests, pip)",
    expected="refused, with an error that names the policy none, the target and how to change it",
)
async def test_none_says_the_policy_refused_the_request(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
) -> None:
    """Row 96: under none each client's error names the policy and the target (no longer
    'Connection refused'), and the server is never contacted."""
    await net_manager.set_network_policy(OWNER, box.sandbox_id, "none")
    before = server.connections
    http_target, https_target = f"allowed.test:{server.port}", "pypi.org:443"
    seen = {
        "urllib http": await run(box, f"with_urllib('http://{http_target}/')"),
        "urllib https": await run(box, f"with_urllib('https://{https_target}/simple/')"),
        "requests http": await run(box, f"with_requests('http://{http_target}/')"),
        "requests https": await run(box, f"with_requests('https://{https_target}/simple/')"),
        "pip": await run(box, "with_pip('six')"),
    }
    for client, said in seen.items():
        target = http_target if client.endswith("http") else https_target
        assert refusal("none", target) + REMEDY in said, (client, said)
    assert server.connections == before
    observe(f"urllib https: {seen['urllib https']}", cases=len(seen))


@pytest.mark.checklist(
    row=97,
    attack="a program asking for a name an allowlist does not list (urllib, requests, pip)",
    expected="403 from the host proxy; the error names the allowlist, the target and the rule",
)
async def test_allowlist_refusal_names_the_rule(
    net_manager: SandboxManager, box: Sandbox, server: RecordingServer, observe: Callable[..., None]
) -> None:
    """Row 97: under an allowlist the refusal names the policy and the rule that refused, in
    what urllib, requests and pip show; a listed name still works."""
    await net_manager.set_network_policy(OWNER, box.sandbox_id, "allowed.test,!pypi.org")
    before = server.connections
    unlisted = f"unlisted.test:{server.port}"
    rule = "not in allowlist"
    seen = {
        "urllib http": (await run(box, f"with_urllib('http://{unlisted}/')"), unlisted, rule),
        "urllib https": (
            await run(box, f"with_urllib('https://{unlisted}/')"),
            unlisted,
            rule,
        ),
        "requests http": (await run(box, f"with_requests('http://{unlisted}/')"), unlisted, rule),
        "requests https": (
            await run(box, f"with_requests('https://{unlisted}/')"),
            unlisted,
            rule,
        ),
        "pip": (await run(box, "with_pip('six')"), "pypi.org:443", "deny pypi.org"),
    }
    for client, (said, target, why) in seen.items():
        assert refusal("allowlist", target, why) + REMEDY in said, (client, said)
    assert server.connections == before
    assert await run(box, f"with_urllib('http://allowed.test:{server.port}/')") == "no error"
    observe(f"pip: {seen['pip'][0].splitlines()[0][:300]}", cases=len(seen))


@pytest.mark.checklist(
    row=98,
    attack="open: a name resolving to a private address; a refused request whose target is "
    "hostile (non-ASCII bytes, 60 KiB long) under none and under an allowlist",
    expected="the error names the rule and how a server's admin opens private ranges; every "
    "refusal's status line is printable ASCII and bounded",
)
async def test_open_refusal_names_the_address_rule_and_reasons_stay_bounded(
    net_manager: SandboxManager, box: Sandbox, observe: Callable[..., None]
) -> None:
    """Row 98: under open a private address is refused with the rule that refused it (no
    policy reaches it, so the remedy is the server's setting), and a hostile target never
    makes a refusal's reason phrase unbounded or other than printable ASCII."""
    await net_manager.set_network_policy(OWNER, box.sandbox_id, "open")
    rule = "resolved to a denied address 10.0.0.1 (private)"
    remedy = "c.NetworkSettings.allow_private_ranges"
    for call in (
        "with_urllib('http://private.test:8080/')",
        "with_urllib('https://private.test:8443/')",
        "with_requests('http://private.test:8080/')",
        "with_requests('https://private.test:8443/')",
    ):
        said = await run(box, call)
        target = "private.test:8443" if "https" in call else "private.test:8080"
        assert refusal("open", target, rule) in said, (call, said)
        assert remedy in said, (call, said)
    hostile = "b'CONNECT ' + bytes(range(0x80, 0x100)) * 240 + b':443 HTTP/1.1\\r\\n\\r\\n'"
    lines = []
    for policy in ("none", "other.test"):
        await net_manager.set_network_policy(OWNER, box.sandbox_id, policy)
        lines.append(await run(box, f"status_line({hostile})"))
        lines.append(
            await run(box, "status_line(b'CONNECT ' + b'a' * 60000 + b':443 HTTP/1.1\\r\\n\\r\\n')")
        )
    for line in lines:
        assert line.startswith(("HTTP/1.1 403 ", "HTTP/1.1 400 ")), line
        assert len(line) <= MAX_REASON, len(line)
        assert all(" " <= c <= "~" for c in line), line
    observe(
        f"open, private: {refusal('open', 'private.test:8080', rule)}...; hostile: {lines[0][:80]}",
        cases=6,
    )
