"""Each sandbox's own certificate authority, for the egress proxy's TLS inspection (issue 37).

Made on the host with the sandbox's directory (``make_sandbox_ca``), for every sandbox: its
policy may allow network later, and the variables that point at the bundle are in every
sandbox's environment (container_spec.BASE_ENVIRONMENT). Its private key stays in the
host-only root of the sandbox's directory (``tls-ca.key``, 0600, never mounted); only the
certificate reaches the sandbox, in ``trust/``, which is mounted read-only at TRUST_MOUNT with
the bundle its programs trust: the image's own CA bundle (read from the created container
before it starts, ``trust_image_bundle``; the host's until then, or where the image has none)
and this CA. The host itself never trusts this CA: the proxy verifies upstream servers with the
host's own trust store.

The proxy mints a leaf certificate per host name on demand (``LeafMinter``): the name as its
only SAN, valid LEAF_LIFETIME, cached while it has more than half of that left.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import os
import re
import ssl
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.backends.base import SandboxBackend
from jupyter_sandbox.sandbox.network.request_head import is_address

if TYPE_CHECKING:
    from cryptography import x509

# cryptography is imported where a certificate is made, not with this module: the CLI and the
# docs' build import the container spec, which names only this module's constants.

CA_KEY = "tls-ca.key"  # in the sandbox directory's host-only root
TRUST_DIR = "trust"  # in the sandbox directory; mounted read-only at TRUST_MOUNT
CA_CERT = "ca.pem"
BUNDLE = "ca-bundle.pem"
TRUST_MOUNT = "/etc/jupyter-sandbox"
CA_LIFETIME = datetime.timedelta(days=3650)  # as long as a sandbox may live: no renewal
LEAF_LIFETIME = datetime.timedelta(days=1)
CLOCK_SKEW = datetime.timedelta(hours=1)  # a sandbox's clock may lag the host's a little
MAX_LEAVES = 256  # leaf contexts kept per proxy (one per host name)
# The variables each client reads its trusted CAs from: Python's ssl (and OpenSSL), requests,
# pip, curl, Node.js (which adds to its own list instead of replacing it).
TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE")
BUNDLE_PATH = f"{TRUST_MOUNT}/{BUNDLE}"
TRUST_ENVIRONMENT = {
    **{name: BUNDLE_PATH for name in TRUST_VARIABLES},
    "NODE_EXTRA_CA_CERTS": f"{TRUST_MOUNT}/{CA_CERT}",
}


# Where a Debian-like image keeps its CA bundle (the sandbox image's, python:*-slim's).
IMAGE_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
MAX_IMAGE_BUNDLE = 4 * 1024 * 1024  # bytes; Debian's is about 220 KB
# The CA bundle of each image, by the engine's id of the image (never by its name, which a
# build points elsewhere), as read from its first sandbox (trust_image_bundle): in this process,
# and in the state directory's BUNDLE_CACHE for the processes after it (a kernel started without
# a server is a process of its own; reading the bundle from the engine is a container archive).
_IMAGE_BUNDLES: dict[str, bytes] = {}
BUNDLE_CACHE = "image-ca-bundles"
MAX_CACHED_BUNDLES = 16  # files; an image's is a few hundred KB
_IMAGE_ID = re.compile(r"sha256:([0-9a-f]{64})")
log = logging.getLogger(__name__)


def system_bundle() -> bytes:
    """The host's CA bundle (what Python's default context loads), PEM; empty if none."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile):
        if path and os.path.isfile(path):
            return Path(path).read_bytes()
    return b""


def write_bundle(root: Path, base: bytes) -> None:
    """Make ``root``'s bundle ``base`` (PEM CAs) followed by the sandbox's CA, replacing the
    one there (world-readable, as the certificate)."""
    if base and not base.endswith(b"\n"):
        base += b"\n"
    trust = root / TRUST_DIR
    data = base + (trust / CA_CERT).read_bytes()
    staging = trust / f".{BUNDLE}.{os.getpid()}"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(data)
    finally:
        os.close(fd)
    os.replace(staging, trust / BUNDLE)


async def trust_image_bundle(
    backend: SandboxBackend, sandbox_id: str, image_id: str, root: Path, state_path: Path
) -> None:
    """Make the bundle of a created sandbox its image's own CA bundle and its CA (read from
    the engine once per image, then kept by this process and in ``state_path``); where the
    image has none the backend can read, the host's stays (make_sandbox_ca). ``image_id``:
    the engine's id of the sandbox's image; without one ("" from a backend that has none) the
    bundle is read each time."""
    found = _IMAGE_ID.fullmatch(image_id)
    cache = state_path / BUNDLE_CACHE / f"{found.group(1)}.pem" if found else None
    base = _IMAGE_BUNDLES.get(image_id) if cache else None
    if base is None and cache is not None:
        base = _read_kept_bundle(cache)
    if base is None:
        try:
            read = await backend.image_file(sandbox_id, IMAGE_BUNDLE, MAX_IMAGE_BUNDLE)
        except SandboxError as exc:
            log.warning(
                "the CA bundle of image %s is unreadable (%s): the host's is used", image_id, exc
            )
            return
        if read is None or not _is_bundle(read):
            return
        base = read
        if cache is not None:
            _keep_bundle(cache, base)
    if cache is not None:
        if len(_IMAGE_BUNDLES) >= 64:  # a few images per server: bounded all the same
            _IMAGE_BUNDLES.clear()
        _IMAGE_BUNDLES[image_id] = base
    write_bundle(root, base)


def _is_bundle(data: bytes) -> bool:
    return b"-----BEGIN CERTIFICATE-----" in data


def _read_kept_bundle(path: Path) -> bytes | None:
    """The bundle an earlier process kept at ``path``, if it is one (a regular file, within
    MAX_IMAGE_BUNDLE)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_IMAGE_BUNDLE + 1)
    return data if len(data) <= MAX_IMAGE_BUNDLE and _is_bundle(data) else None


def _keep_bundle(path: Path, data: bytes) -> None:
    """Keep an image's bundle at ``path`` for the next processes (written whole, then renamed
    into place), and at most MAX_CACHED_BUNDLES of them, the least recently written going
    first. Best effort: a state directory that cannot keep it costs the next start a read."""
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, staging = tempfile.mkstemp(dir=path.parent, prefix=".")
    except OSError as exc:
        log.debug("cannot keep the CA bundle of an image in %s: %s", path.parent, exc)
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
        kept = sorted(path.parent.glob("*.pem"), key=lambda kept: kept.stat().st_mtime)
        for old in kept[:-MAX_CACHED_BUNDLES]:
            old.unlink(missing_ok=True)
    except OSError as exc:  # a full disk; another process's pruning at the same moment
        with contextlib.suppress(OSError):
            os.unlink(staging)
        log.debug("cannot keep the CA bundle of an image in %s: %s", path.parent, exc)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def make_sandbox_ca(root: Path, sandbox_id: str, bundle: bytes | None = None) -> None:
    """Make ``root``'s CA: the key (0600) in ``root``, certificate and bundle in
    ``root/trust`` (world-readable: the sandbox's uid may not be the host's)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "jupyter-sandbox"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"jupyter-sandbox {sandbox_id} egress CA"),
        ]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(root / CA_KEY, flags, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    trust = root / TRUST_DIR
    trust.mkdir(mode=0o755)
    os.chmod(trust, 0o755)  # whatever the umask: the sandbox's uid reads it
    base = system_bundle() if bundle is None else bundle
    if base and not base.endswith(b"\n"):
        base += b"\n"
    for file_name, data in ((CA_CERT, cert_pem), (BUNDLE, base + cert_pem)):
        fd = os.open(trust / file_name, flags, 0o644)
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


class LeafMinter:
    """Server-side TLS contexts with a leaf for each host name, signed by the sandbox's CA."""

    def __init__(self, root: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        loaded = serialization.load_pem_private_key((root / CA_KEY).read_bytes(), None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{root / CA_KEY} is not the sandbox CA's key")
        self.root = root
        self.ca_key = loaded
        self.ca_cert = x509.load_pem_x509_certificate((root / TRUST_DIR / CA_CERT).read_bytes())
        # One key for every leaf of this proxy: minting is then one signature.
        self.leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = self.leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        self._contexts: OrderedDict[str, tuple[datetime.datetime, ssl.SSLContext]] = OrderedDict()
        self._lock = threading.Lock()  # minted from the relay's threads

    def leaf(self, host: str) -> x509.Certificate:
        """A fresh leaf certificate for ``host`` (a name or an IP literal)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = _now()
        san: x509.GeneralName = (
            x509.IPAddress(ipaddress.ip_address(host)) if is_address(host) else x509.DNSName(host)
        )
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.ca_cert.subject)
            .public_key(self.leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + LEAF_LIFETIME)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                critical=False,
            )
            .sign(self.ca_key, hashes.SHA256())
        )

    def context(self, host: str) -> ssl.SSLContext:
        """A server context presenting ``host``'s leaf (cached while more than half of its
        lifetime is left), HTTP/1.1 only."""
        with self._lock:
            cached = self._contexts.get(host)
            if cached is not None and cached[0] - _now() > LEAF_LIFETIME / 2:
                self._contexts.move_to_end(host)
                return cached[1]
        from cryptography.hazmat.primitives import serialization

        cert = self.leaf(host)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        chain = cert.public_bytes(serialization.Encoding.PEM)
        # load_cert_chain reads files only: a temporary file (0600) in the sandbox directory's
        # host-only root, gone once loaded.
        with tempfile.NamedTemporaryFile(prefix=".leaf-", dir=self.root) as f:
            f.write(chain + self._leaf_key_pem)
            f.flush()
            context.load_cert_chain(f.name)
        with self._lock:
            self._contexts[host] = (cert.not_valid_after_utc, context)
            self._contexts.move_to_end(host)
            while len(self._contexts) > MAX_LEAVES:
                self._contexts.popitem(last=False)
        return context
