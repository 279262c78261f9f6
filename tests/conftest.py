"""Fixtures shared by the whole suite.

Integration tests get a SandboxManager whose state directory is private to the test, and every
container whose host directory lies there is removed when the test ends, pass or fail. At the
end of the session, any container labelled by a test is reported and fails the run.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from traitlets.config import Config

from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.host.sandbox_dir import sandbox_directories
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.network.tls_ca import BUNDLE_CACHE

# A test that hangs is reported with what it waited for (tests/hang_report.py).
pytest_plugins = ["tests.hang_report"]

# Containers are labelled "test:<this run>:<test>", so that the leak check at the end of a run
# counts only what this run created, even when another run shares the engine.
TEST_PURPOSE_PREFIX = f"test:{uuid.uuid4().hex[:8]}:"


def purpose_label(name: str) -> str:
    """The purpose label of containers created by the test ``name``."""
    return TEST_PURPOSE_PREFIX + name


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # Short, under /tmp: ipc:// socket paths must stay below ~100 bytes.
    path = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    yield path
    remove_state_dir(path)


def remove_state_dir(path: Path) -> None:
    """Remove a state directory the tests made, the size caps mounted in it first. A process
    of the test may still be finishing in it (a kernel's lifeline removing its sandbox and
    letting its context's lock go): what it wrote while the removal was under way kept the
    directory from going, so the removal is tried again for a few seconds."""
    for directory in sandbox_directories(path):
        directory.remove()
    for _ in range(50):
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.1)


def left_in_state_dir(state_dir: Path) -> list[str]:
    """What sandboxes left in ``state_dir``: every entry but the image CA bundles the directory
    keeps for every sandbox of an image (network/tls_ca.py), which are no sandbox's."""
    return sorted(entry.name for entry in state_dir.iterdir() if entry.name != BUNDLE_CACHE)


def manager_config(state_dir: Path, **settings: Any) -> Config:
    config = Config()
    config.SandboxSettings.state_dir = str(state_dir)
    for name, value in settings.items():
        config.SandboxSettings[name] = value
    return config


@pytest.fixture
async def manager(state_dir: Path) -> AsyncIterator[SandboxManager]:
    sandbox_manager = SandboxManager.from_config(manager_config(state_dir))
    yield sandbox_manager
    await remove_everything_under(sandbox_manager, state_dir)
    await sandbox_manager.close()


@contextlib.asynccontextmanager
async def scratch_manager() -> AsyncIterator[SandboxManager]:
    """A manager on a state directory of its own, for fixtures wider than one test (the
    function-scoped ``manager`` fixture's, made and removed the same way)."""
    state_dir = Path(tempfile.mkdtemp(prefix="jsbx-", dir="/tmp"))
    sandbox_manager = SandboxManager.from_config(manager_config(state_dir))
    try:
        yield sandbox_manager
    finally:
        await remove_everything_under(sandbox_manager, state_dir)
        await sandbox_manager.close()
        remove_state_dir(state_dir)


async def remove_everything_under(sandbox_manager: SandboxManager, state_dir: Path) -> None:
    for info in await sandbox_manager.backend.list_sandboxes():
        if Path(info.host_dir).parent == state_dir:
            await sandbox_manager.backend.remove(info.sandbox_id)


# Both runtimes as parameters, each marked so that ``-m runc`` / ``-m runsc`` selects it.
BOTH_RUNTIMES = [
    pytest.param("runc", marks=pytest.mark.runc),
    pytest.param("runsc", marks=pytest.mark.runsc),
]


@pytest.fixture(params=BOTH_RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def purpose(request: pytest.FixtureRequest) -> str:
    """The label value that names the test that created a container."""
    return purpose_label(request.node.nodeid)


@pytest.fixture
async def sandbox(manager: SandboxManager, runtime: str, purpose: str) -> Sandbox:
    return await manager.create("alice", runtime=runtime, purpose=purpose)


# What packages_image adds to the sandbox image: small, pure Python, and not in the image.
ADDED_PACKAGE = "tabulate"


@pytest.fixture(scope="session")
def packages_image() -> Iterator[str]:
    """An image adding ADDED_PACKAGE to the sandbox image, built as an operator would
    (``jupyter sandbox build-image --requirements``), once per run; removed after the run."""
    yield from built_image("test-packages", f"# for the tests\n{ADDED_PACKAGE}  # tables\n")


@pytest.fixture(scope="session")
def debugger_image() -> Iterator[str]:
    """An image whose kernels offer the debugger (it keeps debugpy), built the same way."""
    yield from built_image("test-debugger", "debugpy\n")


def built_image(name: str, requirements_text: str) -> Iterator[str]:
    tag = f"jupyter-sandbox/{name}:{TEST_PURPOSE_PREFIX.split(':')[1]}"
    with tempfile.TemporaryDirectory(prefix="jsbx-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(requirements_text)
        built = subprocess.run(
            [
                *(sys.executable, "-m", "jupyter_sandbox.cli", "build-image"),
                *(f"--requirements={requirements}", f"--tag={tag}"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert built.returncode == 0, built.stdout + built.stderr
    yield tag
    client = docker.from_env(version="auto")
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(tag, force=True)


@pytest.fixture(autouse=True)
def checklist_row(request: pytest.FixtureRequest) -> None:
    """A test marked ``checklist(row, attack, expected)`` or ``resilience(scenario, expected)``
    carries them, and its runtime, into the JUnit report that scripts/security_report.py turns
    into docs/security.md."""
    marker = request.node.get_closest_marker("checklist") or request.node.get_closest_marker(
        "resilience"
    )
    if marker is None:
        return
    properties = request.node.user_properties
    properties.extend(sorted(marker.kwargs.items()))
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "runtime" in callspec.params:
        properties.append(("runtime", callspec.params["runtime"]))


@pytest.fixture
def observe(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``observe("fork refused with EAGAIN after 57 children", cases=1)``: what the test saw
    and how many attacks or bad inputs it tried, for the security report."""

    def record(text: str, cases: int = 1) -> None:
        request.node.user_properties.extend([("observed", text), ("cases", cases)])

    return record


# Seconds each test file took in a whole run (scripts/test_durations.py writes it).
FILE_DURATIONS = Path(__file__).with_name("file_durations.json")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``), the longest files first.

    Each worker takes whole files (``--dist loadfile``) in collection order
    (``--no-loadscope-reorder``: by default pytest-xdist starts with the files of most tests,
    which hands out a long file of few tests, the REST fuzzer's or the hub's, near the end,
    one worker running it while the other idles). Longest first, the last files handed out are
    short. A file not in FILE_DURATIONS counts as a typical one; the order within a file is
    kept."""
    if not hasattr(config, "workerinput"):
        return
    seconds: dict[str, float] = json.loads(FILE_DURATIONS.read_text())
    typical = statistics.median(seconds.values())
    items.sort(key=lambda item: -seconds.get(item.nodeid.partition("::")[0], typical))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any test left a labelled container behind.

    Under pytest-xdist (``make test``), each worker checks its own containers (each has its own
    TEST_PURPOSE_PREFIX) and hands what it found to the controller (``pytest_testnodedown``),
    whose exit status is the run's."""
    leaked = leaked_containers()
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["leaked"] = leaked
        return
    leaked += session.config.stash.get(WORKERS_LEAKED, [])
    if leaked:
        print(f"\nLEAK: tests left {len(leaked)} sandbox container(s): {', '.join(leaked)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


WORKERS_LEAKED = pytest.StashKey[list[str]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A pytest-xdist worker ended: keep the containers its tests left for the leak check."""
    leaked = node.workeroutput.get("leaked", []) if hasattr(node, "workeroutput") else []
    node.config.stash.setdefault(WORKERS_LEAKED, []).extend(leaked)


def leaked_containers() -> list[str]:
    """The names of the containers this process's tests labelled that still exist."""
    try:
        client = docker.from_env(version="auto", timeout=10)
        left = client.api.containers(all=True, filters={"label": labels.PURPOSE})
    except docker.errors.DockerException:
        return []
    return [
        row["Names"][0].lstrip("/")
        for row in left
        if row["Labels"].get(labels.PURPOSE, "").startswith(TEST_PURPOSE_PREFIX)
    ]
