"""``jupyter sandbox <verb>``: doctor, build-image, list, gc; install-kernel (cli/kernelspec.py);
stop, restart, pause, resume, exec (cli/sandboxes.py); run (cli/code.py); terminal
(cli/terminal.py); ports, forward (cli/ports.py); snapshot (cli/snapshots.py), files
(cli/files.py), background (cli/background.py), credentials (cli/credentials.py); mcp
(cli/mcp.py); gateway (gateway/app.py).

Each verb is a small JupyterApp, so it reads ``jupyter_sandbox_config.py`` as the kernel does
and takes ``--SandboxSettings.x=y`` as the server extension does (a kernel has no command line
for settings: it reads that file only). The groups of verbs, ``jupyter sandbox``, ``jupyter
sandbox snapshot``, ``jupyter sandbox files``, ``jupyter sandbox background`` and ``jupyter
sandbox credentials``, are here; the verbs of the last four are in their own modules.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from traitlets import Bool, List, Unicode

from jupyter_sandbox.cli import background as cli_background
from jupyter_sandbox.cli import code as cli_code
from jupyter_sandbox.cli import credentials as cli_credentials
from jupyter_sandbox.cli import files as cli_files
from jupyter_sandbox.cli import ports as cli_ports
from jupyter_sandbox.cli import sandboxes as cli_sandboxes
from jupyter_sandbox.cli import snapshots as cli_snapshots
from jupyter_sandbox.cli import terminal as cli_terminal
from jupyter_sandbox.cli.kernelspec import InstallKernelApp
from jupyter_sandbox.cli.mcp import McpApp
from jupyter_sandbox.cli.owner import OwnerCommand, SandboxCommandApp
from jupyter_sandbox.cli.text import print_table, shown
from jupyter_sandbox.protocol.errors import ImageBuildError
from jupyter_sandbox.sandbox.backends.docker.backend import DockerBackend
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.records import SandboxInfo
from jupyter_sandbox.sandbox.doctor import exit_code, run_checks
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.images.build import ImageBuilder, remove_leftover_build_containers
from jupyter_sandbox.sandbox.images.packages import PackageImageBuilder, read_requirements
from jupyter_sandbox.sandbox.lifecycle.contexts import kernel_attached
from jupyter_sandbox.sandbox.lifecycle.pool import unclaimed_member
from jupyter_sandbox.sandbox.lifecycle.reaper import ReapReport, orphan_reason, reap_orphans
from jupyter_sandbox.sandbox.manager import SandboxManager, default_owner
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE, SandboxSettings

# Seconds a build step may stay silent (pip installing the wheels is the longest).
BUILD_TIMEOUT = 1800
# Seconds `list` spares a start or a kernel's restart before it calls a sandbox an orphan; the
# automatic sweeps wait for the start timeout, and an unnamed kernel's lifeline a few seconds.
LIST_GRACE = 10.0
SANDBOX_COLUMNS = [
    ("SANDBOX", "12"),
    ("RUNTIME", "7"),
    ("STATUS", "8"),
    ("CREATED", "25"),
    ("USE", "24"),
    ("IMAGE", ""),
]


class _SandboxCommand(SandboxCommandApp):
    def run(self) -> int:
        """The verb's work; returns the exit status."""
        raise NotImplementedError

    def start(self) -> None:
        self.exit_with(self.run)

    def manager(self) -> SandboxManager:
        return SandboxManager.from_config(self.config)


class DoctorApp(_SandboxCommand):
    name = "jupyter-sandbox-doctor"
    description = "Check that Sandboxed Python kernels can run here, and how safely."
    smoke = Bool(True, config=True, help="Also start a real sandbox on each registered runtime.")
    flags = {"no-smoke": ({"DoctorApp": {"smoke": False}}, "Skip starting real sandboxes.")}

    def run(self) -> int:
        async def check() -> int:
            manager = self.manager()
            try:
                checks = await run_checks(manager, smoke=self.smoke)
            finally:
                await manager.close()
            for item in checks:
                print(item.line())
            return exit_code(checks)

        return asyncio.run(check())


class BuildImageApp(_SandboxCommand):
    name = "jupyter-sandbox-build-image"
    description = "Build the sandbox image locally; no container registry is needed."
    examples = """
    jupyter sandbox build-image
    jupyter sandbox build-image --requirements=ml.txt --tag=jupyter-sandbox/python-ml:1
    """
    classes = [SandboxSettings, ImageBuilder, PackageImageBuilder]
    force = Bool(False, config=True, help="Rebuild even when an image of the same recipe exists.")
    base = Unicode(
        "", config=True, help="Base image (e.g. python:3.11-slim-bookworm); empty: debootstrap."
    )
    requirements = List(
        Unicode(),
        config=True,
        help="""Requirements files (one package per line) of Python packages to add to the
        sandbox image; the result is a new image, named by --tag.""",
    )
    flags = {"force": ({"BuildImageApp": {"force": True}}, "Rebuild even when up to date.")}
    aliases = {
        "base": "BuildImageApp.base",
        "tag": "ImageBuilder.tag",
        "requirements": "BuildImageApp.requirements",
        "from": "PackageImageBuilder.extends",
    }

    def run(self) -> int:
        tagged = "tag" in self.config.get("ImageBuilder", {})
        if self.requirements and not tagged:
            raise ImageBuildError(
                "--requirements makes a new image: name it with --tag, e.g. "
                "--tag=jupyter-sandbox/python-ml:1 (the standard image stays as kernels expect)"
            )
        # read and checked before anything is built
        requirements = read_requirements([Path(name) for name in self.requirements])
        engine = DockerEngine(timeout=BUILD_TIMEOUT)
        try:
            if requirements:
                self._build_with_packages(engine, requirements)
            else:  # without --tag: the image kernels will ask for
                tag = None if tagged else SandboxSettings(parent=self).image
                self._standard_builder(engine, tag).build(force=self.force)
        finally:
            engine.close()
        return 0

    def _standard_builder(self, engine: DockerEngine, tag: str | None) -> ImageBuilder:
        extra: dict[str, Any] = {"base_image": self.base} if self.base else {}
        if tag is not None:
            extra["tag"] = tag
        return ImageBuilder(engine.client, parent=self, **extra)

    def _build_with_packages(self, engine: DockerEngine, requirements: list[str]) -> None:
        tag = str(self.config["ImageBuilder"]["tag"])
        packages = PackageImageBuilder(engine.client, parent=self)
        packages.check_tag(tag)
        if packages.extends == DEFAULT_IMAGE:  # the standard image, brought up to date first
            self._standard_builder(engine, DEFAULT_IMAGE).build()
        packages.build(tag, requirements, force=self.force)


class ListApp(_SandboxCommand):
    name = "jupyter-sandbox-list"
    description = "List your sandboxes."
    owner = Unicode(
        config=True,
        help="Whose sandboxes to list (default: JUPYTER_SANDBOX_OWNER, JUPYTERHUB_USER or the OS user).",
    )
    aliases = {"owner": "ListApp.owner"}

    def run(self) -> int:
        async def show() -> int:
            manager = self.manager()
            try:
                rows = await manager.list_sandboxes(self.owner or default_owner())
            finally:
                await manager.close()
            print_table(SANDBOX_COLUMNS, (_row(manager, info) for info in rows))
            return 0

        return asyncio.run(show())


def _row(manager: SandboxManager, info: SandboxInfo) -> tuple[str, ...]:
    """A sandbox's row in ``list``: what it is, what it serves, and why it is an orphan."""
    state = manager.read_state(info.sandbox_id)
    orphan = orphan_reason(manager, info, state, LIST_GRACE)
    use = "orphan" if orphan else _use_of(state, manager)
    # Last, why an orphan is one: `jupyter sandbox gc` (or the next start of a
    # kernel or verb) removes it.
    why = f"  (orphan: {orphan})" if orphan else ""
    # The image and the context are labels a caller chose: escaped, as is all
    # else a row shows that is not the server's own.
    return (
        info.sandbox_id,
        info.runtime,
        info.status,
        info.created,
        shown(use),
        shown(info.image) + why,
    )


def _use_of(state: SandboxState, manager: SandboxManager) -> str:
    """What a sandbox serves: a warm-pool member, a named context, or a kernel's own."""
    if unclaimed_member(state):
        return "warm pool"
    attached = "attached" if kernel_attached(manager.settings.state_path, state) else "detached"
    if state.get("ephemeral") or not state.get("context"):
        return f"kernel ({attached})"
    return f"context {state['context']} ({attached})"[:24]


class GcApp(_SandboxCommand):
    name = "jupyter-sandbox-gc"
    description = (
        "Remove orphaned sandboxes, failed starts, stale state directories and the build "
        "containers of killed image builds."
    )

    def run(self) -> int:
        async def reap() -> tuple[ReapReport, list[str]]:
            manager = self.manager()
            try:
                report = await reap_orphans(manager)
                # Image builds run on Docker whatever the sandboxes' backend is (images/build.py);
                # its engine's settings are the Docker backend's (c.DockerBackend.engine_timeout).
                if isinstance(manager.backend, DockerBackend):
                    return report, remove_leftover_build_containers(manager.backend.engine.client)
                engine = DockerEngine()
                try:
                    return report, remove_leftover_build_containers(engine.client)
                finally:
                    engine.close()
            finally:
                await manager.close()

        report, builds = asyncio.run(reap())
        print(
            f"removed {len(report.containers)} container(s), {len(report.directories)} "
            f"state director(ies), {len(report.processes)} stray runtime process(es), "
            f"{len(report.locks)} free context lock file(s), {len(builds)} leftover build "
            "container(s)"
        )
        return 0


def verbs_of(module: ModuleType) -> list[type[OwnerCommand]]:
    """The verbs a module of one group's verbs defines (cli/files.py...), in the order it
    defines them (the order its help lists them in)."""
    return [
        app
        for app in vars(module).values()
        if isinstance(app, type)
        and issubclass(app, OwnerCommand)
        and app.__module__ == module.__name__
        and app.verb
    ]


class _CommandGroup(SandboxCommandApp):
    """An app that only holds verbs: without one, it lists them and exits with status 2.

    A group names its verbs' apps in ``verbs``; its ``subcommands`` describe each as the app
    describes itself."""

    verbs: ClassVar[dict[str, type[SandboxCommandApp]]] = {}
    # Verbs that are apps of another kind (a server), by import name and description.
    other_verbs: ClassVar[dict[str, tuple[str, str]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.subcommands = {verb: (app, app.description) for verb, app in cls.verbs.items()}
        cls.subcommands.update(cls.other_verbs)

    def start(self) -> None:
        if self.subapp is None:
            self.print_subcommands()
            self.exit(2)
        super().start()


def verb_group(module: ModuleType, topic: str) -> type[_CommandGroup]:
    """The app of the group of verbs ``module`` defines (verbs_of): named by their group
    (``jupyter sandbox files``), described as ``topic`` and the list of its verbs."""
    apps = verbs_of(module)
    group = apps[0].group
    found: dict[str, type[SandboxCommandApp]] = {app.verb: app for app in apps}

    class Group(_CommandGroup):
        name = f"jupyter-sandbox-{group}"
        description = f"{topic}: {', '.join(found)}."
        verbs = found

    Group.__name__ = Group.__qualname__ = f"{group.capitalize()}App"
    return Group


# The groups of verbs that have a module each, as `jupyter sandbox --help` lists them.
SnapshotApp = verb_group(cli_snapshots, "Workspace snapshots")
FilesApp = verb_group(cli_files, "Files in a running sandbox")
BackgroundApp = verb_group(cli_background, "Commands left running in a sandbox")
CredentialsApp = verb_group(cli_credentials, "Credentials the host proxy adds to your requests")


class SandboxApp(_CommandGroup):
    name = "jupyter-sandbox"
    description = "Manage the containers that Sandboxed Python kernels run in."
    verbs = {
        "doctor": DoctorApp,
        "build-image": BuildImageApp,
        "install-kernel": InstallKernelApp,
        "list": ListApp,
        "gc": GcApp,
        "stop": cli_sandboxes.StopApp,
        "restart": cli_sandboxes.RestartApp,
        "exec": cli_sandboxes.ExecApp,
        "run": cli_code.RunApp,
        "terminal": cli_terminal.TerminalApp,
        "ports": cli_ports.PortsApp,
        "forward": cli_ports.ForwardApp,
        "pause": cli_sandboxes.PauseApp,
        "resume": cli_sandboxes.ResumeApp,
        "snapshot": SnapshotApp,
        "files": FilesApp,
        "background": BackgroundApp,
        "credentials": CredentialsApp,
        "mcp": McpApp,
    }
    other_verbs = {
        "gateway": (
            "jupyter_sandbox.gateway.app.SandboxGateway",
            "Serve hub users Sandboxed Python kernels and sandboxes (the kernel gateway API).",
        )
    }


main = SandboxApp.launch_instance

if __name__ == "__main__":
    main()
