"""A failing test of the hub gets the ends of the hub's and the servers' logs in its report
(whole, they are in test-artifacts/hub/): the test's fixture leaves a way to read them."""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

LOG_TAILS = pytest.StashKey[Callable[[], str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and LOG_TAILS in item.stash:
        report.sections.append(
            ("hub and servers' logs (test-artifacts/hub/)", item.stash[LOG_TAILS]())
        )
    return report
