"""Which addresses the host proxy may connect to: never the host's, the LAN's or the cloud's.

Checked in every mode, ``open`` included, on every address a name resolves to, before any
connection is made (then the proxy connects to that very address, so a second lookup cannot
swap it: no DNS rebinding). Every IPv6 form that embeds an IPv4 address is judged by the
address it embeds (each of them, for Teredo's server and client): v4-mapped ``::ffff:a.b.c.d``,
IPv4-translated ``::ffff:0:a.b.c.d`` (RFC 2765), IPv4-compatible ``::a.b.c.d``, NAT64
``64:ff9b::/96`` and the local ``64:ff9b:1::/48`` (RFC 6052 and 8215, in its /48 and /96
layouts), 6to4 ``2002::/16`` and Teredo ``2001::/32``; the deprecated and local ones among them
(IPv4-compatible, local NAT64, Teredo) stay refused even when what they embed is public.

``allow_private_ranges`` may open chosen private ranges (a company mirror on 10.0.0.0/8); it can
never open loopback, link-local, metadata or the host's own addresses. Only the settings whose
names say they are for tests (``allow_loopback_for_tests``) open 127.0.0.1, so that tests can
run their servers on the host's loopback.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Metadata services answer credentials to whoever asks from the machine: named first, so that
# the audit says why.
METADATA = {
    "169.254.169.254": "cloud metadata service",
    "169.254.170.2": "cloud metadata service (ECS)",
    "168.63.129.16": "cloud metadata service (Azure wireserver)",
    "100.100.100.200": "cloud metadata service (Alibaba)",
    "fd00:ec2::254": "cloud metadata service (IPv6)",
}
_DENIED: list[tuple[str, str]] = [
    ("0.0.0.0/8", "unspecified or 'this network'"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT (shared)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("64:ff9b:1::/48", "local NAT64"),
    ("100::/64", "discard"),
    ("2001::/32", "Teredo"),
    ("2001:db8::/32", "documentation"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
]
DENIED_NETWORKS: list[tuple[IPNetwork, str]] = [
    (ipaddress.ip_network(net), why) for net, why in _DENIED
]
# What allow_private_ranges may open: never loopback, link-local or metadata.
OPENABLE = [
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
]
# The one address allow_loopback_for_tests opens: the tests' servers listen there, and every
# other loopback address stays refused (so tests can also prove a refusal on 127.0.0.2).
TEST_SERVER_ADDRESS = ipaddress.IPv4Address("127.0.0.1")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_UNSPECIFIED_V4 = ipaddress.ip_network("::/104")  # ::0.x.x.x: ::, ::1 and the like, not a v4
# Forms refused whatever they embed (their entries in _DENIED say why); the refusal also names
# what they embed when that is refused on its own.
_REFUSED_FORMS = [
    (net, why)
    for net, why in DENIED_NETWORKS
    if net in (_COMPATIBLE, _LOCAL_NAT64, ipaddress.ip_network("2001::/32"))
]


def embedded_ipv4s(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address carries, by each form it has (empty for none)."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    value = int(address)
    low32 = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address in _TRANSLATED or address in _NAT64:
        return [low32]
    if address in _COMPATIBLE:
        return [] if address in _UNSPECIFIED_V4 else [low32]
    if address in _LOCAL_NAT64:
        # RFC 6052's /48 layout (bits 48-63 and 72-87, around the u octet) and the /96 one.
        packed = address.packed
        forms = [low32, ipaddress.IPv4Address(packed[6:8] + packed[9:11])]
        # The layout not in use reads as 0.0.0.0/8 mostly: named last, the audit names the other.
        return sorted(forms, key=lambda v4: int(v4) < 1 << 24)
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        server, client = address.teredo
        return [server, client]
    return []


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The (first) IPv4 address an IPv6 address carries, or None."""
    found = embedded_ipv4s(address)
    return found[0] if found else None


def check_private_ranges(ranges: Iterable[str]) -> list[IPNetwork]:
    """Parse ``allow_private_ranges``; a range outside the openable private ones is refused."""
    from jupyter_sandbox.protocol.errors import InvalidSettingError

    parsed = []
    for text in ranges:
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise InvalidSettingError(
                f"NetworkSettings.allow_private_ranges: {text!r} is not a CIDR range such as "
                "'10.1.0.0/16'"
            ) from None
        if not any(net.version == o.version and net.subnet_of(o) for o in OPENABLE):  # type: ignore[arg-type]
            raise InvalidSettingError(
                f"NetworkSettings.allow_private_ranges: {text} is not inside a private range "
                "(10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7); loopback, link-local and "
                "metadata addresses can never be opened"
            )
        parsed.append(net)
    return parsed


@dataclass
class AddressGuard:
    """Decides whether the proxy may connect to an address."""

    allowed_private: list[IPNetwork] = field(default_factory=list)
    allow_loopback_for_tests: bool = False
    host_addresses: frozenset[IPAddress] = field(default_factory=frozenset)

    def refusal(self, address: str | IPAddress) -> str | None:
        """Why the proxy must not connect to ``address``, or None when it may."""
        ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            return "scoped (link-local) address"
        inner = embedded_ipv4s(ip)
        refused_form = next((why for net, why in _REFUSED_FORMS if _within(ip, net)), None)
        for embedded in inner:
            why = self.refusal(embedded)
            if why:
                return "; ".join(filter(None, (refused_form, f"embeds {embedded}: {why}")))
        if inner:  # the IPv4 addresses it carries are ones the proxy may reach
            return refused_form
        name = str(ip)
        if name in METADATA:
            return METADATA[name]
        if self.allow_loopback_for_tests and ip == TEST_SERVER_ADDRESS:
            return None
        if ip in self.host_addresses:
            return "an address of this host"
        for net, why in DENIED_NETWORKS:
            if _within(ip, net):
                if why.startswith(("private", "carrier", "unique")) and any(
                    _within(ip, n) for n in self.allowed_private
                ):
                    return None
                return why
        if not ip.is_global:
            return "not a public address"
        return None


def _within(ip: IPAddress, net: IPNetwork) -> bool:
    return ip.version == net.version and ip in net


def host_addresses() -> frozenset[IPAddress]:
    """Every address of this host's interfaces (a public one too: it reaches host services)."""
    found: set[IPAddress] = set()
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(
                    probe.fileno(),
                    0x8915,
                    struct.pack("256s", name.encode()[:15]),  # SIOCGIFADDR
                )
            except OSError:
                continue
            found.add(ipaddress.IPv4Address(packed[20:24]))
    finally:
        probe.close()
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                hex_address = line.split()[0]
                found.add(ipaddress.IPv6Address(int(hex_address, 16)))
    except OSError:
        pass
    return frozenset(found)
