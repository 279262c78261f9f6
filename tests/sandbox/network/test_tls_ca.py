"""The sandbox's egress CA and the leaves the proxy mints with it (network/tls_ca.py), and the
request and answer heads read inside an inspected CONNECT (network/inspection.py)."""

from __future__ import annotations

import datetime
import os
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from jupyter_sandbox.sandbox.network.inspection import Refusal, rewrite_request, rewrite_response
from jupyter_sandbox.sandbox.network.request_head import BadRequest
from jupyter_sandbox.sandbox.network.tls_ca import (
    BUNDLE,
    CA_CERT,
    CA_KEY,
    LEAF_LIFETIME,
    TRUST_DIR,
    LeafMinter,
    make_sandbox_ca,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    made = tmp_path / "0123456789ab"
    made.mkdir(mode=0o700)
    make_sandbox_ca(made, "0123456789ab", bundle=b"-----BEGIN CERTIFICATE-----\nhost\n")
    return made


def test_the_key_is_host_only_and_the_certificate_and_bundle_readable(root: Path) -> None:
    assert stat.S_IMODE(os.stat(root / CA_KEY).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / TRUST_DIR).st_mode) == 0o755
    cert = (root / TRUST_DIR / CA_CERT).read_bytes()
    bundle = (root / TRUST_DIR / BUNDLE).read_bytes()
    assert bundle == b"-----BEGIN CERTIFICATE-----\nhost\n" + cert  # the host's, then this CA
    assert sorted(os.listdir(root / TRUST_DIR)) == [BUNDLE, CA_CERT]  # never the key
    ca = x509.load_pem_x509_certificate(cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert "0123456789ab" in ca.subject.rfc4514_string()


def test_each_sandbox_has_its_own_ca(tmp_path: Path, root: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    make_sandbox_ca(other, "other", bundle=b"")
    assert (other / TRUST_DIR / CA_CERT).read_bytes() != (root / TRUST_DIR / CA_CERT).read_bytes()
    with pytest.raises(FileExistsError):  # never over an existing key
        make_sandbox_ca(other, "other", bundle=b"")


def test_a_leaf_names_its_host_only_is_short_lived_and_verifies(root: Path) -> None:
    minter = LeafMinter(root)
    leaf = minter.leaf("api.example.com")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api.example.com"]
    assert (
        leaf.not_valid_after_utc - leaf.not_valid_before_utc
        <= LEAF_LIFETIME + datetime.timedelta(hours=1)
    )
    assert leaf.issuer == minter.ca_cert.subject
    leaf.verify_directly_issued_by(minter.ca_cert)
    address = minter.leaf("127.0.0.1")
    ips = address.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in ips.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_contexts_are_cached_per_name_and_offer_http_1_1(root: Path) -> None:
    minter = LeafMinter(root)
    first = minter.context("a.example")
    assert minter.context("a.example") is first
    assert minter.context("b.example") is not first
    assert isinstance(first, ssl.SSLContext)


CONNECT = ("api.example.com", 443)


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_request_is_rewritten_with_the_credential_replacing_the_sandbox_s() -> None:
    request = rewrite_request(
        head(
            "POST /v1/x?y=1 HTTP/1.1",
            "Host: API.example.com",
            "authorization: mine",
            "Connection: keep-alive",
            "Expect: 100-continue",
            "Content-Length: 5",
        ),
        *CONNECT,
        [("Authorization", "Bearer secret")],
    )
    assert request.head == head(
        "POST /v1/x?y=1 HTTP/1.1",
        "Host: API.example.com",
        "Content-Length: 5",
        "Authorization: Bearer secret",
        "Connection: close",
    )
    assert (request.length, request.chunked, request.expects_continue) == (5, False, True)
    assert request.added == ("Authorization",)


@pytest.mark.parametrize(
    "host", ["evil.test", "api.example.com:8443", "api.example.com.evil.test", "[::1]"]
)
def test_a_host_other_than_the_connect_host_is_refused(host: str) -> None:
    with pytest.raises(Refusal) as refused:
        rewrite_request(head("GET / HTTP/1.1", f"Host: {host}"), *CONNECT, [])
    assert refused.value.status == 421
    assert "is not the CONNECT host api.example.com:443" in refused.value.rule


@pytest.mark.parametrize(
    "bad",
    [
        b"GET / HTTP/1.1\nHost: api.example.com\r\n\r\n",  # a bare LF
        b"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",  # absolute
        b"GET / HTTP/1.1\r\nHost: api.example.com\r\nHost: evil.test\r\n\r\n",  # two Hosts
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: \xd9\xa3\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 1\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: api.example.com\r\n\r\n",  # 1.1 only inside
    ],
)
def test_malformed_heads_are_bad_requests(bad: bytes) -> None:
    with pytest.raises(BadRequest):
        rewrite_request(bad, *CONNECT, [])


def test_an_answer_keeps_its_headers_and_says_connection_close() -> None:
    status, rewritten = rewrite_response(
        head("HTTP/1.1 200 OK", "Content-Length: 3", "Connection: keep-alive", "Keep-Alive: 5")
    )
    assert status == 200
    assert rewritten == head("HTTP/1.1 200 OK", "Content-Length: 3", "Connection: close")
    with pytest.raises(ValueError, match="status line"):
        rewrite_response(head("HTTP/1.1 2000 OK"))
