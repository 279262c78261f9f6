"""The JupyterLab extension in a real browser: a notebook's sandbox under the network policy ask.
Each request its cells make to a host not yet allowed is held, and Lab shows a notification
naming the sandbox, the notebook, the host and the port, with Allow once, Allow for this sandbox
and Deny; the cell waiting on it goes on as decided (200, or the proxy's 403 naming who denied
it), a host allowed for the sandbox is not asked about again, and the audit says who decided.
The upstream is a test server on the host's 127.0.0.1 (the test-only network settings).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.labextension.conftest import ARTIFACTS, TIMEOUT_MS, open_lab, shot
from tests.labextension.lab_server import LabServer, lab_server
from tests.labextension.test_notebook_and_panel import new_sandboxed_notebook
from tests.sandbox.network.servers import RecordingServer, recording_server

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]

# The server and its kernels: every new sandbox asks; the test server's name leads to loopback.
CONFIG = (
    "c.NetworkSettings.default_policy = 'ask'\n"
    "c.NetworkSettings.allow_loopback_for_tests = True\n"
    "c.NetworkSettings.test_host_addresses = {'allowed.test': '127.0.0.1'}\n"
)
FETCH = "urllib.request.urlopen(URL, timeout=60).status"


@pytest.fixture
def upstream() -> Iterator[RecordingServer]:
    with recording_server("127.0.0.1") as s:
        yield s


@pytest.fixture
def asking_server(purpose: str) -> Iterator[LabServer]:
    with lab_server(purpose, keep_log=ARTIFACTS / "server-egress.log", config=CONFIG) as lab:
        yield lab


def run_cell(page: Page, index: int, source: str) -> Locator:
    """Type ``source`` into the notebook's cell ``index`` (Lab adds it after running the one
    before) and run it; its output area."""
    cell = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)
    cell.locator(".cm-content").click()
    page.keyboard.type(source)
    page.keyboard.press("Shift+Enter")
    return cell.locator(".jp-OutputArea-output")


def test_held_requests_are_decided_from_notifications(
    asking_server: LabServer, upstream: RecordingServer, page: object
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    server = asking_server
    open_lab(page, server)
    new_sandboxed_notebook(page)
    expect(page.locator("#jupyter-sandbox-status")).to_contain_text("net ask")
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
    url = f"http://allowed.test:{upstream.port}/"
    run_cell(page, 0, f"import urllib.request; URL = {url!r}")
    code, sandboxes = server.api("GET", "api/sandboxes")
    assert code == 200, sandboxes
    [sandbox] = sandboxes
    sandbox_id = sandbox["id"]
    asks = (
        f"allowed.test:{upstream.port}: sandbox {sandbox_id} (notebook Untitled.ipynb) asks to "
        "connect"
    )
    toasts = page.locator(".Toastify__toast", has_text=asks)

    reached = 0  # requests let through so far
    for index, (action, expected) in enumerate(
        [
            ("Allow once", "200"),
            ("Deny", "denied by"),
            ("Allow for this sandbox", "200"),
        ],
        start=1,
    ):
        output = run_cell(page, index, FETCH)
        expect(toasts).to_have_count(1)  # one notification for the one held request
        assert upstream.connections == reached, "a held request reached the upstream"
        shot(page, f"egress-{index}-asked")
        toasts.get_by_role("button", name=action).click()
        expect(toasts).to_have_count(0)
        expect(output).to_contain_text(expected, timeout=TIMEOUT_MS)
        reached += action != "Deny"
        shot(page, f"egress-{index}-{action.lower().replace(' ', '-')}")

    # Allowed for the sandbox: in its policy, and the next request is not asked about.
    code, policy = server.api("GET", f"api/sandboxes/{sandbox_id}/network")
    assert code == 200, policy
    assert (policy["mode"], policy["allow"]) == ("ask", [f"allowed.test:{upstream.port}"])
    output = run_cell(page, 4, FETCH)
    expect(output).to_contain_text("200", timeout=TIMEOUT_MS)
    expect(toasts).to_have_count(0)
    code, audit = server.api("GET", f"api/sandboxes/{sandbox_id}/network/audit")
    assert code == 200, audit
    decided = [(e.get("decision"), bool(e.get("by")), e["allowed"]) for e in audit["entries"]]
    assert decided == [
        ("once", True, True),
        ("deny", True, False),
        ("sandbox", True, True),
        (None, False, True),
    ]
