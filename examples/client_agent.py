"""Agent code driving a sandbox through jupyter_sandbox.client, the package's Python client of
the REST API (stdlib only: an agent's machine needs none of the server's dependencies).

What examples/rest_agent.py does by hand over HTTP, as E2B's or OpenSandbox's SDK would do it:
start a sandbox with a timeout and metadata, run Python in its live interpreter (state kept
from one run to the next, an exception returned as data, a run streamed as it runs), start a
background job and follow its output to its end, write a file and read one back, and remove
the sandbox when done. The server is any Jupyter Server with jupyter-sandbox installed (``make
lab``, a JupyterHub single-user server):

    JUPYTER_TOKEN=... .venv/bin/python examples/client_agent.py --url http://127.0.0.1:8888/
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from jupyter_sandbox.client import SandboxClient, SandboxError

TRAINING = """\
import sys, time
for epoch in range(3):
    print(f"epoch {epoch}: loss {1 / (epoch + 1):.2f}", flush=True)
    time.sleep(0.5)
print("no GPU here, on the CPU", file=sys.stderr)
radius * 10
"""

# Run in the background: prints as it goes, and leaves its result in a file.
JOB = """\
import time
for step in range(3):
    print("step", step, flush=True)
    time.sleep(0.5)
with open("result.txt", "w") as out:
    out.write("sum of squares: %d\\n" % sum(n * n for n in range(10)))
"""


def printer(prefix: str) -> Callable[[str], None]:
    """Print streamed output line by line, each with ``prefix`` (a piece of output holds
    whatever the sandbox wrote since the last one: a line, several, or part of one)."""

    def show(text: str) -> None:
        for line in text.splitlines():
            print(prefix, line, flush=True)

    return show


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JUPYTER_URL", "http://127.0.0.1:8888/"))
    parser.add_argument("--token", default=None, help="default: $JUPYTER_TOKEN")
    parser.add_argument("--runtime", default="runsc", choices=["runsc", "runc"])
    parser.add_argument("--task", default="demo", help="metadata to find the sandbox by")
    args = parser.parse_args()
    client = SandboxClient(args.url, token=args.token)

    metadata = {"agent": "client_agent", "task": args.task}
    with client.create(runtime=args.runtime, timeout=600, metadata=metadata) as sandbox:
        print(
            f"sandbox {sandbox.id} ({sandbox.info['runtime']}), expires {sandbox.info['expires']}"
        )

        # Python in the sandbox's live interpreter: what one run defines, the next one sees.
        sandbox.run_code("import math\nradius = 2").raise_for_error()
        print("area of radius 2:", sandbox.run_code("math.pi * radius ** 2").text)
        failed = sandbox.run_code("radius / 0")  # an exception is data, as a cell shows it
        print(f"raised, as data: {failed.error}")

        print("streamed run:")
        streamed = sandbox.run_code(
            TRAINING,
            on_stdout=printer("  [stdout]"),
            on_stderr=printer("  [stderr]"),
            on_display=lambda data: print(f"  [{data['type']}]", data["data"]["text/plain"]),
        )
        print(f"  status {streamed.status} in {streamed.duration} s")

        sandbox.files.write("job/run.py", JOB)
        job = sandbox.start(["python3", "run.py"], cwd="/workspace/job")
        print(f"background job {job.id}:")
        show = printer("  |")
        for piece in job.follow():  # its output as it is written, until it ends
            show(piece)
        print(f"  exit code {job.exit_code}")
        print("read back:", sandbox.files.read_text("job/result.txt").strip())
        job.remove()

        found = client.list(metadata={"task": args.task})
        print("found by metadata:", [s.id for s in found])
    print(f"removed {sandbox.id}")


if __name__ == "__main__":
    try:
        main()
    except SandboxError as error:  # the server's message says what to change
        raise SystemExit(f"{type(error).__name__}: {error}") from None
