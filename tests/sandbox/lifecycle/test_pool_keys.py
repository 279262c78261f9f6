"""Warm pool without an engine: keys, the exclusive claim marker, wanted records, settings."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.lifecycle.pool import is_stale_member, pool_key, record_wanted, take
from jupyter_sandbox.sandbox.lifecycle.pool_directory import MAX_WANTED, PoolDirectory
from jupyter_sandbox.sandbox.lifecycle.pool_filler import WarmPool
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.settings import SandboxSettings, load_config
from tests.conftest import manager_config


@pytest.fixture
def manager(state_dir: Path) -> SandboxManager:
    # Constructing the manager makes no engine call until a sandbox is touched.
    return SandboxManager.from_config(manager_config(state_dir))


def test_a_key_changes_with_everything_fixed_at_creation(
    manager: SandboxManager, tmp_path: Path
) -> None:
    other_dir = tmp_path / "other"
    other_dir.mkdir()

    def key(owner: str = "alice", **request: Any) -> str:
        request.setdefault("launch_dir", str(tmp_path))
        return pool_key(
            manager.settings, manager.check_request(owner, **request), manager.backend_key()
        )

    base = key()
    assert key() == base
    assert key(runtime=manager.settings.runtime) == base  # the default, spelt out
    variants = [
        key("bob"),
        key(launch_dir=str(other_dir)),
        key(launch_dir=None),
        key(runtime="runc" if manager.settings.runtime == "runsc" else "runsc"),
        key(image="jupyter-sandbox/other:1"),
        key(limits={"memory": "1g"}),
        key(environment={"EXTRA": "1"}),
    ]
    assert len(set(variants)) == len(variants)
    assert base not in variants
    hardened_differently = SandboxSettings(config=manager.config, read_only_root=False)
    request = manager.check_request("alice", launch_dir=str(tmp_path))
    assert pool_key(hardened_differently, request, manager.backend_key()) != base
    # The backend is part of what a member was made by: another one, or the same configured
    # otherwise (under its setting's old name too), makes other members.
    renamed = {"runsc": "runsc-kvm", "runc": "runc"}
    for config in (
        {"DockerBackend": {"runtime_names": renamed}},
        {"SandboxSettings": {"docker_runtime_names": renamed}},
        {"SandboxManager": {"backend_class": "tests.sandbox.test_backend_class.ListingBackend"}},
    ):
        merged = Config()
        merged.merge(manager.config)
        merged.merge(Config(config))
        other = SandboxManager.from_config(merged)
        assert pool_key(other.settings, request, other.backend_key()) != base, config


def test_exactly_one_of_many_takers_wins(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.root.mkdir(parents=True)
    wins: list[bool] = []
    start = threading.Barrier(20)

    def taker() -> None:
        start.wait()
        wins.append(take(directory, "claim"))

    threads = [threading.Thread(target=taker) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wins.count(True) == 1
    assert not take(SandboxDirectory(state_dir, "ba9876543210"), "claim")  # no such member


def test_a_member_with_a_ticket_is_stale_only_once_its_refiller_is_gone(state_dir: Path) -> None:
    directory = SandboxDirectory(state_dir, "0123456789ab")
    directory.root.mkdir(parents=True)
    directory.write_state({"owner": "alice", "pool": "0" * 16})
    pool_dir = PoolDirectory(state_dir)
    pool_dir.add_ticket("0" * 16, "0123456789ab")
    refiller = ProcessLock(pool_dir.refill_lock_path("alice"))
    assert refiller.try_acquire()  # a server keeps alice's pool
    assert not is_stale_member(state_dir, directory, directory.read_state(), grace=0)
    assert is_stale_member(state_dir, directory, {"owner": "bob", "pool": "0" * 16}, grace=0)
    refiller.release()  # the server was killed: nobody will refill, drain or claim it
    assert is_stale_member(state_dir, directory, directory.read_state(), grace=3600)
    pool_dir.remove_ticket("0" * 16, "0123456789ab")
    assert is_stale_member(state_dir, directory, directory.read_state(), grace=0)
    assert not is_stale_member(state_dir, directory, directory.read_state(), grace=3600)
    directory.update_state(claimed="now")
    assert not is_stale_member(state_dir, directory, directory.read_state(), grace=0)


def test_misses_are_recorded_only_while_a_refiller_runs(
    manager: SandboxManager, state_dir: Path, tmp_path: Path
) -> None:
    request = manager.check_request("alice", launch_dir=str(tmp_path))
    record_wanted(state_dir, request)
    assert PoolDirectory(state_dir).wanted() == []

    pool = WarmPool(manager, "alice")
    assert pool._take_refill_lock()
    try:
        record_wanted(state_dir, request)
        secret = manager.check_request("alice", environment={"TOKEN": "s3cret"})
        record_wanted(state_dir, secret)  # never written: environment values may be secrets
        record_wanted(state_dir, manager.check_request("bob"))  # bob has no refiller
        [(_, record)] = PoolDirectory(state_dir).wanted()
        assert record["launch_dir"] == str(tmp_path)
        assert "s3cret" not in "".join(p.read_text() for p in state_dir.rglob("*.json"))
    finally:
        pool._refill_lock.release()


def test_pool_settings_come_from_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "jupyter_sandbox_config.py").write_text(
        "c.WarmPool.size = 3\nc.WarmPool.max_keys = 0\nc.WarmPool.refill_interval = 0.5\n"
    )
    pool = WarmPool(
        SandboxManager.from_config(Config()), "alice", config=load_config([str(tmp_path)])
    )
    assert (pool.size, pool.max_keys, pool.refill_interval) == (3, 0, 0.5)
    with pytest.raises(TraitError):
        WarmPool(SandboxManager.from_config(Config()), "alice", max_keys=MAX_WANTED + 1)
    for name, trait in WarmPool.class_traits(config=True).items():
        assert len(trait.help) > 20, name


def test_draining_where_no_pool_was_made_creates_nothing(
    manager: SandboxManager, state_dir: Path
) -> None:
    # A server stopping after its state directory was removed (a test's clean-up, an operator)
    # must not make the directory again just to take the refill lock.
    state_dir.rmdir()
    assert asyncio.run(WarmPool(manager, "alice").drain()) == []
    assert not state_dir.exists()
