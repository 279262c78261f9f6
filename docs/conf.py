"""Sphinx configuration of the documentation site (``make docs``: docs/_build/html).

The site is built offline (no intersphinx, no theme assets from the network) with warnings as
errors and nitpicky cross-references. The references are generated from the code at build time
(docs/_ext/sandbox_reference.py, sphinxcontrib-openapi, autodoc), so the package is imported
from this checkout rather than installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(DOCS / "_ext"))

from jupyter_sandbox import __version__  # noqa: E402

project = "jupyter-sandbox"
author = "jupyter-sandbox developers"
copyright = "jupyter-sandbox developers"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "sphinxcontrib.openapi",
    "sandbox_reference",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "requirements.txt", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
# Anchors for headings down to ###, so that pages can link to a section (page.md#section).
myst_heading_anchors = 3

# Every cross-reference must resolve. Names outside this project are not looked up (no
# intersphinx: the build is offline), so references to the standard library and to other
# packages' classes in signatures are let through; the project's own never are.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!jupyter_sandbox\.).*"),
    # Private names (type variables in signatures) are not part of the API and have no entry.
    (r"py:.*", r"jupyter_sandbox\..*\._\w+"),
]

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True

html_theme = "pydata_sphinx_theme"
html_title = f"jupyter-sandbox {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_show_sourcelink = False
