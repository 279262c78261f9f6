"""The REST API fuzzed: schemathesis generates requests from openapi.yaml and sends them to a real
``jupyter server`` with the extension, on a real engine, on 127.0.0.1 with a token.

Every answer must be documented (its status and its content type in the spec), fit its schema
(each Server-Sent Event too), come within the per-request timeout, and never be a 5xx the spec
does not promise; schema-valid input must be taken and schema-invalid input refused (the spec
states the server's real constraints). The run has a fixed seed and a time budget
(JUPYTER_SANDBOX_FUZZ_SECONDS, 75 by default: ``make test``; ``make fuzz-api`` gives it 900);
JUPYTER_SANDBOX_FUZZ_SEED changes the seed.

The fuzzer acts on real things: its sandbox, background command and snapshot ids are those of
a sandbox, an ended command and a snapshot made first (pinned as parameters; DELETE of a
sandbox gets a sandbox of its own to remove), so that its requests reach the code behind the
404. It may pause, resume, restart, snapshot and create sandboxes (at most SANDBOXES at once,
the owner's quota): all are removed with the state directory when the test ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import purpose_label
from tests.kernel.sandbox_env import notebook_dir, sandbox_kernel_env
from tests.kernel.test_jupyter_server import Server, start_server, stop_process, wait_for_status
from tests.server_extension.openapi_check import SPEC_FILE

# One run covers both runtimes (its budget, twice, would not fit the suite's): the sandbox it
# acts on is runsc's, the one it removes and the one it times out runc's.
pytestmark = [pytest.mark.integration, pytest.mark.runsc, pytest.mark.runc]
RUNTIMES = ("runsc", "runc")

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
REPOSITORY = Path(__file__).parents[2]
FUZZ_SECONDS = float(os.environ.get("JUPYTER_SANDBOX_FUZZ_SECONDS", "75"))
SEED = int(os.environ.get("JUPYTER_SANDBOX_FUZZ_SEED", "31"))
# Reports written beside the run's log (e.g. junit,har to see every request and answer).
REPORTS = os.environ.get("JUPYTER_SANDBOX_FUZZ_REPORTS", "junit")
# A request not answered by then is a hang. The slowest documented answers (a sandbox created,
# an interpreter restarted) take a few seconds on this machine's 2 cores.
REQUEST_TIMEOUT = 30.0
SANDBOXES = 5  # the owner's quota (3 made first): the fuzzer's creations past it are 403s
# Everything the spec and the server must agree on. Left out: ignored_auth and
# object_level_authorization (the spec declares no security scheme: authentication and the
# owner's isolation are tests of their own, test_auth_and_spec.py and row 37), and
# use_after_free / ensure_resource_availability, which assume a created resource is at the
# URL its Location names and stays there (a sandbox created here may be culled, paused or
# removed by a concurrent step of the same run).
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "positive_data_acceptance",
    "missing_required_header",
    "unsupported_method",
]


async def created(server: Server, path: str, body: Any) -> dict[str, Any]:
    response = await server.request("POST", path, body)
    assert response.code == 201, response.body
    data: dict[str, Any] = json.loads(response.body)
    return data


# Operations whose valid input is more than a schema can state, so that schema-valid input
# may rightly be refused (400): their positive_data_acceptance check is off, every other on.
UNSTATED = {
    # The limits' maxima, the images allowed and the time to live are the server's settings
    # (and the host's: its CPUs), which the spec names but cannot hold.
    ("POST", "/api/sandboxes"),
    ("PUT", "/api/sandboxes/{sandbox_id}/timeout"),
    # The body must be a tar archive (or gzip with compression=gzip): bytes no schema checks.
    ("POST", "/api/snapshots"),
    # Whether the body must name a sandbox depends on the snapshot's kind (workspace: yes).
    ("POST", "/api/snapshots/{snapshot_id}/restore"),
    # limit is refused with follow=true: OpenAPI cannot make one query argument exclude another.
    ("GET", "/api/sandboxes/{sandbox_id}/commands/{command_id}/output"),
    # A move's new path may not be its path or lie below it, and /workspace itself is neither
    # moved nor removed, whatever the path that names it: relations no pattern states.
    ("PATCH", "/api/sandboxes/{sandbox_id}/files"),
    ("DELETE", "/api/sandboxes/{sandbox_id}/files"),
    # A credential's host patterns follow the policy's grammar (no address, no bare top-level
    # name) and some header names are refused (Host, Connection...): more than a pattern says.
    ("PUT", "/api/credentials/{name}"),
}


def unstated_toml() -> str:
    return "".join(
        f"""
[[operations]]
include-path = "{path}"
include-method = "{method}"
checks.positive_data_acceptance.enabled = false
"""
        for method, path in sorted(UNSTATED)
    )


def config_toml(
    server: Server,
    sandbox_id: str,
    doomed_id: str,
    timed_id: str,
    command_id: str,
    snapshot_id: str,
) -> str:
    """schemathesis.toml for one run (its format: schemathesis's config/schema.json)."""
    checks = "\n".join(f"{name}.enabled = true" for name in CHECKS)
    unstated = unstated_toml()
    return f"""
seed = {SEED}
max-time = {FUZZ_SECONDS:g}
workers = 1
request-timeout = {REQUEST_TIMEOUT:g}
# Events of one answer read at most (a stream of a command or a run ends by itself sooner).
max-stream-events = 20
continue-on-failure = true
base-url = "{server.base}"
hooks = "tests.server_extension.api_fuzz_hooks"

[headers]
Authorization = "token {server.token}"

[checks]
enabled = false
{checks}

[phases.examples]
enabled = true
[phases.coverage]
enabled = true
[phases.fuzzing]
enabled = true
[phases.stateful]
enabled = true
# Its steps take whatever the operations before gave them, UNSTATED ones too (below).
checks.positive_data_acceptance.enabled = false

[generation]
mode = "all"
database = "none"

[parameters]
sandbox_id = "{sandbox_id}"
command_id = "{command_id}"
snapshot_id = "{snapshot_id}"

[[operations]]
include-path = "/api/sandboxes/{{sandbox_id}}"
include-method = "DELETE"
parameters = {{ sandbox_id = "{doomed_id}" }}

# A start waits for the kernel, up to SandboxSettings.start_timeout (60 s), as a restart does:
# that is their bound; past it they would answer a 504.
[[operations]]
include-path = "/api/sandboxes"
include-method = "POST"
request-timeout = 90

[[operations]]
include-path = "/api/sandboxes/{{sandbox_id}}/restart"
request-timeout = 90

# A timeout of 5e-324 s has the culler remove the sandbox at once, as it should.
[[operations]]
include-path = "/api/sandboxes/{{sandbox_id}}/timeout"
parameters = {{ sandbox_id = "{timed_id}" }}

# A watch streams until the client leaves, with a ping every 15 s: its first event (ready)
# is the one to check.
[[operations]]
include-path = "/api/sandboxes/{{sandbox_id}}/files/watch"
max-stream-events = 1

# Held requests followed: a stream until the client leaves, whose first event (requests) is the
# one to check (the fuzzed sandbox's policy is none: it never holds one).
[[operations]]
include-path = "/api/sandboxes/{{sandbox_id}}/network/requests"
max-stream-events = 1

# A WebSocket: what it takes is a handshake, which schemathesis does not make (the route's
# refusal of a plain GET, its auth and its messages: test_terminals.py, test_auth_and_spec.py).
[[operations]]
include-path = "/api/sandboxes/{{sandbox_id}}/terminal"
enabled = false
{unstated}"""


@pytest.mark.timeout(FUZZ_SECONDS + 600)  # the run's budget, and the server's start and end
@pytest.mark.checklist(
    row=60,
    attack="schemathesis (examples, coverage, fuzzing and stateful phases, positive and "
    "negative data, fixed seed) against every route of openapi.yaml on a real server",
    expected="0 server errors, 0 undocumented statuses or content types, 0 schema "
    "violations, 0 requests unanswered within the timeout; valid input taken, invalid refused",
)
async def test_the_api_answers_every_generated_request_as_documented(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    observe: Callable[..., None],
) -> None:
    with sandbox_kernel_env(purpose_label(request.node.nodeid)) as state_dir:
        config = Path(os.environ["JUPYTER_CONFIG_DIR"]) / "jupyter_sandbox_config.py"
        with config.open("a") as lines:
            lines.write(
                f"c.SandboxSettings.runtime = {RUNTIMES[0]!r}\n"
                f"c.SandboxExtension.container_purpose = {purpose_label(request.node.nodeid)!r}\n"
                "c.WarmPool.size = 0\n"
                f"c.SandboxQuotas.max_sandboxes = {SANDBOXES}\n"
                "c.SandboxCuller.interval = 3600.0\n"
                # The run's snapshots go with its tmp_path, not to the user's data directory.
                f"c.SnapshotSettings.snapshot_dir = {str(tmp_path / 'snapshots')!r}\n"
            )
        server = start_server(notebook_dir(state_dir), tmp_path)
        try:
            await wait_for_status(server)
            # What the run acts on: runsc's (the default runtime), and runc's to remove
            # and to time out; the sandboxes it creates are of either (the runtime field).
            sandbox = await created(server, "/api/sandboxes", {"runtime": RUNTIMES[0]})
            doomed = await created(server, "/api/sandboxes", {"runtime": RUNTIMES[1]})
            timed = await created(server, "/api/sandboxes", {"runtime": RUNTIMES[1]})
            base = f"/api/sandboxes/{sandbox['id']}"
            command = await created(
                server, f"{base}/commands", {"command": ["echo", "hello"], "background": True}
            )
            snapshot = await created(server, f"{base}/snapshots", {})
            (tmp_path / "schemathesis.toml").write_text(
                config_toml(
                    server,
                    sandbox["id"],
                    doomed["id"],
                    timed["id"],
                    command["id"],
                    snapshot["id"],
                )
            )
            run = await asyncio.to_thread(
                subprocess.run,
                [
                    str(SCHEMATHESIS),
                    f"--config-file={tmp_path / 'schemathesis.toml'}",
                    "run",
                    str(SPEC_FILE),
                    f"--report={REPORTS}",
                    f"--report-dir={tmp_path / 'report'}",
                    "--no-color",
                ],
                cwd=tmp_path,
                env={
                    **os.environ,
                    "PYTHONPATH": str(REPOSITORY),  # for the hooks module
                    "JUPYTER_SANDBOX_FUZZ_PINNED": json.dumps(
                        {
                            "sandbox_id": sandbox["id"],
                            "command_id": command["id"],
                            "snapshot_id": snapshot["id"],
                            "timed_sandbox_id": timed["id"],
                        }
                    ),
                },
                capture_output=True,
                text=True,
                timeout=FUZZ_SECONDS + 600,
                check=False,
            )
        finally:
            stop_process(server.process)
        output = run.stdout + run.stderr
        (tmp_path / "schemathesis.log").write_text(output)
        assert run.returncode == 0, output[-20000:] + "\nserver log:\n" + server.log_text()[-5000:]
        cases = sum(int(found) for found in re.findall(r"(\d+) generated", output))
        observe(f"{cases} generated cases in {FUZZ_SECONDS:g}s (seed {SEED}): no failure", cases)
