"""The Docker backend: sandboxes as Docker containers under runsc (gVisor) or runc.

Every call goes through :class:`DockerEngine` (one executor, a time limit each). Containers are
named ``jupyter-sandbox-<id>`` and carry the project's labels; a container without them is never
touched, even when asked for by name. What a spec becomes in docker-py's arguments is in
container_config.py, how the engine's answers become records in records.py, and
exec and archives in exec.py (streamed: stream.py), terminals in
terminal.py, removal in removal.py and checkpoints in checkpoints.py; this
module holds the other calls and their errors.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tarfile
from typing import Any

import docker.errors
from traitlets import Dict, Enum, Float, Integer, Unicode

from jupyter_sandbox.protocol.errors import (
    EngineTimeoutError,
    ImageNotFoundError,
    ProcessNotFoundError,
    RuntimeUnavailableError,
    SandboxError,
    SandboxNotFoundError,
    SandboxStartTimeoutError,
)
from jupyter_sandbox.sandbox import labels
from jupyter_sandbox.sandbox.backends.base import (
    ContainerSpec,
    ExecOptions,
    Feed,
    SandboxBackend,
    Sink,
    Terminal,
    TerminalOptions,
)
from jupyter_sandbox.sandbox.backends.docker import checkpoints as docker_checkpoints
from jupyter_sandbox.sandbox.backends.docker.container_config import (
    container_arguments,
    host_config_arguments,
)
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec import get_tar, put_tar, run_exec
from jupyter_sandbox.sandbox.backends.docker.exec_deadline import supervised_start
from jupyter_sandbox.sandbox.backends.docker.exec_start import start_exec
from jupyter_sandbox.sandbox.backends.docker.pause import pause
from jupyter_sandbox.sandbox.backends.docker.records import (
    facts_from_info,
    info_from_inspect,
    info_from_list_row,
    stats_from_json,
)
from jupyter_sandbox.sandbox.backends.docker.removal import remove_container
from jupyter_sandbox.sandbox.backends.docker.runtime_processes import kill_runsc_processes
from jupyter_sandbox.sandbox.backends.docker.sealed_archive import sealed_tar, why_not_sealed
from jupyter_sandbox.sandbox.backends.docker.stream import stream_exec
from jupyter_sandbox.sandbox.backends.docker.terminal import open_docker_terminal
from jupyter_sandbox.sandbox.backends.docker.unpause import unpause
from jupyter_sandbox.sandbox.backends.records import (
    EngineFacts,
    EngineStats,
    ExecResult,
    SandboxInfo,
)
from jupyter_sandbox.sandbox.programs.exec_marks import mark_of
from jupyter_sandbox.sandbox.settings import DEFAULT_IMAGE, RUNTIMES

log = logging.getLogger(__name__)

# Seconds an archive may take to stream in or out of a sandbox.
ARCHIVE_TIMEOUT = 600.0
# A runsc process is only "stray" once its container has been unknown for this long (seconds).
STRAY_MIN_AGE = 60.0


class DockerBackend(SandboxBackend):
    """Sandboxes on a Docker engine (the default ``SandboxManager.backend_class``).

    Configured as ``c.DockerBackend.*``; these settings were ``SandboxSettings``' before
    (``docker_runtime_names``, ``engine_*``), and those names still work, with a warning
    (settings.MOVED_SETTINGS). ``engine``: a client of the engine to use instead of one made
    from these settings.
    """

    runtime_names = Dict(
        key_trait=Enum(RUNTIMES),
        value_trait=Unicode(),
        default_value={"runsc": "runsc", "runc": "runc"},
        config=True,
        help="""The name each runtime is registered under in the Docker daemon (daemon.json
        'runtimes'). Change it only if your daemon registers gVisor under another name.""",
    )
    engine_timeout = Float(
        30.0,
        config=True,
        help="Seconds any one container-engine call may take before it is abandoned and reported.",
    )
    # The engine's threads (engine.py), each pool shared fairly between owners (fair_share.py).
    engine_threads = Integer(
        16,
        min=1,
        config=True,
        help="""Threads (a count) for the container engine's short calls (inspect, list, create,
        start, remove), all owners together.""",
    )
    engine_threads_per_owner = Integer(
        8,
        min=1,
        config=True,
        help="""Most of engine_threads (a count) one owner's calls hold at once; past it their
        calls wait, and a free thread goes to the owner holding fewest.""",
    )
    engine_long_threads = Integer(
        128,
        min=1,
        config=True,
        help="""Threads (a count) for engine calls that last as long as a command does (commands,
        file operations, streams, directory watches, snapshots), all owners together: each
        such call holds one while it runs.""",
    )
    engine_long_threads_per_owner = Integer(
        32,
        min=1,
        config=True,
        help="""Most of engine_long_threads (a count) one owner's commands, streams and watches
        hold at once; past it the owner's next one waits for one of them to end.""",
    )

    def __init__(self, engine: DockerEngine | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.engine = engine or DockerEngine(
            timeout=self.engine_timeout,
            max_workers=self.engine_threads,
            max_workers_per_owner=self.engine_threads_per_owner,
            max_long=self.engine_long_threads,
            max_long_per_owner=self.engine_long_threads_per_owner,
        )

    def runtime_name(self, runtime: str) -> str:
        return str(self.runtime_names.get(runtime, runtime))

    # -- readiness of the engine itself -------------------------------------------------------

    async def engine_facts(self) -> EngineFacts:
        info = await self.engine.run("read engine info", self._api_call("info"))
        return facts_from_info(info)

    async def check_ready(self, runtime: str, image: str) -> None:
        registered = (await self.engine_facts()).runtimes
        engine_name = self.runtime_name(runtime)
        if engine_name not in registered:
            raise RuntimeUnavailableError(
                f"the Docker engine has no '{engine_name}' runtime (it has: "
                f"{', '.join(sorted(registered)) or 'none'}); register it with "
                "'sudo scripts/engine-bootstrap.sh', or choose runtime 'runc'"
            )
        if not await self.image_exists(image):
            raise ImageNotFoundError(missing_image(image))

    async def image_exists(self, image: str) -> bool:
        try:
            await self.engine.run(f"inspect image {image}", self._api_call("inspect_image", image))
        except docker.errors.NotFound:
            return False
        return True

    # -- lifecycle ----------------------------------------------------------------------------

    async def create(self, sandbox_id: str, spec: ContainerSpec) -> SandboxInfo:
        def create() -> str:
            api = self.engine.client.api
            host_config = api.create_host_config(
                **host_config_arguments(spec, self.runtime_name(spec.runtime))
            )
            created = api.create_container(**container_arguments(spec), host_config=host_config)
            return str(created["Id"])

        try:
            await self.engine.run(f"create sandbox {sandbox_id}", create)
        except docker.errors.NotFound:
            raise ImageNotFoundError(missing_image(spec.image)) from None
        except SandboxError as exc:
            if "runtime" in exc.message and "unknown" in exc.message:
                raise RuntimeUnavailableError(
                    f"the Docker engine does not know runtime '{spec.runtime}': register it with "
                    "'sudo scripts/engine-bootstrap.sh', or choose runtime 'runc'"
                ) from None
            raise
        return await self.inspect(sandbox_id)

    async def start(self, sandbox_id: str) -> None:
        name = labels.container_name(sandbox_id)
        try:
            await self.engine.run(f"start sandbox {sandbox_id}", self._api_call("start", name))
        except EngineTimeoutError:
            raise SandboxStartTimeoutError(
                f"sandbox {sandbox_id} did not start within {self.engine.timeout:g}s: its runtime "
                "hung (seen with runsc --platform=kvm); it is being removed. "
                "'jupyter sandbox doctor' checks the runtimes"
            ) from None
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None

    async def stop(self, sandbox_id: str, timeout: int) -> None:
        await self._on_container("stop", sandbox_id, timeout=timeout)

    async def pause(self, sandbox_id: str) -> None:
        container = labels.container_name(sandbox_id)

        def pause_it() -> None:  # never while an exec starts in it (pause.py)
            pause(self.engine.client.api, self.engine.exec_gate, container)

        try:
            await self.engine.run(f"pause sandbox {sandbox_id}", pause_it)
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None

    async def resume(self, sandbox_id: str) -> None:
        container = labels.container_name(sandbox_id)
        try:  # until the engine stops calling it paused (unpause.py)
            await self.engine.run(
                f"unpause sandbox {sandbox_id}", unpause, self.engine.client.api, container
            )
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None

    async def remove(self, sandbox_id: str) -> None:
        await remove_container(self.engine, sandbox_id)

    # -- checkpoints --------------------------------------------------------------------------

    async def checkpoint(self, sandbox_id: str, name: str, *, leave_running: bool) -> None:
        await docker_checkpoints.checkpoint(self.engine, sandbox_id, name, leave_running)

    async def start_from_checkpoint(self, sandbox_id: str, name: str) -> None:
        await docker_checkpoints.start_from_checkpoint(self.engine, sandbox_id, name)

    async def remove_checkpoint(self, sandbox_id: str, name: str) -> None:
        await docker_checkpoints.remove_checkpoint(self.engine, sandbox_id, name)

    # -- state --------------------------------------------------------------------------------

    async def inspect(self, sandbox_id: str) -> SandboxInfo:
        name = labels.container_name(sandbox_id)
        try:
            raw = await self.engine.run(
                f"inspect sandbox {sandbox_id}", self._api_call("inspect_container", name)
            )
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None
        found = raw["Config"].get("Labels") or {}
        if found.get(labels.SANDBOX_ID) != sandbox_id:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}")
        return info_from_inspect(raw)

    async def list_sandboxes(self, owner: str | None = None) -> list[SandboxInfo]:
        rows = await self.engine.run(
            "list sandboxes",
            self._api_call("containers", all=True, filters=labels.owner_filter(owner)),
        )
        return [
            info_from_list_row(r) for r in rows if (r.get("Labels") or {}).get(labels.SANDBOX_ID)
        ]

    async def logs(self, sandbox_id: str, tail: int = 50) -> str:
        try:
            raw = await self.engine.run(
                f"read logs of sandbox {sandbox_id}",
                self._api_call("logs", labels.container_name(sandbox_id), tail=tail),
            )
        except docker.errors.NotFound:
            return ""
        return bytes(raw).decode(errors="replace")

    # -- running things inside ----------------------------------------------------------------

    async def exec(self, sandbox_id: str, argv: list[str], options: ExecOptions) -> ExecResult:
        return await run_exec(
            self.engine,
            labels.container_name(sandbox_id),
            argv,
            options,
            inspect=lambda: self.inspect(sandbox_id),
        )

    async def spawn(self, sandbox_id: str, argv: list[str], *, environment: dict[str, str]) -> str:
        mark = mark_of(argv)  # a background command, under its supervisor

        def start() -> str:
            container = labels.container_name(sandbox_id)
            with (
                contextlib.nullcontext()
                if mark is None
                else supervised_start(self.engine, container, mark)
            ):
                exec_id, _ = start_exec(
                    self.engine,
                    container,
                    argv,
                    start={"detach": True},
                    stdout=False,
                    stderr=False,
                    environment=environment,
                )
            return exec_id

        try:
            return await self.engine.run(f"start a process in sandbox {sandbox_id}", start)
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None

    async def spawned_exit_code(self, spawn_id: str) -> int | None:
        try:
            found = await self.engine.run(
                "inspect a process in a sandbox", self.engine.client.api.exec_inspect, spawn_id
            )
        except docker.errors.NotFound:
            raise ProcessNotFoundError(f"the engine no longer knows process {spawn_id}") from None
        return None if found.get("Running") else int(found.get("ExitCode") or 0)

    async def exec_stream(
        self,
        sandbox_id: str,
        argv: list[str],
        *,
        timeout: float,
        feed: Feed | None = None,
        sink: Sink | None = None,
    ) -> ExecResult:
        return await stream_exec(
            self.engine,
            labels.container_name(sandbox_id),
            argv,
            timeout=timeout,
            feed=feed,
            sink=sink,
            inspect=lambda: self.inspect(sandbox_id),
        )

    def why_not_sealed(self, runtime: str) -> str:
        return why_not_sealed(runtime)

    async def sealed_archive(
        self, sandbox_id: str, sink: Sink, *, timeout: float, max_members: int
    ) -> ExecResult:
        info = await self.inspect(sandbox_id)
        try:
            return await sealed_tar(
                self.engine,
                labels.container_name(sandbox_id),
                info.runtime,
                sink,
                timeout=timeout,
                max_members=max_members,
                inspect=lambda: self.inspect(sandbox_id),
            )
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None

    async def open_terminal(self, sandbox_id: str, options: TerminalOptions) -> Terminal:
        return await open_docker_terminal(
            self.engine,
            labels.container_name(sandbox_id),
            options,
            user="",  # the container's own user, as for every command
            inspect=lambda: self.inspect(sandbox_id),
        )

    async def stats(self, sandbox_id: str) -> EngineStats:
        # one-shot: the engine answers at once instead of waiting ~2 s for a second sample.
        raw = await self._on_container("stats", sandbox_id, stream=False, one_shot=True)
        return stats_from_json(raw)

    async def put_archive(self, sandbox_id: str, path: str, data: bytes) -> None:
        await put_tar(
            self.engine,
            labels.container_name(sandbox_id),
            path,
            data,
            inspect=lambda: self.inspect(sandbox_id),
            timeout=ARCHIVE_TIMEOUT,
        )

    async def image_file(self, sandbox_id: str, path: str, max_bytes: int) -> bytes | None:
        # The engine's own archive call, on the container before it starts: it reads the image's
        # layers on the host, under runc and runsc alike (a started sandbox's files it cannot).
        name = labels.container_name(sandbox_id)

        def read() -> bytes | None:
            try:
                stream, _stat = self.engine.client.api.get_archive(name, path, chunk_size=65536)
            except docker.errors.NotFound:
                return None
            data = bytearray()
            for chunk in stream:
                data += chunk
                if len(data) > max_bytes + 64 * 1024:  # the file and its tar headers
                    return None
            with tarfile.open(fileobj=io.BytesIO(bytes(data))) as archive:
                members = archive.getmembers()
                if len(members) != 1 or not members[0].isreg():
                    return None  # a link or a directory: not read through
                content = archive.extractfile(members[0])
                return None if content is None else content.read(max_bytes + 1)[:max_bytes]

        return await self.engine.run(f"read {path} of sandbox {sandbox_id}'s image", read)

    async def get_archive(self, sandbox_id: str, path: str, max_bytes: int) -> bytes:
        return await get_tar(
            self.engine,
            labels.container_name(sandbox_id),
            path,
            max_bytes=max_bytes,
            inspect=lambda: self.inspect(sandbox_id),
            timeout=ARCHIVE_TIMEOUT,
        )

    async def end_stray_runtime_processes(self) -> list[int]:
        rows = await self.engine.run(
            "list all containers", self._api_call("containers", all=True, quiet=True)
        )
        known = frozenset(str(r["Id"]) for r in rows)
        return await kill_runsc_processes(keep=known, min_age=STRAY_MIN_AGE)

    async def close(self) -> None:
        self.engine.close()

    # -- helpers ------------------------------------------------------------------------------

    def _api_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            return getattr(self.engine.client.api, method)(*args, **kwargs)

        return call

    async def _on_container(self, method: str, sandbox_id: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.engine.run(
                f"{method} sandbox {sandbox_id}",
                self._api_call(method, labels.container_name(sandbox_id), *args, **kwargs),
            )
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox {sandbox_id}") from None


def missing_image(image: str) -> str:
    """The error for a missing image, naming the command that builds it (no registry needed)."""
    if image == DEFAULT_IMAGE:
        fix = "'jupyter sandbox build-image' (no registry is needed)"
    else:  # an image the operator named: perhaps one with extra packages (images/packages.py)
        fix = (
            f"'jupyter sandbox build-image --tag={image}', with --requirements=FILE for an "
            "image that adds packages to the standard one"
        )
    return f"image '{image}' is not on this machine: build it with {fix}"
