"""The sandbox core: what a sandbox is and who may touch it, with no tornado and no jupyter_server
(a test asserts it): the kernel process, the CLI and the server extension all build on it.

Directly here: the manager (``manager.py``, the one place that decides what a sandbox is and who
may touch it) and the starting of sandboxes (``starting.py``), settings, limits, labels,
identity, the container spec built from a request, the types that cross the manager's
boundary, the use cases every front end calls (``use_cases.py``), and ``doctor``. The rest is in wings, each with one job (its ``__init__``
says which):

- ``backends/``: where sandboxes run (the interface, and ``docker/``);
- ``kernel_link/``: the host's link to the ipykernel in a sandbox;
- ``operations/``: files, commands, background commands, code runs, ports, terminals, stats;
- ``lifecycle/``: contexts, the warm pool, quotas, usage, culling, reaping, lifelines;
- ``workspace/``: what /workspace shows of the host, and keeping its listings current;
- ``host/``: how the host guards itself against what sandboxes send;
- ``programs/``: the programs the host runs inside a sandbox;
- ``images/``: building sandbox images without a registry;
- ``network/``, ``snapshots/``, ``attestation/``: egress, snapshots, isolation checks.

The errors every part raises are in :mod:`jupyter_sandbox.protocol.errors`.
"""
