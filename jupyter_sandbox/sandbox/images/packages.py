"""Sandbox images with extra Python packages: ``jupyter sandbox build-image --requirements``.

A notebook that needs a package the sandbox image lacks cannot ``%pip install`` it: a sandbox
has no network by default and a read-only root. The operator builds an image that adds the
packages to a sandbox image instead, and kernels choose it (``JUPYTER_SANDBOX_IMAGE``, or a
kernelspec made by ``jupyter sandbox install-kernel``) or all sandboxes get it
(``c.SandboxSettings.image``). :meth:`PackageImageBuilder.build`:

1. reads the requirements files: package requirements only (names, extras, versions, markers;
   no pip options, URLs or paths), so the image holds exactly what the files list;
2. asks the sandbox image for its Python version and the distributions it has;
3. downloads the wheels on the host (see build.py for why), with the image's own versions as
   constraints, so an addition never upgrades a package the image's kernel relies on; wheels of
   distributions the image already has are dropped;
4. installs them in a stopped container of the sandbox image (root, no network, the wheels
   copied in and deleted again), and commits it: the new image is one layer holding only what
   was added, with the sandbox image's user, command and labels.

The standard image leaves debugpy out (kernels start faster, and offer no debugger); listing
``debugpy`` keeps it, and labels the image as one whose kernels offer the JupyterLab debugger
(``jupyter sandbox install-kernel`` then says so in its kernelspec). Like the standard image,
it is labelled with a hash of its recipe (the sandbox image's id and the requirements) and not
rebuilt while that matches.
"""

from __future__ import annotations

import io
import platform
import re
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
from docker.utils import parse_repository_tag
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version
from traitlets import Unicode
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import ImageBuildError
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.images.build import (
    BUILDER_VERSION,
    Say,
    create_build_container,
    digest,
    download_wheels,
    has_recipe,
    image_labels,
    inspect_image,
    offers_debugger,
    run_python,
)
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE

KIND = "packages"
# Where the wheels and the requirements go inside the build container (removed again).
WORK = "/tmp/jupyter-sandbox-packages"
# Listed in the requirements, it gives the image's kernels the JupyterLab debugger.
DEBUGPY = "debugpy"
# A comment, as pip reads requirements files: '#' at the start or after whitespace.
COMMENT = re.compile(r"(^|\s+)#.*$")
# Printed by the sandbox image's Python: its version tag, then one 'name==version' per line.
PROBE = (
    "import sys, importlib.metadata as m; print('%d%d' % sys.version_info[:2]); "
    "[print(d.metadata['Name'] + '==' + d.version) for d in m.distributions()]"
)


def install_script(*, keep_debugpy: bool) -> str:
    """What the build container runs: pip into the image's venv (images/python/Dockerfile),
    then no file may keep a set-id bit. debugpy, which ipykernel depends on, is removed again
    unless the image is to offer the debugger (the standard image leaves it out: see its
    Dockerfile)."""
    remove_debugpy = (
        ""
        if keep_debugpy
        else "/opt/sandbox/bin/pip uninstall --yes --quiet --root-user-action=ignore debugpy "
        "2>/dev/null || true\n"
    )
    # PIP_PREFIX (the image's, for a notebook's own packages in /tmp) would send these there.
    return f"""set -e
unset PIP_PREFIX
cd {WORK}
/opt/sandbox/bin/pip install --quiet --no-cache-dir --no-index --find-links wheels \\
    --disable-pip-version-check --root-user-action=ignore \\
    -r requirements.txt -c constraints.txt
{remove_debugpy}find /opt/sandbox -xdev -type f -perm /6000 -exec chmod ug-s {{}} +
cd / && rm -rf {WORK}
"""


def read_requirements(paths: Sequence[Path]) -> list[str]:
    """The package requirements the files list, normalised (none for no files); an error names
    the file, the line and what is wrong with it."""
    found: list[str] = []
    for path in paths:
        try:
            text = path.read_text()
        except OSError as exc:
            raise ImageBuildError(f"cannot read requirements file {path}: {exc.strerror}") from None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = COMMENT.sub("", raw).strip()
            if not line:
                continue
            found.append(_requirement(line, f"{path}, line {number}"))
    if paths and not found:
        raise ImageBuildError(
            "the requirements files list no package: write one requirement per line, "
            "e.g. 'scikit-learn' or 'polars>=1.0'"
        )
    return found


def _requirement(line: str, where: str) -> str:
    if line.startswith("-"):
        raise ImageBuildError(
            f"{where}: {line!r} is a pip option; list packages only (name, extras, versions, "
            "markers): their wheels are downloaded from the host's package index"
        )
    if "://" in line or line.startswith(("git+", "hg+", "svn+", "bzr+", ".", "/", "~")):
        raise ImageBuildError(
            f"{where}: {line!r} installs from a URL or a path; list packages from the index only"
        )
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        raise ImageBuildError(
            f"{where}: {line!r} is not a package requirement ({exc}); write e.g. 'polars>=1.0'"
        ) from None
    if requirement.url:
        raise ImageBuildError(
            f"{where}: {line!r} installs from a URL or a path; list packages from the index only"
        )
    return str(requirement)


class PackageImageBuilder(LoggingConfigurable):
    """Builds an image that adds Python packages to a sandbox image."""

    extends = Unicode(
        DEFAULT_IMAGE,
        config=True,
        help="""The sandbox image the packages are added to: one built by 'jupyter sandbox
        build-image' (with or without packages of its own).""",
    )

    def __init__(self, client: docker.DockerClient, say: Say = print, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.client = client
        self.say = say

    def check_tag(self, tag: str) -> None:
        """Refuse to build over the image the packages are added to."""
        if tag == self.extends:
            raise ImageBuildError(
                f"the image with packages needs a tag of its own, not {tag}: e.g. "
                "--tag=jupyter-sandbox/python-extra:1 (the image it extends stays as it is)"
            )

    def build(self, tag: str, requirements: list[str], *, force: bool = False) -> str:
        """Build ``tag`` adding ``requirements`` (see :func:`read_requirements`) unless an
        image of the same recipe exists; return ``tag``."""
        self.check_tag(tag)
        base = self._sandbox_image()
        # The debugger: asked for by name, or kept from the image extended.
        debugger = DEBUGPY in requirement_names(requirements) or offers_debugger(base)
        script = install_script(keep_debugpy=debugger)
        recipe = digest(
            BUILDER_VERSION, KIND, base["Id"], platform.machine(), script, *requirements
        )
        if not force and has_recipe(self.client, tag, recipe):
            self.say(f"{tag} is up to date (recipe {recipe[:12]}); nothing to build")
            return tag
        started = time.monotonic()
        python_tag, installed = self._probe()
        with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-packages-") as tmp:
            work = Path(tmp) / "packages"
            work.mkdir()
            (work / "requirements.txt").write_text("\n".join(requirements) + "\n")
            (work / "constraints.txt").write_text(
                "".join(f"{name}=={version}\n" for name, version in sorted(installed.items()))
            )
            try:
                download_wheels(
                    work / "wheels",
                    python_tag,
                    [work / "requirements.txt"],
                    work / "constraints.txt",
                    self.say,
                )
            except ImageBuildError as exc:
                raise ImageBuildError(exc.message + _conflict_hint(exc.message)) from None
            added = _drop_installed(work / "wheels", installed)
            if added:
                self.say(f"adding to {self.extends}: {', '.join(added)}")
            else:
                self.say(f"{self.extends} already has every package; {tag} will be the same")
            self._install_and_commit(work, base, tag, recipe, requirements, script, debugger)
        size = (inspect_image(self.client, tag) or {}).get("Size", 0) - base.get("Size", 0)
        self.say(f"built {tag} in {time.monotonic() - started:.0f}s (+{size / 1e6:.1f} MB)")
        return tag

    def _sandbox_image(self) -> dict[str, Any]:
        found = inspect_image(self.client, self.extends)
        if found is None:
            raise ImageBuildError(
                f"{self.extends} is not on this machine: build it with 'jupyter sandbox "
                f"build-image --tag={self.extends}', or name another sandbox image with --from"
            )
        kind = image_labels(found).get(labels.IMAGE_KIND)
        if kind not in ("python", KIND):
            raise ImageBuildError(
                f"{self.extends} is not a sandbox image (one built by 'jupyter sandbox "
                "build-image'): packages can only be added to one, whose kernel they serve"
            )
        return found

    def _probe(self) -> tuple[str, dict[str, str]]:
        """The sandbox image's Python version tag ('311') and its distributions' versions."""
        out = run_python(self.client, self.extends, "/opt/sandbox/bin/python", PROBE)
        first, *rest = out.split()
        installed = dict(line.split("==", 1) for line in rest)
        return first, {canonicalize_name(name): version for name, version in installed.items()}

    def _install_and_commit(
        self,
        work: Path,
        base: dict[str, Any],
        tag: str,
        recipe: str,
        requirements: list[str],
        script: str,
        debugger: bool,
    ) -> None:
        container = create_build_container(
            self.client, self.extends, ["sh", "-c", script], user="0"
        )
        try:
            with _tar_of(work, WORK.rsplit("/", 1)[1]) as archive:
                container.put_archive("/tmp", archive)
            container.start()
            status = container.wait()
            if status.get("StatusCode") != 0:
                tail = bytes(container.logs()).decode(errors="replace").strip().splitlines()
                raise ImageBuildError(
                    "pip could not install the packages in the image:\n" + "\n".join(tail[-15:])
                )
            config = base.get("Config") or {}
            repository, version = parse_repository_tag(tag)
            container.commit(
                repository=repository,
                tag=version or "latest",
                message="jupyter sandbox build-image: added " + ", ".join(requirements),
                # The build container ran sh as root; the image runs as the sandbox image does.
                conf={
                    "Cmd": config.get("Cmd"),
                    "User": config.get("User") or "",
                    "Labels": {
                        labels.IMAGE_RECIPE: recipe,
                        labels.IMAGE_KIND: KIND,
                        labels.IMAGE_PACKAGES: "; ".join(requirements),
                        **({labels.IMAGE_DEBUGGER: DEBUGPY} if debugger else {}),
                    },
                },
            )
        finally:
            container.remove(force=True)


def requirement_names(requirements: list[str]) -> set[str]:
    """The canonical distribution names of checked requirements (see read_requirements)."""
    return {canonicalize_name(Requirement(line).name) for line in requirements}


def _conflict_hint(pip_output: str) -> str:
    if "ResolutionImpossible" not in pip_output:
        return ""
    return (
        "\nThe sandbox image's own packages stay at the versions it has (its kernel runs on "
        "them): a requirement that needs another version of one of them cannot be added. "
        "Loosen its version bound."
    )


def _drop_installed(wheels: Path, installed: dict[str, str]) -> list[str]:
    """Delete the wheels of distributions the image has at that version; the names of the
    others, which the image gains."""
    added = []
    for wheel in sorted(wheels.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if _same_version(installed.get(name), version):
            wheel.unlink()
        else:
            added.append(f"{name} {version}")
    return added


def _same_version(installed: str | None, version: Version) -> bool:
    try:
        return installed is not None and Version(installed) == version
    except InvalidVersion:
        return False


def _tar_of(directory: Path, name: str) -> io.BufferedReader:
    """``directory`` as a tar file named ``name``, written beside it (wheels can be large)."""
    archive = directory.with_name(directory.name + ".tar")
    with tarfile.open(archive, "w") as tar:
        tar.add(directory, arcname=name)
    return archive.open("rb")
