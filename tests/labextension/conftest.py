"""What the browser tests of the JupyterLab extension share: a real JupyterLab server (`server`),
a page in Debian's Chromium driven by Playwright (`page`), and the steps they all take (open Lab,
open the sandbox panel, a sandbox's card and details, a sandbox started through the REST API),
with screenshots and a way to hold back the panel's list refreshes.

Screenshots go to test-artifacts/labextension/ (gitignored), one per step, light and dark.
Chromium is installed by `make browser` (part of `make test`); without it the browser tests fail
and say so: they are never skipped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.labextension.lab_server import REPO, LabServer, lab_server

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "labextension"
TIMEOUT_MS = 90_000  # generous: kernel start and Lab's first load on a loaded 2-core machine


@pytest.fixture
def server(purpose: str) -> Iterator[LabServer]:
    with lab_server(purpose, keep_log=ARTIFACTS / "server.log") as lab:
        yield lab


@pytest.fixture
def page() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's Chromium with 'make browser' "
            "(apt-get install -y chromium, as root); the browser tests need it",
            pytrace=False,
        )
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)  # expect's own default is 5 s
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            try:
                yield page
            finally:
                shot(page, "last")
        finally:
            browser.close()


def shot(page: object, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))  # type: ignore[attr-defined]


def start_sandbox(server: LabServer) -> str:
    """A runc sandbox started through the server's REST API, not from a notebook; its id."""
    code, sandbox = server.api("POST", "api/sandboxes", {"runtime": "runc"})
    assert code == 201, sandbox
    return str(sandbox["id"])


def open_lab(page: Page, server: LabServer) -> None:
    page.goto(f"{server.url}/lab?token={server.token}")


def open_panel(page: Page) -> None:
    """The sandbox panel, from its tab in the left side bar."""
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()


def sandbox_card(page: Page, sandbox_id: str) -> Locator:
    """The sandbox's card in the panel."""
    return page.locator(f"#jupyter-sandbox-panel .jp-Sandbox-card[data-sandbox-id='{sandbox_id}']")


def sandbox_details(page: Page, sandbox_id: str) -> Locator:
    """The sandbox's details (a main area widget), once opened."""
    return page.locator(f"#jupyter-sandbox-details-{sandbox_id}")


def open_details(page: Page, server: LabServer, sandbox_id: str) -> Locator:
    """Lab, its sandbox panel, and the details of the sandbox from its card's Details button."""
    open_lab(page, server)
    open_panel(page)
    card = sandbox_card(page, sandbox_id)
    card.get_by_role("button", name=f"Details sandbox {sandbox_id}").click()
    return sandbox_details(page, sandbox_id)


def unlabelled(page: Page, selector: str) -> int:
    """How many of the elements the selector finds have no aria-label."""
    return int(
        page.eval_on_selector_all(
            selector, "nodes => nodes.filter(n => !n.getAttribute('aria-label')).length"
        )
    )


@contextmanager
def held_list_refreshes(page: object) -> Iterator[None]:
    """Hold the extension's requests for the sandbox list until the block ends, after one has
    been held (so no refresh that began before is still on its way); every other request, and
    the server's answers to actions, pass untouched."""
    with held_gets(page, re.compile(r"/api/sandboxes/?(\?.*)?$"), "the panel's list refresh"):
        yield


@contextmanager
def held_gets(
    page: object, pattern: re.Pattern[str], what: str, then: Callable[[], object] | None = None
) -> Iterator[None]:
    """Hold the page's GET requests whose URL matches ``pattern`` until the block ends; the block
    begins once one is held. ``then`` runs once the hold is in place (what makes the request,
    a page load say). Other requests pass untouched."""
    from playwright.sync_api import Page, Route

    assert isinstance(page, Page)
    held: list[Route] = []

    def hold(route: Route) -> None:
        if route.request.method == "GET":
            held.append(route)
        else:
            route.continue_()

    page.route(pattern, hold)
    try:
        if then is not None:
            then()
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while not held:
            assert time.monotonic() < deadline, f"no request for {what} came"
            page.wait_for_timeout(100)  # lets Playwright dispatch the route handler
        yield
    finally:
        for route in held:
            route.continue_()
        page.unroute(pattern)
