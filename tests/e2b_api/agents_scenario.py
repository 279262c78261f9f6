"""The OpenAI Agents SDK's own E2B sandbox client against jupyter-sandbox's E2B API.

Run by tests/e2b_api/test_openai_agents.py with .venv-agents' Python (``make agents-env``:
``openai-agents[e2b]`` from PyPI, unmodified, whose e2b pins conflict with .venv's), configured
by nothing but E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY. It does what issue 34 lists for
the SDK and prints one JSON object of what it saw on its last line; the test asserts on it, and
a failure is a traceback on standard error and a non-zero exit.

Standard library and the SDK only: it runs outside the project's virtualenv.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path
from typing import Any

from agents.extensions.sandbox.e2b import E2BSandboxClient, E2BSandboxClientOptions

NOTE = Path("notes/a.txt")  # relative: under the manifest's root, /workspace


async def read(session: Any, path: Path) -> str:
    data: bytes = (await session.read(path)).read()
    return data.decode()


async def scenario() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    client = E2BSandboxClient()
    session = await client.create(options=E2BSandboxClientOptions(sandbox_type="e2b", timeout=600))
    seen["sandbox_id"] = session.state.sandbox_id
    resumed: Any = None
    try:
        await session.start()
        result = await session.exec("echo hello from $(pwd) as $(id -u)")
        seen["exec"] = [result.exit_code, result.stdout.decode()]
        failed = await session.exec("echo nope >&2; exit 3")
        seen["exec_failed"] = [failed.exit_code, failed.stderr.decode()]

        await session.write(NOTE, io.BytesIO(b"first version"))
        seen["read"] = await read(session, NOTE)
        seen["seen_by_a_command"] = (await session.exec(f"cat {NOTE}")).stdout.decode()

        archive = (await session.persist_workspace()).read()
        seen["archive_bytes"] = len(archive)
        await session.write(NOTE, io.BytesIO(b"changed since"))
        seen["changed"] = await read(session, NOTE)
        await session.hydrate_workspace(io.BytesIO(archive))
        seen["hydrated"] = await read(session, NOTE)

        started = await session.pty_exec_start(
            "sh", "-c", "read line; echo got:$line", shell=False, tty=True, yield_time_s=3
        )
        seen["pty_live"] = started.process_id is not None
        output = started.output
        update = await session.pty_write_stdin(
            session_id=started.process_id, chars="over the pty\n", yield_time_s=3
        )
        output += update.output
        seen["pty_output"] = output.decode(errors="replace")

        await session.exec("echo kept > marker")
        payload = json.loads(json.dumps(client.serialize_session_state(session.state)))
        resumed = await client.resume(client.deserialize_session_state(payload))
        await resumed.start()
        seen["resumed_sandbox_id"] = resumed.state.sandbox_id
        seen["resumed_marker"] = (await resumed.exec("cat marker")).stdout.decode()
        seen["resumed_read"] = await read(resumed, NOTE)
    finally:
        await session.shutdown()  # kills the sandbox (pause_on_exit is off)
        await client.delete(session)
    if resumed is not None:
        await resumed.shutdown()  # the same sandbox, gone already: a no-op for E2B's kill
        await client.delete(resumed)
    return seen


def main() -> None:
    seen = asyncio.run(scenario())
    sys.stdout.write(json.dumps(seen) + "\n")


if __name__ == "__main__":
    main()
