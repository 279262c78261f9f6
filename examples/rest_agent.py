"""Agent code driving sandboxes over a Jupyter Server's REST API, with nothing but the stdlib.

What an agent does with E2B's or OpenSandbox's SDK, against your own server: start a sandbox
with a timeout and metadata, write a file into it, run commands (one whole, one streamed as it
runs), run Python in the sandbox's live interpreter (state kept from one run to the next, an
exception returned as data, a run streamed as it runs), find the sandbox again by its metadata,
give it more time, and remove it. The server is
any Jupyter Server with jupyter-sandbox installed (``make lab``, a JupyterHub single-user
server); its URL and token come from the command line or the environment:

    JUPYTER_TOKEN=... .venv/bin/python examples/rest_agent.py --url http://127.0.0.1:8888/

Cells run through the kernel instead (examples/agent.py); the routes are in
jupyter_sandbox/server_extension/openapi.yaml.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

SCRIPT = """\
import os, sys, time
print("hello from", os.getcwd(), "as uid", os.getuid(), flush=True)
for step in range(3):
    print("step", step, flush=True)
    time.sleep(0.5)
print("one line, written", end=" ", flush=True)
time.sleep(0.3)
print("in two pieces")
print("GREETING is", os.environ.get("GREETING"), file=sys.stderr)
"""

# Run in the sandbox's interpreter after `radius` was defined there by an earlier run.
TRAINING = """\
import sys, time
for epoch in range(3):
    print(f"epoch {epoch}: loss {1 / (epoch + 1):.2f}", flush=True)
    time.sleep(0.5)
print("no GPU here, on the CPU", file=sys.stderr)
radius * 10
"""


class SandboxAPI:
    """The few calls this agent needs; every error is raised with the server's message."""

    def __init__(self, url: str, token: str) -> None:
        self.base = url.rstrip("/") + "/api/sandboxes"
        self.headers = {"Authorization": f"token {token}"} if token else {}

    def call(self, method: str, path: str = "", body: Any = None, query: str = "") -> Any:
        """One JSON request; its decoded answer (None for 204)."""
        data = None if body is None else json.dumps(body).encode()
        with self._open(method, path, data, query) as response:
            answer = response.read()
        return json.loads(answer) if answer else None

    def put_file(self, sandbox_id: str, path: str, content: bytes) -> None:
        """Write one whole file into the sandbox (relative paths start at /workspace)."""
        query = urllib.parse.urlencode({"path": path})
        with self._open("PUT", f"/{sandbox_id}/files/content", content, query):
            pass

    def execute(self, sandbox_id: str, code: str) -> Any:
        """Run Python in the sandbox's interpreter to its end: status, outputs, error."""
        return self.call("POST", f"/{sandbox_id}/execute", {"code": code, "timeout": 60})

    def events(self, path: str, body: Any) -> Iterator[tuple[str, Any]]:
        """(event, data) of a text/event-stream answer, each as it arrives."""
        event = "message"
        with self._open("POST", path, json.dumps(body).encode()) as response:
            for raw in response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    yield event, json.loads(line.removeprefix("data: "))
                    event = "message"

    def _open(self, method: str, path: str, data: bytes | None, query: str = "") -> Any:
        url = self.base + path + (f"?{query}" if query else "")
        request = urllib.request.Request(url, data=data, headers=self.headers, method=method)
        try:
            return urllib.request.urlopen(request, timeout=120)
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            with contextlib.suppress(ValueError, KeyError, TypeError):  # not one of ours
                detail = json.loads(detail)["message"]
            raise SystemExit(f"{method} {url}: {error.code} {detail}") from None


class StreamLines:
    """Streamed text printed by whole lines: pieces come as the sandbox passes them on, not
    line by line (a line may span two events), so each stream's unfinished line waits for the
    rest."""

    def __init__(self) -> None:
        self.partial = {"stdout": "", "stderr": ""}

    def add(self, stream: str, text: str) -> None:
        *lines, self.partial[stream] = (self.partial[stream] + text).split("\n")
        for line in lines:
            print(f"  [{stream}] {line}", flush=True)

    def finish(self) -> None:
        """Print what is left of each stream's last line (the output ended without one)."""
        for stream, rest in self.partial.items():
            if rest:
                print(f"  [{stream}] {rest}")
            self.partial[stream] = ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JUPYTER_URL", "http://127.0.0.1:8888/"))
    parser.add_argument("--token", default=os.environ.get("JUPYTER_TOKEN", ""))
    parser.add_argument("--runtime", default="runsc", choices=["runsc", "runc"])
    parser.add_argument("--task", default="demo", help="metadata to find the sandbox by")
    args = parser.parse_args()
    api = SandboxAPI(args.url, args.token)

    metadata = {"agent": "rest_agent", "task": args.task}
    sandbox = api.call("POST", body={"runtime": args.runtime, "timeout": 600, "metadata": metadata})
    sid = sandbox["id"]
    print(f"sandbox {sid} ({sandbox['runtime']}), expires {sandbox['expires']}")
    try:
        api.put_file(sid, "job/run.py", SCRIPT.encode())

        whole = api.call(
            "POST",
            f"/{sid}/commands",
            {"command": ["python3", "run.py"], "cwd": "/workspace/job", "env": {"GREETING": "hi"}},
        )
        print(f"exit {whole['exit_code']} in {whole['duration']} s")
        print("stdout:", whole["stdout"].strip().replace("\n", " | "))
        print("stderr:", whole["stderr"].strip())

        print("streamed:")
        command = {"command": "python3 job/run.py", "stream": True}
        lines = StreamLines()
        for event, data in api.events(f"/{sid}/commands", command):
            if event in ("stdout", "stderr"):
                lines.add(event, data["text"])
                continue
            lines.finish()
            if event == "result":
                print(f"  exit {data['exit_code']}")
            elif event == "error":
                print(f"  error: {data['message']}")

        # Python in the sandbox's live interpreter, as a notebook's cells run: what one run
        # defines, the next one sees.
        api.execute(sid, "import math\nradius = 2")
        area = api.execute(sid, "math.pi * radius ** 2")  # the last expression is its result
        print("area of radius 2:", area["outputs"][0]["data"]["text/plain"])
        # An exception is data in the answer (still a 200), as a cell shows it.
        failed = api.execute(sid, "radius / 0")
        error = failed["error"]
        print(f"raised, as data: status {failed['status']}, {error['ename']}: {error['evalue']}")
        print("  its traceback ends:", error["traceback"][-1])

        print("streamed run:")
        lines = StreamLines()
        for event, data in api.events(f"/{sid}/execute", {"code": TRAINING, "stream": True}):
            if event in ("stdout", "stderr"):
                lines.add(event, data["text"])
                continue
            lines.finish()
            if event == "display":  # figures, HTML, the last expression: MIME bundles
                print(f"  [{data['type']}] {data['data'].get('text/plain', '')}")
            elif event == "clear":
                print("  [clear]")
            elif event == "result":
                print(f"  status {data['status']} in {data['duration']} s")
            elif event == "error":
                print(f"  error: {data['message']}")

        found = api.call("GET", query=urllib.parse.urlencode({"metadata": f"task={args.task}"}))
        print("found by metadata:", [s["id"] for s in found])
        moved = api.call("PUT", f"/{sid}/timeout", {"timeout": 1800})
        print("now expires", moved["expires"])
    finally:
        api.call("DELETE", f"/{sid}")
        print(f"removed {sid}")


if __name__ == "__main__":
    main()
