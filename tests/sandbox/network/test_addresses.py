"""The address guard: what the host proxy never connects to, in any mode (no engine)."""

from __future__ import annotations

import ipaddress

import pytest

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.network.addresses import (
    AddressGuard,
    check_private_ranges,
    embedded_ipv4,
    host_addresses,
)

DENIED = {
    "127.0.0.1": "loopback",
    "127.9.9.9": "loopback",
    "::1": "loopback",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.168.1.1": "private",
    "100.64.0.1": "carrier-grade",
    "169.254.1.1": "link-local",
    "fe80::1": "link-local",
    "169.254.169.254": "metadata",
    "169.254.170.2": "metadata",
    "168.63.129.16": "metadata",
    "100.100.100.200": "metadata",
    "fd00:ec2::254": "metadata",
    "fd12:3456::1": "unique local",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "ff02::1": "multicast",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "240.0.0.1": "reserved",
    "255.255.255.255": "reserved",
    "192.0.2.1": "documentation",
    "2001:db8::1": "documentation",
    "198.18.0.1": "benchmarking",
    # IPv4 inside IPv6
    "::ffff:169.254.169.254": "metadata",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:10.0.0.1": "private",
    "64:ff9b::a9fe:a9fe": "metadata",  # NAT64 of 169.254.169.254
    "64:ff9b::7f00:1": "loopback",
    "2002:a9fe:a9fe::1": "metadata",  # 6to4 of 169.254.169.254
    "2002:c0a8:0101::1": "private",  # 6to4 of 192.168.1.1
    "::127.0.0.1": "IPv4-compatible",
    "2001:0:4136:e378::1": "Teredo",
    # Issue 31: every form that embeds an IPv4 address is judged by what it embeds.
    "::ffff:0:7f00:1": "embeds 127.0.0.1: loopback",  # IPv4-translated (RFC 2765)
    "::ffff:0:a9fe:a9fe": "embeds 169.254.169.254: cloud metadata",
    "::ffff:0:10.0.0.1": "embeds 10.0.0.1: private",
    "::7f00:1": "embeds 127.0.0.1: loopback",  # IPv4-compatible
    "::8.8.8.8": "IPv4-compatible",  # deprecated, whatever it embeds
    "64:ff9b:1::7f00:1": "embeds 127.0.0.1: loopback",  # local NAT64, /96 layout
    "64:ff9b:1:7f00:0:100::": "embeds 127.0.0.1: loopback",  # local NAT64, /48 layout
    "64:ff9b:1::808:808": "local NAT64",
    "2001:0:7f00:1::1": "embeds 127.0.0.1: loopback",  # Teredo server
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "embeds 127.0.0.1: loopback",  # Teredo client
    "2002:7f00:1::1": "embeds 127.0.0.1: loopback",  # 6to4
}
PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    "151.101.0.223",
    "2606:4700:4700::1111",
    "::ffff:1.1.1.1",
    "64:ff9b::101:101",
    "2002:0101:0101::1",
    "::ffff:0:101:101",  # IPv4-translated 1.1.1.1
]


@pytest.mark.parametrize("address", sorted(DENIED))
def test_denied_in_every_mode(address: str) -> None:
    why = AddressGuard().refusal(address)
    assert DENIED[address] in (why or "<allowed>"), (address, why)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert AddressGuard().refusal(address) is None


def test_embedded_ipv4_forms() -> None:
    metadata = ipaddress.IPv4Address("169.254.169.254")
    for form in ("::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::"):
        assert embedded_ipv4(ipaddress.IPv6Address(form)) == metadata
    assert embedded_ipv4(ipaddress.IPv6Address("2606:4700::1")) is None


def test_host_own_addresses_are_denied_even_when_public() -> None:
    mine = ipaddress.ip_address("203.0.114.7")  # stands for a public address of this host
    guard = AddressGuard(host_addresses=frozenset({mine}))
    assert guard.refusal("203.0.114.7") == "an address of this host"
    found = host_addresses()
    assert ipaddress.ip_address("127.0.0.1") in found  # read from the real interfaces


def test_allow_private_ranges_opens_only_the_chosen_private_range() -> None:
    guard = AddressGuard(allowed_private=check_private_ranges(["10.1.0.0/16", "fd00:1::/32"]))
    assert guard.refusal("10.1.2.3") is None
    assert guard.refusal("fd00:1::5") is None
    assert guard.refusal("::ffff:10.1.2.3") is None
    assert "private" in (guard.refusal("10.2.0.1") or "")
    assert "metadata" in (guard.refusal("169.254.169.254") or "")
    assert "loopback" in (guard.refusal("127.0.0.1") or "")


@pytest.mark.parametrize(
    "bad",
    [
        "127.0.0.0/8",
        "169.254.0.0/16",
        "0.0.0.0/0",
        "8.8.8.0/24",
        "fe80::/10",
        "not-a-range",
        "::/0",
    ],
)
def test_allow_private_ranges_refuses_what_it_cannot_open(bad: str) -> None:
    with pytest.raises(InvalidSettingError, match="allow_private_ranges"):
        check_private_ranges([bad])


def test_loopback_for_tests_opens_127_0_0_1_only() -> None:
    guard = AddressGuard(allow_loopback_for_tests=True, host_addresses=host_addresses())
    assert guard.refusal("127.0.0.1") is None
    assert guard.refusal("::ffff:127.0.0.1") is None
    assert "loopback" in (guard.refusal("127.0.0.2") or "")
    assert guard.refusal("::1") is not None  # loopback, and an address of this host
    assert "metadata" in (guard.refusal("169.254.169.254") or "")
