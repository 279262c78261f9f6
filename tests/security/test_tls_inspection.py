"""TLS inspection through real sandboxes on both runtimes (issue 37 item 2; rows 120-123).

Inspection is off (the default); the owner's credentials name some hosts, which makes them
inspected. The sandbox trusts its own CA through the usual variables (tls_ca.TRUST_ENVIRONMENT),
so urllib, requests, curl and pip reach HTTPS test servers on the host's 127.0.0.1 (signed by a test
CA that only the proxy trusts, through NetworkSettings.upstream_extra_ca_file) with the proxy in
the middle adding the credential; the proxy refuses an upstream whose certificate does not
verify, and a Host or TLS server name that is not the CONNECT host. A host without credential
is tunneled as before.

requests is not in the sandbox image: the host's own installed requests (and what it imports)
is copied into the sandbox's workspace, unmodified, as tests/security/test_network_refusals.py
does. curl is the image's own, run by its absolute path.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import tempfile
import zipfile
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

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.network import read_audit
from jupyter_sandbox.sandbox.network.credentials import CredentialStore
from jupyter_sandbox.sandbox.network.tls_ca import CA_KEY
from jupyter_sandbox.sandbox.programs import image_programs
from tests.conftest import (
    BOTH_RUNTIMES,
    manager_config,
    purpose_label,
    remove_everything_under,
    remove_state_dir,
)
from tests.kernel_client import execute
from tests.sandbox.network.tls_servers import LocalCA, TLSServer, local_ca, tls_server
from tests.security.forwarder import forwarder_listening
from tests.security.test_network_credentials import SEARCH

pytestmark = pytest.mark.asyncio(loop_scope="module")
OWNER = "alice"
NAMES = (
    "allowed.test",
    "index.test",
    "selfsigned.test",
    "wrong.test",
    "expired.test",
    "plain.test",
)
SECRET = "Bearer tls-inspected-4f1c9e0b7a"
PASSWORD = "pip-index-pass-93b2d1"
BASIC = "pipuser:" + PASSWORD

HELPERS = r"""
import json, os, socket, ssl, subprocess, sys, urllib.error, urllib.request
sys.path.insert(0, "/workspace/site")
import requests
def with_urllib(url, headers=None):
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30)
        return f"{r.status} {r.read().decode()}"
    except urllib.error.HTTPError as e:
        return f"HTTPError {e.code}: {e.read().decode(errors='replace')}"
    except urllib.error.URLError as e:
        return f"URLError: {e}"
def with_requests(url):
    try:
        r = requests.get(url, timeout=30)
        return f"{r.status_code} {r.text}"
    except requests.RequestException as e:
        return f"{type(e).__name__}: {e}"
def with_curl(url):
    done = subprocess.run(
        ["/usr/bin/curl", "-sS", "--max-time", "30", url],
        capture_output=True, text=True, timeout=60,
    )
    return f"{done.returncode} {done.stdout}{done.stderr}"
def with_pip(index, package):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--retries", "0", "--timeout", "20",
         "--no-cache-dir", "--disable-pip-version-check",
         "--index-url", index, package],
        capture_output=True, text=True, timeout=180,
    )
    return f"{done.returncode} {done.stdout}{done.stderr}"
def tunnel(host, port):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(1)
    return s
def verifies(host, port):
    # Whether the certificate the client is shown verifies with what the sandbox trusts.
    context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    try:
        context.wrap_socket(tunnel(host, port), server_hostname=host).close()
        return "verified"
    except ssl.SSLError as e:
        return f"not verified: {e.reason}"
def holding(encoded):
    # Every file the sandbox can read that holds the text `encoded` in base64 (so that the
    # text itself is in no cell's source, which the kernel's history keeps).
    import base64
    text = base64.b64decode(encoded).decode()
    found = []
    for top in ("/etc/jupyter-sandbox", "/run/sandbox", "/tmp", "/workspace"):
        for base, _dirs, files in os.walk(top):
            for name in files:
                try:
                    with open(os.path.join(base, name), errors="replace") as f:
                        if text in f.read():
                            found.append(os.path.join(base, name))
                except OSError:
                    pass
    return found
def fronted(host, port, sni, host_header):
    # TLS through the proxy asking for `sni`, then a request for `host_header`.
    context = ssl.create_default_context()
    context.check_hostname = False  # a fronting client ignores the name the leaf has
    answer = b""
    try:
        t = context.wrap_socket(tunnel(host, port), server_hostname=sni)
        t.sendall(f"GET / HTTP/1.1\r\nHost: {host_header}\r\nConnection: close\r\n\r\n".encode())
        while chunk := t.recv(65536):
            answer += chunk
    except (ssl.SSLError, OSError):
        pass
    return answer.decode(errors="replace")
def trust():
    bundle = os.environ["SSL_CERT_FILE"]
    try:
        open(bundle, "a").close()
        writable = True
    except OSError:
        writable = False
    names = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE"]
    return {
        "same": sorted({os.environ[n] for n in names}),
        "node": os.environ["NODE_EXTRA_CA_CERTS"],
        "writable": writable,
        "files": sorted(os.listdir(os.path.dirname(bundle))),
        "certificates": open(bundle).read().count("BEGIN CERTIFICATE"),
        "image_first": open(bundle).read().startswith(
            open("/etc/ssl/certs/ca-certificates.crt").read()
        ),
        "image_certificates": open("/etc/ssl/certs/ca-certificates.crt").read().count(
            "BEGIN CERTIFICATE"
        ),
    }
"""


def wheel(name: str, version: str) -> tuple[str, bytes]:
    """A wheel of one module, ``name``, whose ``VALUE`` says where it came from."""
    dist = f"{name}-{version}"
    files = {
        f"{name}.py": b"VALUE = 'installed through TLS inspection'\n",
        f"{dist}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}.dist-info/RECORD,,\n"
    files[f"{dist}.dist-info/RECORD"] = record.encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{dist}-py3-none-any.whl", buffer.getvalue()


@pytest.fixture(scope="module")
def ca() -> Iterator[LocalCA]:
    with local_ca() as made:
        made.pem_file.chmod(0o644)
        yield made


@pytest.fixture(scope="module")
def upstream(ca: LocalCA) -> Iterator[TLSServer]:
    with tls_server(*ca.server_files("allowed.test")) as server:
        yield server


@pytest.fixture(scope="module")
def index(ca: LocalCA) -> Iterator[TLSServer]:
    """A simple index behind basic auth: only the proxy's credential opens it."""
    name, data = wheel("jsb_tls_probe", "1.0")
    with tls_server(*ca.server_files("index.test"), files={name: data}) as server:
        server.basic = BASIC
        yield server


@pytest.fixture(scope="module")
def plain(ca: LocalCA) -> Iterator[TLSServer]:
    """A host no credential names."""
    with tls_server(*ca.server_files("plain.test")) as server:
        yield server


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    """A launch directory holding the host's requests and what it imports, under site/."""
    path = Path(tempfile.mkdtemp(prefix="jsbt-", dir="/tmp"))
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
async def net_manager(ca: LocalCA) -> AsyncIterator[SandboxManager]:
    """Inspection off (the default): the credentials below make their hosts inspected."""
    state_dir = Path(tempfile.mkdtemp(prefix="jsbt-", dir="/tmp"))
    store = Path(tempfile.mkdtemp(prefix="jsbt-credentials-", dir="/tmp"))
    config = manager_config(state_dir)
    config.NetworkSettings.allow_loopback_for_tests = True
    config.NetworkSettings.test_host_addresses = dict.fromkeys(NAMES, "127.0.0.1")
    config.NetworkSettings.upstream_extra_ca_file = str(ca.pem_file)
    config.NetworkSettings.credentials_dir = str(store / "credentials")
    credentials = CredentialStore(store / "credentials")
    hosts = ["allowed.test", "selfsigned.test", "wrong.test", "expired.test"]
    credentials.set(OWNER, "api", {"hosts": hosts, "headers": {"Authorization": SECRET}})
    credentials.set(
        OWNER,
        "index",
        {"hosts": ["index.test"], "basic": {"username": "pipuser", "password": PASSWORD}},
    )
    manager = SandboxManager.from_config(config)
    try:
        yield manager
    finally:
        shutil.rmtree(store, ignore_errors=True)
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
    await net_manager.set_network_policy(OWNER, sandbox.sandbox_id, ",".join(NAMES))
    try:
        yield sandbox
    finally:
        await net_manager.remove(OWNER, sandbox.sandbox_id)


async def run(box: Sandbox, expression: str) -> Any:
    output, reply = await execute(
        box.connection_info, f"print(json.dumps({expression}))", timeout=240
    )
    assert reply["status"] == "ok", output
    return json.loads(output.strip().splitlines()[-1])


def root_of(manager: SandboxManager, box: Sandbox) -> Path:
    return SandboxDirectory(manager.settings.state_path, box.sandbox_id).root


@pytest.mark.checklist(
    row=120,
    attack="sandboxed urllib, requests, curl and pip (a local HTTPS index behind basic auth) to hosts "
    "a credential names, inspection otherwise off; a redirect to another host; then the "
    "sandbox searches /proc/*/environ, "
    "every file it can read and the answers for the values, and writes to its trust bundle",
    expected="each reaches the upstream through inspection with the credential added, trusting "
    "the sandbox's own CA; the redirect's target gets its own credential, not the first's; no value and no CA key anywhere in the sandbox; the bundle is "
    "read-only",
)
async def test_clients_reach_the_upstream_through_inspection_with_the_credential(
    net_manager: SandboxManager,
    box: Sandbox,
    upstream: TLSServer,
    index: TLSServer,
    observe: Callable[..., None],
) -> None:
    """Row 120: a credential's host is inspected, transparently to the sandbox's clients (they
    trust its CA through the usual variables); the credential reaches the server and nothing
    of it, nor of the CA's key, reaches the sandbox."""
    url = f"https://allowed.test:{upstream.port}/x"
    by_urllib = await run(box, f"with_urllib({url!r}, {{'Authorization': 'mine'}})")
    assert by_urllib == "200 hello from the TLS test server\n"
    assert upstream.requests[-1]["authorization"] == SECRET  # replaced the sandbox's own
    assert await run(box, f"with_requests({url!r})") == "200 hello from the TLS test server\n"
    assert upstream.requests[-1]["authorization"] == SECRET
    assert await run(box, f"with_curl({url!r})") == "0 hello from the TLS test server\n"
    assert upstream.requests[-1]["authorization"] == SECRET
    assert upstream.requests[-1]["connection"] == "close"
    # A redirect to another host: its request carries that host's credential, not this one's.
    redirect = (
        f"https://allowed.test:{upstream.port}/redirect?to=https://index.test:{index.port}/simple/"
    )
    assert (await run(box, f"with_urllib({redirect!r})")).startswith("200 <html>")
    assert upstream.paths[-1].startswith("/redirect?to=")
    assert index.requests[-1]["authorization"].startswith("Basic ")
    pip = await run(box, f"with_pip('https://index.test:{index.port}/simple/', 'jsb_tls_probe')")
    assert pip.startswith("0 "), pip
    assert "/files/jsb_tls_probe-1.0-py3-none-any.whl" in index.paths
    assert await run(box, "__import__('jsb_tls_probe').VALUE") == "installed through TLS inspection"
    secrets = [SECRET, PASSWORD, base64.b64encode(BASIC.encode()).decode()]
    assert not any(secret in by_urllib + pip for secret in secrets)
    searched = await net_manager.exec(
        OWNER,
        box.sandbox_id,
        [image_programs.PYTHON, "-c", SEARCH],
        ExecOptions(timeout=600, stdin=json.dumps(secrets).encode()),
    )
    assert searched.exit_code == 0, searched.stderr
    result = json.loads(searched.stdout.decode().strip().splitlines()[-1])
    assert result["found"] == []
    assert result["files"] > 1000  # it did read the image's files
    trust = await run(box, "trust()")
    assert trust["same"] == ["/etc/jupyter-sandbox/ca-bundle.pem"]
    assert trust["node"] == "/etc/jupyter-sandbox/ca.pem"
    assert trust["writable"] is False
    assert trust["files"] == ["ca-bundle.pem", "ca.pem"]
    assert trust["image_first"] is True  # the image's own bundle, then the sandbox's CA
    assert trust["certificates"] == trust["image_certificates"] + 1
    root = root_of(net_manager, box)
    key = (root / CA_KEY).read_text()
    line = base64.b64encode(key.splitlines()[1].encode()).decode()
    assert await run(box, f"holding({line!r})") == []
    audit = read_audit(root)
    used = {e["host"]: e.get("credential") for e in audit if e["rule"].startswith("inspected")}
    assert used == {"allowed.test": "api", "index.test": "index"}
    assert not any(secret in json.dumps(audit) for secret in secrets)
    observe(
        f"pip: {pip.strip().splitlines()[-1][:120]}; searched {result['files']} files and "
        "/proc/*/environ: no value",
        cases=5,
    )


@pytest.mark.checklist(
    row=121,
    attack="under inspection, an upstream whose certificate is self-signed, for another name, "
    "or expired",
    expected="refused (502) with the verification error, audited; no request reaches it",
)
@pytest.mark.parametrize(
    ("name", "kind", "reason"),
    [
        ("selfsigned.test", "self_signed", "self-signed certificate"),
        ("wrong.test", "wrong_name", "Hostname mismatch"),
        ("expired.test", "expired", "certificate has expired"),
    ],
)
async def test_an_upstream_certificate_that_does_not_verify_is_refused(
    net_manager: SandboxManager,
    box: Sandbox,
    ca: LocalCA,
    name: str,
    kind: str,
    reason: str,
    observe: Callable[..., None],
) -> None:
    """Row 121: the proxy verifies the upstream with the host's store; a bad certificate is a
    refusal the sandbox's program sees and the audit records, never accepted silently."""
    files = {
        "self_signed": lambda: ca.server_files(name, self_signed=True),
        "wrong_name": lambda: ca.server_files("allowed.test"),
        "expired": lambda: ca.server_files(name, expired=True),
    }[kind]()
    with tls_server(*files) as server:
        said = await run(box, f"with_urllib('https://{name}:{server.port}/')")
        assert said.startswith("HTTPError 502: refused: the upstream certificate of"), said
        assert reason in said
        assert server.requests == []
    entry = read_audit(root_of(net_manager, box))[-1]
    assert entry["allowed"] is False
    assert entry["host"] == name
    assert reason in entry["rule"]
    observe(said.strip(), cases=1)


@pytest.mark.checklist(
    row=122,
    attack="domain fronting under inspection: CONNECT to an allowed name, then TLS asking for "
    "another name, or a Host header naming another",
    expected="421 with a line naming both, audited; the upstream never sees the request",
)
async def test_fronting_under_inspection_is_refused(
    net_manager: SandboxManager,
    box: Sandbox,
    upstream: TLSServer,
    observe: Callable[..., None],
) -> None:
    """Row 122: a Host or a server name other than the CONNECT host is refused."""
    before = len(upstream.requests)
    port = upstream.port
    by_sni = await run(box, f"fronted('allowed.test', {port}, 'evil.test', 'allowed.test')")
    by_host = await run(box, f"fronted('allowed.test', {port}, 'allowed.test', 'evil.test')")
    sni_rule = "TLS server name evil.test is not the CONNECT host allowed.test"
    host_rule = f"Host evil.test is not the CONNECT host allowed.test:{port}"
    assert by_sni.startswith("HTTP/1.1 421 Misdirected Request\r\n"), by_sni
    assert by_sni.endswith(f"refused: {sni_rule}\n")
    assert by_host.startswith("HTTP/1.1 421 Misdirected Request\r\n"), by_host
    assert by_host.endswith(f"refused: {host_rule}\n")
    assert len(upstream.requests) == before
    rules = [e["rule"] for e in read_audit(root_of(net_manager, box)) if not e["allowed"]]
    assert sni_rule in rules
    assert host_rule in rules
    observe(f"{sni_rule}; {host_rule}", cases=2)


@pytest.mark.checklist(
    row=123,
    attack="with inspection off and no credential for the host: HTTPS through the proxy, and "
    "TLS asking for another server name",
    expected="tunneled as before (the client sees the server's own certificate, not one of the "
    "sandbox's CA); another server name is still closed; NetworkSettings.tls_inspection then "
    "inspects that host too",
)
async def test_without_credential_or_inspection_the_tunnel_is_as_before(
    net_manager: SandboxManager,
    box: Sandbox,
    plain: TLSServer,
    observe: Callable[..., None],
) -> None:
    """Row 123: plain.test has no credential: the sandbox's client meets its upstream's
    certificate itself (a test CA its bundle does not hold); the tunnel's SNI check stays.
    With inspection turned on (a setting of the proxy process, so the proxy is restarted) the
    client is shown a leaf of its own CA instead."""
    port = plain.port
    before = len(plain.requests)  # the server is the module's: the other runtime's went there
    shown = await run(box, f"verifies('plain.test', {port})")
    assert shown.startswith("not verified: CERTIFICATE_VERIFY_FAILED"), shown
    fronted = await run(box, f"fronted('plain.test', {port}, 'evil.test', 'plain.test')")
    assert fronted == ""  # closed before any byte passed
    assert len(plain.requests) == before
    entry = read_audit(root_of(net_manager, box))[-1]
    assert entry["rule"] == "TLS server name evil.test is not the CONNECT host plain.test"
    policy = ",".join(NAMES)
    net_manager.network.tls_inspection = True
    try:
        await net_manager.set_network_policy(OWNER, box.sandbox_id, "none")
        await net_manager.set_network_policy(OWNER, box.sandbox_id, policy)
        assert await run(box, f"verifies('plain.test', {port})") == "verified"
        said = await run(box, f"with_urllib('https://plain.test:{port}/')")
        assert said == "200 hello from the TLS test server\n"
        assert "authorization" not in plain.requests[-1]
    finally:
        net_manager.network.tls_inspection = False
        await net_manager.set_network_policy(OWNER, box.sandbox_id, "none")
        await net_manager.set_network_policy(OWNER, box.sandbox_id, policy)
    observe(f"without inspection: {shown}", cases=3)
