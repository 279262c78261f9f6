"""Warnings a sandbox can cause at will: the first of each reason said, then a count a while."""

from __future__ import annotations

import logging

import pytest

from jupyter_sandbox.sandbox.host.log_throttle import ThrottledWarning


def test_the_first_of_each_reason_is_said_and_the_rest_counted_once_a_while(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logging.getLogger("tests.log_throttle")
    caplog.set_level(logging.DEBUG, logger=log.name)
    now = [100.0]
    monkeypatch.setattr("jupyter_sandbox.sandbox.host.log_throttle.time.monotonic", lambda: now[0])
    said = ThrottledWarning(log, interval=60)
    for n in range(1000):
        said.warning("junk", "dropped junk %d", n)
    said.warning("cut", "cut a connection")
    now[0] += 61  # a line of a reason again, counting those left unsaid
    said.warning("junk", "dropped junk %d", 1000)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "dropped junk 0",
        "cut a connection",
        "dropped junk 1000 (and 999 more like it since the last said)",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 999
