"""Limits are parsed from human forms and refused when out of range."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.limits import (
    LimitMaximums,
    SandboxLimits,
    format_size,
    host_pid_max,
    parse_size,
)
from jupyter_sandbox.sandbox.settings import SandboxSettings

BASE = {
    "memory": "1g",
    "cpus": 1,
    "pids": 128,
    "nofile": 1024,
    "tmp_size": "64m",
    "workspace_size": "1g",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512m", 512 * 1024**2),
        ("2g", 2 * 1024**3),
        ("1.5GiB", 3 * 1024**3 // 2),
        ("100", 100),
        (4096, 4096),
        ("64 MB", 64 * 1024**2),
        ("1T", 1024**4),
    ],
)
def test_sizes_parse(text: str | int, expected: int) -> None:
    assert parse_size(text, "memory") == expected


@pytest.mark.parametrize("text", ["", "lots", "-1g", "1x", "g", True, "1e9"])
def test_bad_sizes_say_what_is_expected(text: str | int) -> None:
    with pytest.raises(InvalidSettingError, match="must be a size such as"):
        parse_size(text, "memory")


def test_format_size_round_trips() -> None:
    for size in ("256m", "2g", "1t", "3k"):
        assert format_size(parse_size(size, "x")) == size
    assert format_size(1000) == "1000b"


def test_overrides_replace_only_what_is_named() -> None:
    limits = SandboxLimits.parse(**BASE).with_overrides(memory="2g", pids=64)
    assert limits.memory_bytes == 2 * 1024**3
    assert limits.pids == 64
    assert limits.workspace_bytes == 1024**3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"memory": "10m"}, "below the minimum"),
        ({"cpus": 0}, "cpus must be between"),
        ({"cpus": 10_000}, "cpus must be between"),
        ({"pids": 8}, "pids limit must be between"),
        ({"pids": True}, "whole number"),
        ({"nofile": 10}, "open-file limit"),
        ({"tmp_size": 10}, "tmp size must be at least"),
        ({"disk": "1g"}, "unknown limit"),
    ],
)
def test_out_of_range_limits_are_refused(override: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSettingError, match=message):
        SandboxLimits.parse(**BASE).with_overrides(**override)


def test_describe_names_every_enforced_limit() -> None:
    text = SandboxLimits.parse(**BASE).describe()
    assert text == "memory 1g (no swap), 1 CPU, 128 pids, workspace 1g"


MAXIMUMS = LimitMaximums(
    memory_bytes=4 * 1024**3,
    cpus=1.0,
    pids=512,
    nofile=4096,
    tmp_bytes=1024**3,
    workspace_bytes=2 * 1024**3,
)


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (
            {"memory": "1t"},
            "memory=1t is above this server's maximum of 4g (c.SandboxSettings.max_memory_limit)",
        ),
        (
            {"cpus": 1.5},
            "cpus=1.5 is above this server's maximum of 1 (c.SandboxSettings.max_cpus)",
        ),
        (
            {"pids": 4_194_304},
            "pids=4194304 is above this server's maximum of 512 (c.SandboxSettings.max_pids_limit)",
        ),
        (
            {"nofile": 1 << 20},
            "nofile=1048576 is above this server's maximum of 4096 (c.SandboxSettings.max_nofile_limit)",
        ),
        (
            {"tmp_size": "100t"},
            "tmp_size=100t is above this server's maximum of 1g (c.SandboxSettings.max_tmp_size)",
        ),
        (
            {"workspace_size": "3g"},
            "workspace_size=3g is above this server's maximum of 2g (c.SandboxSettings.max_workspace_size)",
        ),
    ],
)
def test_a_limit_above_its_maximum_is_refused_naming_the_maximum_and_setting(
    asked: dict[str, object], message: str
) -> None:
    limits = SandboxLimits.parse(**BASE).with_overrides(**asked)
    with pytest.raises(InvalidSettingError) as refused:
        MAXIMUMS.check(limits, asked=set(asked))
    assert message in refused.value.message
    assert "ask for at most" in refused.value.message


def test_limits_at_their_maximums_pass() -> None:
    at_most = {"memory": "4g", "cpus": 1, "pids": 512, "nofile": 4096, "tmp_size": "1g"}
    MAXIMUMS.check(SandboxLimits.parse(**BASE).with_overrides(**at_most), asked=set(at_most))


def test_a_default_above_its_maximum_names_both_settings() -> None:
    """Nobody asked: the administrator's two settings disagree, and the error says which."""
    limits = SandboxLimits.parse(**BASE).with_overrides(pids=1024)
    with pytest.raises(InvalidSettingError) as refused:
        MAXIMUMS.check(limits, asked=())
    assert refused.value.message == (
        "the configured default c.SandboxSettings.pids_limit (1024) is above its maximum "
        "c.SandboxSettings.max_pids_limit (512): lower the one or raise the other"
    )


def test_the_hosts_pid_max_is_read_and_defaults_when_unreadable(tmp_path: Path) -> None:
    written = tmp_path / "pid_max"
    written.write_text("4194304\n")
    assert host_pid_max(str(written)) == 4_194_304
    assert host_pid_max(str(tmp_path / "absent")) == 32768
    written.write_text("lots\n")
    assert host_pid_max(str(written)) == 32768


@pytest.mark.parametrize(
    "text",
    [
        "9" * 400,  # a float of it is infinite
        "1" + "0" * 16,  # more digits than a size has
        "\u0662g",  # an Arabic-Indic two
        "1\u2003g",  # an em space
        "\u0661\u0660\u0660",
        "1\u212a",  # the Kelvin sign, which folds to 'k'
        "1g\n",
        "\uff11g",  # a fullwidth one
    ],
)
def test_sizes_are_ascii_and_bounded(text: str) -> None:
    with pytest.raises(InvalidSettingError, match="must be a size such as"):
        parse_size(text, "memory")


def test_a_sizes_error_shows_a_long_value_cut_short() -> None:
    with pytest.raises(InvalidSettingError) as refused:
        parse_size("9" * 400, "memory")
    assert len(refused.value.message) < 200


@pytest.mark.parametrize(
    "cpus", ["1e400", "inf", "nan", "-inf", 10**400, float("nan"), "\u0662", "1\u2003", "0x1", True]
)
def test_cpus_are_finite_ascii_numbers(cpus: object) -> None:
    with pytest.raises(InvalidSettingError, match="cpus must be a"):
        SandboxLimits.parse(**{**BASE, "cpus": cpus})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "asked",
    [
        {"memory": "9" * 400},
        {"tmp_size": "\u0662g"},
        {"workspace_size": "1\u2003g"},
        {"cpus": "9" * 400},
        {"pids": "\u0661\u0660\u0660"},
    ],
)
def test_a_request_with_a_bad_value_is_refused_not_an_error(asked: dict[str, object]) -> None:
    """What REST's create and a kernel's JUPYTER_SANDBOX_LIMITS give requested_limits: refused
    as a bad setting (a 400), never an OverflowError or ValueError (a 500)."""
    with pytest.raises(InvalidSettingError):
        SandboxSettings().requested_limits(asked)
