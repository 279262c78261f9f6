"""The JupyterLab extension in a real browser (Debian's Chromium, driven by Playwright) against a
real JupyterLab server and a real sandbox (runc): open Lab, start a Sandboxed Python notebook, run
a cell, read the status bar, open the details and the panel, pause and resume, take a snapshot,
change the network policy, stop the sandbox; a terminal in a sandbox; background commands in a
sandbox's details; new folders and renames in its Files section; and, with no engine, the
kernel's refusal.

Screenshots go to test-artifacts/labextension/ (gitignored), one per step, light and dark.
Chromium is installed by `make browser` (part of `make test`); without it this test fails and
says so: it is never skipped.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from .lab_server import REPO, LabServer, lab_server

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]

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


def test_notebook_status_bar_panel_and_stop(server: LabServer, page: object) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    page.goto(f"{server.url}/lab?token={server.token}")

    # A Sandboxed Python notebook from the launcher; its first cell runs in the sandbox.
    page.locator(".jp-LauncherCard[data-category='Notebook']", has_text="Sandboxed Python").click()
    # The status bar shows the sandbox once the kernel has attached to it; the cell runs once
    # the kernel is idle (a cell run while the session is still being made is dropped by Lab).
    status = page.locator("#jupyter-sandbox-status")
    expect(status).to_contain_text("Docker runc")
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
    cell = page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    cell.click()
    # The cell also writes a file into /workspace: under copy-on-write it stays in the sandbox.
    page.keyboard.type(
        "import os; open('result.txt', 'w').write('from the sandbox'); os.getuid(), 6 * 7"
    )
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
    expect(output).to_contain_text("42", timeout=TIMEOUT_MS)
    assert "(0, 42)" not in output.inner_text(), "the cell ran as root"

    # The status bar names the notebook's sandbox: runc is marked as weakened isolation.
    expect(status).to_contain_text("net none")
    expect(status).to_contain_text(re.compile(r"MiB / \d+\.\d\d GiB \(\d+%\)"))
    expect(status).to_have_class(re.compile("jp-mod-weak"))
    assert "weakened isolation" in (status.get_attribute("aria-label") or "")
    shot(page, "1-notebook-status-bar")

    code, sandboxes = server.api("GET", "api/sandboxes")
    assert code == 200
    assert len(sandboxes) == 1, sandboxes
    sandbox = sandboxes[0]
    assert sandbox["runtime"] == "runc"
    sandbox_id = sandbox["id"]
    kernel_id = sandbox["kernel"]["id"]
    code, kernels = server.api("GET", "api/kernels")
    assert [k["id"] for k in kernels] == [kernel_id]

    # Clicking the status bar opens the sandbox's details, with its attestation report.
    status.click()
    details = page.locator(f"#jupyter-sandbox-details-{sandbox_id}")
    expect(details).to_be_visible()
    expect(details.locator("h2")).to_have_text(f"Sandbox {sandbox_id}")
    weakened = details.get_by_role("note", name="Weakened isolation")
    expect(weakened).to_contain_text("runtime runc")
    # Findings, if the probe reported any (seen once in CI, under load), get a box of their
    # own beside it; say which in the test's output rather than guess later.
    code, report = server.api("GET", f"api/sandboxes/{sandbox_id}/attestation")
    assert code == 200, report
    for finding in report.get("findings") or []:
        print(f"attestation finding: {finding.get('message')}")
    expect(details.locator("table.jp-Sandbox-attestation")).to_contain_text("uid")
    shot(page, "2-details-attestation")

    # The side panel lists it with the facts the issue names, and labelled controls.
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()
    card = page.locator(f"#jupyter-sandbox-panel .jp-Sandbox-card[data-sandbox-id='{sandbox_id}']")
    expect(card).to_be_visible()
    expect(card.locator(".jp-Sandbox-state")).to_have_text("running")
    expect(card).to_contain_text("Docker runc")
    expect(card).to_contain_text("jupyter-sandbox/python")
    expect(card).to_contain_text("Untitled.ipynb")
    expect(card.locator("dd").nth(5)).to_have_text(re.compile(r"\d+\.\d%"))  # CPU, measured
    unlabelled = page.eval_on_selector_all(
        "#jupyter-sandbox-panel button, #jupyter-sandbox-status",
        "nodes => nodes.filter(n => !n.getAttribute('aria-label')).length",
    )
    assert unlabelled == 0
    # The panel redraws on every refresh; the focused control keeps the focus.
    details_button = card.get_by_role("button", name=f"Details sandbox {sandbox_id}")
    details_button.focus()
    details_button.evaluate("node => node.setAttribute('data-before-redraw', '')")
    expect(page.locator("#jupyter-sandbox-panel [data-before-redraw]")).to_have_count(0)
    expect(page.locator(":focus")).to_have_attribute("aria-label", f"Details sandbox {sandbox_id}")
    shot(page, "3-panel-light")

    # The details' Files section lists the file the cell wrote in the sandbox's /workspace,
    # which never reached the host's notebook directory (copy-on-write); it downloads through
    # the server, walks into directories and up, uploads, and deletes (confirmed).
    files = details.locator(".jp-SandboxFiles")
    expect(files.locator(".jp-SandboxFiles-path")).to_have_text("/workspace")
    result = files.locator("tr[data-path='/workspace/result.txt']")
    expect(result).to_contain_text("16 B")
    # /workspace shows the host's notebook directory (the notebook is there), not its writes.
    expect(files.locator("tr[data-path='/workspace/Untitled.ipynb']")).to_have_count(1)
    assert (server.root_dir / "Untitled.ipynb").is_file()
    assert not (server.root_dir / "result.txt").exists(), "the sandbox's write reached the host"
    with page.expect_download() as downloading:
        result.get_by_role(
            "button", name=f"Download /workspace/result.txt from sandbox {sandbox_id}"
        ).click()
    download = downloading.value
    assert download.suggested_filename == "result.txt"
    assert Path(download.path()).read_text() == "from the sandbox"
    # A directory made behind the view's back appears on Refresh; its name opens it.
    inner = f"api/sandboxes/{sandbox_id}/files/content?path=sub/inner.txt"
    assert server.api("PUT", inner, "x")[0] == 200  # the body is JSON: '"x"', 3 bytes
    files.get_by_role(
        "button", name=f"Refresh the files in /workspace of sandbox {sandbox_id}"
    ).click()
    files.get_by_role("button", name=f"Open /workspace/sub in sandbox {sandbox_id}").click()
    expect(files.locator(".jp-SandboxFiles-path")).to_have_text("/workspace/sub")
    expect(files.locator("tbody tr")).to_have_count(1)
    expect(files.locator("tbody tr")).to_have_attribute("data-path", "/workspace/sub/inner.txt")
    files.locator(".jp-SandboxFiles-input").set_input_files(
        [{"name": "up é.txt", "mimeType": "text/plain", "buffer": b"uploaded\n"}]
    )
    expect(files.locator("tr[data-path='/workspace/sub/up é.txt']")).to_contain_text("9 B")
    code, listing = server.api("GET", f"api/sandboxes/{sandbox_id}/files?path=sub")
    assert code == 200
    assert {e["name"]: e["size"] for e in listing["entries"]} == {"inner.txt": 3, "up é.txt": 9}
    files.get_by_role("button", name=f"Up to /workspace in sandbox {sandbox_id}").click()
    expect(files.locator(".jp-SandboxFiles-path")).to_have_text("/workspace")
    unlabelled = page.eval_on_selector_all(
        f"#jupyter-sandbox-details-{sandbox_id} button",
        "nodes => nodes.filter(n => !n.getAttribute('aria-label')).length",
    )
    assert unlabelled == 0
    shot(page, "3b-details-files")
    result.get_by_role(
        "button", name=f"Delete /workspace/result.txt from sandbox {sandbox_id}"
    ).click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Delete result.txt?")
    dialog.get_by_role("button", name="Delete").click()
    expect(result).to_have_count(0)
    expect(files.locator("tr[data-path='/workspace/sub']")).to_have_count(1)
    code, listing = server.api("GET", f"api/sandboxes/{sandbox_id}/files")
    assert code == 200
    assert "result.txt" not in [e["name"] for e in listing["entries"]]

    # Pause and resume through the panel; the sandbox's state follows.
    card.get_by_role("button", name=f"Pause sandbox {sandbox_id}").click()
    expect(card.locator(".jp-Sandbox-state")).to_have_text("paused")
    assert server.api("GET", f"api/sandboxes/{sandbox_id}")[1]["status"] == "paused"

    # A refusal is a dialog carrying the server's own message: the panel still shows the
    # sandbox paused (its list refreshes are held back) when it is resumed behind its back,
    # and its Resume button then asks the real server to resume a running sandbox.
    with held_list_refreshes(page):
        assert server.api("POST", f"api/sandboxes/{sandbox_id}/resume")[0] == 200
        refused_code, refused = server.api("POST", f"api/sandboxes/{sandbox_id}/resume")
        assert refused_code >= 400, refused
        card.get_by_role("button", name=f"Resume sandbox {sandbox_id}").click()
        dialog = page.locator(".jp-Dialog")
        expect(dialog).to_contain_text("Resume failed")
        expect(dialog).to_contain_text(refused["message"])
        shot(page, "4-server-error-dialog")
        dialog.get_by_role("button", name="Close").click()
    expect(card.locator(".jp-Sandbox-state")).to_have_text("running")

    # A snapshot from the panel: the details list it (stored in the server's private data dir).
    card.get_by_role("button", name=f"Snapshot sandbox {sandbox_id}").click()
    snapshots = details.locator(".jp-SandboxSnapshots li")
    expect(snapshots).to_have_count(1)
    code, stored = server.api("GET", "api/snapshots")
    assert code == 200
    assert [s["source"]["sandbox"] for s in stored] == [sandbox_id]
    expect(snapshots.first).to_contain_text(stored[0]["id"])

    # The network policy from the details: an allowlist, then open (marked as weakened).
    network = details.locator(".jp-SandboxNetwork")
    network.get_by_label(f"Network policy of sandbox {sandbox_id}", exact=True).select_option(
        "allowlist"
    )
    network.get_by_label(f"Allowed hosts of sandbox {sandbox_id}, one a line").fill(
        "PyPI.org\n*.pythonhosted.org"
    )
    network.get_by_role("button", name=f"Apply the network policy of sandbox {sandbox_id}").click()
    expect(status).to_contain_text("net allowlist")
    policy = server.api("GET", f"api/sandboxes/{sandbox_id}/network")[1]
    assert (policy["mode"], policy["allow"]) == ("allowlist", ["pypi.org", "*.pythonhosted.org"])
    shot(page, "5-snapshot-and-network")
    network.get_by_label(f"Network policy of sandbox {sandbox_id}", exact=True).select_option(
        "open"
    )
    network.get_by_role("button", name=f"Apply the network policy of sandbox {sandbox_id}").click()
    expect(status).to_contain_text("net open")
    expect(details.locator(".jp-Sandbox-weakBox").first).to_contain_text("network open")
    assert server.api("GET", f"api/sandboxes/{sandbox_id}/network")[1]["mode"] == "open"

    # The same panel in the dark theme.
    page.evaluate(
        "window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})"
    )
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
    expect(card.locator(".jp-Sandbox-state")).to_have_text("running")
    shot(page, "6-panel-dark")

    # Stop: confirmed, the notebook's kernel is shut down and the sandbox removed.
    card.get_by_role("button", name=f"Stop sandbox {sandbox_id}").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Stop").click()
    expect(card).to_have_count(0)
    expect(page.locator("#jupyter-sandbox-panel .jp-SandboxPanel-empty")).to_be_visible()
    expect(status).to_be_hidden()
    shot(page, "7-stopped")
    assert server.api("GET", "api/sandboxes") == (200, [])
    assert server.api("GET", "api/kernels") == (200, [])
    assert (
        json.loads(json.dumps(server.api("GET", f"api/sandboxes/{sandbox_id}")[1]))["code"]
        == "sandbox_not_found"
    )


def test_terminal_in_a_sandbox(server: LabServer, page: object) -> None:
    """A shell in a running sandbox from the panel's "Open terminal": it runs what is typed,
    exiting it closes its tab, closing its tab ends it, and a paused sandbox's refusal is a
    dialog that says so."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    code, sandbox = server.api("POST", "api/sandboxes", {"runtime": "runc"})
    assert code == 201, sandbox
    sandbox_id = sandbox["id"]
    # xterm.js draws on a canvas; with the user's screen reader mode on (a JupyterLab terminal
    # setting, which the sandbox's terminals follow) it also keeps its rows as text in the DOM.
    code, _ = server.api(
        "PUT",
        "lab/api/settings/@jupyterlab/terminal-extension:plugin",
        {"raw": json.dumps({"screenReaderMode": True})},
    )
    assert code == 204
    page.goto(f"{server.url}/lab?token={server.token}")
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()
    card = page.locator(f"#jupyter-sandbox-panel .jp-Sandbox-card[data-sandbox-id='{sandbox_id}']")
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


def test_background_commands_in_the_details(server: LabServer, page: object) -> None:
    """The details' Background commands section: a command started there (Enter) shows its
    output as it comes and its exit status once it ends; another, still running, is stopped
    (confirmed) with what it started, and leaves the list."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    code, sandbox = server.api("POST", "api/sandboxes", {"runtime": "runc"})
    assert code == 201, sandbox
    sandbox_id = sandbox["id"]
    page.goto(f"{server.url}/lab?token={server.token}")
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()
    card = page.locator(f"#jupyter-sandbox-panel .jp-Sandbox-card[data-sandbox-id='{sandbox_id}']")
    card.get_by_role("button", name=f"Details sandbox {sandbox_id}").click()
    details = page.locator(f"#jupyter-sandbox-details-{sandbox_id}")
    section = details.locator(".jp-SandboxCommands")
    expect(section.locator("h3")).to_have_text("Background commands")
    expect(section).to_contain_text("No background command in this sandbox.")
    command_input = section.get_by_role(
        "textbox", name=f"Command to start in the background in sandbox {sandbox_id}"
    )

    # Enter starts it; its output shows below the list, followed until it ends.
    command_input.fill("echo hello; sleep 1; echo done")
    command_input.press("Enter")
    rows = section.locator("tbody tr")
    first = rows.filter(has_text="echo hello; sleep 1; echo done")
    expect(first).to_have_count(1)
    first_id = first.get_attribute("data-command-id") or ""
    assert re.fullmatch(r"[0-9a-f]{12}", first_id), first_id
    output = section.get_by_role(
        "log", name=f"Output of command {first_id} in sandbox {sandbox_id}"
    )
    expect(output).to_contain_text("hello")
    expect(output).to_have_text(re.compile(r"^hello\s+done\s*$"))
    expect(first.locator(".jp-SandboxCommands-status")).to_have_text("exited 0")
    expect(command_input).to_have_value("")
    code, listed = server.api("GET", f"api/sandboxes/{sandbox_id}/commands")
    assert code == 200, listed
    assert [(c["id"], c["command"], c["running"], c["exit_code"]) for c in listed["commands"]] == [
        (first_id, ["/bin/sh", "-c", "echo hello; sleep 1; echo done"], False, 0)
    ]
    shot(page, "11-background-command-output")

    # One that runs on, started with the button: its (empty) output replaces the first's,
    # and the first's Output button brings that back.
    command_input.fill("sleep 600")
    section.get_by_role(
        "button", name=f"Start the command in the background in sandbox {sandbox_id}"
    ).click()
    sleeper = rows.filter(has_text="sleep 600")
    expect(sleeper.locator(".jp-SandboxCommands-status")).to_have_text("running")
    sleeper_id = sleeper.get_attribute("data-command-id") or ""
    expect(
        section.get_by_role("log", name=f"Output of command {sleeper_id} in sandbox {sandbox_id}")
    ).to_have_count(1)
    first.get_by_role(
        "button", name=f"Show the output of command {first_id} in sandbox {sandbox_id}"
    ).click()
    expect(output).to_have_text(re.compile(r"^hello\s+done\s*$"))
    unlabelled = page.eval_on_selector_all(
        f"#jupyter-sandbox-details-{sandbox_id} .jp-SandboxCommands :is(button, input, pre)",
        "nodes => nodes.filter(n => !n.getAttribute('aria-label')).length",
    )
    assert unlabelled == 0
    shot(page, "12-background-commands")

    # Stop, confirmed: the command and what it started are killed, and it leaves the list.
    sleeper.get_by_role("button", name=f"Stop command {sleeper_id} in sandbox {sandbox_id}").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text(f"Stop command {sleeper_id}?")
    dialog.get_by_role("button", name="Stop").click()
    expect(sleeper).to_have_count(0)
    expect(rows).to_have_count(1)
    code, listed = server.api("GET", f"api/sandboxes/{sandbox_id}/commands")
    assert [c["id"] for c in listed["commands"]] == [first_id]
    code, left = server.api(
        "POST",
        f"api/sandboxes/{sandbox_id}/commands",
        {"command": "cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'sleep 60[0]'"},
    )
    assert code == 200, left
    assert left["stdout"].strip() == "0", left

    # Long output: the page keeps its end only (256 KiB), from a line's start, and says so.
    command_input.fill("seq 1 400000")
    command_input.press("Enter")
    counted = rows.filter(has_text="seq 1 400000")
    expect(counted.locator(".jp-SandboxCommands-status")).to_have_text("exited 0")
    counted_id = counted.get_attribute("data-command-id") or ""
    log = section.get_by_role("log", name=f"Output of command {counted_id} in sandbox {sandbox_id}")
    expect(log).to_have_text(re.compile(r"\n399999\n400000\n?$"))
    expect(section.locator(".jp-SandboxCommands-output")).to_contain_text(
        "Only the end of the output is shown"
    )
    kept = log.inner_text()
    assert len(kept.encode()) <= 256 * 1024, len(kept)
    assert kept[0].isdigit(), repr(kept[:20])  # no piece of a line, no empty line
    numbers = [int(line) for line in kept.split()]
    assert numbers == list(range(numbers[0], 400001)), "a line cut or lost"
    assert numbers[0] > 1


def test_files_new_folder_and_rename(server: LabServer, page: object) -> None:
    """The details' Files section makes a folder and renames files: a name that is not one
    (empty, a path) is refused in the dialog and nothing is sent; a new name taken is the
    server's refusal, shown in a dialog that replaces what has it once confirmed."""
    from playwright.sync_api import Page, Request, expect

    assert isinstance(page, Page)
    code, sandbox = server.api("POST", "api/sandboxes", {"runtime": "runc"})
    assert code == 201, sandbox
    sandbox_id = sandbox["id"]
    base = f"api/sandboxes/{sandbox_id}/files"
    # The bodies go as JSON: a.txt holds '"first"' (7 bytes), b.txt '"second file"' (13).
    for name, text in (("a.txt", "first"), ("b.txt", "second file")):
        assert server.api("PUT", f"{base}/content?path={name}", text)[0] == 200
    # What the page asks the server to change in the sandbox's files, in order.
    changes: list[tuple[str, str, object]] = []

    def record(request: Request) -> None:
        url = urlsplit(request.url)
        if request.method in ("PUT", "PATCH", "DELETE") and url.path.endswith(f"/{base}"):
            path = parse_qs(url.query)["path"][0]
            changes.append((request.method, path, json.loads(request.post_data or "null")))

    page.on("request", record)
    page.goto(f"{server.url}/lab?token={server.token}")
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()
    card = page.locator(f"#jupyter-sandbox-panel .jp-Sandbox-card[data-sandbox-id='{sandbox_id}']")
    card.get_by_role("button", name=f"Details sandbox {sandbox_id}").click()
    details = page.locator(f"#jupyter-sandbox-details-{sandbox_id}")
    files = details.locator(".jp-SandboxFiles")
    expect(files.locator("tr[data-path='/workspace/a.txt']")).to_contain_text("7 B")
    dialog = page.locator(".jp-Dialog")

    # New folder: no name, then a path, are refused in the dialog (its Create disabled, the
    # reason under the field); Enter on a refused name brings the dialog back saying why.
    files.get_by_role("button", name=f"New folder in /workspace of sandbox {sandbox_id}").click()
    field = dialog.get_by_role(
        "textbox", name=f"Name of the new folder in /workspace of sandbox {sandbox_id}"
    )
    create = dialog.get_by_role("button", name="Create", exact=True)
    expect(field).to_be_focused()
    expect(dialog).to_contain_text("Enter a name.")
    expect(create).to_be_disabled()
    field.fill("out/sub")
    expect(dialog).to_contain_text('A name cannot contain "/"')
    expect(create).to_be_disabled()
    expect(field).to_have_attribute("aria-invalid", "true")
    field.press("Enter")
    expect(dialog).to_have_count(1)
    expect(field).to_have_value("out/sub")
    expect(dialog).to_contain_text('A name cannot contain "/"')
    shot(page, "13-files-new-folder-refused")
    field.fill("out")
    expect(create).to_be_enabled()
    expect(dialog.locator(".jp-SandboxName-problem")).to_have_text("")
    create.click()
    expect(dialog).to_have_count(0)
    expect(files.locator("tr[data-path='/workspace/out']")).to_have_attribute(
        "data-type", "directory"
    )
    assert changes == [("PUT", "/workspace/out", {"type": "directory"})]
    code, made = server.api("GET", f"{base}/info?path=out")
    assert (code, made["type"]) == (200, "directory"), made

    # Rename: the field starts with the name, its stem selected (typing keeps the extension).
    a = files.locator("tr[data-path='/workspace/a.txt']")
    a.get_by_role("button", name=f"Rename /workspace/a.txt in sandbox {sandbox_id}").click()
    field = dialog.get_by_role(
        "textbox", name=f"New name for /workspace/a.txt in sandbox {sandbox_id}"
    )
    expect(field).to_have_value("a.txt")
    expect(field).to_be_focused()
    page.keyboard.type("c")
    expect(field).to_have_value("c.txt")
    dialog.get_by_role("button", name="Rename", exact=True).click()
    expect(a).to_have_count(0)
    c = files.locator("tr[data-path='/workspace/c.txt']")
    expect(c).to_contain_text("7 B")
    assert changes[1:] == [
        ("PATCH", "/workspace/a.txt", {"path": "/workspace/c.txt", "overwrite": False})
    ]

    # The same name again: nothing is sent.
    c.get_by_role("button", name=f"Rename /workspace/c.txt in sandbox {sandbox_id}").click()
    dialog.get_by_role("button", name="Rename", exact=True).click()
    expect(dialog).to_have_count(0)
    assert len(changes) == 2, changes

    # A name taken: the server's 409, shown with an offer to replace; Cancel keeps both.
    rename_c = c.get_by_role("button", name=f"Rename /workspace/c.txt in sandbox {sandbox_id}")
    rename_c.click()
    dialog.get_by_role(
        "textbox", name=f"New name for /workspace/c.txt in sandbox {sandbox_id}"
    ).fill("b.txt")
    dialog.get_by_role("button", name="Rename", exact=True).click()
    expect(dialog).to_contain_text("Replace b.txt?")
    expect(dialog).to_contain_text("/workspace/b.txt already exists")
    expect(dialog).to_contain_text("(file_exists, HTTP 409)")
    dialog.get_by_role("button", name="Cancel", exact=True).click()
    expect(dialog).to_have_count(0)
    expect(files.locator("tr[data-path='/workspace/b.txt']")).to_contain_text("13 B")
    expect(c).to_have_count(1)
    # Again, confirmed: it replaces b.txt.
    rename_c.click()
    dialog.get_by_role(
        "textbox", name=f"New name for /workspace/c.txt in sandbox {sandbox_id}"
    ).fill("b.txt")
    dialog.get_by_role("button", name="Rename", exact=True).click()
    expect(dialog).to_contain_text("Replace b.txt?")
    shot(page, "14-files-rename-taken")
    dialog.get_by_role("button", name="Replace", exact=True).click()
    expect(c).to_have_count(0)
    expect(files.locator("tr[data-path='/workspace/b.txt']")).to_contain_text("7 B")
    moved = {"path": "/workspace/b.txt", "overwrite": False}
    assert changes[2:] == [
        ("PATCH", "/workspace/c.txt", moved),
        ("PATCH", "/workspace/c.txt", moved),
        ("PATCH", "/workspace/c.txt", {**moved, "overwrite": True}),
    ]
    code, listing = server.api("GET", base)
    assert code == 200, listing
    assert sorted(e["name"] for e in listing["entries"]) == ["b.txt", "out"]
    assert server.api("GET", f"{base}/content?path=b.txt") == (200, "first")
    unlabelled = page.eval_on_selector_all(
        f"#jupyter-sandbox-details-{sandbox_id} .jp-SandboxFiles button",
        "nodes => nodes.filter(n => !n.getAttribute('aria-label')).length",
    )
    assert unlabelled == 0


def test_without_an_engine_the_kernel_refuses_and_says_why(purpose: str, page: object) -> None:
    """A Binder host: no container engine. The kernel answers, refuses every cell with the
    reason, and the status bar and the panel show the server's message; nothing runs on the
    host."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    no_engine = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    with lab_server(
        purpose, environment=no_engine, keep_log=ARTIFACTS / "server-no-engine.log"
    ) as server:
        code, error = server.api("GET", "api/sandboxes")
        assert (code, error["code"]) == (503, "engine_unavailable")
        page.goto(f"{server.url}/lab?token={server.token}")
        page.locator(
            ".jp-LauncherCard[data-category='Notebook']", has_text="Sandboxed Python"
        ).click()
        expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
        status = page.locator("#jupyter-sandbox-status")
        expect(status).to_have_text("⚠ No sandbox")
        expect(status).to_have_class(re.compile("jp-mod-weak"))
        assert "no Docker engine answers" in (status.get_attribute("title") or "")
        page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first.click()
        page.keyboard.type("import os; os.getpid()")
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
        expect(output).to_contain_text("SandboxUnavailable", timeout=TIMEOUT_MS)
        expect(output).to_contain_text("never on this host")
        page.locator(".jp-SideBar .lm-TabBar-tab[data-id='jupyter-sandbox-panel']").click()
        expect(page.locator("#jupyter-sandbox-panel .jp-SandboxPanel-error")).to_contain_text(
            "no Docker engine answers"
        )
        shot(page, "8-no-engine")


@contextmanager
def held_list_refreshes(page: object) -> Iterator[None]:
    """Hold the extension's requests for the sandbox list until the block ends, after one has
    been held (so no refresh that began before is still on its way); every other request, and
    the server's answers to actions, pass untouched."""
    from playwright.sync_api import Page, Route

    assert isinstance(page, Page)
    held: list[Route] = []
    pattern = re.compile(r"/api/sandboxes/?(\?.*)?$")

    def hold(route: Route) -> None:
        if route.request.method == "GET":
            held.append(route)
        else:
            route.continue_()

    page.route(pattern, hold)
    try:
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while not held:
            assert time.monotonic() < deadline, "the panel stopped refreshing its list"
            page.wait_for_timeout(100)  # lets Playwright dispatch the route handler
        yield
    finally:
        for route in held:
            route.continue_()
        page.unroute(pattern)
