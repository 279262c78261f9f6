"""sandbox.ports against a real server: a web server started in the sandbox is listed with its
command and absolute URL, and that URL, fetched with no token, answers with the sandbox
server's bytes; a port's URL is given before anything listens there; errors keep their class."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request

import pytest

from jupyter_sandbox.client import (
    InvalidRequestError,
    Port,
    Sandbox,
    SandboxClient,
    SandboxNotFoundError,
)

pytestmark = [pytest.mark.integration, pytest.mark.runc]

# No token, no cookie, straight to the server whatever proxy the environment names: the URL
# alone must be enough.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url: str) -> bytes:
    with DIRECT.open(url, timeout=60) as answer:
        return bytes(answer.read())


def listening(sandbox: Sandbox, port: int) -> Port:
    """The sandbox's Port ``port`` once something listens there."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for found in sandbox.ports.list():
            if found.port == port:
                return found
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")


async def test_a_server_in_the_sandbox_is_listed_and_served_by_its_url(
    client: SandboxClient, server_url: str
) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, every byte value

    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            assert sandbox.ports.list() == []
            sandbox.files.write("site/data.bin", data)
            sandbox.start(["python", "-m", "http.server", "8000", "--directory", "site"])
            found = listening(sandbox, 8000)
            assert found.command.startswith("python -m http.server 8000"), found
            assert found.url.startswith(server_url.rstrip("/") + "/"), found.url
            assert found.url.endswith("/"), found.url
            assert f"/sandbox-ports/{sandbox.id}/8000/" in found.url
            assert sandbox.ports.url(8000) == found.url

            assert b"data.bin" in fetch(found.url)  # the directory listing, with no token
            assert fetch(found.url + "data.bin") == data

            sandbox.ports.revoke()  # the URL handed out dies; a new one serves the same
            with pytest.raises(urllib.error.HTTPError) as revoked:
                fetch(found.url)
            assert revoked.value.code == 404
            revoked.value.close()
            renewed = sandbox.ports.url(8000)
            assert renewed != found.url
            assert fetch(renewed + "data.bin") == data
        assert client.list() == []

    await asyncio.to_thread(scenario)


async def test_a_url_is_given_before_anything_listens_and_errors_keep_their_class(
    client: SandboxClient,
) -> None:
    def scenario() -> None:
        with client.create(runtime="runc") as sandbox:
            url = sandbox.ports.url(9000)
            assert url.startswith(("http://", "https://")), url
            assert f"/sandbox-ports/{sandbox.id}/9000/" in url
            with pytest.raises(urllib.error.HTTPError) as refused:  # nothing listens yet
                fetch(url)
            assert refused.value.code == 502
            assert b"nothing listens on port 9000" in refused.value.read()
            refused.value.close()
            sandbox.start(["python", "-m", "http.server", "9000"])
            listening(sandbox, 9000)
            assert b"Directory listing" in fetch(url)  # the same URL, once the server is up

            for bad in (0, 65536, True, "8000"):
                with pytest.raises(InvalidRequestError, match="from 1 to 65535"):
                    sandbox.ports.url(bad)  # type: ignore[arg-type]
            gone = sandbox.id
        with pytest.raises(SandboxNotFoundError):
            client.get(gone)
        with pytest.raises(SandboxNotFoundError):
            sandbox.ports.list()
        with pytest.raises(SandboxNotFoundError):
            sandbox.ports.url(8000)
        with pytest.raises(urllib.error.HTTPError) as closed:  # the URL died with the sandbox
            fetch(url)
        assert closed.value.code == 404
        closed.value.close()

    await asyncio.to_thread(scenario)
