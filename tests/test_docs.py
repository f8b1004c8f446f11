"""The API reference builds from the docstrings (Sphinx autodoc) without a single warning, and
documents the public API; `make docs` is the same build. Every test a document points at exists:
SECURITY.md and docs/FORMAT.md name tests as ``tests/<file>.py::<test>`` (or ``::<test>`` for
another test of the file named just before), and README.md, SECURITY.md and FORMAT.md name
tests by their bare names."""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gcmstream

pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]' (make test installs it)")

DOCS = Path(__file__).resolve().parent.parent / "docs"


# `make test` builds the reference once (its docs target: the same command, any warning fails
# it) and names the build here, so the suite reads it instead of running Sphinx again.
BUILT_HTML_ENV = "GCMSTREAM_DOCS_HTML"


def built_html(tmp_path: Path) -> Path:
    """The HTML reference: the build `make test` made just before, else one made here."""
    if built := os.environ.get(BUILT_HTML_ENV):
        return Path(built)
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return tmp_path


@pytest.mark.slow  # Sphinx: 5 to 9 s; in make test, the docs target's build is read
def test_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    html = built_html(tmp_path)
    api = (html / "api.html").read_text()
    for name in ("Sealer", "Opener", "Channel", "SecureStream", "decrypt_stream", "KeyCommitmentError"):
        obj = getattr(gcmstream, name)
        assert f'id="{obj.__module__}.{name}"' in api, name  # documented where it is defined
        words = re.findall(r"[A-Za-z]+", (obj.__doc__ or "").split("``")[0])[:4]
        assert len(words) == 4 and re.search(r"\W+".join(words), api), name  # with its docstring
    assert gcmstream.__version__ in (html / "index.html").read_text()


def test_every_test_the_documents_cite_exists() -> None:
    """SECURITY.md, README.md and docs/FORMAT.md point at tests by name: those tests exist."""
    root = DOCS.parent
    defined = set()
    for path in (root / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.MULTILINE))
    cited = set()
    for name in ("SECURITY.md", "README.md", "docs/FORMAT.md"):
        cited |= set(re.findall(r"\b(test_\w+)\b(?!\.py)", (root / name).read_text()))
    assert cited, "no test is cited"
    assert not sorted(cited - defined), f"cited but not defined: {sorted(cited - defined)}"


ROOT = Path(__file__).resolve().parents[1]
REFERENCE = re.compile(r"(tests/[\w/]+\.py)?::(\w+)")


def references(document: str) -> list[tuple[str, str]]:
    found, current = [], ""
    for match in REFERENCE.finditer((ROOT / document).read_text()):
        current = match.group(1) or current
        found.append((current, match.group(2)))
    return found


@functools.cache  # one parse per file: a document names dozens of tests of each
def defined(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


@pytest.mark.parametrize("document", ["SECURITY.md", "docs/FORMAT.md"])
def test_every_test_a_document_names_exists(document: str) -> None:
    refs = references(document)
    assert refs or document != "SECURITY.md"
    for path, name in refs:
        assert path, f"{document}: ::{name} without a file before it"
        assert name in defined(path), f"{document} points at {path}::{name}, which does not exist"
