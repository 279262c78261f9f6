"""``python -m jupyter_sandbox.kernel -f CONNECTION_FILE``: run one proxy kernel."""

from __future__ import annotations

import argparse
import logging
import sys

from jupyter_sandbox.kernel import event_loop
from jupyter_sandbox.kernel.log_level import log_level
from jupyter_sandbox.kernel.proxy_kernel import SandboxKernel
from jupyter_sandbox.sandbox.settings import load_config


def configure_logging() -> None:
    """Log to stderr, which jupyter_client hands to the server's log (or the caller's)."""
    logging.basicConfig(
        stream=sys.stderr,
        level=log_level(),
        format="[SandboxedPython %(asctime)s %(levelname)s] %(message)s",
        force=True,  # a kernel forked by the zygote replaces the zygote's logging
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_sandbox.kernel")
    parser.add_argument("-f", dest="connection_file", required=True, help="the connection file")
    args = parser.parse_args(argv)
    configure_logging()
    return event_loop.run(SandboxKernel(args.connection_file, load_config()).run())


if __name__ == "__main__":
    sys.exit(main())
