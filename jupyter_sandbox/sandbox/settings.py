"""Settings shared by the kernel process and the server extension.

Both read ``jupyter_sandbox_config.py`` (e.g. ``c.SandboxSettings.memory_limit = "4g"``). Every
isolation default (docs/explanation/design.md, "Isolation defaults") is a setting here; relaxing
one is explicit.
"""

from __future__ import annotations

import copy
import fnmatch
import logging
import os
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_config_path, jupyter_runtime_dir
from traitlets import Bool, Dict, Enum, Float, Integer, List, TraitError, Unicode, default, validate
from traitlets.config import Config, LoggingConfigurable
from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

from jupyter_sandbox._version import __version__
from jupyter_sandbox.protocol.errors import InvalidSettingError
from jupyter_sandbox.sandbox.host.size_caps import can_cap
from jupyter_sandbox.sandbox.images.reference import image_reference, same_image
from jupyter_sandbox.sandbox.limits import (
    LIMIT_FIELDS,
    LimitMaximums,
    SandboxLimits,
    check_disk_size,
    format_size,
    host_memory_bytes,
    host_pid_max,
    parse_size,
)

RUNTIMES = ("runsc", "runc")
# How banners and kernelspecs name them.
RUNTIME_NAMES = {"runsc": "gVisor (runsc)", "runc": "runc, sharing the host kernel"}
CONFIG_FILE = "jupyter_sandbox_config.py"
DEFAULT_IMAGE = f"jupyter-sandbox/python:{__version__}"
# The uid/gid the image's non-root user has; used when the host user is root.
SANDBOX_UID = 10001
# Settings of the Docker backend that were SandboxSettings' (old name: configurable class and
# new name); with_moved_settings reads them under the old name still.
MOVED_SETTINGS = {
    "docker_runtime_names": ("DockerBackend", "runtime_names"),
    "engine_timeout": ("DockerBackend", "engine_timeout"),
    "engine_threads": ("DockerBackend", "engine_threads"),
    "engine_threads_per_owner": ("DockerBackend", "engine_threads_per_owner"),
    "engine_long_threads": ("DockerBackend", "engine_long_threads"),
    "engine_long_threads_per_owner": ("DockerBackend", "engine_long_threads_per_owner"),
}


class SandboxSettings(LoggingConfigurable):
    """How sandboxes are made: runtime, image, limits and hardening."""

    runtime = Enum(
        RUNTIMES,
        default_value="runsc",
        config=True,
        help="""OCI runtime for new sandboxes: 'runsc' (gVisor, a user-space kernel between the
        code and the host; the default) or 'runc' (plain namespaces and cgroups: lighter, but the
        code talks to the host kernel directly).""",
    )
    docker_runtime_names = Dict(
        key_trait=Enum(RUNTIMES),
        value_trait=Unicode(),
        default_value={"runsc": "runsc", "runc": "runc"},
        config=True,
        help="Deprecated: use DockerBackend.runtime_names (this name still works, with a warning).",
    )
    image = Unicode(
        DEFAULT_IMAGE,
        config=True,
        help="""Image of new sandboxes. It must exist locally: build it with
        'jupyter sandbox build-image'.""",
    )
    allowed_images = List(
        Unicode(),
        default_value=["jupyter-sandbox/*"],
        config=True,
        help="""Images a request (REST body, kernel environment, agent code) may choose, as
        shell-style patterns ('jupyter-sandbox/*', 'myorg/python:3.*'). The configured 'image' is
        always allowed; an empty list allows only it. Any local image could otherwise be asked
        for: keep this to images made for sandboxes.""",
    )
    proxy_memory_limit = Unicode(
        "1g",
        config=True,
        help="""Memory the host process of each Sandboxed Python kernel (the proxy that reads
        its sandbox's messages) may allocate (bytes, or with a unit: '1g'). A message part from
        the sandbox larger than a quarter of it drops the sandbox's connection (the message is
        lost, the kernel runs on); a message that still needs more ends that process, and
        Jupyter starts the kernel again (kernel/memory_bound.py). Keep it several times
        max_cell_output. '0' means no limit.""",
    )
    max_cell_output = Unicode(
        "20m",
        config=True,
        help="""Output one cell may send to frontends (bytes, or with a unit: '20m'); past it the
        rest of that cell's output is dropped and the frontend is told so, while the cell runs
        on. '0' means no limit. Protects browsers, the server and notebook files from floods.""",
    )
    memory_limit = Unicode(
        "2g",
        config=True,
        help="""Memory a sandbox may use (bytes, or with a unit: '512m', '2g'). Swap is set equal,
        so the sandbox gets no swap. Files in the tmpfs /tmp count against it too.""",
    )
    cpus = Float(
        1.0,
        config=True,
        help="CPU time a sandbox may use, in cores (0.5 = half a core). At most the host's cores.",
    )
    cpu_period_ms = Integer(
        500,
        min=100,
        max=1000,
        config=True,
        help="""Window over which the cpus limit is enforced, in milliseconds (the kernel's CFS
        period; Docker's default is 100). In each window a sandbox may use cpus x window of CPU
        time on any cores, so a longer window lets a short burst use more than one core: a
        kernel's start, which under runsc also spends gVisor's own CPU, is quicker at 500 than
        at 100 (docs/explanation/performance.md, "Figures behind the code"). The price: a sandbox
        that has spent its share waits out the rest of the window (at most window x (1 - cpus /
        host cores)) before it runs again.""",
    )
    pids_limit = Integer(
        256,
        config=True,
        help="""Processes and threads a sandbox may hold. Under runc it is the pids cgroup limit;
        under runsc gVisor enforces it as RLIMIT_NPROC inside the sandbox, because the host pids
        cgroup also counts gVisor's own threads (see runsc_host_pids_limit).""",
    )
    runsc_host_pids_limit = Integer(
        4096,
        config=True,
        help="""Host pids cgroup limit of a runsc sandbox: bounds gVisor's sentry and gofer
        threads, not the code inside. Too low a value makes gVisor itself fail under load.""",
    )
    nofile_limit = Integer(
        1024, config=True, help="Open files per process inside the sandbox (RLIMIT_NOFILE)."
    )
    tmp_size = Unicode(
        "256m",
        config=True,
        help="Size cap of the in-memory /tmp (bytes or with a unit). Counts against memory.",
    )
    workspace_size = Unicode(
        "1g",
        config=True,
        help="""Size cap of the writable /workspace (bytes or with a unit). Writes past it fail
        with ENOSPC inside the sandbox (for a copy-on-write /workspace, when cap_host_writes is
        in force). Counts against memory.""",
    )
    # The most a request (REST ``limits``, JUPYTER_SANDBOX_LIMITS, install-kernel --limits) may
    # ask for: each limit's own range is the same on every host, these are this host's.
    max_memory_limit = Unicode(
        config=True,
        help="""Most memory one sandbox may be given (bytes, or with a unit: '8g'); a request for
        more is refused. Default: the host's physical memory (at least memory_limit's default).""",
    )
    max_cpus = Float(
        config=True,
        help="Most CPUs one sandbox may be given, in cores. Default: the host's cores.",
    )
    max_pids_limit = Integer(
        config=True,
        help="""Most processes and threads one sandbox may be given (pids_limit). Default: an
        eighth of the host's kernel.pid_max, at most 4096 (at least 256): every process a
        sandbox holds is one of the host's.""",
    )
    max_nofile_limit = Integer(
        65536,
        config=True,
        help="Most open files per process one sandbox may be given (nofile_limit).",
    )
    max_tmp_size = Unicode(
        config=True,
        help="""Largest in-memory /tmp one sandbox may be given (bytes, or with a unit). Default:
        a quarter of the host's physical memory (at least 256m): /tmp is held in memory.""",
    )
    max_workspace_size = Unicode(
        config=True,
        help="""Largest /workspace one sandbox may be given (bytes, or with a unit). Default: a
        quarter of the host's physical memory (at least 1g): with cap_host_writes its writes
        are held in memory.""",
    )
    workspace_mode = Enum(
        ("copy-on-write", "read-only", "read-write", "none"),
        default_value="copy-on-write",
        config=True,
        help="""What /workspace shows of the directory the kernel was launched in (the notebook's
        directory under JupyterLab and nbclient). 'copy-on-write': its files are visible, writes
        stay in the sandbox and never reach them. 'read-only': visible, not writable.
        'read-write': writes reach the host's files -- sandbox code can then change or delete
        them; use it only for code you would run on the host. 'none': an empty /workspace of
        workspace_size bytes. The filesystem root, your home directory itself and system
        directories are never shown.""",
    )
    cap_host_writes = Bool(
        True,
        config=True,
        help="""Bound what a sandbox writes to the host: its io/ directory (/run/sandbox inside,
        io_size) and the upper layer of a copy-on-write /workspace (workspace_size) are each a
        tmpfs of that size, so writes past it fail with ENOSPC instead of filling the state
        directory's disk; they count against the sandbox's memory. Needs the server (and a
        kernel that starts its own sandbox) to run as root, in the engine's mount namespace:
        otherwise both stay uncapped on the state directory's filesystem and `jupyter sandbox
        doctor` says why.""",
    )
    io_size = Unicode(
        "2g",
        config=True,
        help="""Size cap of a sandbox's io/ directory, /run/sandbox inside (bytes or with a unit;
        see cap_host_writes). It holds the kernel's sockets and connection file, and with the
        'host-dir' snapshot transport an archive being restored; one that does not fit is
        restored over the slower exec stream instead.""",
    )
    memory_snapshots = Bool(
        False,
        config=True,
        help="""Make runsc sandboxes ready for memory snapshots (checkpoint and restore of the live
        kernel; docs/snapshots.md). Their kernel then listens on TCP inside the sandbox, behind
        a bridge in the sandbox's supervisor that owns the host-facing sockets, because gVisor
        cannot checkpoint a sandbox holding host sockets. The price: every message crosses
        a ZMQ proxy inside the sandbox, which lengthens every execute round trip under runsc
        (docs/explanation/performance.md, "Figures behind the code"), so it is off by default.
        Needs the Docker daemon's experimental mode (scripts/engine-bootstrap.sh turns it on) and
        runsc 20240729 or later; runc sandboxes are never bridged.""",
    )
    read_only_root = Bool(
        True,
        config=True,
        help="""Mount the image's root filesystem read-only. Turning this off lets sandbox code
        modify the image's files for its own lifetime (e.g. pip install into the venv).""",
    )
    sandbox_uid = Integer(
        None,
        allow_none=True,
        config=True,
        help=f"""uid (and gid) the kernel runs as inside the sandbox. None picks: the host user's
        own uid when it is not root, {SANDBOX_UID} (the image's 'sandbox' user) when it is.
        0 (root) is refused.""",
    )
    environment = Dict(
        value_trait=Unicode(),
        default_value={},
        config=True,
        help="""Extra environment variables for sandboxes. Nothing of the server's or kernel's
        own environment is passed in; only these and a fixed minimal set.""",
    )
    # Moved to DockerBackend: still read from a configuration, with a warning (MOVED_SETTINGS).
    engine_timeout = Float(
        30.0, config=True, help="Deprecated: use DockerBackend.engine_timeout (seconds)."
    )
    engine_threads = Integer(
        16, config=True, help="Deprecated: use DockerBackend.engine_threads (a count)."
    )
    engine_threads_per_owner = Integer(
        8, config=True, help="Deprecated: use DockerBackend.engine_threads_per_owner (a count)."
    )
    engine_long_threads = Integer(
        128, config=True, help="Deprecated: use DockerBackend.engine_long_threads (a count)."
    )
    engine_long_threads_per_owner = Integer(
        32,
        config=True,
        help="Deprecated: use DockerBackend.engine_long_threads_per_owner (a count).",
    )
    start_timeout = Float(
        60.0,
        config=True,
        help="""Seconds from creating a sandbox to its kernel answering kernel_info. Past it the
        sandbox is removed and the start reported as failed.""",
    )
    stop_timeout = Integer(
        5,
        config=True,
        help="Seconds a stopping sandbox gets after SIGTERM before it is killed.",
    )
    log_max_size = Unicode(
        "1m", config=True, help="Cap of the container's log kept by the engine (one file)."
    )
    state_dir = Unicode(
        config=True,
        help="""Host directory holding one 0700 directory per sandbox (its kernel's sockets and
        its state file). Default: <jupyter runtime dir>/sandboxes. Keep the path short: Unix
        socket paths are limited to about 100 bytes.""",
    )

    @default("state_dir")
    def _default_state_dir(self) -> str:
        return os.path.join(jupyter_runtime_dir(), "sandboxes")

    @default("max_memory_limit")
    def _default_max_memory(self) -> str:
        return format_size(max(host_memory_bytes(), 2 * 1024**3))

    @default("max_cpus")
    def _default_max_cpus(self) -> float:
        return float(os.cpu_count() or 1)

    @default("max_pids_limit")
    def _default_max_pids(self) -> int:
        return max(256, min(4096, host_pid_max() // 8))

    @default("max_tmp_size")
    def _default_max_tmp(self) -> str:
        return format_size(max(host_memory_bytes() // 4, 256 * 1024**2))

    @default("max_workspace_size")
    def _default_max_workspace(self) -> str:
        return format_size(max(host_memory_bytes() // 4, 1024**3))

    @validate("image")
    def _full_reference(self, proposal: dict[str, object]) -> str:
        try:
            return image_reference(str(proposal["value"]))
        except InvalidSettingError as exc:
            raise TraitError(f"SandboxSettings.image: {exc.message}") from None

    @validate("sandbox_uid")
    def _refuse_root(self, proposal: dict[str, object]) -> int | None:
        value = proposal["value"]
        if value == 0:
            raise TraitError("sandbox_uid 0 (root) is refused: sandboxes never run as root")
        return value  # type: ignore[return-value]

    @property
    def effective_uid(self) -> int:
        """The uid the kernel runs as inside the sandbox."""
        if self.sandbox_uid is not None:
            return int(self.sandbox_uid)
        host_uid = os.getuid()
        return host_uid if host_uid != 0 else SANDBOX_UID

    @property
    def capping_host_writes(self) -> bool:
        """Whether sandboxes started here get the caps of ``cap_host_writes``."""
        return self.cap_host_writes and can_cap()

    @property
    def io_bytes(self) -> int:
        size = parse_size(self.io_size, "io_size")
        check_disk_size("io_size", size)
        return size

    @property
    def proxy_memory_bytes(self) -> int:
        return parse_size(self.proxy_memory_limit, "proxy_memory_limit")

    @property
    def max_cell_output_bytes(self) -> int:
        return parse_size(self.max_cell_output, "max_cell_output")

    def check_image(self, image: str) -> str:
        """``image`` in its full form (images/reference.py) if a request may choose it (see
        ``allowed_images``); InvalidSettingError otherwise."""
        full = image_reference(image)
        if full == self.image or any(
            fnmatch.fnmatchcase(image, p) or fnmatch.fnmatchcase(full, p) or same_image(full, p)
            for p in self.allowed_images
        ):
            return full
        allowed = ", ".join([self.image, *self.allowed_images])
        raise InvalidSettingError(
            f"image {image!r} is not allowed here (allowed: {allowed}); ask the operator to add "
            "it to c.SandboxSettings.allowed_images"
        )

    def default_limits(self) -> SandboxLimits:
        """The configured limits, checked (raises InvalidSettingError when out of range)."""
        settings = {name: getattr(self, setting) for name, (_, setting, _) in LIMIT_FIELDS.items()}
        return SandboxLimits.parse(**settings)

    def limit_maximums(self) -> LimitMaximums:
        """The most of each limit one sandbox may be given here (the ``max_*`` settings)."""
        return LimitMaximums(
            memory_bytes=parse_size(self.max_memory_limit, "SandboxSettings.max_memory_limit"),
            cpus=self.max_cpus,
            pids=self.max_pids_limit,
            nofile=self.max_nofile_limit,
            tmp_bytes=parse_size(self.max_tmp_size, "SandboxSettings.max_tmp_size"),
            workspace_bytes=parse_size(
                self.max_workspace_size, "SandboxSettings.max_workspace_size"
            ),
        )

    def requested_limits(self, asked: dict[str, Any] | None) -> SandboxLimits:
        """The configured limits with those a request ``asked`` for in their place, each
        checked against its range and its maximum (InvalidSettingError names the one over)."""
        limits = self.default_limits().with_overrides(**(asked or {}))
        self.limit_maximums().check(limits, asked=set(asked or {}))
        return limits

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir)


def with_moved_settings(config: Config, log: logging.Logger | logging.LoggerAdapter[Any]) -> Config:
    """``config`` with each setting of MOVED_SETTINGS that it sets under its old name set under
    its new one too, unless set there already (the new name wins), and a warning for each (as
    jupyter_server warns of a renamed trait). ``config`` itself is left as it was."""
    moved = copy.deepcopy(config)  # merge() would share its sections with ``config``
    old_section = config.get("SandboxSettings", {})
    for old, (section, new) in MOVED_SETTINGS.items():
        if old not in old_section:
            continue
        log.warning("c.SandboxSettings.%s is deprecated: set c.%s.%s instead", old, section, new)
        if new not in config.get(section, {}):
            moved[section][new] = old_section[old]
    return moved


def load_config(extra_paths: list[str] | None = None) -> Config:
    """Merge every ``jupyter_sandbox_config.py`` on Jupyter's config path (later wins).

    The kernel process has no Jupyter application of its own to do this; the server extension
    gets the same files through jupyter_server's own loading. Like that loading under a
    JupyterHub that disables user config (``JUPYTERHUB_DISABLE_USER_CONFIG``, which its spawner
    hands the single-user server and so its kernels), it skips every directory under the
    user's home: a config file is Python the kernel runs on the host, and those directories
    are the user's to write. ``extra_paths`` (read last) are the caller's own choice.
    """
    config = Config()
    directories = list(reversed(jupyter_config_path()))
    if user_config_disabled():
        directories = [path for path in directories if not _under_home(path)]
    for directory in [*directories, *(extra_paths or [])]:
        loader = PyFileConfigLoader(CONFIG_FILE, path=directory)
        try:
            config.merge(loader.load_config())
        except ConfigFileNotFound:
            continue
    return config


# The sections of the configuration a Sandboxed Python kernel reads (from load_config: its
# sandbox's settings, network, snapshots, quotas, engine, headless pool). A kernel is a process
# of its own with no command line for them and reads jupyter_sandbox_config.py only.
KERNEL_SECTIONS = (
    "SandboxSettings",
    "NetworkSettings",
    "SnapshotSettings",
    "SandboxQuotas",
    "DockerBackend",
    "HeadlessPool",
    "SandboxManager",
)


def settings_kernels_miss(server_config: Config, kernel_config: Config) -> list[str]:
    """``Class.trait`` of each setting of KERNEL_SECTIONS that a server's configuration
    (its command line, jupyter_server_config.py, and jupyter_sandbox_config.py) gives a value
    the kernels' (``kernel_config``, load_config's) does not: the server's own sandboxes would
    have it and a notebook's kernel would not."""
    missed = []
    for section in KERNEL_SECTIONS:
        kernels = kernel_config.get(section, {})
        for name, value in server_config.get(section, {}).items():
            if name not in kernels or kernels[name] != value:
                missed.append(f"{section}.{name}")
    return sorted(missed)


def user_config_disabled() -> bool:
    """Whether JupyterHub's spawner said to ignore config in the user's home (as jupyterhub's
    singleuser reads ``JUPYTERHUB_DISABLE_USER_CONFIG``: any value but empty, 0 or false)."""
    value = os.environ.get("JUPYTERHUB_DISABLE_USER_CONFIG", "")
    return value.strip().lower() not in ("", "0", "false")


def _under_home(path: str) -> bool:
    # Resolved both sides, as jupyterhub compares them: a symlinked home, or a path through one.
    home = Path.home().resolve()
    resolved = Path(path).resolve()
    return resolved == home or home in resolved.parents
