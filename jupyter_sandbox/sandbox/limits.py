"""Resource limits of one sandbox, parsed and checked before anything starts.

Settings carry limits as people write them ("2g", "256m", 1.5); :class:`SandboxLimits` holds
them as numbers and refuses values that are out of range with a message saying what is allowed.
What is in range is the same on every host; what a request may ask for here is at most the
administrator's :class:`LimitMaximums` (SandboxSettings' ``max_*`` settings), so that no user
can hold more of the host than the administrator meant one sandbox to have.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidSettingError

_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
# ASCII only: Unicode digits and spaces ('٢g', '1\u2003g') and case folds (the Kelvin sign
# for 'k') are no size people write, and would be read as one. The digit counts bound the
# number so that it stays finite (a float of hundreds of digits is infinite).
MAX_SIZE_DIGITS = 15
_SIZE = re.compile(
    rf"^ *([0-9]{{1,{MAX_SIZE_DIGITS}}}(?:\.[0-9]{{1,{MAX_SIZE_DIGITS}}})?) *([kmgt]?)(?:i?b)? *$",
    re.IGNORECASE | re.ASCII,
)
# A number of CPUs as people write it: '2', '0.5'.
_CPUS = re.compile(r"^ *[0-9]{1,6}(?:\.[0-9]{1,6})? *$", re.ASCII)

MIN_MEMORY = 64 * 1024**2
# A kernel's start takes about 1.5 s of CPU: at 0.01 CPUs it took 59.5 s (runc), a hair under
# the start timeout; at 0.1, 15 s under runsc. Less is refused rather than left to time out.
MIN_CPUS = 0.1
MIN_DISK = 1024**2
MAX_PIDS = 1 << 22
# Each limit: the name a request gives it, its SandboxLimits (and LimitMaximums) field, the
# setting of its default and the setting of its maximum (SandboxSettings', settings.py).
LIMIT_FIELDS = {
    "memory": ("memory_bytes", "memory_limit", "max_memory_limit"),
    "cpus": ("cpus", "cpus", "max_cpus"),
    "pids": ("pids", "pids_limit", "max_pids_limit"),
    "nofile": ("nofile", "nofile_limit", "max_nofile_limit"),
    "tmp_size": ("tmp_bytes", "tmp_size", "max_tmp_size"),
    "workspace_size": ("workspace_bytes", "workspace_size", "max_workspace_size"),
}


def parse_size(value: str | int | float, what: str) -> int:
    """Bytes from ``value``: an int, or a string such as ``"512m"``, ``"2g"``, ``"1.5GiB"``."""
    if isinstance(value, bool):
        raise InvalidSettingError(f"{what} must be a size such as '512m' or '2g', not {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)  # a JSON body's 1073741824.0
    else:
        match = _SIZE.fullmatch(value) if isinstance(value, str) else None
        if not match:
            raise InvalidSettingError(
                f"{what} must be a size such as '512m' or '2g' (units k, m, g, t; at most "
                f"{MAX_SIZE_DIGITS} digits), not {_shown_value(value)}"
            )
        number = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return number


def parse_cpus(value: Any) -> float:
    """CPUs from ``value``: a number, or a string such as ``"2"`` or ``"0.5"``; finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidSettingError(f"cpus must be a number such as 1 or 0.5, not {value!r}")
    if isinstance(value, str) and not _CPUS.fullmatch(value):
        raise InvalidSettingError(
            f"cpus must be a number such as 1 or 0.5, not {_shown_value(value)}"
        )
    try:
        cpus = float(value)
    except OverflowError:  # an int beyond any float
        cpus = math.inf
    if not math.isfinite(cpus):
        raise InvalidSettingError(f"cpus must be a finite number such as 1 or 0.5, not {cpus}")
    return cpus


def _shown_value(value: Any) -> str:
    """``value`` in an error message, cut short: a request may send a long one."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:37]}..."


def check_disk_size(what: str, num_bytes: int) -> None:
    """Refuse a filesystem size below MIN_DISK (a tmpfs of size 0 would have no cap at all)."""
    if num_bytes < MIN_DISK:
        raise InvalidSettingError(
            f"{what} must be at least {format_size(MIN_DISK)}, not {num_bytes} bytes"
        )


# Each limit's field -> the name settings, REST bodies and state files give it.
SETTING_NAMES = {field: name for name, (field, _, _) in LIMIT_FIELDS.items()}


def in_setting_names(record: Any) -> dict[str, Any]:
    """A dataclass of limits (or of what limits add up to) as a dict keyed by the names
    settings give them, in field order."""
    return {SETTING_NAMES.get(name, name): value for name, value in asdict(record).items()}


def format_size(num_bytes: int) -> str:
    """A short human form of a byte count, e.g. ``2g``, ``256m``."""
    for unit in ("t", "g", "m", "k"):
        if num_bytes >= _UNITS[unit] and num_bytes % _UNITS[unit] == 0:
            return f"{num_bytes // _UNITS[unit]}{unit}"
    return f"{num_bytes}b"


@dataclass(frozen=True)
class LimitValues:
    """A value of each of the six limits (LIMIT_FIELDS): bytes, CPUs, counts."""

    memory_bytes: int
    cpus: float
    pids: int
    nofile: int
    tmp_bytes: int
    workspace_bytes: int


@dataclass(frozen=True)
class SandboxLimits(LimitValues):
    """What one sandbox may use. Every field is enforced by the container engine."""

    def __post_init__(self) -> None:
        if self.memory_bytes < MIN_MEMORY:
            raise InvalidSettingError(
                f"memory limit {format_size(self.memory_bytes)} is below the minimum of "
                f"{format_size(MIN_MEMORY)}: a Python kernel needs at least that much"
            )
        host_cores = os.cpu_count() or 1
        if not MIN_CPUS <= self.cpus <= host_cores:
            raise InvalidSettingError(
                f"cpus must be between {MIN_CPUS:g} and this host's {host_cores} cores, not "
                f"{self.cpus}"
            )
        if not 16 <= self.pids <= MAX_PIDS:
            raise InvalidSettingError(
                f"pids limit must be between 16 and {MAX_PIDS}, not {self.pids}"
            )
        if not 64 <= self.nofile <= 1 << 20:
            raise InvalidSettingError(
                f"open-file limit must be between 64 and {1 << 20}, not {self.nofile}"
            )
        check_disk_size("tmp size", self.tmp_bytes)
        check_disk_size("workspace size", self.workspace_bytes)

    @classmethod
    def parse(
        cls,
        *,
        memory: str | int,
        cpus: float,
        pids: int,
        nofile: int,
        tmp_size: str | int,
        workspace_size: str | int,
    ) -> SandboxLimits:
        """Limits from the human forms used in settings and REST bodies."""
        cpus = parse_cpus(cpus)
        for name, value in (("pids", pids), ("nofile", nofile)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidSettingError(
                    f"{name} must be a whole number, not {_shown_value(value)}"
                )
        return cls(
            memory_bytes=parse_size(memory, "memory"),
            cpus=cpus,
            pids=pids,
            nofile=nofile,
            tmp_bytes=parse_size(tmp_size, "tmp size"),
            workspace_bytes=parse_size(workspace_size, "workspace size"),
        )

    def as_settings(self) -> dict[str, Any]:
        """The limits in the form :meth:`parse` takes (for state files and REST bodies)."""
        return in_setting_names(self)

    def with_overrides(self, **overrides: Any) -> SandboxLimits:
        """A copy with some limits replaced, given in their human forms; unknown names are refused."""
        current = self.as_settings()
        unknown = sorted(set(overrides) - set(current))
        if unknown:
            raise InvalidSettingError(
                f"unknown limit(s) {', '.join(unknown)}; known: {', '.join(current)}"
            )
        return SandboxLimits.parse(**{**current, **overrides})

    def describe(self) -> str:
        """One line for banners and logs."""
        return (
            f"memory {format_size(self.memory_bytes)} (no swap), {self.cpus:g} CPU, "
            f"{self.pids} pids, workspace {format_size(self.workspace_bytes)}"
        )


@dataclass(frozen=True)
class LimitMaximums(LimitValues):
    """The most of each limit one sandbox may have here: what the administrator allows
    (SandboxSettings' ``max_*`` settings)."""

    def check(self, limits: SandboxLimits, asked: Collection[str]) -> None:
        """Refuse ``limits`` if any is above its maximum. ``asked``: the limits a request named
        (the rest are the configured defaults), so that the error tells a user what to ask for,
        and an administrator which of two settings disagree."""
        for name, (field, default, most_setting) in LIMIT_FIELDS.items():
            value, maximum = getattr(limits, field), getattr(self, field)
            if value <= maximum + (1e-9 if field == "cpus" else 0):
                continue
            shown, most = _shown(field, value), _shown(field, maximum)
            setting = f"SandboxSettings.{most_setting}"
            if name in asked:
                raise InvalidSettingError(
                    f"the limit {name}={shown} is above this server's maximum of {most} "
                    f"(c.{setting}): ask for at most {most}, or ask the administrator to raise "
                    f"c.{setting}"
                )
            raise InvalidSettingError(
                f"the configured default c.SandboxSettings.{default} ({shown}) is above its maximum "
                f"c.{setting} ({most}): lower the one or raise the other"
            )


def _shown(field: str, value: float) -> str:
    """A limit's value as people write it: sizes with their unit, counts as they are."""
    if field.endswith("_bytes"):
        return format_size(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def host_memory_bytes() -> int:
    """The host's physical memory, in whole MiB (what a default maximum is derived from)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return total // 1024**2 * 1024**2


def host_pid_max(path: str = "/proc/sys/kernel/pid_max") -> int:
    """The host's pid_max: the processes and threads all of it may hold at once (Linux's
    default 32768 when the file cannot be read)."""
    try:
        with open(path, encoding="ascii") as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return 32768
