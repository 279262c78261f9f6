"""Importing jupyter_sandbox.client loads the standard library, the client and the stdlib-only
protocol package alone: an agent's machine needs none of the server's dependencies (tornado,
pyzmq, jupyter_client, traitlets, docker), and none of the core (``jupyter_sandbox.sandbox``)."""

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
print(json.dumps({"foreign": foreign, "error": [type(error).__name__, type(error).__module__]}))
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
        "jupyter_sandbox.protocol",
        "jupyter_sandbox.protocol.errors",  # the client's error classes
        "jupyter_sandbox.protocol.cell_output",  # a streamed run's output gathered
        "jupyter_sandbox.protocol.snapshot_errors",  # the snapshots' errors
        *(f"jupyter_sandbox.client.{name}" for name in MODULES),
        "jupyter_sandbox.client",
    }, seen
    assert seen["error"] == ["SandboxNotFoundError", "jupyter_sandbox.protocol.errors"]


# The client's modules, as its directory holds them.
MODULES = sorted(path.stem for path in CLIENT.glob("*.py") if path.stem != "__init__")
