"""Outputs of a Sandboxed Python kernel are untrusted in JupyterLab: code in the sandbox cannot
run JavaScript in the page (the Jupyter server's origin, with the user's session), through any
output JupyterLab renders: HTML with an event handler, a JavaScript output, an SVG with one, or
Markdown carrying HTML. What is safe still shows (HTML sanitized by JupyterLab's own sanitizer),
and the saved notebook is not signed as trusted, so reopening it does not run them either.

Without this, a cell's output could call the server's REST API as the user, e.g. open the
sandbox's own network policy, or send the workspace anywhere through the browser's network.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import nbformat
import pytest
from nbformat.sign import NotebookNotary

from tests.labextension.conftest import ARTIFACTS, TIMEOUT_MS, open_lab, shot
from tests.labextension.lab_server import LabServer, lab_server
from tests.labextension.test_notebook_and_panel import new_sandboxed_notebook, run_first_cell

if TYPE_CHECKING:
    from playwright.sync_api import Page, Request, Response

pytestmark = [pytest.mark.integration, pytest.mark.runc, pytest.mark.browser]

# One line (typed into the cell): each output tries to set window.sandboxEscaped; a table and a
# heading show that what is safe in them is still rendered.
ESCAPE = "window.sandboxEscaped = window.sandboxEscaped || []; window.sandboxEscaped.push"
ATTEMPTS = (
    "from IPython.display import display; "
    f"E = '{ESCAPE}'; "
    "display({'text/html': '<table><tr><td>forty-two</td></tr></table>"
    '<img src="x" onerror="\' + E + \'(1)">\'}, raw=True); '
    "display({'application/javascript': E + '(2)', 'text/plain': 'js'}, raw=True); "
    "display({'image/svg+xml': '<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"' + E + "
    '\'(3)"><rect width="9" height="9"/></svg>\'}, raw=True); '
    "display({'text/markdown': '## markdown kept\\n<img src=\"x\" onerror=\"' + E + '(4)\">'}, "
    "raw=True); "
    # ipywidgets' HTML widget puts its value into the page as it is (innerHTML).
    "import ipywidgets; display(ipywidgets.HTML('<img src=\"x\" onerror=\"' + E + '(5)\">'))"
)


ATTACK = (
    "sandbox code printing outputs that run JavaScript in JupyterLab's page, on the server's "
    "origin with the user's session (able to call the policy API, or send data out through the "
    "browser): HTML with an event handler, a JavaScript output, SVG with onload, HTML in Markdown, "
    "an ipywidgets HTML widget"
)
EXPECTED = (
    "none runs: outputs of sandboxed kernels are rendered untrusted (sanitized HTML, no "
    "JavaScript); the saved notebook is not signed"
)


@pytest.mark.checklist(row=24, attack=f"{ATTACK}, in a notebook", expected=EXPECTED)
def test_sandboxed_outputs_cannot_run_javascript_in_the_page(
    server: LabServer, page: object, observe: Callable[..., None]
) -> None:
    assert run_attempts(server, page) is None
    assert_saved(server, page, trusted=False)
    observe(
        "5 outputs tried, none ran (the sanitized table and Markdown heading shown); the saved "
        "notebook's cells are not trusted",
        cases=5,
    )


@pytest.mark.parametrize("console", [False, True], ids=["notebook", "console"])
def test_a_user_who_trusts_sandboxed_outputs_gets_jupyterlabs_own_behaviour(
    purpose: str, page: object, console: bool
) -> None:
    """The setting trustSandboxedOutputs: outputs are trusted as any kernel's are (which is also
    what the tests here would see without the extension's guard)."""
    settings = {"trustSandboxedOutputs": True}
    config = "c.SandboxExtension.trust_sandboxed_notebooks = True\n"  # to sign what is saved
    with lab_server(
        purpose, keep_log=ARTIFACTS / "server.log", settings=settings, config=config
    ) as server:
        # All but the SVG's, which JupyterLab shows as an <img> even when trusted.
        assert run_attempts(server, page, console=console) == [1, 2, 4, 5]
        if not console:
            assert_saved(server, page, trusted=True)


@pytest.mark.checklist(row=24, attack=f"{ATTACK}, in a console", expected=EXPECTED)
def test_sandboxed_console_outputs_cannot_run_javascript_in_the_page(
    server: LabServer, page: object, observe: Callable[..., None]
) -> None:
    assert run_attempts(server, page, console=True) is None
    observe("5 outputs tried in a code console, none ran", cases=5)


def run_attempts(server: LabServer, page: object, console: bool = False) -> list[int] | None:
    """A new Sandboxed Python notebook (or console) running ATTEMPTS; which of them ran in the
    page."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    open_lab(page, server)
    if console:
        category, area = "Console", ".jp-CodeConsole"
        page.locator(
            ".jp-LauncherCard[data-category='Console']", has_text="Sandboxed Python"
        ).click()
        page.locator(".jp-CodeConsole-promptCell .cm-content").click()
        expect(page.locator(".jp-CodeConsole .jp-CodeConsole-banner")).to_contain_text("Python")
        page.keyboard.type(ATTEMPTS)
        page.keyboard.press("Shift+Enter")
    else:
        category, area = "Notebook", ".jp-NotebookPanel"
        new_sandboxed_notebook(page)
        # The cell runs once the kernel has its sandbox and is idle (a cell run while the
        # session is still being made is dropped by Lab).
        expect(page.locator("#jupyter-sandbox-status")).to_contain_text("Docker runc")
        idle = page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        expect(idle).to_have_count(1)
        run_first_cell(page, ATTEMPTS)
    outputs = page.locator(f"{area} .jp-OutputArea-output")
    expect(outputs.filter(has_text="forty-two")).to_have_count(1, timeout=TIMEOUT_MS)
    expect(page.locator(f"{area} h2", has_text="markdown kept")).to_have_count(1)
    time.sleep(2)  # handlers of images that failed to load, and SVG onload, have run by now
    shot(page, f"output-trust-{category.lower()}")
    ran = page.evaluate("window.sandboxEscaped ?? null")
    return sorted(ran) if ran is not None else None


def assert_saved(server: LabServer, page: Page, trusted: bool) -> None:
    """Saved, the notebook's first cell is trusted (the server signed it) or not."""
    # What the page asks of the contents API, to say what went wrong should the save not land.
    requests: list[str] = []

    def record(request: Request) -> None:
        if "/api/contents" in request.url:
            requests.append(f"{request.method} {request.url}")

    def save_answered(response: Response) -> bool:
        return response.request.method == "PUT" and response.url.split("?")[0].endswith(
            "/api/contents/Untitled.ipynb"
        )

    page.on("request", record)
    page.locator(".lm-MenuBar-itemLabel", has_text="File").click()
    # Read only once the save is answered. Jupyter Server writes a notebook in place (its atomic
    # writing keeps the old file beside it), and a read that lands mid-write takes the file for
    # corrupt, moves it aside as .invalid and puts the old one back: seen in CI, the save lost.
    with page.expect_response(save_answered, timeout=TIMEOUT_MS) as answer:
        page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Save Notebook$")).click()
    code, model = server.api("GET", "api/contents/Untitled.ipynb?content=1")
    cells = model["content"]["cells"] if code == 200 else []
    if not (answer.value.ok and cells and cells[0]["outputs"]):
        shot(page, "output-trust-not-saved")
        files = sorted(path.name for path in server.root_dir.iterdir())
        raise AssertionError(
            f"Untitled.ipynb not saved with its outputs (save: {answer.value.status}; "
            f"{code}: {model}); the root holds {files}; the page asked the contents API:\n"
            + "\n".join(requests)
        )
    cell = cells[0]
    assert bool(cell["metadata"].get("trusted")) is trusted, cell["metadata"]


@pytest.mark.checklist(
    row=24,
    attack=f"{ATTACK}, saved in a notebook the server signed as trusted (before this guard, or "
    "by `jupyter trust`), then opened on a sandboxed kernel",
    expected="none runs on opening: the server does not trust a sandboxed kernel's notebook",
)
def test_a_signed_notebook_of_a_sandboxed_kernel_opens_untrusted(
    server: LabServer, page: object, observe: Callable[..., None]
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    outputs = [
        {"output_type": "display_data", "metadata": {}, "data": data}
        for data in (
            {"text/html": '<b>forty-two</b><img src="x" onerror="' + ESCAPE + '(1)">'},
            {"application/javascript": ESCAPE + "(2)", "text/plain": "js"},
            {"text/markdown": '## markdown kept\n<img src="x" onerror="' + ESCAPE + '(4)">'},
        )
    ]
    cell = {
        "cell_type": "code",
        "execution_count": 1,
        "id": "signed-cell",
        "metadata": {},
        "outputs": outputs,
        "source": "# ran earlier",
    }
    spec = {"name": "sandboxed-python", "display_name": "Sandboxed Python", "language": "python"}
    notebook = {
        "cells": [cell],
        "metadata": {"kernelspec": spec},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    code, answer = server.api(
        "PUT", "api/contents/signed.ipynb", {"type": "notebook", "content": notebook}
    )
    assert code == 201, answer
    # Signed as `jupyter trust` signs it, in the server's own notary database.
    notary = NotebookNotary(data_dir=str(server.data_dir))
    signed = nbformat.read(server.root_dir / "signed.ipynb", as_version=4)
    notary.sign(signed)
    assert notary.check_signature(signed)
    page.goto(f"{server.url}/lab/tree/signed.ipynb?token={server.token}")
    rendered = page.locator(".jp-NotebookPanel .jp-OutputArea-output")
    expect(rendered.filter(has_text="forty-two")).to_have_count(1)
    expect(page.locator(".jp-NotebookPanel h2", has_text="markdown kept")).to_have_count(1)
    time.sleep(2)
    shot(page, "output-trust-signed")
    assert page.evaluate("window.sandboxEscaped ?? null") is None
    observe("a signed notebook with 3 such outputs opened: none ran", cases=3)
