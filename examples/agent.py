"""Agent code running untrusted snippets in Sandboxed Python, through plain jupyter_client.

Each snippet runs in a gVisor sandbox with no network. A context id keeps the same live
interpreter across kernel processes: run this twice with the same --context and the second run
still sees the first run's variables. Results and errors come back as data:

    .venv/bin/python examples/agent.py --context demo
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager


@dataclass
class Outcome:
    """What one snippet did."""

    stdout: str = ""
    stderr: str = ""
    result: str | None = None  # text/plain of the last expression, if any
    error: str | None = None  # "ValueError: boom" when the snippet raised
    displays: list[dict[str, Any]] = field(default_factory=list)


class SandboxedInterpreter:
    """A Sandboxed Python kernel bound to a context id; ``run`` executes one snippet."""

    def __init__(self, context: str, runtime: str = "runsc") -> None:
        self.manager = KernelManager(kernel_name="sandboxed-python")
        env = {**os.environ, "JUPYTER_SANDBOX_CONTEXT": context, "JUPYTER_SANDBOX_RUNTIME": runtime}
        self.manager.start_kernel(env=env)
        self.client: BlockingKernelClient = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 60) -> Outcome:
        outcome = Outcome()

        def collect(msg: dict[str, Any]) -> None:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                if content["name"] == "stdout":
                    outcome.stdout += content["text"]
                else:
                    outcome.stderr += content["text"]
            elif kind == "execute_result":
                outcome.result = content["data"].get("text/plain")
            elif kind == "display_data":
                outcome.displays.append(content["data"])
            elif kind == "error":
                outcome.error = f"{content['ename']}: {content['evalue']}"

        self.client.execute_interactive(code, timeout=timeout, output_hook=collect)
        return outcome

    def close(self) -> None:
        """Detach: a named context's interpreter stays alive for the next run."""
        self.client.stop_channels()
        self.manager.shutdown_kernel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", default="agent-demo", help="context id to use")
    parser.add_argument("--runtime", default="runsc", choices=["runsc", "runc"])
    args = parser.parse_args()
    interpreter = SandboxedInterpreter(args.context, args.runtime)
    try:
        snippets = [
            "runs = globals().get('runs', 0) + 1\nprint('run number', runs)",
            "import os; os.uname().release, os.getuid()",
            "import urllib.request; urllib.request.urlopen('http://example.com', timeout=3)",
            "open('/etc/passwd', 'a')",
        ]
        for code in snippets:
            outcome = interpreter.run(code)
            first_line = code.splitlines()[0]
            print(f">>> {first_line}")
            for label, value in (
                ("stdout", outcome.stdout.strip()),
                ("result", outcome.result),
                ("error", outcome.error),
            ):
                if value:
                    print(f"    {label}: {value}")
    finally:
        interpreter.close()


if __name__ == "__main__":
    main()
