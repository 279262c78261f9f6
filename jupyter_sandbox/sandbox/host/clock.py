"""The host's wall clock as state files, labels and records write it: UTC, in ISO 8601.

One place, so that every stamp the host writes is read back the same way (the culler compares
them; a naive stamp from an older file is taken as UTC).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

# How much of the time a stamp keeps: whole seconds for state files and labels; "auto" keeps
# the microseconds, for records ordered by when they were made (snapshots, background commands).
Precision = Literal["auto", "seconds", "milliseconds"]


def now() -> datetime.datetime:
    """The current time, aware, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc)


def now_iso(timespec: Precision = "seconds") -> str:
    """The current time as an ISO 8601 stamp in UTC, e.g. ``2026-01-31T12:00:00+00:00``."""
    return now().isoformat(timespec=timespec)


def parse_iso(stamp: Any) -> datetime.datetime | None:
    """A stored ISO time, aware (a naive one is UTC); None when absent or unreadable."""
    if not stamp:
        return None
    try:
        then = datetime.datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    return then if then.tzinfo is not None else then.replace(tzinfo=datetime.timezone.utc)
