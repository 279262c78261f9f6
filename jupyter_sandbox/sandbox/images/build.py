"""Build the sandbox image with no container registry.

``jupyter sandbox build-image`` runs :meth:`ImageBuilder.build`:

1. the base: ``--base IMAGE`` when the engine can get it (e.g. ``python:3.11-slim-bookworm``
   from a registry), otherwise Debian bookworm made with debootstrap and ``docker import``-ed;
2. wheels for the base's Python, downloaded on the host with pip (pip inside a fresh root
   would not trust this machine's certificate chain, and may have no network at all);
3. ``docker build`` of images/python/Dockerfile with those wheels as its only package source.

Each image is labelled with a hash of its recipe; a build whose recipe matches an existing
image is skipped. This is a long, blocking, command-line operation, so it is synchronous.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from traitlets import Unicode
from traitlets.config import LoggingConfigurable

from jupyter_sandbox import __version__
from jupyter_sandbox.protocol.errors import ImageBuildError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.host.python_command import module_command
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE

BUILDER_VERSION = "1"
# What the debootstrapped base holds: python3 with venv, and curl (what agent code and users reach
# for first, and whose proxy and CA variables the sandbox sets); everything else comes from wheels.
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "curl")
# Parts of a fresh root no sandbox needs; removing them makes the base a third smaller.
BASE_PRUNE = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
)
MANYLINUX = ("manylinux2014", "manylinux_2_17", "manylinux_2_28", "manylinux_2_34")

# A stopped build container this old (seconds since it was made) is a killed build's.
LEFTOVER_SECONDS = 600.0
# Printed by an image's Python: its version as wheel tags write it ('311').
PYTHON_TAG = "import sys; print('%d%d' % sys.version_info[:2])"

Say = Callable[[str], None]


def images_dir() -> Path:
    """Where the Dockerfiles are: inside the installed package, or in a source checkout."""
    package_root = Path(__file__).parents[2]  # jupyter_sandbox/
    for candidate in (package_root / "images", package_root.parent / "images"):
        if (candidate / "python" / "Dockerfile").is_file():
            return candidate
    raise ImageBuildError(
        "the images/ directory is missing from this installation; reinstall jupyter-sandbox"
    )


class ImageBuilder(LoggingConfigurable):
    """Builds ``jupyter-sandbox/python:<version>`` (or another tag) from images/python."""

    tag = Unicode(DEFAULT_IMAGE, config=True, help="Tag of the image to build.")
    base_image = Unicode(
        "",
        config=True,
        help="""Base image for the build, e.g. 'python:3.11-slim-bookworm' where a registry is
        reachable. Empty: debootstrap Debian (debian_suite) and import it; needs root.""",
    )
    debian_suite = Unicode("bookworm", config=True, help="Debian release debootstrap installs.")
    debian_mirror = Unicode(
        "http://deb.debian.org/debian",
        config=True,
        help="Debian mirror debootstrap downloads from.",
    )

    def __init__(self, client: docker.DockerClient, say: Say = print, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.client = client
        self.say = say

    def build(self, *, force: bool = False) -> str:
        """Build the image unless one of the same recipe exists; return its tag."""
        source = images_dir() / "python"
        base = self.base_image or self._debootstrap_base(force=force)
        recipe_files = sorted(p for p in source.iterdir() if p.is_file())
        recipe = digest(
            BUILDER_VERSION,
            base,
            ensure_image(self.client, base)["Id"],  # which fixes its Python: no need to ask it here
            platform.machine(),
            *(f"{p.name}\0{p.read_text()}" for p in recipe_files),
        )
        if not force and has_recipe(self.client, self.tag, recipe):
            self.say(f"{self.tag} is up to date (recipe {recipe[:12]}); nothing to build")
            return self.tag
        started = time.monotonic()
        python_tag = run_python(self.client, base, "python3", PYTHON_TAG).strip()
        with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-build-") as tmp:
            context = Path(tmp)
            for path in recipe_files:
                shutil.copy(path, context / path.name)
            download_wheels(
                context / "wheels",
                python_tag,
                [source / "requirements.txt"],
                source / "constraints.txt",
                self.say,
            )
            self.say(f"building {self.tag} from {base}")
            self._docker_build(context, base, recipe)
        size = (inspect_image(self.client, self.tag) or {}).get("Size", 0)
        self.say(f"built {self.tag} in {time.monotonic() - started:.0f}s ({size / 1e6:.0f} MB)")
        return self.tag

    # -- base ---------------------------------------------------------------------------------

    def _debootstrap_base(self, *, force: bool) -> str:
        recipe = digest(
            BUILDER_VERSION, self.debian_suite, self.debian_mirror, *BASE_PACKAGES, *BASE_PRUNE
        )
        tag = f"jupyter-sandbox/base:{self.debian_suite}-{recipe[:12]}"
        if not force and has_recipe(self.client, tag, recipe):
            self.say(f"base {tag} exists")
            return tag
        if shutil.which("debootstrap") is None:
            raise ImageBuildError(
                "debootstrap is not installed: 'sudo apt-get install debootstrap', or build from a "
                "registry image with --base python:3.11-slim-bookworm"
            )
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-rootfs-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            self.say(f"debootstrap {self.debian_suite} from {self.debian_mirror} (about a minute)")
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(BASE_PACKAGES)}",
                    self.debian_suite,
                    str(rootfs),
                    self.debian_mirror,
                ],
                "debootstrap failed (it needs root and the Debian mirror)",
            )
            for part in BASE_PRUNE:
                shutil.rmtree(rootfs / part, ignore_errors=True)
            (rootfs / "var/lib/apt/lists").mkdir(parents=True, exist_ok=True)
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            assert tar.stdout is not None
            try:
                self.client.api.import_image_from_stream(
                    tar.stdout,
                    repository=tag.split(":")[0],
                    tag=tag.split(":")[1],
                    changes=[
                        f"LABEL {labels.IMAGE_RECIPE}={recipe}",
                        f"LABEL {labels.IMAGE_KIND}=base",
                        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "ENV LANG=C.UTF-8",
                        'CMD ["/bin/bash"]',
                    ],
                )
            finally:
                tar.stdout.close()
                tar.wait()
        self.say(f"imported base {tag} in {time.monotonic() - started:.0f}s")
        return tag

    # -- wheels and build ---------------------------------------------------------------------

    def _docker_build(self, context: Path, base: str, recipe: str) -> None:
        stream = self.client.api.build(
            path=str(context),
            tag=self.tag,
            buildargs={"BASE_IMAGE": base},
            rm=True,
            forcerm=True,
            decode=True,
            labels={labels.IMAGE_RECIPE: recipe, labels.IMAGE_KIND: "python"},
        )
        for chunk in stream:
            if "error" in chunk:
                raise ImageBuildError(f"docker build failed: {chunk['error'].strip()}")
            line = str(chunk.get("stream", "")).rstrip()
            if line.startswith("Step "):
                self.say(line)


def inspect_image(client: docker.DockerClient, tag: str) -> dict[str, Any] | None:
    """The engine's record of image ``tag``, or None when there is none."""
    try:
        found: dict[str, Any] = client.api.inspect_image(tag)  # type: ignore[no-untyped-call]
    except docker.errors.NotFound:
        return None
    return found


def ensure_image(client: docker.DockerClient, image: str) -> dict[str, Any]:
    """The engine's record of ``image``, pulled first if this machine lacks it (a base such
    as python:3.11-slim-bookworm, where a registry answers)."""
    found = inspect_image(client, image)
    if found is None:
        try:
            client.images.pull(image)
        except docker.errors.APIError:
            raise ImageBuildError(
                f"image {image} is not on this machine and no registry answers: leave out "
                "--base to build one with debootstrap, or load it with 'docker load'"
            ) from None
        found = inspect_image(client, image)
    if found is None:
        raise ImageBuildError(f"image {image} vanished right after it was pulled; try again")
    return found


def has_recipe(client: docker.DockerClient, tag: str, recipe: str) -> bool:
    """Whether image ``tag`` exists and was built from ``recipe`` (its label says so)."""
    found = inspect_image(client, tag)
    return found is not None and image_labels(found).get(labels.IMAGE_RECIPE) == recipe


def image_labels(found: dict[str, Any]) -> dict[str, str]:
    """The labels of an inspected image (an image without any has null there)."""
    return dict((found.get("Config") or {}).get("Labels") or {})


def offers_debugger(found: dict[str, Any]) -> bool:
    """Whether an inspected image's kernels offer the JupyterLab debugger (it keeps debugpy:
    packages.py)."""
    return labels.IMAGE_DEBUGGER in image_labels(found)


def run_python(client: docker.DockerClient, image: str, interpreter: str, code: str) -> str:
    """What ``interpreter -c code`` prints in a throw-away container of ``image`` (no
    network, labelled as a build's, removed however it ends); how a build asks an image about
    its Python."""
    try:
        container = create_build_container(client, image, [interpreter, "-c", code])
    except docker.errors.ImageNotFound:
        raise ImageBuildError(f"image {image} is not on this machine") from None
    try:
        container.start()
        status = container.wait()
        failed = status.get("StatusCode") != 0
        out = bytes(container.logs(stdout=True, stderr=failed)).decode(errors="replace")
    except docker.errors.APIError as exc:  # e.g. the interpreter is not in the image
        raise ImageBuildError(
            f"image {image} cannot run {interpreter}: {exc.explanation or exc}"
        ) from None
    finally:
        container.remove(force=True)
    if failed:
        raise ImageBuildError(f"{interpreter} in image {image} failed:\n{out.strip()[-2000:]}")
    return out


def create_build_container(
    client: docker.DockerClient, image: str, command: list[str], **options: Any
) -> Container:
    """A stopped container for a build step: no network, labelled so that one a killed build
    left behind is found (``docker ps -a --filter label=io.jupyter-sandbox.build``)."""
    return client.containers.create(
        image,
        command,
        network_mode="none",
        labels={labels.BUILD: image, labels.VERSION: __version__},
        **options,
    )


def remove_leftover_build_containers(
    client: docker.DockerClient, older_than: float = LEFTOVER_SECONDS
) -> list[str]:
    """Remove the build containers a killed build left (``jupyter sandbox gc``); their ids.

    A build removes its own containers however it ends, unless it is killed. A live build's
    container is running, or was made moments ago and is about to start; one that stopped, or
    never started, more than ``older_than`` seconds after it was made is a leftover."""
    removed = []
    for row in client.api.containers(all=True, filters={"label": labels.BUILD}):
        if row.get("State") == "running" or time.time() - row.get("Created", 0) < older_than:
            continue
        try:
            client.api.remove_container(row["Id"], force=True)
        except docker.errors.NotFound:
            continue  # gone meanwhile: what was wanted
        removed.append(str(row["Id"]))
    return removed


def download_wheels(
    target: Path, python_tag: str, requirements: list[Path], constraints: Path, say: Say
) -> None:
    """Wheels for CPython ``python_tag`` ('311') on this machine's architecture, of
    ``requirements`` and their dependencies under ``constraints``, downloaded into ``target``
    by the host's pip (wheels only: nothing is built)."""
    target.mkdir(exist_ok=True)
    machine = platform.machine()
    platforms = [arg for tag in MANYLINUX for arg in ("--platform", f"{tag}_{machine}")]
    say(f"downloading wheels for CPython {python_tag[0]}.{python_tag[1:]} on the host")
    _run(
        [
            *module_command("pip"),
            "download",
            "--quiet",
            "--dest",
            str(target),
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            python_tag,
            "--abi",
            f"cp{python_tag}",
            *platforms,
            *(arg for path in requirements for arg in ("-r", str(path))),
            "-c",
            str(constraints),
        ],
        "pip could not download the wheels (is PyPI reachable, and has every package a wheel "
        f"for CPython {python_tag[0]}.{python_tag[1:]} on {machine}?)",
    )


def digest(*parts: str) -> str:
    """A recipe's hash: the same parts give the same image."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _run(argv: list[str], failure: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise ImageBuildError(f"{failure}:\n{tail}")
