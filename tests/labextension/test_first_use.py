"""The JupyterLab extension in a real browser, as a first-time user meets it (issue 36): a page
load with no errors in the console (the features are learned from one 200, not from probes of
routes), Sandboxed Python's own logo in the launcher, a paused sandbox that says so in the
notebook and offers Resume, a details tab named by its notebook, and a network policy whose
`open` asks first and whose typed allowlist survives a switch of modes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from tests.labextension.conftest import open_details, open_lab, shot, start_sandbox
from tests.labextension.lab_server import LabServer

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]


def launcher_card(page: Page, name: str) -> Locator:
    return page.locator(".jp-LauncherCard[data-category='Notebook']", has_text=name)


def test_a_page_load_logs_no_errors_and_the_launcher_shows_its_own_logo(
    server: LabServer, page: object
) -> None:
    from playwright.sync_api import ConsoleMessage, Page, Response, expect

    assert isinstance(page, Page)
    start_sandbox(server)  # a sandbox listed: its own routes were what the probes asked
    errors: list[str] = []
    failed: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def response(answer: Response) -> None:
        if "/api/" in answer.url and answer.status >= 400:
            failed.append(f"{answer.status} {answer.request.method} {answer.url}")

    page.on("console", console)
    page.on("response", response)
    with page.expect_response(re.compile(r"/api/sandbox-features")) as features:
        open_lab(page, server)
    assert features.value.status == 200
    card = launcher_card(page, "Sandboxed Python")
    expect(card).to_be_visible()
    # The features are known: the sandbox's row offers the actions they bring.
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()
    expect(page.locator("#jupyter-sandbox-panel .jp-Sandbox-card")).to_have_count(1)
    page.wait_for_timeout(3000)  # what a late probe would log, it logs by now
    assert failed == [], failed
    assert errors == [], errors

    # Its own logo, not Python 3's: the kernelspec's SVG, which Lab prefers.
    logo = card.locator("img")
    expect(logo).to_have_attribute("src", re.compile(r"sandboxed-python/logo-svg\.svg"))
    python3 = launcher_card(page, "Python 3").locator("img")
    assert logo.get_attribute("src") != python3.get_attribute("src")
    shot(page, "first-use-launcher")


def test_a_paused_sandbox_says_so_in_the_notebook_and_resumes_from_there(
    server: LabServer, page: object
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    open_lab(page, server)
    launcher_card(page, "Sandboxed Python").click()
    status = page.locator("#jupyter-sandbox-status")
    expect(status).to_contain_text("Docker runc")
    code, sandboxes = server.api("GET", "api/sandboxes")
    assert code == 200, sandboxes
    assert len(sandboxes) == 1, sandboxes
    sandbox_id = sandboxes[0]["id"]

    code, paused = server.api("POST", f"api/sandboxes/{sandbox_id}/pause")
    assert code == 200, paused
    expect(status).to_contain_text("Sandbox paused", timeout=30_000)
    expect(status).to_have_attribute("aria-label", re.compile("paused. Resume it"))
    shot(page, "first-use-paused")
    status.click()
    expect(status).to_contain_text("Docker runc", timeout=30_000)
    assert server.api("GET", f"api/sandboxes/{sandbox_id}")[1]["status"] == "running"

    # Now the button opens the details, in a tab named by the notebook, not by the hex id.
    status.click()
    tab = page.locator(
        ".lm-TabBar-tab", has=page.locator(".lm-TabBar-tabLabel", has_text="Sandbox: Untitled")
    )
    expect(tab).to_have_count(1)
    expect(page.locator(f"#jupyter-sandbox-details-{sandbox_id}")).to_be_visible()


def test_network_open_asks_first_and_a_typed_allowlist_survives_a_switch(
    server: LabServer, page: object
) -> None:
    from playwright.sync_api import Page, Response, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    details = open_details(page, server, sandbox_id)
    section = details.locator(".jp-SandboxNetwork")
    mode = section.get_by_role("combobox", name=f"Network policy of sandbox {sandbox_id}")
    allow = section.get_by_role(
        "textbox", name=f"Allowed hosts of sandbox {sandbox_id}, one a line"
    )
    apply = section.get_by_role("button", name=f"Apply the network policy of sandbox {sandbox_id}")
    network = f"api/sandboxes/{sandbox_id}/network"

    def put_answered(response: Response) -> bool:
        return response.request.method == "PUT" and response.url.split("?")[0].endswith(network)

    mode.select_option("allowlist")
    allow.fill("pypi.org\nfiles.pythonhosted.org")
    with page.expect_response(put_answered):
        apply.click()
    expect(mode).to_have_value("allowlist")
    assert server.api("GET", network)[1]["allow"] == ["pypi.org", "files.pythonhosted.org"]

    # Open asks; Cancel leaves the policy as it was.
    dialog = page.locator(".jp-Dialog")
    mode.select_option("open")
    apply.click()
    expect(dialog).to_contain_text(f"Open the network of sandbox {sandbox_id}?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert server.api("GET", network)[1]["mode"] == "allowlist"

    # Accepted, it opens; the warning and the attestation agree on what is blocked.
    apply.click()
    with page.expect_response(put_answered):
        dialog.get_by_role("button", name="Open network").click()
    expect(mode).to_have_value("open")
    assert server.api("GET", network)[1]["mode"] == "open"
    weak = details.get_by_role("note", name="Weakened isolation")
    expect(weak).to_contain_text("direct egress is blocked, but the host proxy")
    # The server keeps no allowlist under open; the editor keeps what was typed.
    expect(allow).to_have_value("pypi.org\nfiles.pythonhosted.org")
    mode.select_option("allowlist")
    with page.expect_response(put_answered):
        apply.click()
    expect(mode).to_have_value("allowlist")
    assert server.api("GET", network)[1]["allow"] == ["pypi.org", "files.pythonhosted.org"]
    shot(page, "first-use-network")


def test_details_ports_and_egress_audit_renew_themselves(server: LabServer, page: object) -> None:
    """A server started after the details opened shows in Ports without Refresh, and a request
    the policy refuses shows in the egress audit without reopening the tab; each says when it
    was read. (The request goes to the sandbox's own proxy, which refuses it before any lookup:
    nothing leaves the host.)"""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    code, policy = server.api(
        "PUT", f"api/sandboxes/{sandbox_id}/network", {"mode": "allowlist", "allow": ["pypi.org"]}
    )
    assert code == 200, policy
    details = open_details(page, server, sandbox_id)
    ports = details.locator(".jp-SandboxPorts")
    expect(ports.locator(".jp-SandboxPorts-readAt")).to_contain_text(re.compile(r"read \d"))
    audit = details.get_by_role("list", name=f"Egress decisions of sandbox {sandbox_id}")
    expect(audit).to_be_attached()
    expect(details.locator(".jp-SandboxNetwork-readAt")).to_contain_text("again every 5 s")
    expect(audit).not_to_contain_text("not-allowed.example")

    commands = f"api/sandboxes/{sandbox_id}/commands"
    code, refused = server.api(
        "POST",
        commands,
        {
            "command": "python -c \"import urllib.request as u; u.urlopen('http://not-allowed.example/', timeout=10)\""
        },
    )
    assert code == 200, refused
    assert refused["exit_code"] != 0, refused  # the proxy's 403
    code, started = server.api(
        "POST",
        commands,
        {"command": "python -m http.server 8000 --directory /workspace", "background": True},
    )
    assert code in (200, 201), started

    # No click, no reopening: both show up by themselves.
    expect(audit).to_contain_text("refused GET not-allowed.example:80", timeout=30_000)
    expect(ports.locator("tr", has_text="8000")).to_have_count(1, timeout=60_000)
    shot(page, "first-use-live-details")


def test_a_followed_command_is_followed_again_after_pause_and_resume(
    server: LabServer, page: object
) -> None:
    """A background command's output followed in the details: a pause stops the reads with
    the server's refusal on show; after resume the refusal goes and new output comes in."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    details = open_details(page, server, sandbox_id)
    section = details.locator(".jp-SandboxCommands")
    command_input = section.get_by_role(
        "textbox", name=f"Command to start in the background in sandbox {sandbox_id}"
    )
    command_input.fill("i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done")
    command_input.press("Enter")
    row = section.locator("tbody tr").first
    expect(row).to_have_count(1)
    command_id = row.get_attribute("data-command-id") or ""
    output = section.get_by_role(
        "log", name=f"Output of command {command_id} in sandbox {sandbox_id}"
    )
    expect(output).to_contain_text("tick 2")

    assert server.api("POST", f"api/sandboxes/{sandbox_id}/pause")[0] == 200
    problem = section.locator(".jp-SandboxCommands-outputError")
    expect(problem).to_contain_text("paused", timeout=30_000)
    last = max(int(n) for n in re.findall(r"tick (\d+)", output.inner_text()))

    assert server.api("POST", f"api/sandboxes/{sandbox_id}/resume")[0] == 200
    expect(problem).to_have_text("", timeout=60_000)
    expect(output).to_contain_text(f"tick {last + 3}", timeout=60_000)
    shot(page, "first-use-follow-after-resume")
