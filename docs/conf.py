"""Sphinx configuration: the API reference, built from the docstrings by autodoc (`make docs`)."""

from __future__ import annotations

import re
from importlib.metadata import version as _version
from typing import Any

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
html_theme_options = {"description": "Async streaming AEAD framing for Python", "fixed_sidebar": True}

# a quoted default (with its escapes), a bracket, or a comma: what splitting a signature needs
_TOKEN = re.compile(r"""'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"|['"]|[()\[\]{}<>,]""")


def _split_parameters(inside: str) -> list[str] | None:
    """The top-level comma-separated parameters of a signature's inside, or None when its
    brackets or quotes do not balance (then the signature is left as autodoc made it)."""
    parts, depth, start = [], 0, 0
    for token in _TOKEN.finditer(inside):
        text = token.group()
        if text in ("'", '"'):  # a quote that no closing quote matched
            return None
        depth += (text in "([{<") - (text in ")]}>")
        if depth < 0:
            return None
        if text == "," and depth == 0:
            parts.append(inside[start : token.start()].strip())
            start = token.end()
    if depth:
        return None
    parts.append(inside[start:].strip())
    return [part for part in parts if part]


def without_private_parameters(signature: str) -> str:
    """``signature`` without the parameters whose name starts with ``_`` (test-vector hooks such
    as ``_salt=``, which callers must never pass: SECURITY.md), and without a bare ``*`` left
    with no keyword-only parameter after it."""
    if not (signature.startswith("(") and signature.endswith(")")):
        return signature
    parameters = _split_parameters(signature[1:-1])
    if parameters is None:
        return signature
    kept = [p for p in parameters if not p.lstrip("*").startswith("_")]
    if kept and kept[-1] == "*":
        kept.pop()
    return f"({', '.join(kept)})"


def _hide_private_parameters(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: str | None, annotation: str | None
) -> tuple[str | None, str | None]:
    return (without_private_parameters(signature) if signature else signature), annotation


def setup(app: Any) -> None:
    app.connect("autodoc-process-signature", _hide_private_parameters)
