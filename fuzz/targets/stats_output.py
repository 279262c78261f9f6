"""The host's reading of what the stats script in a sandbox prints (sandbox/operations/stats.py
inside_report).

The output is the sandbox's to print. One that is not exactly the script's shape becomes
``{"error": why}``, which the stats answer carries as a note; anything escaping is a bug (a 500
from the stats route). A measurement that is read has only the script's keys, with whole,
non-negative counts, which the answer's JSON can carry (no NaN or Infinity).
"""

from __future__ import annotations

import json

from jupyter_sandbox.sandbox.operations.stats import inside_report

MAX_LEN = 16384
KEYS = {"workspace_fstype", "workspace_bytes", "workspace_complete", "processes", "meminfo"}


def fuzz_one_input(data: bytes) -> None:
    report = inside_report(data)
    json.dumps(report, allow_nan=False)
    if "error" in report:
        assert list(report) == ["error"], report
        assert type(report["error"]) is str, report
        assert len(report["error"]) < 300, report
        return
    assert set(report) <= KEYS, report
    assert type(report["processes"]) is int, report
    assert report["processes"] >= 0, report
    assert all(type(value) is int for value in report["meminfo"].values()), report
    assert min(report["meminfo"].values(), default=0) >= 0, report
    if "workspace_bytes" in report:
        assert type(report["workspace_bytes"]) is int, report
        assert report["workspace_bytes"] >= 0, report
        assert type(report["workspace_complete"]) is bool, report
