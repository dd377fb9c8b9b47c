"""Sphinx configuration of the harness's documentation (``make docs``).

The site is built offline: the theme's assets and MathJax are copied into it, and the
measurement tables are generated from the committed CSVs when the build starts
(``_ext/harness_docs.py`` writes them under ``_generated/``, which the pages include).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "harness"
author = "the harness developers"
copyright = "2026, the harness developers"
from harness import __version__ as release  # noqa: E402

version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",   # MathJax copied into the site: no CDN
    "numpydoc",
    "harness_docs",             # the tables, generated from the committed CSVs
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "figures/*.csv", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["dollarmath", "amsmath", "deflist", "colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]

autodoc_member_order = "bysource"
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_validation_checks = set()

html_theme = "pydata_sphinx_theme"
html_title = "harness"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_static_path = []
html_show_sourcelink = False
