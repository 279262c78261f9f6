"""The JupyterLab extension in a real browser: the Ports section of a sandbox's details. A web
server started in the sandbox is listed (after Refresh) and opens in a JupyterLab tab, a frame
sandboxed into an opaque origin, and in a new browser tab that has no handle on Lab's page; a
number that is no port is refused in the page, before anything is sent. Revoking the links kills
the old one, and the open tab goes on with a new one.
"""

from __future__ import annotations

import time

import pytest

from tests.labextension.conftest import open_details, shot, start_sandbox, unlabelled
from tests.labextension.lab_server import LabServer

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]

EMPTY = (
    "No server listens in this sandbox. Start one, e.g. `python -m http.server 8000` "
    "in a cell or terminal."
)
REVOKE = (
    "Revoke every link to this sandbox's ports? Anyone holding one — a browser tab, a shared URL — "
    "loses access; new links are made when asked for. Open connections are not cut."
)
FRAME_SANDBOX = ["allow-scripts", "allow-forms", "allow-popups", "allow-modals", "allow-downloads"]


def test_ports_in_the_details(server: LabServer, page: object) -> None:
    """A sandbox's http.server on port 8000: the Ports section says none listens, refuses port
    70000 without asking the server, lists 8000 after Refresh, and opens it in a sandboxed
    frame (the directory listing, in an opaque origin) and in a new browser tab; after Revoke
    links, the tab's old link answers 404 and the tab shows the listing through a new one."""
    from playwright.sync_api import Page, Request, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    asked: list[str] = []

    def record(request: Request) -> None:
        if "/ports" in request.url or "/sandbox-ports/" in request.url:
            asked.append(request.url)

    page.on("request", record)
    details = open_details(page, server, sandbox_id)
    section = details.locator(".jp-SandboxPorts")
    expect(section.locator("h3")).to_have_text("Ports")
    expect(section).to_contain_text(EMPTY)

    # A number out of range is refused in the page: nothing is sent.
    port_input = section.get_by_role("textbox", name=f"Port number to open in sandbox {sandbox_id}")
    port_input.fill("70000")
    port_input.press("Enter")
    expect(section.get_by_role("alert")).to_have_text(
        "Port 70000 is out of range: a port is a number from 1 to 65535."
    )
    expect(port_input).to_have_attribute("aria-invalid", "true")
    assert not [url for url in asked if "70000" in url], asked
    port_input.fill("")

    # A server in the sandbox, serving /workspace with a file in it.
    code, made = server.api(
        "POST",
        f"api/sandboxes/{sandbox_id}/commands",
        {"command": "echo hello > /workspace/hello-from-the-sandbox.txt"},
    )
    assert code == 200, made
    assert made["exit_code"] == 0, made
    code, started = server.api(
        "POST",
        f"api/sandboxes/{sandbox_id}/commands",
        {"command": "python -m http.server 8000 --directory /workspace", "background": True},
    )
    assert code in (200, 201), started
    deadline = time.monotonic() + 30
    while True:  # polling until it listens, not waiting a fixed time
        code, listed = server.api("GET", f"api/sandboxes/{sandbox_id}/ports")
        assert code == 200, listed
        if [p["port"] for p in listed["ports"]] == [8000]:
            break
        assert time.monotonic() < deadline, listed
        time.sleep(0.2)

    section.get_by_role("button", name=f"Refresh the ports of sandbox {sandbox_id}").click()
    row = section.locator("tbody tr[data-port='8000']")
    expect(row).to_contain_text("python -m http.server 8000 --directory /workspace")
    expect(section).not_to_contain_text(EMPTY)
    controls = f"#jupyter-sandbox-details-{sandbox_id} .jp-SandboxPorts :is(button, input)"
    assert unlabelled(page, controls) == 0
    section.scroll_into_view_if_needed()
    shot(page, "13-ports")

    # Open: a JupyterLab tab whose frame shows the listing, sandboxed into an opaque origin.
    row.get_by_role(
        "button", name=f"Open port 8000 of sandbox {sandbox_id} in a JupyterLab tab"
    ).click()
    tab = page.locator(
        ".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=f"Sandbox {sandbox_id[:8]}:8000"
    )
    expect(tab).to_have_count(1)
    iframe = page.locator(f"#jupyter-sandbox-port-{sandbox_id}-8000 iframe")
    frame = page.frame_locator(f"#jupyter-sandbox-port-{sandbox_id}-8000 iframe")
    expect(frame.locator("body")).to_contain_text("Directory listing for /")
    expect(frame.get_by_role("link", name="hello-from-the-sandbox.txt")).to_have_count(1)
    assert (iframe.get_attribute("sandbox") or "").split() == FRAME_SANDBOX
    assert iframe.get_attribute("referrerpolicy") == "no-referrer"
    src = iframe.get_attribute("src") or ""
    assert src.startswith(f"{server.url}/sandbox-ports/{sandbox_id}/8000/"), src
    content = iframe.element_handle().content_frame()
    assert content is not None
    assert content.evaluate("self.origin") == "null"  # opaque: not Lab's origin
    shot(page, "14-port-in-a-tab")

    # Open in a new browser tab: the listing, with no handle on Lab's page and no referrer.
    page.locator(f".lm-TabBar-tab[data-id='jupyter-sandbox-details-{sandbox_id}']").click()
    with page.context.expect_page() as opened:
        row.get_by_role(
            "button", name=f"Open port 8000 of sandbox {sandbox_id} in a new browser tab"
        ).click()
    other = opened.value
    expect(other.locator("body")).to_contain_text("hello-from-the-sandbox.txt")
    assert other.url == src, other.url
    assert other.evaluate("[window.opener, document.referrer, self.origin]") == [None, "", "null"]
    other.close()

    # The command (the palette's "Open a port of the notebook's sandbox", here given the
    # sandbox and the port) opens the tab again once it was closed.
    tab.locator(".lm-TabBar-tabCloseIcon").click()
    expect(tab).to_have_count(0)
    assert (
        page.evaluate("window.jupyterapp.commands.label('jupyter-sandbox:open-port', {})")
        == "Open a port of the notebook's sandbox"
    )
    page.evaluate(
        "([id, port]) => window.jupyterapp.commands.execute('jupyter-sandbox:open-port', {id, port})",
        [sandbox_id, 8000],
    )
    expect(frame.locator("body")).to_contain_text("hello-from-the-sandbox.txt")

    # Revoke links (asked first): the old link answers 404, even to a direct request from Lab's
    # page, and the open tab goes on with the port's new link.
    old = iframe.get_attribute("src") or ""
    page.locator(f".lm-TabBar-tab[data-id='jupyter-sandbox-details-{sandbox_id}']").click()
    section.get_by_role(
        "button", name=f"Revoke every link to the ports of sandbox {sandbox_id}"
    ).click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text(REVOKE)
    dialog.get_by_role("button", name="Revoke links").click()
    expect(iframe).not_to_have_attribute("src", old)
    new = iframe.get_attribute("src") or ""
    assert new.startswith(f"{server.url}/sandbox-ports/{sandbox_id}/8000/"), new
    assert page.evaluate("url => fetch(url).then(r => r.status)", old) == 404
    assert page.evaluate("url => fetch(url).then(r => r.status)", new) == 200
    expect(section.get_by_role("alert")).to_have_text("")
    tab.click()
    deadline = time.monotonic() + 30
    while (iframe.element_handle().content_frame() or page.main_frame).url != new:
        assert time.monotonic() < deadline, "the tab did not load its new link"
        time.sleep(0.1)
    expect(frame.locator("body")).to_contain_text("hello-from-the-sandbox.txt")
    shot(page, "15-port-links-revoked")
