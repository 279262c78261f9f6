"""The Sandboxed Python proxy kernel: relays the Jupyter protocol to an ipykernel in a sandbox.

Started by Jupyter from the ``sandboxed-python`` kernelspec as
``python -m jupyter_sandbox.kernel -f {connection_file}``.
"""

from __future__ import annotations
