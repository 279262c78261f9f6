"""jupyter-sandbox: run untrusted Python in Jupyter, every cell inside an isolated container."""

from __future__ import annotations

from jupyter_sandbox._version import __version__

__all__ = ["__version__"]
