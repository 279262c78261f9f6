"""The host's reading of the port program's ``--list`` report (sandbox/operations/ports.py listed_ports).

The report is the sandbox's to print. One that is not exactly the program's shape is a
PortOpenerError, the expected outcome (the ports API answers it); anything else escaping is a bug
(a 500). A report that is read gives sorted, distinct ports of 1 to 65535 with string commands,
which the API's JSON answer can carry (no NaN or Infinity).
"""

from __future__ import annotations

import dataclasses
import json

from jupyter_sandbox.protocol.errors import PortOpenerError
from jupyter_sandbox.sandbox.operations.ports import ListeningPort, listed_ports

SANDBOX_ID = "0123456789ab"
MAX_LEN = 16384


def fuzz_one_input(data: bytes) -> None:
    try:
        ports = listed_ports(data, SANDBOX_ID)
    except PortOpenerError:
        return
    assert ports == sorted(set(ports)), ports
    for port in ports:
        assert type(port) is ListeningPort, port
        assert type(port.port) is int, port
        assert 0 < port.port < 65536, port
        assert type(port.command) is str, port
    json.dumps([dataclasses.asdict(port) for port in ports], allow_nan=False)
