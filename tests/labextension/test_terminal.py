"""The JupyterLab extension in a real browser: a terminal in a sandbox, opened from the sandbox
panel. What is typed runs in the sandbox's shell, whose TTY has the terminal's size; closing the
tab ends the shell, the shell's exit closes the tab, and a paused sandbox's refusal is a dialog.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.labextension.conftest import (
    held_list_refreshes,
    open_lab,
    open_panel,
    sandbox_card,
    shot,
    start_sandbox,
)
from tests.labextension.lab_server import LabServer

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]


def test_terminal_in_a_sandbox(server: LabServer, page: object) -> None:
    """A shell in a running sandbox from the panel's "Open terminal": it runs what is typed,
    exiting it closes its tab, closing its tab ends it, and a paused sandbox's refusal is a
    dialog that says so."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    # xterm.js draws on a canvas; with the user's screen reader mode on (a JupyterLab terminal
    # setting, which the sandbox's terminals follow) it also keeps its rows as text in the DOM.
    code, _ = server.api(
        "PUT",
        "lab/api/settings/@jupyterlab/terminal-extension:plugin",
        {"raw": json.dumps({"screenReaderMode": True})},
    )
    assert code == 204
    open_lab(page, server)
    open_panel(page)
    card = sandbox_card(page, sandbox_id)
    open_terminal = card.get_by_role("button", name=f"Open terminal sandbox {sandbox_id}")
    tab = page.locator(
        f".lm-DockPanel-tabBar .lm-TabBar-tab[title='A shell in sandbox {sandbox_id}']"
    )

    open_terminal.click()
    terminal = page.locator(".jp-SandboxTerminal")
    rows = terminal.locator(".xterm-accessibility-tree [role='listitem']")
    expect(rows.filter(has_text=re.compile(r"\S"))).not_to_have_count(0)  # the prompt
    terminal.locator("textarea.xterm-helper-textarea").focus()
    page.keyboard.type("echo $((6*7))")
    page.keyboard.press("Enter")
    expect(rows.filter(has_text=re.compile(r"^\s*42\s*$"))).to_have_count(1)
    # The shell's TTY has the terminal's size (one listitem per row), not the 24 rows it began
    # with: the widget's set_size reached it.
    page.keyboard.type("stty size")
    page.keyboard.press("Enter")
    size = rows.filter(has_text=re.compile(r"^\s*\d+ \d+\s*$"))
    expect(size).to_have_count(1)
    assert size.inner_text().split()[0] == str(rows.count()), size.inner_text()
    assert rows.count() > 24
    page.keyboard.type("echo shell=$$")
    page.keyboard.press("Enter")
    shell = rows.filter(has_text=re.compile(r"^\s*shell=\d+\s*$"))
    expect(shell).to_have_count(1)
    pid = shell.inner_text().strip().removeprefix("shell=")
    shot(page, "9-terminal")

    # Closing the tab closes the socket, and the server ends the shell.
    tab.locator(".lm-TabBar-tabCloseIcon").click()
    expect(terminal).to_have_count(0)
    deadline = time.monotonic() + 30
    while True:
        code, result = server.api(
            "POST", f"api/sandboxes/{sandbox_id}/commands", {"command": f"kill -0 {pid}"}
        )
        assert code == 200, result
        if result["exit_code"] != 0:
            break
        assert time.monotonic() < deadline, f"the shell {pid} outlived its terminal's tab"
        time.sleep(0.5)  # polling for the shell's end

    # The shell's exit ends the terminal: its tab closes (JupyterLab's "close on exit").
    open_terminal.click()
    expect(rows.filter(has_text=re.compile(r"\S"))).not_to_have_count(0)
    terminal.locator("textarea.xterm-helper-textarea").focus()
    page.keyboard.type("exit")
    page.keyboard.press("Enter")
    expect(terminal).to_have_count(0)

    # A sandbox paused behind the panel's back refuses the terminal; the dialog says why, and
    # the panel, refreshed, offers no terminal for a paused sandbox.
    with held_list_refreshes(page):
        assert server.api("POST", f"api/sandboxes/{sandbox_id}/pause")[0] == 200
        open_terminal.click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("Terminal failed")
        expect(dialog).to_contain_text(f"Could not open a terminal in sandbox {sandbox_id}")
        expect(dialog).to_contain_text("it is paused")
        shot(page, "10-terminal-refused")
        dialog.get_by_role("button", name="Close").click()
    expect(terminal).to_have_count(0)
    expect(card.locator(".jp-Sandbox-state")).to_have_text("paused")
    expect(open_terminal).to_have_count(0)
