"""``jupyter sandbox install-kernel``: a kernelspec whose kernels use another image, runtime or
network policy.

JupyterLab's launcher, nbclient, papermill and ``jupyter_client`` choose kernels by kernelspec.
What a Sandboxed Python kernel reads from its environment (JUPYTER_SANDBOX_IMAGE, _RUNTIME,
_LIMITS and _NETWORK; kernel/kernel_request.py) becomes a kernelspec's
``env``, so a "Sandboxed Python (ML)" beside "Sandboxed Python" is one command::

    jupyter sandbox install-kernel --name=sandboxed-ml --image=jupyter-sandbox/python-ml:1

The kernelspec is a copy of the installed ``sandboxed-python`` one (its standard-library
launcher and logos) with that ``env``, installed by jupyter_client's KernelSpecManager into this
environment's prefix (``--user``: the user's Jupyter data directory). Everything is checked
before it is written; ``jupyter kernelspec remove NAME`` removes it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import docker.errors
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from traitlets import Bool, Unicode

from jupyter_sandbox.cli.owner import SandboxCommandApp
from jupyter_sandbox.kernel.kernel_request import LIMITS_ENV_VAR, KernelRequest
from jupyter_sandbox.protocol.errors import InvalidSettingError, SandboxError
from jupyter_sandbox.sandbox.backends.docker.backend import missing_image
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.images.build import inspect_image, offers_debugger
from jupyter_sandbox.sandbox.network import ENV_VAR as NETWORK_ENV_VAR
from jupyter_sandbox.sandbox.settings import RUNTIME_NAMES, SandboxSettings

SOURCE = "sandboxed-python"
# jupyter_client's rule for kernelspec names
NAME = re.compile(r"^[a-z0-9._-]+$", re.IGNORECASE)


class InstallKernelApp(SandboxCommandApp):
    name = "jupyter-sandbox-install-kernel"
    description = (
        "Install a kernelspec whose sandboxes have another image, runtime, network or limits."
    )
    examples = """
    jupyter sandbox install-kernel --name=sandboxed-ml --image=jupyter-sandbox/python-ml:1
    jupyter sandbox install-kernel --name=sandboxed-runc --runtime=runc --display-name="Python (runc)"
    """
    kernel_name = Unicode("", config=True, help="Name of the kernelspec (letters, digits, . _ -).")
    display_name = Unicode(
        "", config=True, help="Name shown in the launcher (default: 'Sandboxed Python (...)')."
    )
    image = Unicode("", config=True, help="JUPYTER_SANDBOX_IMAGE of its kernels.")
    runtime = Unicode("", config=True, help="JUPYTER_SANDBOX_RUNTIME of its kernels.")
    network = Unicode(
        "",
        config=True,
        help="JUPYTER_SANDBOX_NETWORK of its kernels: none, open, an allowlist, or ask alone or "
        "before an allowlist (ask,pypi.org).",
    )
    limits = Unicode(
        "",
        config=True,
        help="""JUPYTER_SANDBOX_LIMITS of its kernels, e.g. 'memory=8g,cpus=2' (the names of
        the REST API's limits: memory, cpus, pids, nofile, tmp_size, workspace_size).""",
    )
    user = Bool(False, config=True, help="Install for this user rather than this environment.")
    prefix = Unicode("", config=True, help="Install under this prefix (e.g. a virtualenv's).")
    aliases = {
        "name": "InstallKernelApp.kernel_name",
        "display-name": "InstallKernelApp.display_name",
        "image": "InstallKernelApp.image",
        "runtime": "InstallKernelApp.runtime",
        "network": "InstallKernelApp.network",
        "limits": "InstallKernelApp.limits",
        "prefix": "InstallKernelApp.prefix",
    }
    flags = {"user": ({"InstallKernelApp": {"user": True}}, "Install for this user.")}

    def start(self) -> None:
        self.exit_with(self.install_kernelspec)

    def install_kernelspec(self) -> int:
        env = self.environment()
        found, note = self.find_image(self.image) if self.image else (None, "")
        debugger = found is not None and offers_debugger(found)
        destination = self.install(env, debugger=debugger)
        print(f"installed kernelspec {self.kernel_name!r} ({self.title()}) in {destination}")
        if debugger:
            print(f"its kernels offer the JupyterLab debugger: {self.image} has debugpy")
        if note:
            print(f"note: {note}", file=sys.stderr)
        return 0

    def environment(self) -> dict[str, str]:
        """The kernelspec's ``env``, every value checked as its kernels would check it."""
        if not NAME.match(self.kernel_name) or self.kernel_name == SOURCE:
            raise InvalidSettingError(
                f"--name must be a kernelspec name of letters, digits, '.', '_' and '-', other "
                f"than {SOURCE!r} (given: {self.kernel_name!r}); e.g. --name=sandboxed-ml"
            )
        chosen = (
            ("JUPYTER_SANDBOX_IMAGE", self.image),
            ("JUPYTER_SANDBOX_RUNTIME", self.runtime),
            (NETWORK_ENV_VAR, self.network),
            (LIMITS_ENV_VAR, self.limits),
        )
        env = {name: value for name, value in chosen if value}
        if not env:
            raise InvalidSettingError(
                f"nothing would differ from {SOURCE!r}: give --image, --runtime, --network "
                "or --limits"
            )
        # The syntax as its kernels read it; what is allowed as the manager decides it.
        KernelRequest.allowed(env, SandboxSettings(parent=self))
        return env

    def title(self) -> str:
        detail = (
            self.image.rpartition("/")[2]
            or self.runtime
            or (f"network {self.network}" if self.network else self.limits)
        )
        return self.display_name or f"Sandboxed Python ({detail})"

    def install(self, env: dict[str, str], *, debugger: bool = False) -> str:
        """Copy the installed sandboxed-python kernelspec with ``env`` and install it;
        ``debugger``: its kernels offer the debugger (JupyterLab shows it only then)."""
        specs = KernelSpecManager(parent=self)
        try:
            source = specs.get_kernel_spec(SOURCE)
        except NoSuchKernel:
            raise InvalidSettingError(
                f"the {SOURCE!r} kernelspec is not installed: reinstall jupyter-sandbox"
            ) from None
        with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-kernelspec-") as tmp:
            directory = Path(tmp) / self.kernel_name
            shutil.copytree(
                source.resource_dir, directory, ignore=shutil.ignore_patterns("__pycache__")
            )
            spec: dict[str, Any] = json.loads((directory / "kernel.json").read_text())
            prefix = self.prefix or (None if self.user else sys.prefix)
            if prefix != sys.prefix:
                # Another environment's Jupyter may read it, and would run "python" as its own
                # interpreter, without jupyter_sandbox. In this environment "python" stays:
                # jupyter_client runs its own interpreter, as the server's zygote expects.
                spec["argv"][0] = sys.executable
            spec["display_name"] = self.title()
            spec["env"] = {**spec.get("env", {}), **env}
            spec.setdefault("metadata", {})["debugger"] = debugger
            spec["metadata"]["jupyter_sandbox"] = {
                "isolation": RUNTIME_NAMES[self.runtime or "runsc"],
                "env": env,
            }
            (directory / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
            return str(
                specs.install_kernel_spec(
                    str(directory),
                    kernel_name=self.kernel_name,
                    user=self.user,
                    prefix=prefix,
                )
            )

    def find_image(self, image: str) -> tuple[dict[str, Any] | None, str]:
        """The engine's record of ``image``, or None and a note saying why there is none (a
        note, not an error: the image may be built later)."""
        engine = DockerEngine(timeout=10)
        try:
            found = inspect_image(engine.client, image)
        except (SandboxError, docker.errors.DockerException):
            return None, (
                "no Docker engine answered, so whether the image offers the debugger is "
                "unknown: install the kernelspec again once one does"
            )
        finally:
            engine.close()
        if found is None:
            return None, (
                f"{missing_image(image)}; then install the kernelspec again, so that it knows "
                "whether the image offers the debugger"
            )
        return found, ""
