"""Files beside the notebook: /workspace shows the launch directory, as the setting says."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kernel.kernels import run, running_kernel, value_of
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env

pytestmark = pytest.mark.integration


@pytest.fixture
def notebook(purpose: str, request: pytest.FixtureRequest) -> Iterator[Path]:
    mode = request.param
    with sandbox_kernel_env(purpose, workspace_mode=mode) as state_dir:
        folder = notebook_dir(state_dir)
        (folder / "data.csv").write_text("a,b\n1,2\n3,4\n")
        folder.chmod(0o755)  # as a notebook folder usually is: readable by others
        (folder / "data.csv").chmod(0o644)
        yield folder


@pytest.mark.parametrize("notebook", ["copy-on-write"], indirect=True)
def test_copy_on_write_shows_files_and_keeps_writes_in(notebook: Path, runtime: str) -> None:
    with running_kernel(notebook, JUPYTER_SANDBOX_RUNTIME=runtime) as (_, kc):
        assert value_of(kc, "int(__import__('pandas').read_csv('data.csv')['b'].sum())") == "6"
        out, reply = run(
            kc, "open('new.txt', 'w').write('made inside')\nimport os; os.remove('data.csv')"
        )
        assert reply["status"] == "ok", out
        assert value_of(kc, "sorted(os.listdir('.'))") == "['new.txt']"
    assert (notebook / "data.csv").read_text() == "a,b\n1,2\n3,4\n"
    assert not (notebook / "new.txt").exists()


@pytest.mark.parametrize("notebook", ["read-only"], indirect=True)
def test_read_only_shows_files_and_refuses_writes(notebook: Path) -> None:
    with running_kernel(notebook, JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        assert value_of(kc, "open('data.csv').read().splitlines()[0]") == "'a,b'"
        out, reply = run(kc, "open('new.txt', 'w')")
        assert reply["status"] == "error"
        assert "Read-only file system" in out
    assert sorted(p.name for p in notebook.iterdir()) == ["data.csv"]


@pytest.mark.parametrize("notebook", ["read-write"], indirect=True)
def test_read_write_lets_writes_reach_the_host(notebook: Path) -> None:
    notebook.chmod(0o777)  # the sandbox's uid must be allowed to create files here
    with running_kernel(notebook, JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        out, reply = run(kc, "open('from-sandbox.txt', 'w').write('hello host')")
        assert reply["status"] == "ok", out
    assert (notebook / "from-sandbox.txt").read_text() == "hello host"


@pytest.mark.parametrize("notebook", ["none"], indirect=True)
def test_none_gives_an_empty_private_workspace(notebook: Path) -> None:
    with running_kernel(notebook, JUPYTER_SANDBOX_RUNTIME="runc") as (_, kc):
        assert value_of(kc, "__import__('os').listdir('/workspace')") == "[]"
        banner = kc.kernel_info(reply=True)["content"]["banner"]
        assert "/workspace: none" in banner
