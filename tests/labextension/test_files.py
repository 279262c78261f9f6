"""The JupyterLab extension in a real browser: the Files section of a sandbox's details makes
folders and renames files, refusing in its dialog a name that is not one, and showing the
server's refusal of a name taken with an offer to replace. (Its listing, download, upload and
delete are walked through in test_notebook_and_panel.py, on the file a notebook's cell wrote.)
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.labextension.conftest import open_details, shot, start_sandbox, unlabelled
from tests.labextension.lab_server import LabServer

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]


def test_files_new_folder_and_rename(server: LabServer, page: object) -> None:
    """The details' Files section makes a folder and renames files: a name that is not one
    (empty, a path) is refused in the dialog and nothing is sent; a new name taken is the
    server's refusal, shown in a dialog that replaces what has it once confirmed."""
    from playwright.sync_api import Page, Request, expect

    assert isinstance(page, Page)
    sandbox_id = start_sandbox(server)
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
    details = open_details(page, server, sandbox_id)
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
    assert unlabelled(page, f"#jupyter-sandbox-details-{sandbox_id} .jp-SandboxFiles button") == 0
