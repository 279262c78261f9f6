"""``jupyter sandbox doctor``: can a Sandboxed Python kernel run here, and how safely?

Each check reports ok, warn or fail, what it saw, and for anything not ok the command that fixes
it. The final check starts a real sandbox on each registered runtime, because a configuration
that looks right is not evidence that a kernel runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Literal

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.sandbox_dir import MAX_SOCKET_PATH
from jupyter_sandbox.sandbox.host.size_caps import why_no_caps
from jupyter_sandbox.sandbox.lifecycle.reaper import orphan_reason
from jupyter_sandbox.sandbox.sandbox_access import SandboxLifecycle
from jupyter_sandbox.sandbox.settings import RUNTIMES, SandboxSettings

# Releases carrying the container-escape fixes named in the security checklist (row 39).
MIN_DOCKER = (26, 0, 0)
MIN_RUNC = (1, 2, 8)
# gVisor releases before 2024 have no directfs: every file the kernel's imports open crosses
# the gofer, and a kernel starts ~1.7x slower (Debian 12's own runsc is 20221219).
MIN_RUNSC_RELEASE = 20240101
BOOTSTRAP = "sudo scripts/engine-bootstrap.sh"


@dataclass(frozen=True)
class Check:
    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status.upper():4}  {self.name}: {self.detail}"
        return text + (f"\n      fix: {self.fix}" if self.fix else "")


def version_tuple(text: str) -> tuple[int, ...]:
    """(26, 0, 0) from '26.0.0', '20.10.24+dfsg1', 'runc version 1.1.5+ds1'..."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return ()
    return tuple(int(part or 0) for part in match.groups())


async def run_checks(manager: SandboxLifecycle, *, smoke: bool = True) -> list[Check]:
    """Every check, in order; stops early only when the engine does not answer."""
    settings = manager.settings
    checks: list[Check] = []
    try:
        facts = await manager.backend.engine_facts()
    except SandboxError as exc:
        return [Check("engine", "fail", exc.message, BOOTSTRAP)]
    checks.append(Check("engine", "ok", f"Docker {facts.version}, cgroup v{facts.cgroup_version}"))
    checks.extend(outdated_runtimes(facts.version))
    if not facts.swap_limit:
        checks.append(
            Check(
                "swap limit",
                "warn",
                "the kernel cannot limit swap: a sandbox could use swap beyond its memory limit",
                "boot with swapaccount=1, or run without swap",
            )
        )

    registered = facts.runtimes
    usable = []
    for runtime in RUNTIMES:
        name = manager.backend.runtime_name(runtime)
        if name in registered:
            detail = f"registered as '{name}'"
            if runtime == "runsc":
                detail += f" ({command_version(['runsc', '--version']) or 'version unknown'})"
            checks.append(Check(f"runtime {runtime}", "ok", detail))
            usable.append(runtime)
        else:
            default = runtime == settings.runtime
            checks.append(
                Check(
                    f"runtime {runtime}",
                    "fail" if default else "warn",
                    f"not registered with the engine{' (it is the default runtime)' if default else ''}",
                    BOOTSTRAP,
                )
            )

    if await manager.backend.image_exists(settings.image):
        checks.append(Check("image", "ok", settings.image))
    else:
        checks.append(
            Check(
                "image",
                "fail",
                f"{settings.image} is not on this machine",
                "jupyter sandbox build-image",
            )
        )
        smoke = False

    socket_path = len(str(settings.state_path)) + len("/0123456789ab/io/kernel-1")
    if socket_path > MAX_SOCKET_PATH:
        checks.append(
            Check(
                "state directory",
                "fail",
                f"{settings.state_path} makes socket paths too long ({socket_path} bytes)",
                "set c.SandboxSettings.state_dir to a shorter path",
            )
        )
    else:
        checks.append(Check("state directory", "ok", str(settings.state_path)))
    checks.append(host_write_caps(settings))
    checks.append(await orphans(manager))

    if smoke:
        for runtime in usable:
            checks.append(await _smoke(manager, runtime))
    return checks


async def orphans(manager: SandboxLifecycle) -> Check:
    """Sandboxes of this state directory that nothing will use or remove again (reaper.py)."""
    found = []
    for info in await manager.backend.list_sandboxes():
        if manager.holds(info):
            state = manager.read_state(info.sandbox_id)
            reason = orphan_reason(manager, info, state, manager.settings.start_timeout)
            if reason is not None:
                found.append(f"{info.sandbox_id} ({reason})")
    if not found:
        return Check("orphaned sandboxes", "ok", "none")
    return Check(
        "orphaned sandboxes",
        "warn",
        f"{len(found)}: {', '.join(found[:10])}{' ...' if len(found) > 10 else ''}",
        "jupyter sandbox gc (the next kernel or `jupyter sandbox` verb started also removes them)",
    )


def host_write_caps(settings: SandboxSettings) -> Check:
    """Whether a sandbox's writes to its host directory are bounded (host/size_caps.py)."""
    if settings.capping_host_writes:
        return Check(
            "host write caps",
            "ok",
            f"/run/sandbox capped at {settings.io_size}, a copy-on-write /workspace at the "
            "workspace size (tmpfs)",
        )
    why = "turned off" if not settings.cap_host_writes else why_no_caps()
    return Check(
        "host write caps",
        "warn",
        f"{why}: a sandbox can fill the disk of {settings.state_path} through /run/sandbox "
        "and a copy-on-write /workspace",
        "run the server as root, in the engine's mount namespace, or give the state directory "
        "a size-limited filesystem of its own (docs/explanation/isolation.md)",
    )


def outdated_runtimes(docker_version: str) -> list[Check]:
    """Warnings for a Docker engine or runc older than the releases that fix known container
    escapes (checklist row 39), and for a gVisor without directfs. The doctor shows them; the
    server logs them when it starts."""
    found = []
    if version_tuple(docker_version) < MIN_DOCKER:
        found.append(
            Check(
                "engine version",
                "warn",
                f"Docker {docker_version} predates 26.0.0, which fixes known container escapes (CVE-2024-29018 and others)",
                "upgrade Docker to 26.0.0 or later (or 25.0.4 / 23.0.11)",
            )
        )
    runc = command_version(["runc", "--version"])
    if runc and version_tuple(runc) < MIN_RUNC:
        found.append(
            Check(
                "runc version",
                "warn",
                f"runc {'.'.join(map(str, version_tuple(runc)))} predates 1.2.8, which fixes known container escapes",
                "upgrade runc to 1.2.8 or later; gVisor (runsc) does not depend on it for isolation",
            )
        )
    release = runsc_release(command_version(["runsc", "--version"]))
    if release and release < MIN_RUNSC_RELEASE:
        found.append(
            Check(
                "runsc version",
                "warn",
                f"gVisor {release} predates directfs: sandboxed kernels start ~1.7x slower than under a 2024 release",
                "on Debian 12: apt-get install -t bookworm-backports runsc (what "
                "scripts/engine-bootstrap.sh installs)",
            )
        )
    return found


def runsc_release(version_line: str) -> int | None:
    """20221219 from 'runsc version 0.0~20221219.0' or 'runsc version release-20240729.0'."""
    match = re.search(r"(?<!\d)(\d{8})(?!\d)", version_line)
    return int(match.group(1)) if match else None


async def _smoke(manager: SandboxLifecycle, runtime: str) -> Check:
    started = time.monotonic()
    try:
        sandbox = await manager.create("doctor", runtime=runtime, purpose="doctor")
    except SandboxError as exc:
        return Check(
            f"kernel on {runtime}", "fail", exc.message, "jupyter sandbox doctor --log-level=DEBUG"
        )
    try:
        elapsed = time.monotonic() - started
        version = sandbox.kernel_info.get("language_info", {}).get("version", "?")
        return Check(f"kernel on {runtime}", "ok", f"Python {version} answered in {elapsed:.2f}s")
    finally:
        await manager.remove("doctor", sandbox.sandbox_id)


def command_version(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.splitlines()[0].strip() if out else ""


def exit_code(checks: list[Check]) -> int:
    """Non-zero when something stops a kernel from running (any failed check)."""
    return 1 if any(c.status == "fail" for c in checks) else 0
