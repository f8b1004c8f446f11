"""Sphinx configuration: the API reference, built from the docstrings by autodoc (`make docs`)."""

from importlib.metadata import version as _version

project = "gcmstream"
author = "The gcmstream maintainers"
copyright = "2026, The gcmstream maintainers"  # noqa: A001 (Sphinx reads this name)
release = _version("gcmstream")
version = release

extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# the Markdown pages (FORMAT.md) are read on GitHub and PyPI; Sphinx builds the reference only
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "alabaster"
