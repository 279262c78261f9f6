"""A :class:`ContainerSpec` as docker-py arguments: the container's and its host config's.

Pure translation, no engine calls: every hardening flag a sandbox gets can be read here in one
place, apart from the lifecycle code that sends them to the engine.
"""

from __future__ import annotations

from typing import Any

from docker.types import DriverConfig, LogConfig, Mount, Ulimit

from jupyter_sandbox.sandbox.backends.base import ContainerSpec


def container_arguments(spec: ContainerSpec) -> dict[str, Any]:
    """docker-py ``create_container`` arguments for ``spec``, all but the host config."""
    return {
        "image": spec.image,
        "command": spec.command,
        "name": spec.name,
        "labels": spec.labels,
        "user": spec.user,
        "environment": spec.environment,
        "working_dir": spec.working_dir,
        "hostname": spec.hostname,
        "network_disabled": spec.network == "none",
        "stop_timeout": spec.stop_timeout,
        "detach": True,
    }


def host_config_arguments(spec: ContainerSpec, engine_runtime: str) -> dict[str, Any]:
    """docker-py host config for ``spec``: every hardening flag of the security checklist."""
    security_opt = ["no-new-privileges:true"] if spec.no_new_privileges else []
    return {
        "runtime": engine_runtime,
        "read_only": spec.read_only_root,
        "cap_drop": ["ALL"],
        "cap_add": list(spec.capabilities) or None,
        "security_opt": security_opt,
        "network_mode": spec.network,
        "init": spec.init,
        "mem_limit": spec.memory_bytes,
        "memswap_limit": spec.memory_bytes,
        # Quota per period rather than nano_cpus, whose period is fixed at 100 ms.
        "cpu_period": spec.cpu_period_us,
        "cpu_quota": round(spec.cpus * spec.cpu_period_us),
        "pids_limit": spec.pids_limit,
        "ulimits": [Ulimit(name=n, soft=v, hard=v) for n, v in sorted(spec.ulimits.items())],
        "tmpfs": dict(spec.tmpfs),
        "mounts": [
            *(
                Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                for m in spec.mounts
            ),
            # An anonymous volume: the engine (root) mounts the overlay, so this works for
            # users without root too, and removing the container removes the volume.
            *(
                Mount(
                    target=o.target,
                    source=None,
                    type="volume",
                    driver_config=DriverConfig(
                        "local",
                        {
                            "type": "overlay",
                            "device": "overlay",
                            "o": f"lowerdir={o.lower},upperdir={o.upper},workdir={o.work}",
                        },
                    ),
                )
                for o in spec.overlays
            ),
        ],
        "ipc_mode": "private",
        "cgroupns": "private",
        "log_config": LogConfig(
            type="json-file", config={"max-size": spec.log_max_size, "max-file": "1"}
        ),
    }
