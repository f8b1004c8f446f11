"""The distribution: one version, its metadata, the wheel, and an sdist whose own tests pass
from the extracted tree. Built with ``python -m build --no-isolation`` (setuptools and build
come with the ``test`` extra), so no network is needed."""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from trove_classifiers import classifiers as known_classifiers

import gcmstream

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PYPROJECT["version"]
TIMEOUT = 600


def test_the_version_is_written_once() -> None:
    assert gcmstream.__version__ == importlib.metadata.version("gcmstream") == VERSION
    tree = ast.parse((ROOT / "src" / "gcmstream" / "__init__.py").read_text())
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)]
    literals = [s for s in strings if isinstance(s, str) and re.fullmatch(r"\d+\.\d+.*", s)]
    assert not literals, "a version literal in __init__.py: read it from the metadata"


def test_the_changelog_has_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(VERSION)}\]", text, re.MULTILINE)
    assert re.search(r"^## \[Unreleased\]", text, re.MULTILINE)


def test_metadata_for_an_index() -> None:
    assert PYPROJECT["license"] == "MIT" and PYPROJECT["license-files"] == ["LICENSE"]
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    unknown = [c for c in PYPROJECT["classifiers"] if c not in known_classifiers]
    assert not unknown, unknown
    assert {"Homepage", "Source", "Issues", "Changelog", "Documentation"} <= set(PYPROJECT["urls"])
    assert PYPROJECT["keywords"] and PYPROJECT["authors"]
    assert {"trio", "uvloop", "test", "docs"} <= set(PYPROJECT["optional-dependencies"])


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def _one(directory: Path, pattern: str) -> Path:
    (found,) = directory.glob(pattern)
    return found


@pytest.mark.slow  # the build: 3 s, once per make test (the sdist tests share it)
def test_wheel_carries_the_license_and_the_metadata(dist: Path) -> None:
    wheel = _one(dist, f"gcmstream-{VERSION}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"gcmstream-{VERSION}.dist-info"
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert f"{info}/licenses/LICENSE" in names
    assert "gcmstream/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "docs/"))]
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata.get_all("Classifier") == PYPROJECT["classifiers"]
    assert len(metadata.get_all("Project-URL", [])) == len(PYPROJECT["urls"])
    assert 'extra == "trio"' in " ".join(metadata.get_all("Requires-Dist", []))
    assert "pip install gcmstream" in (metadata.get_payload() or "")  # the README, the index page


@pytest.mark.slow
def test_sdist_holds_the_tests_their_data_and_the_docs(dist: Path) -> None:
    with tarfile.open(_one(dist, f"gcmstream-{VERSION}.tar.gz")) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for needed in (
        "LICENSE",
        "CHANGELOG.md",
        "SECURITY.md",
        "README.md",
        "Makefile",
        "docs/FORMAT.md",
        "docs/conf.py",
        "examples/demo.py",
        "tests/vectors/valid.json",
        "tests/vectors/invalid/generate.py",
        "tests/vectors/invalid/valid_stream_trailing_byte.json",
        "tests/vectors/invalid/flipped_tag.json",
        "benchmarks/run.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.startswith(("docs/_build", ".venv"))]
    sources = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "docs").rglob("*")
        if path.is_file() and not {"_build", "__pycache__"} & set(path.relative_to(ROOT / "docs").parts)
    }
    assert not sorted(sources - names), "docs sources missing from the sdist (Sphinx needs them all)"


@pytest.mark.slow
def test_sdist_tests_pass_from_the_extracted_tree(dist: Path, tmp_path: Path) -> None:
    """The tests that read the sdist's own files (vectors, README, docs, examples), those not
    marked slow, run against the extracted tree's source; `make sdist-check` runs the whole
    suite the same way."""
    with tarfile.open(_one(dist, f"gcmstream-{VERSION}.tar.gz")) as archive:
        archive.extractall(tmp_path, filter="data")
    tree = tmp_path / f"gcmstream-{VERSION}"
    environ = {**os.environ, "PYTHONPATH": str(tree / "src")}
    where = subprocess.run(
        [sys.executable, "-c", "import gcmstream; print(gcmstream.__file__)"],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(tree)  # the extracted code, not ours
    files = [f"tests/test_{name}.py" for name in ("vectors", "public_api", "readme", "docs")]
    # Those not marked slow: Sphinx runs once per `make test` (its docs target), and the sdist
    # holds every source it reads (test_sdist_holds_the_tests_their_data_and_the_docs); the
    # README's shell blocks run in our tree's suite from the same README (`make sdist-check`
    # runs everything from the extracted tree).
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *files],
        cwd=tree,
        env=environ,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert re.search(r"\d+ passed", result.stdout) and "failed" not in result.stdout
