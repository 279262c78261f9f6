"""A kernel started by an ordinary host user, as a JupyterHub single-user server starts it.

Such a server runs as its user (in the docker group), not as root: the kernel must still start
its sandbox, show the notebook's directory copy-on-write in /workspace, run as the user's own
uid inside, and keep its state under the user's home, private; and what the server extension
does for that user (files, snapshots, a network policy) must work and leave nothing behind.
The user is made for the test (useradd, in the docker group) and removed with its home
afterwards; the kernel runs under Debian's own Python 3 (the virtualenv's interpreter may live
where other users cannot reach, e.g. under /root), importing this checkout and the
virtualenv's packages.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kernel.sandbox_env import remove_containers_under

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")

# Runs as the user: argv = the notebook's directory, the runtime. Prints one JSON line.
AS_THE_USER = r"""
import json, os, stat, sys
from jupyter_client.manager import KernelManager

notebook, runtime = sys.argv[1], sys.argv[2]
km = KernelManager(kernel_name="sandboxed-python")
km.start_kernel(cwd=notebook, env={**os.environ, "JUPYTER_SANDBOX_RUNTIME": runtime})
kc = km.client()
kc.start_channels()
try:
    kc.wait_for_ready(timeout=120)
    outputs = []
    code = (
        "import os; open('new.txt', 'w').write('inside')\n"
        "print(os.getuid(), os.getcwd(), open('data.csv').read().strip())"
    )
    reply = kc.execute_interactive(
        code, timeout=60, output_hook=lambda m: outputs.append(m["content"].get("text", ""))
    )
    state = os.path.expanduser("~/.local/share/jupyter/runtime/sandboxes")

    def unclaimed_member(name):  # a warm-pool member the kernel's own pool keeper made
        try:
            with open(os.path.join(state, name, "state.json")) as file:
                record = json.load(file)
        except (OSError, ValueError):  # still being made: not the kernel's, which runs
            return True
        return bool(record.get("pool")) and not record.get("claimed")

    found = {
        "status": reply["content"]["status"],
        "output": "".join(outputs).strip(),
        "state_mode": oct(stat.S_IMODE(os.stat(state).st_mode)),
        "listed": sorted(os.listdir(state)),
        "kernels": sorted(
            n for n in os.listdir(state) if len(n) == 12 and not unclaimed_member(n)
        ),
        "host_sees_new": os.path.exists(os.path.join(notebook, "new.txt")),
    }
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=False)
found["listed_after"] = sorted(os.listdir(state))
print(json.dumps(found))
"""


# Runs as the user: argv = the notebook's directory, the runtime. What the server extension does
# for that user: files, a snapshot restored into a new sandbox, a network policy (its host proxy
# a process of the user's), then removal. Prints one JSON line.
MANAGER_AS_THE_USER = r"""
import asyncio, json, os, sys
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.network import NetworkPolicy
from jupyter_sandbox.sandbox.network.tls_ca import BUNDLE_CACHE

async def main(notebook, runtime):
    manager = SandboxManager.from_config()
    owner = os.environ["USER"]
    purpose = os.environ["JUPYTER_SANDBOX_PURPOSE"]
    found = {}
    made = []
    try:
        source = await manager.create(owner, runtime=runtime, launch_dir=notebook, purpose=purpose)
        made.append(source.sandbox_id)
        await manager.files.write(owner, source.sandbox_id, "out/result.txt", b"42")
        snapshot = await manager.snapshots.persist(owner, source.sandbox_id)
        copy = await manager.snapshots.create_sandbox(
            owner, snapshot["id"], runtime=runtime, purpose=purpose
        )
        made.append(copy.sandbox_id)
        found["restored"] = [
            (await manager.files.read(owner, copy.sandbox_id, name)).decode()
            for name in ("out/result.txt", "data.csv")
        ]
        policy = NetworkPolicy.from_dict({"mode": "allowlist", "allow": ["pypi.org"]})
        found["policy"] = (await manager.set_network_policy(owner, source.sandbox_id, policy)).mode
        await manager.snapshots.delete(owner, snapshot["id"])
    finally:
        for sandbox_id in made:
            await manager.remove(owner, sandbox_id)
        await manager.close()
    state = os.path.expanduser("~/.local/share/jupyter/runtime/sandboxes")
    kept = ("locks", "pool", BUNDLE_CACHE)  # the state directory's, no sandbox's
    found["left"] = sorted(n for n in os.listdir(state) if n not in kept)
    print(json.dumps(found))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.fixture
def host_user() -> Iterator[tuple[str, Path]]:
    """A new ordinary user in the docker group, and its home; both gone afterwards."""
    if not SYSTEM_PYTHON.exists():
        pytest.fail(f"{SYSTEM_PYTHON} is missing: the test runs the kernel with it as the user")
    name = f"jsbx-{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--create-home", "--groups", "docker", "--shell", "/usr/sbin/nologin", name],
        check=True,
    )
    home = Path(f"/home/{name}")
    try:
        yield name, home
    finally:
        # The user's processes first (the headless pool keeper its kernel started lives on for
        # minutes, and userdel refuses a user who still runs one), then what they made.
        for _ in range(100):  # SIGKILL is sent, not waited for: until pgrep finds none
            subprocess.run(["pkill", "--signal", "KILL", "--uid", name], capture_output=True)
            if subprocess.run(["pgrep", "--uid", name], capture_output=True).returncode == 1:
                break
            time.sleep(0.1)
        state = home / ".local/share/jupyter/runtime/sandboxes"
        if state.exists():
            remove_containers_under(state)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=True)
        shutil.rmtree(home, ignore_errors=True)


def run_as(user: tuple[str, Path], script: str, runtime: str, purpose: str) -> dict[str, Any]:
    """Run ``script`` as the user, in its home, on its notebook directory (with a data.csv);
    the JSON line it prints last."""
    name, home = user
    notebook = home / "notebooks"
    notebook.mkdir()
    (notebook / "data.csv").write_text("a,b\n1,2\n")
    (home / "script.py").write_text(script)
    subprocess.run(["chown", "-R", f"{name}:{name}", str(home)], check=True)
    env = {
        "HOME": str(home),
        "USER": name,
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]]),
        "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"),  # the kernelspec
        "JUPYTER_SANDBOX_PURPOSE": purpose,
    }
    as_user = ["setpriv", f"--reuid={name}", f"--regid={name}", "--init-groups", "--"]
    result = subprocess.run(
        [*as_user, str(SYSTEM_PYTHON), str(home / "script.py"), str(notebook), runtime],
        capture_output=True,
        text=True,
        env=env,
        cwd=home,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a host user needs root")


@needs_root
def test_an_ordinary_host_user_runs_a_sandboxed_kernel(
    host_user: tuple[str, Path], runtime: str, purpose: str
) -> None:
    name, home = host_user
    notebook = home / "notebooks"
    found = run_as(host_user, AS_THE_USER, runtime, purpose)
    uid = int(subprocess.run(["id", "-u", name], capture_output=True, text=True).stdout)
    assert found["status"] == "ok", found
    # Its own uid inside; the notebook's files seen; its write kept in the sandbox.
    assert found["output"] == f"{uid} /workspace a,b\n1,2", found
    assert not found["host_sees_new"]
    assert not (notebook / "new.txt").exists()
    # State under the user's home, private; the kernel's shutdown removed its sandbox.
    assert found["state_mode"] == "0o700"
    # The kernel's own sandbox; its pool keeper may have made a warm member beside it by then.
    sandboxes = [name for name in found["kernels"] if re.fullmatch("[0-9a-f]{12}", name)]
    assert len(sandboxes) == 1, (found["listed"], found["kernels"])
    assert sandboxes[0] not in found["listed_after"]


@needs_root
def test_an_ordinary_host_user_gets_files_snapshots_and_network(
    host_user: tuple[str, Path], runtime: str, purpose: str
) -> None:
    found = run_as(host_user, MANAGER_AS_THE_USER, runtime, purpose)
    assert found["restored"] == ["42", "a,b\n1,2\n"], found
    assert found["policy"] == "allowlist"
    assert found["left"] == []  # both sandboxes removed without a trace, as the user
