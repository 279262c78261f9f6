"""Network policies: pattern parsing, refusals with messages, decisions (no engine)."""

from __future__ import annotations

import pytest

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.network import HostPattern, NetworkPolicy, NetworkSettings
from jupyter_sandbox.sandbox.network.policy import policy_of_state


@pytest.mark.parametrize(
    ("text", "domain", "wildcard", "port"),
    [
        ("pypi.org", "pypi.org", False, None),
        ("PyPI.org.", "pypi.org", False, None),
        ("*.pythonhosted.org", "pythonhosted.org", True, None),
        ("example.com:8443", "example.com", False, 8443),
        ("*.a-b.example.co.uk:443", "a-b.example.co.uk", True, 443),
        ("xn--bcher-kva.example", "xn--bcher-kva.example", False, None),
    ],
)
def test_patterns_parse(text: str, domain: str, wildcard: bool, port: int | None) -> None:
    assert HostPattern.parse(text) == HostPattern(domain, wildcard, port)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("*", "every host"),
        ("*.", "every host"),
        ("*.com", "top-level domain"),
        ("com", "top-level domain"),
        ("localhost", "single label"),
        ("1.1.1.1", "is an address"),
        ("[::1]:443", "is an address"),
        ("example.com:0", "port"),
        ("example.com:70000", "port"),
        ("example.com:http", "port"),
        ("exa mple.com", "malformed"),
        ("-bad.example.com", "malformed"),
        ("a.*.example.com", "malformed"),
        ("example..com", "malformed"),
        ("bücher.example", "xn--"),
        ("", "malformed"),
    ],
)
def test_bad_patterns_are_refused_with_a_message(text: str, message: str) -> None:
    with pytest.raises(InvalidSettingError, match=message):
        HostPattern.parse(text)


def allowlist(*items: str) -> NetworkPolicy:
    return NetworkPolicy.from_text(",".join(items))


def test_allowlist_matches_exact_names_wildcards_below_the_apex_and_ports() -> None:
    policy = allowlist("allowed.test", "*.wild.test", "port.test:8080")
    assert policy.decide("allowed.test", 80).allowed
    assert policy.decide("ALLOWED.test.", 443).allowed
    assert policy.decide("a.b.wild.test", 443).allowed
    assert not policy.decide("wild.test", 443).allowed  # the apex is not below itself
    assert not policy.decide("evilwild.test", 443).allowed
    assert policy.decide("port.test", 8080).allowed
    assert not policy.decide("port.test", 8081).allowed
    # Look-alikes of a listed name
    for host in ("allowed.test.evil.test", "evilallowed.test", "allowed.tes", "sub.allowed.test"):
        decision = policy.decide(host, 80)
        assert (decision.allowed, decision.rule) == (False, "not in allowlist"), host


def test_allowlist_refuses_ip_literals() -> None:
    policy = allowlist("allowed.test")
    for host in ("1.1.1.1", "[2606:4700::1111]", "::1"):
        decision = policy.decide(host, 443)
        assert not decision.allowed
        assert "address literal" in decision.rule


def test_deny_patterns_win_in_allowlist_and_open() -> None:
    policy = allowlist("*.example.com", "!bad.example.com")
    assert policy.decide("good.example.com", 443).allowed
    decision = policy.decide("bad.example.com", 443)
    assert not decision.allowed
    assert decision.rule == "deny bad.example.com"
    opened = NetworkPolicy.from_dict({"mode": "open", "deny": ["*.tracker.test"]})
    assert opened.decide("anything.example", 80).allowed
    assert not opened.decide("x.tracker.test", 80).allowed


def test_empty_allowlist_denies_everything_like_none() -> None:
    for policy in (
        NetworkPolicy.from_dict({"mode": "allowlist"}),
        NetworkPolicy.from_dict({"mode": "allowlist", "allow": []}),
        NetworkPolicy.from_text(" , "),
    ):
        assert policy.mode == "allowlist"
        assert not policy.decide("pypi.org", 443).allowed
    decision = NetworkPolicy.from_text("none").decide("pypi.org", 443)
    assert not decision.allowed
    assert decision.rule == "network policy is none"


def test_env_text_form() -> None:
    assert NetworkPolicy.from_text("none").mode == "none"
    assert NetworkPolicy.from_text(" OPEN ").mode == "open"
    policy = NetworkPolicy.from_text("pypi.org, *.pythonhosted.org ,!bad.pythonhosted.org")
    assert policy.as_dict() == {
        "mode": "allowlist",
        "allow": ["pypi.org", "*.pythonhosted.org"],
        "deny": ["bad.pythonhosted.org"],
    }
    with pytest.raises(InvalidSettingError, match="every host"):
        NetworkPolicy.from_text("pypi.org,*")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("open", "must be an object"),
        ({"mode": "everything"}, "network.mode must be one of"),
        ({"mode": "allowlist", "allow": "pypi.org"}, "must be a list"),
        ({"mode": "open", "allow": ["pypi.org"]}, "only for the modes 'allowlist' and 'ask'"),
        ({"mode": "none", "extra": 1}, "unknown network field"),
        ({"mode": "allowlist", "allow": [3]}, "must be a string"),
        ({"mode": "allowlist", "allow": ["x.test"] * 257}, "at most 256"),
    ],
)
def test_rest_form_refusals(body: object, message: str) -> None:
    with pytest.raises(InvalidSettingError, match=message):
        NetworkPolicy.from_dict(body)


def test_round_trip_and_state() -> None:
    policy = NetworkPolicy.from_dict(
        {"mode": "allowlist", "allow": ["a.test:1", "*.b.test"], "deny": ["c.b.test"]}
    )
    assert NetworkPolicy.from_dict(policy.as_dict()) == policy
    assert policy_of_state({"network": policy.as_dict()}) == policy
    assert policy_of_state({}).mode == "none"  # pool members, older sandboxes
    assert policy_of_state({"network": {"mode": "bogus"}}).mode == "none"  # fails closed
    assert "a.test:1" in policy.describe()
    assert "c.b.test" in policy.describe()


def test_config_default_is_checked() -> None:
    assert NetworkSettings().default().mode == "none"
    assert NetworkSettings(default_policy="pypi.org").default().allow[0].domain == "pypi.org"
    with pytest.raises(InvalidSettingError, match="top-level"):
        NetworkSettings(default_policy="*.org")
    settings = NetworkSettings(default_policy="open")
    assert settings.policy_for(None).mode == "open"
    assert settings.policy_for("").mode == "open"
    assert settings.policy_for("none").mode == "none"
    assert settings.policy_for({"mode": "allowlist"}).mode == "allowlist"
