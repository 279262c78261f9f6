"""Every isolation default (docs/explanation/design.md), read off the container spec (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.base import SANDBOX_IO_DIR
from jupyter_sandbox.sandbox.backends.docker.container_config import host_config_arguments
from jupyter_sandbox.sandbox.container_spec import (
    SpecRequest,
    build_container_spec,
    check_environment,
)
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.settings import SandboxSettings


def spec_for(runtime: str, tmp_path: Path, **settings: object):  # type: ignore[no-untyped-def]
    config = Config()
    for name, value in settings.items():
        config.SandboxSettings[name] = value
    sandbox_settings = SandboxSettings(config=config)
    request = SpecRequest(
        sandbox_id="0123456789ab",
        owner="alice",
        runtime=runtime,
        image="img",
        limits=sandbox_settings.default_limits(),
        environment={"HOME": "/workspace"},
        purpose="test",
    )
    return build_container_spec(
        sandbox_settings, request, SandboxDirectory(tmp_path, "0123456789ab")
    )


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_hardened_defaults(runtime: str, tmp_path: Path) -> None:
    spec = spec_for(runtime, tmp_path)
    assert spec.capabilities == ()
    assert spec.no_new_privileges
    assert spec.read_only_root
    assert spec.network == "none"
    assert spec.init
    assert not spec.user.startswith("0:")
    assert spec.memory_bytes == 2 * 1024**3
    assert spec.ulimits["nofile"] == 1024
    assert spec.ulimits["core"] == 0
    assert "noexec" in spec.tmpfs["/tmp"]
    assert "size=268435456" in spec.tmpfs["/tmp"]
    # pip's prefix: compiled modules must load from it (no noexec), nothing setuid or a device
    packages = spec.tmpfs["/tmp/.local"].split(",")
    assert {"exec", "nosuid", "nodev", "size=268435456"} <= set(packages)
    assert "noexec" not in packages
    assert f"size={1024**3}" in spec.tmpfs["/workspace"]
    assert spec.log_max_size == "1m"
    # The only host path inside is the sandbox's own io directory.
    assert [(m.source, m.target) for m in spec.mounts] == [
        (str(tmp_path / "0123456789ab" / "io"), SANDBOX_IO_DIR)
    ]
    assert spec.labels[labels.OWNER] == "alice"
    assert spec.labels[labels.SANDBOX_ID] == "0123456789ab"
    assert spec.labels[labels.RUNTIME] == runtime


def test_runsc_bounds_processes_inside_gvisor(tmp_path: Path) -> None:
    spec = spec_for("runsc", tmp_path, pids_limit=100, runsc_host_pids_limit=3000)
    assert spec.ulimits["nproc"] == 100
    assert spec.pids_limit == 3000


def test_runc_bounds_processes_with_the_pids_cgroup(tmp_path: Path) -> None:
    spec = spec_for("runc", tmp_path, pids_limit=100)
    assert spec.pids_limit == 100
    assert "nproc" not in spec.ulimits  # RLIMIT_NPROC would count every sandbox of the uid


def test_the_cpu_limit_is_a_quota_per_window(tmp_path: Path) -> None:
    assert spec_for("runc", tmp_path).cpu_period_us == 500_000
    spec = spec_for("runsc", tmp_path, cpus=0.5, cpu_period_ms=200)
    arguments = host_config_arguments(spec, "runsc")
    assert (arguments["cpu_period"], arguments["cpu_quota"]) == (200_000, 100_000)
    assert "nano_cpus" not in arguments  # the engine refuses both; nano_cpus's window is 100 ms
    with pytest.raises(TraitError):
        spec_for("runc", tmp_path, cpu_period_ms=50)  # shorter than Docker's own default


def test_relaxing_the_read_only_root_is_explicit(tmp_path: Path) -> None:
    assert not spec_for("runc", tmp_path, read_only_root=False).read_only_root


@pytest.mark.parametrize(
    "env",
    [
        {"BAD NAME": "x"},
        {"1X": "x"},
        {"X": 1},
        {"X": "a\0b"},
        {"": ""},
        {"X\n": "x"},  # "$" in a pattern lets a final newline by: matched whole instead
        {"X" * 129: "x"},
    ],
)
def test_bad_environment_is_refused(env: dict[str, object]) -> None:
    with pytest.raises(InvalidSettingError, match="environment variable"):
        check_environment(env)  # type: ignore[arg-type]
