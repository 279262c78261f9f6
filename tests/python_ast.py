"""``parse``: ``ast.parse`` that a garbage collection cannot break, for the tests that read the
repository's Python files.

On Python 3.11, ``ast.parse`` keeps its depth count in state shared by every parse; a
collection that runs inside it (any allocation may start one) can finalize an object whose
``__del__`` formats a traceback, and 3.11's traceback formatting parses source lines to place
its carets: the inner parse leaves the outer one's count off, which then fails with
``SystemError: AST constructor recursion depth mismatch``. A test run leaves such objects
behind (an asyncio future whose exception nobody read, logged when it is collected), and
CI met the failure once in a test of the documentation's references.
"""

from __future__ import annotations

import ast
import gc


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``source`` parsed, with no garbage collection while it is."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename)
    finally:
        if enabled:
            gc.enable()
