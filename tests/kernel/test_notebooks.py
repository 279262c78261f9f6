"""Headless notebook runs give the same outputs in a sandbox as with the plain Python kernel.

One notebook covers the kinds of output a notebook makes (streams, results, rich display,
matplotlib figures, display updates, clear_output, errors, widgets, files beside the notebook).
nbclient runs it with the venv's own ``python3`` kernel and with ``sandboxed-python`` on each
runtime; the outputs must be equal once execution-independent noise is normalised.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat import NotebookNode

from tests.conftest import BOTH_RUNTIMES, purpose_label
from tests.kernel.sandbox_env import containers_under, notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration

JUPYTER = Path(sys.executable).with_name("jupyter")
CELL_TIMEOUT = 120  # seconds per cell; a sandbox's first matplotlib import builds a font cache
STARTUP_TIMEOUT = 120  # seconds for a kernel (and its sandbox) to answer kernel_info
REMOVAL_TIMEOUT = 30.0  # seconds for an ephemeral sandbox to be gone after its kernel stops

DATA_CSV = "name,value\nalpha,1\nbeta,2\ngamma,3\n"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

CELLS = [
    "print('hello from stdout')",
    "import sys\nprint('hello from stderr', file=sys.stderr)",
    "6 * 7",
    "from IPython.display import HTML, display\ndisplay(HTML('<b>bold</b> text'))",
    "%matplotlib inline\n"
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots(figsize=(3, 2), dpi=60)\n"
    "ax.plot([0, 1, 2, 3], [0, 1, 4, 9], color='tab:blue')\n"
    "ax.set_title('squares')\n"
    "plt.show()",
    "display('first version', display_id='d1');",
    "from IPython.display import update_display\nupdate_display('second version', display_id='d1')",
    "from IPython.display import clear_output\n"
    "print('cleared away', flush=True)\n"
    "clear_output()\n"
    "print('after clear_output')",
    "raise ValueError('boom')",
    "import ipywidgets\nipywidgets.IntSlider(value=3, min=0, max=10, description='n')",
    "print(open('data.csv').read())",
    "import pandas as pd\npd.read_csv('data.csv')",
]

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
HOST_PATHS = re.compile(r"(/tmp/[^\s'\"]*|/workspace\b|/opt/sandbox/[^\s'\"]*|/work/[^\s'\"]*)")


def build_notebook() -> NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    built: NotebookNode = notebook
    return built


def write_notebook_dir(directory: Path) -> Path:
    """Put the notebook and the data file it reads into ``directory``; return the notebook."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.csv").write_text(DATA_CSV)
    path = directory / "outputs.ipynb"
    nbformat.write(build_notebook(), path)
    return path


def execute(path: Path, kernel_name: str) -> NotebookNode:
    """Run the notebook at ``path`` with nbclient, its directory being the kernel's cwd."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(path.parent)}},
        allow_errors=True,
        timeout=CELL_TIMEOUT,
        startup_timeout=STARTUP_TIMEOUT,
        # How a stream is cut into messages depends on timing, not on the kernel.
        coalesce_streams=True,
    )
    return client.execute()


def png_size(data: str) -> tuple[int, int]:
    """Width and height from a base64 PNG's IHDR chunk."""
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def normalised(notebook: NotebookNode) -> dict[str, Any]:
    """The outputs of every cell (and the widget state), without execution-independent noise.

    Normalised: widget model ids (random per run), ANSI colouring in tracebacks, file paths
    and memory addresses in tracebacks and text reprs. Everything else, PNG bytes included,
    must match exactly.
    """
    cells = [
        {"execution_count": cell.get("execution_count"), "outputs": copy.deepcopy(cell.outputs)}
        for cell in notebook.cells
    ]
    widget_state = copy.deepcopy(notebook.metadata.get("widgets", {}).get(WIDGET_STATE, {}))
    for cell in cells:
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                output["traceback"] = [scrub(ANSI.sub("", line)) for line in output["traceback"]]
            for mime, value in output.get("data", {}).items():
                if isinstance(value, str) and mime.startswith("text/"):
                    output["data"][mime] = scrub(value)
    model_ids = list(widget_state.get("state", {}))
    for cell in cells:
        for output in cell["outputs"]:
            view = output.get("data", {}).get(WIDGET_VIEW)
            if view is not None and view["model_id"] not in model_ids:
                model_ids.append(view["model_id"])
    text = json.dumps({"cells": cells, "widget_state": widget_state}, sort_keys=True)
    for number, model_id in enumerate(model_ids):
        text = text.replace(model_id, f"MODEL{number}")
    result: dict[str, Any] = json.loads(text)
    return result


def scrub(text: str) -> str:
    return HOST_PATHS.sub("<path>", ADDRESS.sub("0x<address>", text))


def outputs_of(result: dict[str, Any], index: int) -> list[dict[str, Any]]:
    outputs: list[dict[str, Any]] = result["cells"][index]["outputs"]
    return outputs


def wait_until_no_container(state_dir: Path) -> None:
    deadline = time.monotonic() + REMOVAL_TIMEOUT
    while containers_under(state_dir):
        if time.monotonic() > deadline:
            names = [c.name for c in containers_under(state_dir)]
            raise AssertionError(f"sandbox still present after the kernel stopped: {names}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The notebook's outputs under the venv's plain ``python3`` kernel."""
    path = write_notebook_dir(tmp_path_factory.mktemp("plain-notebook"))
    return normalised(execute(path, "python3"))


@pytest.fixture
def sandbox_notebook_dir(request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path]]:
    """(state dir, notebook dir) of an isolated sandbox environment for this test."""
    with sandbox_kernel_env(purpose_label(request.node.nodeid)) as state_dir:
        yield state_dir, notebook_dir(state_dir)


def test_reference_run_has_every_kind_of_output(reference: dict[str, Any]) -> None:
    """The plain kernel's run produces each output the comparison relies on.

    Without this, two runs that both failed the same way would compare equal.
    """
    assert outputs_of(reference, 0) == [
        {"output_type": "stream", "name": "stdout", "text": "hello from stdout\n"}
    ]
    assert outputs_of(reference, 1) == [
        {"output_type": "stream", "name": "stderr", "text": "hello from stderr\n"}
    ]
    assert outputs_of(reference, 2)[0]["data"] == {"text/plain": "42"}
    assert outputs_of(reference, 3)[0]["data"]["text/html"] == "<b>bold</b> text"
    figure = outputs_of(reference, 4)
    assert [o["output_type"] for o in figure] == ["display_data"]
    assert png_size(figure[0]["data"]["image/png"]) > (100, 50)
    assert outputs_of(reference, 5)[0]["data"]["text/plain"] == "'second version'"
    assert outputs_of(reference, 6) == []
    assert outputs_of(reference, 7) == [
        {"output_type": "stream", "name": "stdout", "text": "after clear_output\n"}
    ]
    error = outputs_of(reference, 8)[0]
    assert (error["output_type"], error["ename"], error["evalue"]) == (
        "error",
        "ValueError",
        "boom",
    )
    slider = outputs_of(reference, 9)[0]["data"]
    model = reference["widget_state"]["state"][slider[WIDGET_VIEW]["model_id"]]
    assert (model["model_name"], model["state"]["value"]) == ("IntSliderModel", 3)
    assert "IntSlider" in slider["text/plain"]
    assert outputs_of(reference, 10)[0]["text"] == DATA_CSV + "\n"
    assert "gamma" in outputs_of(reference, 11)[0]["data"]["text/html"]


@pytest.mark.parametrize(
    "runtime",
    BOTH_RUNTIMES,
)
def test_sandboxed_outputs_equal_plain_kernel(
    runtime: str,
    reference: dict[str, Any],
    sandbox_notebook_dir: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nbclient gets, cell by cell, the same outputs from a sandbox as from plain ipykernel.

    This covers the relay of every iopub message kind a notebook uses, widget comms, and
    /workspace showing the notebook's directory; the ephemeral sandbox is gone afterwards.
    """
    state_dir, directory = sandbox_notebook_dir
    monkeypatch.setenv("JUPYTER_SANDBOX_RUNTIME", runtime)
    path = write_notebook_dir(directory)
    result = normalised(execute(path, "sandboxed-python"))
    for index, source in enumerate(CELLS):
        assert result["cells"][index] == reference["cells"][index], (
            f"cell {index}: {source!r} (figures and tables compare exactly, so the venv needs the "
            "sandbox image's versions of matplotlib, Pillow, pandas and ipywidgets)"
        )
    assert result["widget_state"] == reference["widget_state"]
    wait_until_no_container(state_dir)


@pytest.mark.parametrize(
    "runtime",
    BOTH_RUNTIMES,
)
def test_nbconvert_executes_with_sandboxed_kernel(
    runtime: str, sandbox_notebook_dir: tuple[Path, Path]
) -> None:
    """`jupyter nbconvert --execute` with kernel sandboxed-python writes the executed outputs,
    including a file read from beside the notebook."""
    state_dir, directory = sandbox_notebook_dir
    (directory / "beside.txt").write_text("next to the notebook")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("print(6 * 7)"),
        nbformat.v4.new_code_cell("open('beside.txt').read()"),
    ]
    nbformat.write(notebook, directory / "small.ipynb")
    completed = subprocess.run(
        [
            str(JUPYTER),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.kernel_name=sandboxed-python",
            f"--ExecutePreprocessor.startup_timeout={STARTUP_TIMEOUT}",
            f"--ExecutePreprocessor.timeout={CELL_TIMEOUT}",
            "--output",
            "small.executed.ipynb",
            "small.ipynb",
        ],
        cwd=directory,
        env={**os.environ, "JUPYTER_SANDBOX_RUNTIME": runtime},
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT + 2 * CELL_TIMEOUT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    executed = nbformat.read(directory / "small.executed.ipynb", as_version=4)
    assert executed.cells[0].outputs == [
        {"output_type": "stream", "name": "stdout", "text": "42\n"}
    ]
    assert executed.cells[1].outputs[0]["data"] == {"text/plain": "'next to the notebook'"}
    assert executed.cells[1].execution_count == 2
    wait_until_no_container(state_dir)
