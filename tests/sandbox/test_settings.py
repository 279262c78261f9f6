"""Settings: refusals, the uid choice, and loading jupyter_sandbox_config.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.limits import format_size, host_memory_bytes, host_pid_max
from jupyter_sandbox.sandbox.settings import (
    SANDBOX_UID,
    SandboxSettings,
    load_config,
    settings_kernels_miss,
)


def test_root_in_the_sandbox_is_refused() -> None:
    with pytest.raises(TraitError, match="never run as root"):
        SandboxSettings(sandbox_uid=0)


def test_unknown_runtime_is_refused() -> None:
    with pytest.raises(TraitError):
        SandboxSettings(runtime="kata")


def test_default_uid_is_never_root() -> None:
    expected = os.getuid() or SANDBOX_UID
    assert SandboxSettings().effective_uid == expected
    assert SandboxSettings(sandbox_uid=4242).effective_uid == 4242


def test_config_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "jupyter_sandbox_config.py").write_text(
        "c.SandboxSettings.memory_limit = '3g'\nc.SandboxSettings.runtime = 'runc'\n"
    )
    config = load_config([str(tmp_path)])
    settings = SandboxSettings(config=config)
    assert settings.memory_limit == "3g"
    assert settings.runtime == "runc"
    assert settings.default_limits().memory_bytes == 3 * 1024**3


def test_the_settings_kernels_would_miss_are_named() -> None:
    """What a server's command line or jupyter_server_config.py sets for kernels, which read
    jupyter_sandbox_config.py alone (the server warns of them at start)."""
    server = Config()
    server.SandboxSettings.memory_limit = "8g"  # the server's only
    server.SandboxSettings.runtime = "runc"  # the same in both: the kernels have it
    server.NetworkSettings.policy = "open"  # the kernels have another
    server.WarmPool.size = 2  # the server's own setting
    kernels = Config()
    kernels.SandboxSettings.runtime = "runc"
    kernels.NetworkSettings.policy = "none"
    assert settings_kernels_miss(server, kernels) == [
        "NetworkSettings.policy",
        "SandboxSettings.memory_limit",
    ]
    assert settings_kernels_miss(kernels, kernels) == []


def test_every_setting_says_what_it_means() -> None:
    for name, trait in SandboxSettings.class_traits(config=True).items():
        assert len(trait.help) > 20, name
    assert isinstance(SandboxSettings(config=Config()).state_dir, str)


def test_requested_limits_are_refused_above_the_administrators_maximums() -> None:
    """Issue 31: pids 4,194,304 and tmp_size 100t were accepted; every limit a request names
    now has a maximum, and the error names it and its setting."""
    settings = SandboxSettings()
    tried: list[tuple[dict[str, object], str]] = [
        ({"pids": 4_194_304}, "max_pids_limit"),
        ({"tmp_size": "100t"}, "max_tmp_size"),
        ({"workspace_size": "100t"}, "max_workspace_size"),
        ({"memory": "100t"}, "max_memory_limit"),
        ({"nofile": 1 << 20}, "max_nofile_limit"),
    ]
    for asked, setting in tried:
        with pytest.raises(InvalidSettingError, match=rf"c\.SandboxSettings\.{setting}"):
            settings.requested_limits(asked)
    small = SandboxSettings(cpus=0.5, max_cpus=0.5, max_pids_limit=300)
    with pytest.raises(InvalidSettingError, match=r"maximum of 0\.5 "):
        small.requested_limits({"cpus": 1})
    limits = small.requested_limits({"pids": 300, "cpus": 0.5})
    assert (limits.pids, limits.cpus) == (300, 0.5)
    assert small.requested_limits(None) == small.default_limits()


def test_the_default_maximums_come_from_the_host_and_admit_the_default_limits() -> None:
    settings = SandboxSettings()
    memory = host_memory_bytes()
    assert settings.max_memory_limit == format_size(max(memory, 2 * 1024**3))
    assert settings.max_cpus == float(os.cpu_count() or 1)
    assert settings.max_pids_limit == max(256, min(4096, host_pid_max() // 8))
    assert settings.max_tmp_size == format_size(max(memory // 4, 256 * 1024**2))
    assert settings.max_workspace_size == format_size(max(memory // 4, 1024**3))
    settings.requested_limits({})  # the defaults are within their maximums


def test_a_maximum_that_is_not_a_size_is_named() -> None:
    with pytest.raises(InvalidSettingError, match=r"SandboxSettings\.max_tmp_size must be a size"):
        SandboxSettings(max_tmp_size="lots").requested_limits({})


@pytest.mark.parametrize("disabled", ["1", "", "0"])
def test_a_hub_that_disables_user_config_keeps_the_home_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disabled: str
) -> None:
    """JupyterHub's spawner sets JUPYTERHUB_DISABLE_USER_CONFIG; the kernel then reads no
    jupyter_sandbox_config.py from the user's home, as the single-user server reads none."""
    home, system = tmp_path / "home", tmp_path / "etc-jupyter"
    for directory, setting in [(home / ".jupyter", "cpus = 8"), (system, "memory_limit = '3g'")]:
        directory.mkdir(parents=True)
        (directory / "jupyter_sandbox_config.py").write_text(f"c.SandboxSettings.{setting}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("JUPYTER_CONFIG_DIR", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(system))
    monkeypatch.setenv("JUPYTERHUB_DISABLE_USER_CONFIG", disabled)
    settings = SandboxSettings(config=load_config())
    assert settings.memory_limit == "3g"  # outside the home: read either way
    assert settings.cpus == (SandboxSettings().cpus if disabled == "1" else 8)
