"""Isolation attestation: what a sandbox's isolation *is*, measured from inside it.

At start (and on request) a stdlib-only probe is piped into ``python3 -I -`` inside the
sandbox, as the sandbox's own user with the container's security settings, and reports what it
sees: kernel, uid/gid, capabilities, no_new_privs, seccomp, mounts, network interfaces, an egress
attempt, limits. The engine adds what only it can see (the image id, the host cgroup's limits).
:class:`AttestationReport` holds every value with how it was measured, and compares it with what
the sandbox was configured to be: any difference is a finding and makes the report not ``ok``. A
probe that fails yields a report saying so, never an exception: an unverified sandbox is reported
as unverified, not as isolated.

Nothing here is taken from the configuration and presented as measured: a value the probe could
not measure is ``None`` with the reason in ``notes`` (e.g. the CPU quota under gVisor, whose
sandbox shows no cgroup files).

The modules, in the order a report is made: ``run`` pipes the probe (``probe_boundaries.py`` and
``probe.py`` joined into one standalone script, never imported) into the sandbox; ``interpret``
turns its raw fields into measurements; ``expected`` reads what the sandbox was configured to be;
``checks`` compares the two into a ``report``.
"""

from __future__ import annotations

from jupyter_sandbox.sandbox.attestation.checks import build_report, check
from jupyter_sandbox.sandbox.attestation.expected import Expected, expected_from_state
from jupyter_sandbox.sandbox.attestation.interpret import cap_names, interpret
from jupyter_sandbox.sandbox.attestation.report import (
    AttestationReport,
    Finding,
    Measurement,
    banner_line,
    human_bytes,
    stored_report,
)
from jupyter_sandbox.sandbox.attestation.run import (
    PROBE_TIMEOUT,
    attest,
    probe_source,
    read_boot_probe,
    record_attestation,
    request_engine_sample,
    run_probe,
    stage_boot_probe,
)

__all__ = [
    "PROBE_TIMEOUT",
    "AttestationReport",
    "Expected",
    "Finding",
    "Measurement",
    "attest",
    "banner_line",
    "build_report",
    "cap_names",
    "check",
    "expected_from_state",
    "human_bytes",
    "interpret",
    "probe_source",
    "read_boot_probe",
    "record_attestation",
    "request_engine_sample",
    "run_probe",
    "stage_boot_probe",
    "stored_report",
]
