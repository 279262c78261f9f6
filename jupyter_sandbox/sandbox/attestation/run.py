"""Running the probe inside a sandbox, and storing the resulting report in its state.

Never raises for a probe that fails: an unverified sandbox gets a report saying so, and starting
the sandbox goes on (the report, not an exception, tells the user).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backend import SandboxBackend
from ..errors import SandboxError
from ..hostdir import SandboxDirectory
from .checks import build_report
from .expected import Expected, expected_from_state
from .report import AttestationReport

if TYPE_CHECKING:
    from ..starting import SandboxStarter

log = logging.getLogger(__name__)

PROBE_ARGV = ["python3", "-I", "-"]
# Seconds the probe may take inside the sandbox (measured: ~0.15 s under runc, ~0.3 s under
# runsc on an idle 2-core host; the egress attempts fail at once when there is no route).
PROBE_TIMEOUT = 10.0


@functools.lru_cache(maxsize=1)
def probe_source() -> bytes:
    """The probe script's text, as piped into the sandbox's Python."""
    return Path(__file__).with_name("probe.py").read_bytes()


async def run_probe(backend: SandboxBackend, sandbox_id: str, timeout: float) -> dict[str, Any]:
    """The probe's JSON output, or ``{"error": ...}`` saying why there is none."""
    try:
        result = await asyncio.wait_for(
            backend.exec(sandbox_id, PROBE_ARGV, timeout=timeout, stdin=probe_source()),
            timeout + 5,
        )
    except asyncio.TimeoutError:
        return {"error": f"the probe did not finish within {timeout:g}s"}
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
    try:
        data = json.loads(result.stdout)
    except ValueError:
        return {"error": "the probe's output is not JSON"}
    if not isinstance(data, dict) or not isinstance(data.get("fields"), dict):
        return {"error": "the probe's output has no fields"}
    data.pop("error", None)
    return data


async def attest(
    backend: SandboxBackend,
    sandbox_id: str,
    expected: Expected | None,
    *,
    timeout: float = PROBE_TIMEOUT,
) -> AttestationReport:
    """Probe one running sandbox and compare with ``expected``. Never raises SandboxError."""
    start = time.monotonic()

    async def quietly(call: Any) -> Any:
        try:
            return await call
        except Exception as exc:
            log.warning("attestation of sandbox %s: %s", sandbox_id, exc)
            return None

    probe, facts, info, stats = await asyncio.gather(
        run_probe(backend, sandbox_id, timeout),
        quietly(backend.engine_facts()),
        quietly(backend.inspect(sandbox_id)),
        quietly(backend.stats(sandbox_id)),
    )
    return build_report(
        sandbox_id,
        probe,
        expected,
        duration=time.monotonic() - start,
        engine_facts=facts,
        info=info,
        engine_stats=stats,
    )


async def record_attestation(
    manager: SandboxStarter, sandbox_id: str, *, timeout: float = PROBE_TIMEOUT
) -> AttestationReport:
    """Attest a sandbox of ``manager`` and store the report in its state file."""
    directory = SandboxDirectory(manager.settings.state_path, sandbox_id)
    expected = expected_from_state(manager, directory.read_state())
    report = await attest(manager.backend, sandbox_id, expected, timeout=timeout)
    try:
        manager.update_state(sandbox_id, attestation=report.as_dict())
    except OSError as exc:
        log.warning("cannot store the attestation of sandbox %s: %s", sandbox_id, exc)
    if report.ok:
        log.info("sandbox %s %s (%.2fs)", sandbox_id, report.summary(), report.duration_seconds)
    else:
        log.warning("sandbox %s: %s", sandbox_id, report.summary())
    return report
