"""Images with extra packages: requirements checked before anything is built, and the image
built on the host's wheels as one small layer over the sandbox image."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import docker
import pytest

from jupyter_sandbox.protocol.errors import ImageBuildError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.images.build import has_recipe, run_python
from jupyter_sandbox.sandbox.images.packages import (
    WORK,
    PackageImageBuilder,
    _drop_installed,
    read_requirements,
)
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE
from tests.conftest import ADDED_PACKAGE


def requirements_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "requirements.txt"
    path.write_text(text)
    return path


def test_package_requirements_are_read_without_comments(tmp_path: Path) -> None:
    path = requirements_file(
        tmp_path,
        "# what the course needs\n\npolars>=1.0\t# dataframes\n"
        "scikit-learn[alldeps] ==1.5.*\nrich; python_version >= '3.8'\n",
    )
    assert read_requirements([path]) == [
        "polars>=1.0",
        "scikit-learn[alldeps]==1.5.*",
        'rich; python_version >= "3.8"',
    ]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("-r other.txt", "is a pip option"),
        ("--index-url https://example.org/simple", "is a pip option"),
        ("-e .", "is a pip option"),
        ("git+https://example.org/repo.git", "installs from a URL or a path"),
        ("pkg @ https://example.org/pkg-1.0-py3-none-any.whl", "installs from a URL or a path"),
        ("./local-package", "installs from a URL or a path"),
        ("/opt/wheels/pkg-1.0-py3-none-any.whl", "installs from a URL or a path"),
        ("numpy>>2", "is not a package requirement"),
    ],
)
def test_anything_but_a_package_is_refused_naming_the_line(
    tmp_path: Path, line: str, says: str
) -> None:
    path = requirements_file(tmp_path, f"tabulate\n{line}\n")
    with pytest.raises(ImageBuildError) as raised:
        read_requirements([path])
    assert f"{path}, line 2: {line!r} {says}" in raised.value.message


def test_no_package_or_no_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError, match="list no package"):
        read_requirements([requirements_file(tmp_path, "# nothing yet\n\n")])
    with pytest.raises(ImageBuildError, match=r"cannot read requirements file .*missing\.txt"):
        read_requirements([tmp_path / "missing.txt"])


def test_wheels_of_what_the_image_has_are_dropped(tmp_path: Path) -> None:
    for name in (
        "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl",  # the image has it: dropped
        "scikit_learn-1.9.1-cp311-cp311-manylinux_2_27_x86_64.whl",  # new
        "Jinja2-3.1.6-py3-none-any.whl",  # another version than the image's
    ):
        (tmp_path / name).touch()
    installed = {"numpy": "2.4.6", "jinja2": "3.1.5"}
    assert _drop_installed(tmp_path, installed) == ["jinja2 3.1.6", "scikit-learn 1.9.1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "Jinja2-3.1.6-py3-none-any.whl",
        "scikit_learn-1.9.1-cp311-cp311-manylinux_2_27_x86_64.whl",
    ]


@pytest.mark.integration
def test_the_image_adds_one_small_layer_to_the_sandbox_image(packages_image: str) -> None:
    client = docker.from_env(version="auto")
    added = client.api.inspect_image(packages_image)
    standard = client.api.inspect_image(DEFAULT_IMAGE)
    assert added["Config"]["Labels"][labels.IMAGE_KIND] == "packages"
    assert added["Config"]["Labels"][labels.IMAGE_PACKAGES] == ADDED_PACKAGE
    assert labels.IMAGE_DEBUGGER not in added["Config"]["Labels"]
    # it runs as the sandbox image does, not as the root shell that installed the packages
    for key in ("Cmd", "User", "WorkingDir", "Env", "Entrypoint"):
        assert added["Config"][key] == standard["Config"][key], key
    # one layer, holding tabulate only: no wheel files, nothing of the image reinstalled
    assert len(added["RootFS"]["Layers"]) == len(standard["RootFS"]["Layers"]) + 1
    assert added["Size"] - standard["Size"] < 2_000_000
    # the wheels are gone and no file has a set-id bit
    checked = client.containers.run(
        packages_image,
        ["sh", "-c", f"test ! -e {WORK} && find /opt/sandbox -perm /6000 | wc -l"],
        remove=True,
        network_mode="none",
    )
    assert bytes(checked).decode() == "0\n"
    # and the container the packages were installed in is removed (read from the engine's list,
    # which answers for every container, where inspecting each would wait on any that is busy)
    commands = [str(row.get("Command") or "") for row in client.api.containers(all=True)]
    assert not [command for command in commands if WORK in command]


@pytest.mark.integration
def test_debugpy_is_kept_only_where_asked_for(packages_image: str, debugger_image: str) -> None:
    client = docker.from_env(version="auto")
    assert has_debugpy(client, debugger_image)
    assert not has_debugpy(client, packages_image)  # the standard image's rule
    found = client.api.inspect_image(debugger_image)
    assert found["Config"]["Labels"][labels.IMAGE_DEBUGGER] == "debugpy"


def has_debugpy(client: docker.DockerClient, image: str) -> bool:
    code = "import importlib.util; print(importlib.util.find_spec('debugpy') is not None)"
    return run_python(client, image, "/opt/sandbox/bin/python", code).strip() == "True"


@pytest.mark.integration
def test_an_up_to_date_image_is_not_rebuilt(packages_image: str) -> None:
    said: list[str] = []
    client = docker.from_env(version="auto")
    before = client.api.inspect_image(packages_image)["Id"]
    PackageImageBuilder(client, say=said.append).build(packages_image, [ADDED_PACKAGE])
    assert len(said) == 1
    assert said[0].startswith(f"{packages_image} is up to date")
    assert client.api.inspect_image(packages_image)["Id"] == before


@pytest.mark.integration
async def test_a_sandbox_of_the_image_imports_the_package(
    manager: SandboxManager, packages_image: str, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", image=packages_image, purpose=purpose)
    code = f"import {ADDED_PACKAGE}, os; print(os.getuid())"
    result = await manager.exec("alice", sandbox.sandbox_id, ["python", "-c", code])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == b"10001\n"


@pytest.mark.integration
def test_a_version_the_image_cannot_take_is_refused_with_the_reason(tmp_path: Path) -> None:
    client = docker.from_env(version="auto")
    tag = f"jupyter-sandbox/test-refused:{uuid.uuid4().hex[:8]}"
    with pytest.raises(ImageBuildError) as raised:
        PackageImageBuilder(client, say=lambda _: None).build(tag, ["numpy<2"])
    assert "ResolutionImpossible" in raised.value.message
    assert "stay at the versions it has" in raised.value.message
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(tag)


@pytest.mark.integration
def test_only_a_sandbox_image_can_be_extended() -> None:
    client = docker.from_env(version="auto")
    absent = PackageImageBuilder(client, extends="jupyter-sandbox/absent:0")
    with pytest.raises(ImageBuildError, match="absent:0 is not on this machine: build it with"):
        absent.build("jupyter-sandbox/never:1", [ADDED_PACKAGE])
    # an image that exists but was not built as a sandbox image: an empty root
    plain = f"jupyter-sandbox/test-plain:{uuid.uuid4().hex[:8]}"
    empty = io.BytesIO()
    tarfile.open(fileobj=empty, mode="w").close()
    repository, version = plain.split(":")
    client.api.import_image_from_data(empty.getvalue(), repository=repository, tag=version)
    try:
        assert not has_recipe(client, plain, "any")  # it has no labels at all
        with pytest.raises(ImageBuildError, match="is not a sandbox image"):
            PackageImageBuilder(client, extends=plain).build("jupyter-sandbox/never:1", ["six"])
    finally:
        client.images.remove(plain, force=True)
    with pytest.raises(ImageBuildError, match="needs a tag of its own"):
        PackageImageBuilder(client).build(DEFAULT_IMAGE, [ADDED_PACKAGE])
