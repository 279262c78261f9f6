"""The image builder's questions to an image, and a standard image that is up to date costing
no container at all."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
import pytest

from jupyter_sandbox.protocol.errors import ImageBuildError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.images.build import (
    ImageBuilder,
    create_build_container,
    ensure_image,
    remove_leftover_build_containers,
    run_python,
)
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE

MISSING_IMAGE = "jupyter-sandbox/no-such-image:0"


@pytest.fixture
def client() -> Iterator[docker.DockerClient]:
    engine = docker.from_env()
    yield engine
    engine.close()


def engine_time(seconds: float) -> str:
    """A time as the engine's event filters take it to the nanosecond: other tests' containers
    made within the same second are not counted."""
    return f"{int(seconds)}.{int(seconds % 1 * 1e9):09d}"


def build_containers(client: docker.DockerClient) -> list[str]:
    found = client.containers.list(all=True, filters={"label": labels.BUILD})
    return [container.id or "" for container in found]


def test_run_python_returns_what_the_image_prints_and_leaves_no_container(
    client: docker.DockerClient,
) -> None:
    before = build_containers(client)
    code = "import sys; print(sys.version_info[0]); sys.stderr.write('a warning')"
    assert run_python(client, DEFAULT_IMAGE, "python3", code) == "3\n"  # stdout alone
    assert build_containers(client) == before


@pytest.mark.parametrize(
    ("interpreter", "code", "says"),
    [
        ("python3", "import sys; sys.exit('no numpy here')", "no numpy here"),
        ("python9", "print(1)", "cannot run python9"),
    ],
)
def test_a_failing_question_names_the_image_and_leaves_no_container(
    client: docker.DockerClient, interpreter: str, code: str, says: str
) -> None:
    before = build_containers(client)
    with pytest.raises(ImageBuildError, match=says) as raised:
        run_python(client, DEFAULT_IMAGE, interpreter, code)
    assert DEFAULT_IMAGE in str(raised.value)
    assert build_containers(client) == before


def test_an_image_neither_here_nor_in_a_registry_is_a_clear_error(
    client: docker.DockerClient,
) -> None:
    with pytest.raises(ImageBuildError, match="is not on this machine"):
        run_python(client, MISSING_IMAGE, "python3", "print(1)")
    with pytest.raises(ImageBuildError, match=r"no registry answers.*docker load"):
        ensure_image(client, MISSING_IMAGE)


def test_an_up_to_date_standard_image_is_checked_without_a_container(
    client: docker.DockerClient,
) -> None:
    ImageBuilder(client, say=lambda line: None).build()  # as make test has already done
    said: list[str] = []
    since = engine_time(time.time())
    assert ImageBuilder(client, say=said.append).build() == DEFAULT_IMAGE
    until = engine_time(time.time() + 1)
    assert any("is up to date" in line for line in said), said
    created = client.events(
        since=since,
        until=until,
        filters={"type": "container", "event": "create"},
        decode=True,
    )
    assert [event for event in created if not of_another_test(event)] == []


def of_another_test(event: dict[str, Any]) -> bool:
    """Whether a container the engine created was another test's (they run beside this one,
    `make test`): a sandbox, or the build container of another image than the standard one."""
    attributes = event.get("Actor", {}).get("Attributes", {})
    return (
        labels.OWNER in attributes or attributes.get(labels.BUILD, DEFAULT_IMAGE) != DEFAULT_IMAGE
    )


# It removes every stopped build container, another test's build's too: alone (pyproject.toml).
@pytest.mark.alone
def test_only_the_build_containers_a_killed_build_left_are_removed(
    client: docker.DockerClient,
) -> None:
    never_started = create_build_container(client, DEFAULT_IMAGE, ["true"])
    running = create_build_container(client, DEFAULT_IMAGE, ["sleep", "60"])
    try:
        running.start()
        young = remove_leftover_build_containers(client)  # both young: a live build's own
        assert never_started.id not in young
        assert running.id not in young
        removed = remove_leftover_build_containers(client, older_than=0)
        assert never_started.id in removed
        assert running.id not in removed  # a running one may be a live build
        running.reload()
        assert running.status == "running"
    finally:
        for container in (never_started, running):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
