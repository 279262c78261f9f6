"""Choosing the backend by configuration (``c.SandboxManager.backend_class``), and the Docker
backend's own settings under their new and their old names. No engine is called: the backend
here is a small one of this module's own, for the choice alone (it tests no engine), and the
Docker backend's engine connects only on its first call, which none of these makes."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError, Unicode
from traitlets.config import Config

from jupyter_sandbox.protocol.errors import (
    EngineUnavailableError,
    SandboxConflictError,
    SandboxNotFoundError,
)
from jupyter_sandbox.protocol.snapshot_errors import MemorySnapshotUnsupportedError
from jupyter_sandbox.sandbox.backends.base import (
    ContainerSpec,
    ExecOptions,
    SandboxBackend,
    TerminalOptions,
)
from jupyter_sandbox.sandbox.backends.docker.backend import DockerBackend
from jupyter_sandbox.sandbox.backends.records import (
    EngineFacts,
    EngineStats,
    ExecResult,
    SandboxInfo,
)
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.conftest import manager_config

REPO = Path(__file__).resolve().parents[2]


class ListingBackend(SandboxBackend):
    """A backend with no engine behind it: it holds no sandbox and can make none. It has only
    the required methods, so the optional ones are the interface's defaults."""

    engine_name = Unicode("nothing", config=True, help="What it calls its engine (a name).")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.listed: list[str | None] = []  # the owners it was asked to list

    def _no_engine(self) -> EngineUnavailableError:
        return EngineUnavailableError(f"{self.engine_name} makes no sandboxes")

    async def check_ready(self, runtime: str, image: str) -> None:
        raise self._no_engine()

    async def engine_facts(self) -> EngineFacts:
        return EngineFacts(self.engine_name, frozenset(), "2", swap_limit=False)

    async def image_exists(self, image: str) -> bool:
        return False

    async def create(self, sandbox_id: str, spec: ContainerSpec) -> SandboxInfo:
        raise self._no_engine()

    async def start(self, sandbox_id: str) -> None:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def stop(self, sandbox_id: str, timeout: int) -> None:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def remove(self, sandbox_id: str) -> None:
        pass  # idempotent: nothing to remove

    async def inspect(self, sandbox_id: str) -> SandboxInfo:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def list_sandboxes(self, owner: str | None = None) -> list[SandboxInfo]:
        self.listed.append(owner)
        return []

    async def exec(self, sandbox_id: str, argv: list[str], options: ExecOptions) -> ExecResult:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def stats(self, sandbox_id: str) -> EngineStats:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def put_archive(self, sandbox_id: str, path: str, data: bytes) -> None:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def get_archive(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        raise SandboxNotFoundError(f"no sandbox {sandbox_id}")

    async def close(self) -> None:
        pass


def configured(state_dir: Path, **sections: dict[str, Any]) -> SandboxManager:
    config = manager_config(state_dir)
    config.merge(Config(sections))
    return SandboxManager.from_config(config)


async def test_the_configured_backend_class_is_the_one_the_manager_uses(state_dir: Path) -> None:
    manager = configured(
        state_dir,
        SandboxManager={"backend_class": f"{__name__}.ListingBackend"},
        ListingBackend={"engine_name": "listing"},
    )
    backend = manager.backend
    assert type(backend) is ListingBackend
    assert backend.parent is manager
    assert backend.engine_name == "listing"  # from its own section of the configuration
    assert await manager.list_sandboxes("alice") == []
    assert backend.listed == ["alice"]
    with pytest.raises(SandboxNotFoundError):
        await manager.get("alice", "0123456789ab")
    with pytest.raises(EngineUnavailableError, match="listing makes no sandboxes"):
        await manager.create("alice", runtime="runc")
    assert manager.backend_key() == {
        "class": f"{__name__}.ListingBackend",
        "config": {"engine_name": "listing"},
    }
    await manager.close()


async def test_what_a_backend_lacks_it_says_so_through_the_interfaces_defaults() -> None:
    backend = ListingBackend()
    with pytest.raises(SandboxConflictError, match=r"ListingBackend\) cannot pause"):
        await backend.pause("0123456789ab")
    with pytest.raises(SandboxConflictError, match="cannot open terminals"):
        await backend.open_terminal("0123456789ab", TerminalOptions(24, 80))
    with pytest.raises(SandboxConflictError, match="cannot start detached processes"):
        await backend.spawn("0123456789ab", ["true"], environment={})
    with pytest.raises(MemorySnapshotUnsupportedError, match="cannot checkpoint"):
        await backend.checkpoint("0123456789ab", "snap", leave_running=True)
    assert await backend.logs("0123456789ab") == ""
    assert await backend.end_stray_runtime_processes() == []
    assert backend.runtime_name("runsc") == "runsc"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("jupyter_sandbox.sandbox.settings.SandboxSettings", "subclass of"),
        ("jupyter_sandbox.sandbox.backends.nowhere.Backend", "could not be imported"),
    ],
)
def test_a_backend_class_that_is_not_one_is_a_configuration_error(
    state_dir: Path, value: str, error: str
) -> None:
    with pytest.raises(TraitError, match=error):
        configured(state_dir, SandboxManager={"backend_class": value})


def test_the_default_backend_is_docker_and_is_not_imported_until_used(state_dir: Path) -> None:
    # A kernel claiming a warm sandbox makes a manager and computes a pool key, and must not
    # import the engine's client for it (the headless start's budget).
    program = (
        "import sys\n"
        "from traitlets.config import Config\n"
        "from jupyter_sandbox.sandbox.manager import SandboxManager\n"
        f"config = Config({{'SandboxSettings': {{'state_dir': {str(state_dir)!r}}}}})\n"
        "manager = SandboxManager.from_config(config)\n"
        "key = manager.backend_key()\n"
        "assert 'docker' not in sys.modules, 'docker imported'\n"
        "print(key['class'])\n"
        "print(type(manager.backend).__name__, 'docker' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [
        "jupyter_sandbox.sandbox.backends.docker.backend.DockerBackend",
        "DockerBackend True",
    ]


@pytest.mark.parametrize("section", ["DockerBackend", "SandboxSettings"])
async def test_the_docker_backends_settings_work_under_their_new_and_old_names(
    state_dir: Path, section: str, caplog: pytest.LogCaptureFixture
) -> None:
    old = section == "SandboxSettings"
    names = {"runsc": "runsc-kvm", "runc": "runc"}
    settings = {
        "docker_runtime_names" if old else "runtime_names": names,
        "engine_timeout": 12.0,
        "engine_threads": 4,
        "engine_threads_per_owner": 2,
        "engine_long_threads": 6,
        "engine_long_threads_per_owner": 3,
    }
    with caplog.at_level(logging.WARNING):
        manager = configured(state_dir, **{section: settings})
    deprecated = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    if old:
        assert "c.SandboxSettings.docker_runtime_names is deprecated: set " in deprecated[0]
        assert "c.DockerBackend.runtime_names instead" in deprecated[0]
        assert len(deprecated) == 6
    else:
        assert deprecated == []
    backend = manager.backend
    assert isinstance(backend, DockerBackend)
    assert backend.runtime_name("runsc") == "runsc-kvm"
    assert backend.runtime_name("runc") == "runc"
    assert (backend.engine_threads, backend.engine_long_threads_per_owner) == (4, 3)
    assert backend.engine.timeout == 12.0
    assert manager.backend_key()["config"]["runtime_names"] == names
    await manager.close()


def test_the_new_name_wins_over_the_old_one_and_the_callers_config_is_left_alone(
    state_dir: Path,
) -> None:
    config = manager_config(state_dir)
    config.merge(
        Config(
            SandboxSettings={"engine_timeout": 5.0, "engine_threads": 3},
            DockerBackend={"engine_timeout": 7.0},
        )
    )
    manager = SandboxManager.from_config(config)
    assert isinstance(manager.backend, DockerBackend)
    assert manager.backend.engine.timeout == 7.0
    assert manager.backend.engine_threads == 3
    assert dict(config.DockerBackend) == {"engine_timeout": 7.0}  # a server's own, unchanged
