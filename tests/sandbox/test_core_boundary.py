"""The core never imports tornado or jupyter_server (docs/explanation/design.md, "Layout")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import jupyter_sandbox.sandbox
from tests.python_ast import parse

FORBIDDEN = ("tornado", "jupyter_server")
CORE = Path(jupyter_sandbox.sandbox.__file__).parent


def test_no_core_module_imports_the_web_stack() -> None:
    offenders = []
    for path in sorted(CORE.rglob("*.py")):  # the wings too
        for node in ast.walk(parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(CORE)}: {n}" for n in names if n.split(".")[0] in FORBIDDEN
            ]
    assert offenders == []


def test_importing_the_core_does_not_load_jupyter_server() -> None:
    code = (
        "import sys, jupyter_sandbox.sandbox.manager, jupyter_sandbox.sandbox.lifecycle.culler; "
        "print('jupyter_server' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


PROTOCOL = Path(jupyter_sandbox.sandbox.__file__).parents[1] / "protocol"


def test_the_protocol_package_imports_the_standard_library_and_itself_only() -> None:
    offenders = []
    for path in sorted(PROTOCOL.rglob("*.py")):
        for node in ast.walk(parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] not in sys.stdlib_module_names
                and not n.startswith("jupyter_sandbox.protocol")
            ]
    assert offenders == []
