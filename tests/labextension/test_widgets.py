"""ipywidgets in a Sandboxed Python notebook: the core widgets render and update, drawn by
JupyterLab's widget manager from the sandbox's model state (labextension/src/sandboxWidgets.ts),
while the outputs stay untrusted; nothing the sandbox sends runs script in the page, and what
does not render says why in place.

The attacks (rows 99-102) each try to read ``document.cookie`` and call the Jupyter REST API
(``GET /api/contents/escaped-<row>``) from the page: the test sees any script that ran, by the
mark it leaves and by the request it makes. The same attacks run with the user's setting
``trustSandboxedOutputs`` on, where all four do run: that is what the guard stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.labextension.conftest import ARTIFACTS, TIMEOUT_MS, open_lab, shot
from tests.labextension.lab_server import LabServer, lab_server
from tests.labextension.test_notebook_and_panel import new_sandboxed_notebook

pytestmark = [pytest.mark.integration, pytest.mark.browser]

STATUS = {"runc": "Docker runc", "runsc": "gVisor"}

# Typed into a cell: a slider and the output it drives, then interact in the next cell.
SLIDER = (
    "import ipywidgets as w\n"
    "s = w.IntSlider(value=3, description='n')\n"
    "display(s, w.interactive_output(lambda n: print('squared', n * n), {'n': s}))\n"
)
INTERACT = "w.interact(lambda x: print('doubled', 2 * x), x=5);\n"

# The script every attack carries: it marks the page and calls the REST API as the user.
PAYLOAD = (
    "def p(n): return ('window.sandboxEscaped = (window.sandboxEscaped || []).concat([[' + "
    "str(n) + ', document.cookie]]); fetch(\"/api/contents/escaped-' + str(n) + '\")')\n"
    "import ipywidgets, traitlets\n"
    "from IPython.display import display, HTML, Javascript\n"
)
ATTACKS = {
    99: (
        "display(ipywidgets.HTML('<b>html kept</b><img src=x onerror=\\'' + p(99) + '\\'>'), "
        "ipywidgets.HTMLMath('<img src=x onerror=\\'' + p(99) + '\\'>'), "
        "ipywidgets.Label('x', description='<img src=x onerror=\\'' + p(99) + '\\'>', "
        "description_allow_html=True))\n"
    ),
    100: "display(Javascript(p(100)))\n",
    101: "display(HTML('<b>bold kept</b><script>' + p(101) + '</script>'))\n",
    102: (
        # A model of a module no extension provides, named with markup: the error view ipywidgets
        # makes of it quotes the name; shown alone, and as a child of a core box.
        "module = '<img src=x onerror=\\'' + p(102) + '\\'>'\n"
        "Unknown = type('Unknown', (ipywidgets.DOMWidget,), {"
        "'_model_module': traitlets.Unicode(module).tag(sync=True), "
        "'_view_module': traitlets.Unicode(module).tag(sync=True), "
        "'_view_name': traitlets.Unicode('UnknownView').tag(sync=True)})\n"
        "display(Unknown(), ipywidgets.VBox([Unknown()]))\n"
    ),
}
NOTICES = {
    99: None,
    100: "This JavaScript output did not run",
    101: "The scripts of this HTML output did not run",
    102: "is not shown (only the core ipywidgets are)",
}
ATTACK = {
    99: "sandboxed ipywidgets.HTML, HTMLMath and a Label's HTML description carrying "
    "<img src=x onerror=...> (the widget views write them as markup)",
    100: "a sandboxed Javascript(...) display",
    101: "a sandboxed HTML output with <script>",
    102: "a sandboxed widget naming an unknown module (with markup in its name, which ipywidgets' "
    "error view quotes), alone and inside a core VBox; its error view clicked",
}
EXPECTED = (
    "nothing runs in JupyterLab's page (no document.cookie read, no REST API call); the core "
    "widgets render sanitized, and what is not rendered says so in place with the setting that "
    "changes it"
)


def run_cells(server: LabServer, page: object, runtime: str, *sources: str) -> None:
    """A new Sandboxed Python notebook, once its kernel is idle, running each source in turn."""
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    open_lab(page, server)
    new_sandboxed_notebook(page)
    expect(page.locator("#jupyter-sandbox-status")).to_contain_text(STATUS[runtime])
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(1)
    page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first.click()
    for source in sources:
        # Inserted as it is (typing would let the editor close brackets and indent).
        page.keyboard.insert_text(source.rstrip("\n"))
        page.keyboard.press("Shift+Enter")  # runs it; the next cell has the focus


@pytest.mark.parametrize("runtime", ["runc", pytest.param("runsc", marks=pytest.mark.runsc)])
def test_a_slider_drives_its_output_and_interact_works(
    purpose: str, page: object, runtime: str
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    config = f"c.SandboxSettings.runtime = {runtime!r}\n"
    with lab_server(purpose, keep_log=ARTIFACTS / "server.log", config=config) as server:
        run_cells(server, page, runtime, SLIDER, INTERACT)
        cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
        slider_cell, interact_cell = cells.nth(0), cells.nth(1)
        # Sliders, not their text (IntSlider(value=3, ...)), with their outputs.
        expect(slider_cell.locator(".widget-slider .noUi-handle")).to_have_count(1)
        expect(
            slider_cell.locator(".widget-output .jp-OutputArea-output", has_text="squared 9")
        ).to_have_count(1)
        expect(interact_cell.locator(".widget-slider .noUi-handle")).to_have_count(1)
        expect(
            interact_cell.locator(".widget-output .jp-OutputArea-output", has_text="doubled 10")
        ).to_have_count(1)
        expect(
            page.locator(".jp-NotebookPanel .jp-OutputArea", has_text="IntSlider(")
        ).to_have_count(0)
        shot(page, f"widgets-{runtime}")

        # Moved (from the keyboard, as noUiSlider allows), each slider's output follows: the
        # kernel got the new value and the Output widget shows what it printed.
        slider_cell.locator(".noUi-handle").focus()
        page.keyboard.press("ArrowRight")
        expect(
            slider_cell.locator(".widget-output .jp-OutputArea-output", has_text="squared 16")
        ).to_have_count(1, timeout=TIMEOUT_MS)
        expect(slider_cell.locator(".widget-readout")).to_have_text("4")
        interact_cell.locator(".noUi-handle").focus()
        page.keyboard.press("ArrowRight")
        expect(
            interact_cell.locator(".widget-output .jp-OutputArea-output", has_text="doubled 12")
        ).to_have_count(1, timeout=TIMEOUT_MS)
        shot(page, f"widgets-moved-{runtime}")


def attempt(server: LabServer, page: object, rows: list[int]) -> tuple[list[int], list[str]]:
    """Runs the attacks of those rows in a new notebook, clicks what they drew (ipywidgets' error
    view writes its message as markup on a click); the rows whose script ran, and the REST API
    calls it made."""
    from playwright.sync_api import Page, Request

    assert isinstance(page, Page)
    calls: list[str] = []

    def record(request: Request) -> None:
        if "escaped-" in request.url:
            calls.append(request.url)

    page.on("request", record)
    run_cells(server, page, "runc", PAYLOAD + "".join(ATTACKS[row] for row in rows))
    outputs = page.locator(".jp-NotebookPanel .jp-OutputArea-output")
    # Each attack draws at least one output; the last one (102's box) draws two.
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while outputs.count() < len(rows) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # views drawn, images failed and their handlers (if any) run
    # A user's click on each (the outermost first, as one would see them).
    page.evaluate(
        "document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output .jupyter-widgets')"
        ".forEach(widget => widget.click())"
    )
    time.sleep(2)
    ran = page.evaluate("window.sandboxEscaped ?? []")
    return sorted({row for row, _cookie in ran}), calls


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(
            row, marks=pytest.mark.checklist(row=row, attack=ATTACK[row], expected=EXPECTED)
        )
        for row in ATTACKS
    ],
)
def test_sandboxed_widgets_and_outputs_cannot_act_in_the_page(
    server: LabServer, page: object, observe: Callable[..., None], row: int
) -> None:
    from playwright.sync_api import Page, expect

    assert isinstance(page, Page)
    assert attempt(server, page, [row]) == ([], [])
    area = page.locator(".jp-NotebookPanel .jp-OutputArea")
    notice = NOTICES[row]
    if notice is not None:
        shown = area.locator(".jp-Sandbox-unrendered", has_text=notice)
        expect(shown.first).to_contain_text("Trust outputs of sandboxed kernels")
    if row == 99:  # the safe part of the HTML still shows
        expect(area.locator(".widget-html-content b", has_text="html kept")).to_have_count(1)
    if row == 101:
        expect(area.locator("b", has_text="bold kept")).to_have_count(1)
    shot(page, f"widgets-attack-{row}")
    observe(f"row {row}: nothing ran, no REST API call; notice: {notice or 'none needed'}")


def test_trusted_sandboxed_outputs_do_run_the_same_attacks(purpose: str, page: object) -> None:
    """With trustSandboxedOutputs on (JupyterLab's and ipywidgets' own behaviour), each attack
    above runs: the tests above would see it."""
    with lab_server(
        purpose, keep_log=ARTIFACTS / "server.log", settings={"trustSandboxedOutputs": True}
    ) as server:
        ran, calls = attempt(server, page, list(ATTACKS))
    assert ran == list(ATTACKS)
    assert sorted({int(url.rsplit("-", 1)[1]) for url in calls}) == list(ATTACKS)
