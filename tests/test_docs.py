"""Every test a document points at exists: SECURITY.md and docs/FORMAT.md name tests as
``tests/<file>.py::<test>`` (or ``::<test>`` for another test of the file named just before)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = re.compile(r"(tests/[\w/]+\.py)?::(\w+)")


def references(document: str) -> list[tuple[str, str]]:
    found, current = [], ""
    for match in REFERENCE.finditer((ROOT / document).read_text()):
        current = match.group(1) or current
        found.append((current, match.group(2)))
    return found


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
