"""The programs the host runs inside a sandbox, named so that the sandbox cannot swap them.

An engine exec names its program by ``argv[0]``, and a name without a slash is looked up on
the exec's PATH, whose first entry is /tmp/.local/bin (where ``pip install`` in the sandbox
puts scripts): code in the sandbox that writes an executable ``sh``, ``python3`` or ``tar``
there would have the host run it instead, or fail to run anything (/tmp is noexec, which does
not stop the runtime's lookup, only the start). So every program the host runs is named here
by its absolute path in the image's root, which is read-only and owned by root: the sandbox's
user can write none of it. Python runs with ``-I -S``: no PYTHON* variables, no script or
working directory on the path, no user site and no site module at all, so none of the
sandbox's own packages (the image's venv adds /tmp/.local's site-packages through a .pth
file, which only the site module reads). A shell script's own lookups (``mkdir``, ``stat``)
see only HOST_PATH, read-only directories, whatever PATH the sandbox or a caller's ``env``
set; the caller's PATH is kept in ``$sandbox_path`` for a script that runs a caller's command.

The image's paths (images/python/Dockerfile): its venv, /opt/sandbox, made by the base's
python3 (Debian's /usr/bin/python3 or the python image's /usr/local/bin/python3: the venv's
link reaches either); Debian's /bin/sh (dash), /bin/bash, /bin/tar, /usr/bin/env and
/usr/bin/setpriv (Essential packages: coreutils, util-linux), which every base the
builder accepts has (sandbox/images/build.py).
"""

from __future__ import annotations

PYTHON = "/opt/sandbox/bin/python3"
SHELL = "/bin/sh"
BASH = "/bin/bash"
TAR = "/bin/tar"
CAT = "/bin/cat"
ENV = "/usr/bin/env"
SETPRIV = "/usr/bin/setpriv"  # util-linux, Essential in Debian like coreutils' env
# What a host script's commands are looked up on: the image's own read-only directories.
HOST_PATH = "/usr/bin:/bin"


def python(source: str, *arguments: str) -> list[str]:
    """The image's Python running ``source`` with ``arguments`` (``sys.argv[1:]``)."""
    return [PYTHON, "-I", "-S", "-c", source, *arguments]


def python_reading_stdin() -> list[str]:
    """The image's Python running the program it reads from standard input."""
    return [PYTHON, "-I", "-S", "-"]


def shell(script: str, *arguments: str) -> list[str]:
    """The image's sh running ``script`` with ``$0`` and on set to ``arguments``, its lookups
    on HOST_PATH (the PATH it was given stays in ``$sandbox_path``)."""
    return [SHELL, "-c", f"sandbox_path=$PATH; PATH={HOST_PATH}; {script}", *arguments]


def with_only_read_search(argv: list[str], environment: dict[str, str]) -> list[str]:
    """``argv`` with exactly ``environment`` (``env -i``: nothing of the exec's), started by
    setpriv with no_new_privs and every capability dropped (bounding, inheritable and ambient
    sets) but CAP_DAC_READ_SEARCH. For a privileged exec as uid 0 (the sealed archiver:
    sandbox/backends/docker/sealed_archive.py): after setpriv's execve it keeps that one
    capability, to read every file and directory, and nothing else."""
    return [
        ENV,
        "-i",
        *(f"{name}={value}" for name, value in environment.items()),
        SETPRIV,
        "--no-new-privs",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all,+dac_read_search",
        "--",
        *argv,
    ]


def tar(*arguments: str) -> list[str]:
    """The image's GNU tar with ``arguments``."""
    return [TAR, *arguments]
