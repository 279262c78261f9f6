"""``python -m jupyter_sandbox.cli``: the same as ``jupyter sandbox``."""

from jupyter_sandbox.cli.main import main

main()
