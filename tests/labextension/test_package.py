"""The JupyterLab extension's package: one version with Python's, its settings schema, and its
TypeScript unit tests (node's test runner, run here so that the README's test command and CI
run them)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

from jupyter_sandbox import __version__
from tests.labextension.lab_server import BUILT_EXTENSION, REPO

SOURCE = REPO / "labextension"


def test_npm_and_python_versions_are_one() -> None:
    package = json.loads((SOURCE / "package.json").read_text())
    assert package["version"] == __version__, (
        f"labextension/package.json says {package['version']}, jupyter_sandbox/_version.py "
        f"says {__version__}: change both"
    )
    assert package["name"] == "jupyter-sandbox"


def test_built_extension_is_this_version_with_its_settings() -> None:
    """The build the package installs (share/jupyter/labextensions/jupyter-sandbox)."""
    built = json.loads((BUILT_EXTENSION / "package.json").read_text())
    assert built["version"] == __version__
    assert built["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
    assert (BUILT_EXTENSION / built["jupyterlab"]["_build"]["load"]).is_file()
    schema = json.loads(
        (BUILT_EXTENSION / "schemas" / "jupyter-sandbox" / "plugin.json").read_text()
    )
    interval = schema["properties"]["refreshInterval"]
    assert interval["type"] == "number"
    assert interval["default"] > 0
    assert "seconds" in interval["description"].lower()


def test_typescript_unit_tests() -> None:
    npm = shutil.which("npm")
    assert npm, "npm is missing: the extension's unit tests need Node.js 20 and npm"
    env = {**os.environ, "NO_COLOR": "1"}
    if not (SOURCE / "node_modules").is_dir():  # 'make install' leaves them; a bare clone not
        subprocess.run([npm, "install"], cwd=SOURCE, env=env, check=True, timeout=600)
    result = subprocess.run(
        [npm, "test"],
        cwd=SOURCE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    # The spec reporter's summary lines: "\N{INFORMATION SOURCE} pass 33", "... fail 0".
    counts = dict(re.findall(r"^\u2139 (pass|fail) (\d+)$", result.stdout, re.MULTILINE))
    assert counts.get("fail") == "0", result.stdout[-3000:]
    assert int(counts.get("pass", 0)) > 0, result.stdout[-3000:]
