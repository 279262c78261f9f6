"""Settings: refusals, the uid choice, and loading jupyter_sandbox_config.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_sandbox.sandbox.settings import SANDBOX_UID, SandboxSettings, load_config


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


def test_every_setting_says_what_it_means() -> None:
    for name, trait in SandboxSettings.class_traits(config=True).items():
        assert len(trait.help) > 20, name
    assert isinstance(SandboxSettings(config=Config()).state_dir, str)


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
