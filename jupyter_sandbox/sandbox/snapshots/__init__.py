"""Snapshots: persist a sandbox's /workspace and restore it safely; checkpoint a live runsc
kernel and restore it (memory snapshots). The entry point is :class:`~.service.Snapshots`
(``manager.snapshots``).

Modules: archive_rules (what a member may be), archive_scan (reading an archive within caps,
writing the clean one a sandbox unpacks), tar_reader (the strict tar header reader under it),
storage (one directory per owner, atomic writes), persist and hydrate (the tar inside the
sandbox), host_dir_transport (archives through the sandbox's host directory), memory and
kernel_bridge (memory snapshots), settings (the traitlets), service (owner checks and the API).
Their errors are in :mod:`jupyter_sandbox.protocol.snapshot_errors`, which the REST client shares.
"""
