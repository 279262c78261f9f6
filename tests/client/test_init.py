"""Importing jupyter_sandbox.client loads the standard library, the client and the core's
stdlib-only errors alone: an agent's machine needs none of the server's dependencies (tornado,
pyzmq, jupyter_client, traitlets, docker), and the rest of the core imports later as usual."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jupyter_sandbox.client

CLIENT = Path(jupyter_sandbox.client.__file__).parent

CHECK = """
import json, sys
before = set(sys.modules)
import jupyter_sandbox.client as client
loaded = sorted(set(sys.modules) - before)
foreign = [m for m in loaded if m.split(".")[0] not in sys.stdlib_module_names]
error = client.errors.error_from_answer(404, {"code": "sandbox_not_found", "message": "m"}, "")
# The rest of the core, used afterwards, loads as usual.
import jupyter_sandbox.sandbox.errors
core = jupyter_sandbox.sandbox.errors
print(json.dumps({
    "foreign": foreign,
    "error": [type(error).__name__, type(error).__module__],
    "core_whole": hasattr(jupyter_sandbox.sandbox, "SandboxManager"),
    "core_module": core.SandboxNotFoundError.__module__,
}))
"""


def test_importing_the_client_loads_nothing_outside_the_stdlib() -> None:
    run = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(run.stdout)
    assert {m.split(".")[0] for m in seen["foreign"]} == {"jupyter_sandbox"}
    assert set(seen["foreign"]) <= {
        "jupyter_sandbox",
        "jupyter_sandbox._version",
        "jupyter_sandbox.sandbox",  # the core package, whose names load on first use
        "jupyter_sandbox.sandbox.errors",  # stdlib-only: the client's error classes
        "jupyter_sandbox.sandbox.cell_output",  # stdlib-only: a streamed run's output gathered
        "jupyter_sandbox.sandbox.snapshots",  # its names load on first use too
        "jupyter_sandbox.sandbox.snapshots.errors",  # stdlib-only: the snapshots' errors
        *(f"jupyter_sandbox.client.{name}" for name in MODULES),
        "jupyter_sandbox.client",
    }, seen
    assert seen["error"] == ["SandboxNotFoundError", "jupyter_sandbox.sandbox.errors"]
    assert seen["core_whole"]
    assert seen["core_module"] == "jupyter_sandbox.sandbox.errors"


# The client's modules, as its directory holds them.
MODULES = sorted(path.stem for path in CLIENT.glob("*.py") if path.stem != "__init__")
