"""How this package starts Python programs of its own on the host, whatever the directory.

``python -m module`` puts the working directory first on ``sys.path``. The processes this
package starts on the host run where the user works: the proxy kernel in the notebook's
directory, the server's zygote and a sandbox's network proxy in the server's (in JupyterHub,
the user's home). Users write those directories through JupyterLab, so a ``socket.py`` or a
``jupyter_sandbox/`` there would be imported in place of the real module: code of the user's
run on the host, outside every sandbox, as a user who reaches the Docker engine.

:func:`module_command` starts a module with no such entry: ``-P`` (Python 3.11+); before it, a
``-c`` bootstrap that drops the entry before importing anything. Nothing else changes:
environment variables (PYTHONPATH), the user's site directory and the working directory are as
they were. The kernelspec's launcher keeps its own copy of this (it imports nothing of the
package): kernelspec/sandboxed-python/launch.py.
"""

from __future__ import annotations

import sys

# Python < 3.11 has no -P; ``-c`` puts "" (the working directory) first on sys.path, and this
# removes it before runpy or the module imports anything. The module's name is taken off argv,
# and alter_sys makes sys.argv[0] the module's path: the module sees what -m would show it.
_BOOTSTRAP = (
    "import sys; del sys.path[0]; name = sys.argv.pop(1); import runpy; "
    "runpy.run_module(name, run_name='__main__', alter_sys=True)"
)


def module_command(module: str, *args: str, safe_path_flag: bool | None = None) -> list[str]:
    """The argv that runs ``python -m module args...`` with this interpreter, without the
    working directory on ``sys.path``.

    ``safe_path_flag``: use ``-P`` (default: when this Python has it); False forces the
    bootstrap older Pythons get, which the tests run on every version.
    """
    if safe_path_flag is None:
        safe_path_flag = sys.version_info >= (3, 11)
    if safe_path_flag:
        return [sys.executable, "-P", "-m", module, *args]
    return [sys.executable, "-c", _BOOTSTRAP, module, *args]
