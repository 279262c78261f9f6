"""JUPYTER_SANDBOX_LOG_LEVEL: the standard names, TRACE, and a wrong value said, not fatal."""

from __future__ import annotations

import logging

import pytest

from jupyter_sandbox.kernel.log_level import ENVIRONMENT, TRACE, log_level


@pytest.mark.parametrize(
    ("value", "level"),
    [
        ("debug", logging.DEBUG),
        ("WARNING", logging.WARNING),
        (" trace ", TRACE),
        ("", logging.INFO),
    ],
)
def test_names_are_taken_in_any_case(
    monkeypatch: pytest.MonkeyPatch, value: str, level: int
) -> None:
    monkeypatch.setenv(ENVIRONMENT, value)
    assert log_level() == level


def test_unset_is_info(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert log_level() == logging.INFO


def test_an_unknown_name_is_said_and_info_used(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENVIRONMENT, "verbose")
    assert log_level() == logging.INFO
    said = capsys.readouterr().err
    assert "JUPYTER_SANDBOX_LOG_LEVEL='VERBOSE' is not a log level; using INFO" in said
    assert "TRACE, DEBUG, INFO, WARNING, ERROR, CRITICAL" in said
