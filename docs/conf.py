"""Sphinx configuration: the Markdown pages of docs/ as one site.

Build with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (warnings
are errors in CI).
"""

project = "crawlcluster"
author = "the crawlcluster authors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3          # links to a page's sections: page.md#a-heading
html_theme = "alabaster"
html_title = "crawlcluster"
