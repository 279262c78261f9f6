"""Limits are parsed from human forms and refused when out of range."""

from __future__ import annotations

import pytest

from jupyter_sandbox.sandbox.errors import InvalidSettingError
from jupyter_sandbox.sandbox.limits import SandboxLimits, format_size, parse_size

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
