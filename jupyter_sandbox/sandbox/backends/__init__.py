"""Backends: where sandboxes run. The interface every backend meets (``base.py``), the records a
backend answers with (``records.py``), and one subpackage per backend (``docker/``), which
``c.SandboxManager.backend_class`` chooses between.

Policy (who may do what, quotas, the pool, snapshots) lives outside this package; a backend only
creates, runs in, pauses and removes containers as it is told.
"""
