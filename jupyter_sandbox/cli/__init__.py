"""``jupyter sandbox <verb>``: the command line. ``main.py`` holds the app and its verbs; each group
of verbs has a module of its own (files, background, ports, snapshots, ...).
"""

from jupyter_sandbox.cli.main import main

__all__ = ["main"]
