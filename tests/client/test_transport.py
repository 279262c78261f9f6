"""Transport without a server: URLs built safely, the token from the environment and never
shown, and a server that cannot be reached or does not answer reported by URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from jupyter_sandbox.client import InvalidSettingError, SandboxClient, SandboxConnectionError
from jupyter_sandbox.client.transport import Transport


def test_routes_quote_each_part_whole() -> None:
    transport = Transport("http://127.0.0.1:8888/user/alice", token="t")
    assert transport.url == "http://127.0.0.1:8888/user/alice/"
    assert transport.route("sandboxes", "../../x?y", "files", query=[("path", "a b&c")]) == (
        "http://127.0.0.1:8888/user/alice/api/sandboxes/..%2F..%2Fx%3Fy/files?path=a+b%26c"
    )
    metadata = [("metadata", "task=t-1"), ("metadata", "agent=a")]
    assert transport.route("sandboxes", query=metadata).endswith(
        "/api/sandboxes?metadata=task%3Dt-1&metadata=agent%3Da"
    )


def test_the_token_comes_from_jupyter_token_and_is_never_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUPYTER_TOKEN", "secret-from-env")
    client = SandboxClient("https://hub.example.com/user/alice/")
    assert client._transport.token == "secret-from-env"
    assert Transport("http://h/", token="").token == ""  # none at all, said explicitly
    assert "secret" not in repr(client) + repr(client._transport)


@pytest.mark.parametrize("url", ["127.0.0.1:8888", "ftp://h/", "http://", "/api"])
def test_a_url_that_is_not_a_servers_is_refused(url: str) -> None:
    with pytest.raises(InvalidSettingError, match="must start with http:// or https://"):
        SandboxClient(url)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_a_server_that_cannot_be_reached_is_named() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = SandboxClient(f"http://127.0.0.1:{port}/", token="t")
    with pytest.raises(SandboxConnectionError) as caught:
        client.list()
    message = caught.value.message
    assert message.startswith(f"GET http://127.0.0.1:{port}/api/sandboxes: could not talk to")
    assert "Connection refused" in message
    assert isinstance(caught.value, ConnectionError)


def test_a_server_that_does_not_answer_times_out_by_name(silent_port: int) -> None:
    client = SandboxClient(f"http://127.0.0.1:{silent_port}/", token="t", timeout=0.3)
    with pytest.raises(SandboxConnectionError, match=r"did not answer within 0\.3 s"):
        client.get("0123456789ab")
