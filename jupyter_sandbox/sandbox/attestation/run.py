"""Running the probe inside a sandbox, and storing the resulting report in its state.

Two ways in. At start, the host puts the probe in the sandbox's ``io/`` directory
(:func:`stage_boot_probe`) and the image's supervisor (sandbox-init.py) runs it right after it
has started the kernel, while the kernel imports: the result waits in ``io/`` when the kernel
first answers (:func:`read_boot_probe`), which saves a ``docker exec`` and a second interpreter
on every start, slow under gVisor above all. Later, or for an image whose supervisor does not do
this, ``docker exec`` pipes the probe into the sandbox's Python (:func:`run_probe`).

The engine's view of the host cgroup comes from its stats, which Docker samples once a second:
a request waits up to a second for the next sample. At start the request is made as the
container starts (:func:`request_engine_sample`) and taken only if it has answered by the time
the kernel does, so that wait never delays a start; a report made without it says so.

Never raises for a probe that fails: an unverified sandbox gets a report saying so, and starting
the sandbox goes on (the report, not an exception, tells the user).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import OutputTooLargeError, SandboxError
from jupyter_sandbox.sandbox.attestation.checks import build_report
from jupyter_sandbox.sandbox.attestation.expected import Expected, expected_from_state
from jupyter_sandbox.sandbox.attestation.report import AttestationReport
from jupyter_sandbox.sandbox.backends.base import ExecOptions, SandboxBackend
from jupyter_sandbox.sandbox.backends.records import EngineStats, SandboxInfo
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, read_untrusted
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.programs import image_programs

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxHost

log = logging.getLogger(__name__)

PROBE_ARGV = image_programs.python_reading_stdin()
# The probe script's parts, joined in this order into the one script the sandbox runs (probe.py,
# last, runs every measurement).
PROBE_PARTS = ("probe_boundaries.py", "probe.py")
FUTURE_IMPORT = b"from __future__ import annotations\n"
# Seconds the probe may take inside the sandbox (measured: ~0.15 s under runc, ~0.3 s under
# runsc on an idle 2-core host; the egress attempts fail at once when there is no route).
PROBE_TIMEOUT = 10.0
# The boot-time probe and its output in io/ (names shared with images/python/sandbox-init.py,
# which renames the probe to attestation-probe.taken when it takes it).
BOOT_PROBE = "attestation-probe.py"
BOOT_RESULT = "attestation.json"
# Seconds to wait, once the kernel answers, for a boot-time result still being written. The
# probe (~0.07 s) starts before the kernel's imports (~0.3-1 s), so it is normally there.
BOOT_RESULT_WAIT = 2.0
BOOT_RESULT_MAX_BYTES = 1 << 20


@functools.lru_cache(maxsize=1)
def probe_source() -> bytes:
    """The probe script's text, as piped into the sandbox's Python: its parts joined in order.

    Each part is a module of this package for the linters and the type checker, so each starts
    with ``from __future__ import annotations``; a script may have that only at its top, so the
    parts' are dropped and one heads the whole.
    """
    here = Path(__file__).parent
    parts = [(here / name).read_bytes().replace(FUTURE_IMPORT, b"", 1) for name in PROBE_PARTS]
    return FUTURE_IMPORT + b"\n".join(parts)


async def run_probe(backend: SandboxBackend, sandbox_id: str, timeout: float) -> dict[str, Any]:
    """The probe's JSON output, or ``{"error": ...}`` saying why there is none."""
    try:
        result = await within(
            backend.exec(
                sandbox_id,
                PROBE_ARGV,
                # Read no further than a result is taken (_parse_probe_output): the sandbox
                # writes it, and the default bound is many times that.
                ExecOptions(
                    timeout=timeout,
                    stdin=probe_source(),
                    supervised=False,
                    max_output=BOOT_RESULT_MAX_BYTES,
                ),
            ),
            timeout + 5,
        )
    except asyncio.TimeoutError:
        return {"error": f"the probe did not finish within {timeout:g}s"}
    except OutputTooLargeError:
        return {"error": "the probe's output is too large"}
    except SandboxError as exc:
        return {"error": f"the probe could not run: {exc.message}"}
    except Exception as exc:  # an unverified sandbox is reported, never fatal
        log.exception("probe of sandbox %s failed", sandbox_id)
        return {"error": f"the probe could not run: {type(exc).__name__}: {exc}"}
    if result.timed_out:
        return {"error": f"the probe did not finish within {timeout:g}s"}
    if result.exit_code != 0:
        detail = result.stderr.decode(errors="replace").strip()[-300:]
        return {"error": f"the probe exited with {result.exit_code}: {detail or 'no message'}"}
    return _parse_probe_output(result.stdout)


def stage_boot_probe(directory: SandboxDirectory) -> None:
    """Give a sandbox about to start the probe, for its supervisor to run at boot."""
    path = directory.io / BOOT_PROBE
    path.write_bytes(probe_source())
    path.chmod(0o444)


async def read_boot_probe(directory: SandboxDirectory) -> dict[str, Any] | None:
    """The boot-time probe's output, once the sandbox's kernel has answered; None when the
    sandbox's supervisor does not run it (an image without it: use :func:`run_probe`).

    The supervisor takes the probe (renames it) before it starts the kernel, so a probe still
    in place when the kernel answers was not taken. ``io/`` is the sandbox's to write, so the
    output is read only at start, before any request of the user reached the kernel; it is
    opened without following links and read with a cap.
    """
    deadline = time.monotonic() + BOOT_RESULT_WAIT
    while True:
        try:
            return _parse_probe_output(await asyncio.to_thread(_read_capped, directory))
        except FileNotFoundError:
            if (directory.io / BOOT_PROBE).exists():
                return None
            if time.monotonic() > deadline:
                return {"error": f"the boot-time probe did not finish within {BOOT_RESULT_WAIT:g}s"}
        except OSError as exc:
            return {"error": f"the boot-time probe's output cannot be read: {exc}"}
        await asyncio.sleep(0.02)


def _read_capped(directory: SandboxDirectory) -> bytes:
    return read_untrusted(directory.io / BOOT_RESULT, BOOT_RESULT_MAX_BYTES)


def _parse_probe_output(stdout: bytes) -> dict[str, Any]:
    """The probe's JSON object, or ``{"error": ...}`` saying what is wrong with it."""
    if len(stdout) > BOOT_RESULT_MAX_BYTES:
        return {"error": "the probe's output is too large"}
    try:  # the sandbox's to write: nesting past the stack and NaN are refused too
        data = strict_json.loads(stdout, max_bytes=BOOT_RESULT_MAX_BYTES)
    except strict_json.MalformedJSONError as exc:
        return {"error": f"the probe's output is not JSON: {exc.message}"}
    if not isinstance(data, dict):
        return {"error": "the probe's output is not a JSON object"}
    if "error" in data and not isinstance(data.get("fields"), dict):
        return {"error": f"the probe failed: {str(data['error'])[:300]}"}
    if not isinstance(data.get("fields"), dict):
        return {"error": "the probe's output has no fields"}
    data.pop("error", None)
    return data


async def attest(
    backend: SandboxBackend,
    sandbox_id: str,
    expected: Expected | None,
    *,
    timeout: float = PROBE_TIMEOUT,
    probe: dict[str, Any] | None = None,
    info: SandboxInfo | None = None,
    engine_sample: asyncio.Future[EngineStats | None] | None = None,
) -> AttestationReport:
    """Probe one running sandbox (unless the boot-time ``probe`` output is given) and compare
    with ``expected``; ``info`` is what the engine just said of it, when the caller asked, and
    ``engine_sample`` a stats request made earlier (:func:`request_engine_sample`), used only if
    it has answered.
    Never raises SandboxError."""
    start = time.monotonic()

    async def given(value: Any) -> Any:
        return value

    ran_by = "the sandbox's supervisor at boot" if probe is not None else "docker exec"
    output, facts, inspected, stats = await asyncio.gather(
        given(probe) if probe is not None else run_probe(backend, sandbox_id, timeout),
        quietly(sandbox_id, backend.engine_facts()),
        given(info) if info is not None else quietly(sandbox_id, backend.inspect(sandbox_id)),
        given(arrived(engine_sample))
        if engine_sample is not None
        else quietly(sandbox_id, backend.stats(sandbox_id)),
    )
    report = build_report(
        sandbox_id,
        {**output, "ran_by": ran_by},
        expected,
        duration=time.monotonic() - start,
        engine_facts=facts,
        info=inspected,
        engine_stats=stats,
    )
    if stats is None and engine_sample is not None and not engine_sample.done():
        note = (
            "host cgroup: the engine had no sample of it yet when the kernel answered (Docker "
            "samples once a second); asking for the attestation again with refresh measures it"
        )
        report = dataclasses.replace(report, notes=[*report.notes, note])
    return report


def request_engine_sample(
    backend: SandboxBackend, sandbox_id: str
) -> asyncio.Future[EngineStats | None]:
    """Ask the engine for a sandbox's stats now, for :func:`attest` to take later if it has
    answered by then; the request never fails (None, with a warning)."""
    return asyncio.ensure_future(quietly(sandbox_id, backend.stats(sandbox_id)))


async def quietly(sandbox_id: str, call: Awaitable[Any]) -> Any:
    """What an engine call for the attestation of ``sandbox_id`` returns, or None (with a
    warning) when it fails: one missing fact must not stop the report."""
    try:
        return await call
    except Exception as exc:
        log.warning("attestation of sandbox %s: %s", sandbox_id, exc)
        return None


def arrived(sample: asyncio.Future[EngineStats | None]) -> EngineStats | None:
    """What an engine sample request answered, if it has answered by now."""
    return sample.result() if sample.done() and not sample.cancelled() else None


async def record_attestation(
    manager: SandboxHost,
    sandbox_id: str,
    *,
    timeout: float = PROBE_TIMEOUT,
    probe: dict[str, Any] | None = None,
    info: SandboxInfo | None = None,
    engine_sample: asyncio.Future[EngineStats | None] | None = None,
) -> AttestationReport:
    """Attest a sandbox of ``manager`` and store the report in its state file; ``probe`` is the
    boot-time probe's output when there is one (see :func:`read_boot_probe`), ``info`` the
    engine's view when the caller has just asked for it, ``engine_sample`` as :func:`attest`
    takes it."""
    directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
    expected = expected_from_state(manager, directory.read_state())
    report = await attest(
        manager.backend,
        sandbox_id,
        expected,
        timeout=timeout,
        probe=probe,
        info=info,
        engine_sample=engine_sample,
    )
    try:
        manager.update_state(sandbox_id, attestation=report.as_dict())
    except OSError as exc:
        log.warning("cannot store the attestation of sandbox %s: %s", sandbox_id, exc)
    if report.ok:
        log.info("sandbox %s %s (%.2fs)", sandbox_id, report.summary(), report.duration_seconds)
    else:
        log.warning("sandbox %s: %s", sandbox_id, report.summary())
    return report
