"""The JupyterLab extension in a real browser: the Background commands section of a sandbox's
details. Commands started there, their output followed as it comes and its end kept when it is
long, their exit status, and a running one stopped (confirmed) with what it started.
"""

from __future__ import annotations

import re

import pytest

from tests.labextension.conftest import (
    held_gets,
    open_lab,
    open_panel,
    sandbox_card,
    sandbox_details,
    shot,
    start_sandbox,
    unlabelled,
)
from tests.labextension.lab_server import LabServer

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]


def test_background_commands_in_the_details(server: LabServer, page: object) -> None:
    """The details' Background commands section: a command started there (Enter) shows its
    output as it comes and its exit status once it ends; another, still running, is stopped
    (confirmed) with what it started, and leaves the list. A command being typed survives
    the details redrawing for a feature of the server found meanwhile (the Ports section)."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
    details = sandbox_details(page, sandbox_id)
    section = details.locator(".jp-SandboxCommands")
    command_input = section.get_by_role(
        "textbox", name=f"Command to start in the background in sandbox {sandbox_id}"
    )
    # An older server, without the list of its features: the extension asks which routes it
    # has one after another, ports last: held, it leaves the details open with the commands
    # section on show and the ports one to come.
    page.route(
        re.compile(r"/api/sandbox-features/?(\?.*)?$"),
        lambda route: route.fulfill(status=404, body="<html>404: Not Found</html>"),
    )
    ports_route = re.compile(rf"/api/sandboxes/{sandbox_id}/ports(\?.*)?$")
    with held_gets(page, ports_route, "the ports feature", then=lambda: open_lab(page, server)):
        open_panel(page)
        sandbox_card(page, sandbox_id).get_by_role(
            "button", name=f"Details sandbox {sandbox_id}"
        ).click()
        expect(section.locator("h3")).to_have_text("Background commands")
        expect(section).to_contain_text("No background command in this sandbox.")
        command_input.fill("echo hello; sleep 1; echo done")
    expect(details.locator(".jp-SandboxPorts h3")).to_have_count(1)  # the details redrew
    expect(command_input).to_have_value("echo hello; sleep 1; echo done")

    # Enter starts it; its output shows below the list, followed until it ends.
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
    controls = f"#jupyter-sandbox-details-{sandbox_id} .jp-SandboxCommands :is(button, input, pre)"
    assert unlabelled(page, controls) == 0
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
