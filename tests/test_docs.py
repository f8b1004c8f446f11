"""The API reference builds from the docstrings (Sphinx autodoc) without a single warning, and
documents the public API: a landing page, one page per public module, every public attribute of
``GcmStreamAttribute``, no private parameter in any signature shown. `make docs` is the same
build. Every test a document points at exists: SECURITY.md and docs/FORMAT.md name tests as
``tests/<file>.py::<test>`` (or ``::<test>`` for another test of the file named just before),
and README.md, SECURITY.md and FORMAT.md name tests by their bare names."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import gcmstream
from gcmstream.anyio_stream import GcmStreamAttribute

pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]' (make test installs it)")

from sphinx.pycode import ModuleAnalyzer

DOCS = Path(__file__).resolve().parent.parent / "docs"
PUBLIC_MODULES = sorted(
    info.name
    for info in pkgutil.iter_modules(gcmstream.__path__, prefix="gcmstream.")
    if not info.name.split(".")[-1].startswith("_")
)


# `make test` builds the reference once (its docs target: the same command, any warning fails
# it) and names the build here, so the suite reads it instead of running Sphinx again.
BUILT_HTML_ENV = "GCMSTREAM_DOCS_HTML"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One Sphinx build for every test of this module: the one `make test` made just before
    (its -W build succeeded, or make would have stopped), else one made here (seconds)."""
    if made := os.environ.get(BUILT_HTML_ENV):
        return subprocess.CompletedProcess([], 0, "", ""), Path(made)
    out = tmp_path_factory.mktemp("html")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return result, out


def page_of(module: str, out: Path) -> Path:
    return out / "api" / f"{module.removeprefix('gcmstream.')}.html"


@pytest.mark.slow  # a Sphinx build (5 to 9 s); in make test, the docs target's build is read
def test_api_reference_builds_without_warnings(built: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, out = built
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    for name in ("Sealer", "Opener", "Channel", "SecureStream", "decrypt_stream", "KeyCommitmentError"):
        obj = getattr(gcmstream, name)
        page = page_of(obj.__module__, out).read_text()
        assert f'id="{obj.__module__}.{name}"' in page, name  # documented where it is defined
        words = re.findall(r"[A-Za-z]+", (obj.__doc__ or "").split("``")[0])[:4]
        assert len(words) == 4 and re.search(r"\W+".join(words), page), name  # with its docstring
    assert gcmstream.__version__ in (out / "index.html").read_text()


@pytest.mark.slow  # a Sphinx build (5 to 9 s); in make test, the docs target's build is read
def test_the_landing_page_leads_to_a_page_per_public_module(
    built: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = built
    landing = (out / "index.html").read_text()
    assert "What to read for" in landing
    for topic in ("sockets", "files", "recipients", "sans-IO core", "command line", "errors"):
        assert topic in landing, topic
    assert len(PUBLIC_MODULES) >= 15, PUBLIC_MODULES
    for module in PUBLIC_MODULES:
        page = page_of(module, out)
        assert page.is_file(), f"no page for {module}"
        assert f'id="module-{module}"' in page.read_text(), module
        assert f'href="api/{page.name}"' in landing, f"the landing page does not lead to {module}"
    # the names of the landing page's table are links to where they are documented
    assert not re.search(r'(?<!">)<code class="xref py', landing), "a name the reference does not document"
    assert (out / "index.html").stat().st_size < 64_000  # a landing page, not the whole reference


SIGNATURE = re.compile(r'<dt class="sig sig-object py" id="(?P<name>[^"]+)">(?P<signature>.*?)</dt>', re.S)
PARAMETER = re.compile(
    r'<em class="sig-param">(?:<span class="o"><span class="pre">\*{1,2}</span></span>)?'
    r'<span class="n"><span class="pre">(?P<name>\w+)'
)


@pytest.mark.slow  # a Sphinx build (5 to 9 s); in make test, the docs target's build is read
def test_no_private_parameter_in_any_rendered_signature(
    built: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """Test-vector hooks (``_salt=``, ``_random=``, ...) are for tests only (SECURITY.md: never
    pass them); the reference shows no signature with one (conf.py hides them)."""
    _, out = built
    parameters: dict[str, list[str]] = {}
    for page in (out / "api").glob("*.html"):
        for match in SIGNATURE.finditer(page.read_text()):
            parameters[match["name"]] = PARAMETER.findall(match["signature"])
    assert len(parameters) > 150, len(parameters)  # the pattern still finds the signatures
    private = {name: [p for p in found if p.startswith("_")] for name, found in parameters.items()}
    assert not {name: found for name, found in private.items() if found}
    # the public parameters around the hidden ones are still shown
    assert parameters["gcmstream.sealer.Sealer"][:2] == ["key", "recipients"]
    assert "reuse_output" in parameters["gcmstream.sealer.Sealer"]
    assert "max_record_size" in parameters["gcmstream.opener.Opener"]


def sphinx_configuration() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gcmstream_docs_conf", DOCS / "conf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        ("(key, *, context=b'', _salt=None)", "(key, *, context=b'')"),
        ("(key, *, _salt=None, _random=<built-in function urandom>)", "(key)"),  # no bare * left
        ("(sep=b',', _x=(1, 2), *args, _y={'a': [1, 2]}, **kwargs)", "(sep=b',', *args, **kwargs)"),
        ("(data, *, flush=False)", "(data, *, flush=False)"),
        ("()", "()"),
        ("(unbalanced=(, _x=1)", "(unbalanced=(, _x=1)"),  # left as it was, and the build test sees it
        ("(quote='x, _x=1)", "(quote='x, _x=1)"),
    ],
)
def test_the_signature_filter_drops_exactly_the_private_parameters(shown: str, expected: str) -> None:
    assert sphinx_configuration().without_private_parameters(shown) == expected


@pytest.mark.slow  # a Sphinx build (5 to 9 s); in make test, the docs target's build is read
def test_every_public_attribute_of_gcmstream_attribute_is_documented(
    built: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, out = built
    public = [name for name in vars(GcmStreamAttribute) if not name.startswith("_")]
    assert {"records_opened", "peer_key_id", "bytes_sealed"} <= set(public), public
    documented = ModuleAnalyzer.for_module(GcmStreamAttribute.__module__).find_attr_docs()
    page = page_of(GcmStreamAttribute.__module__, out).read_text()
    for name in public:
        text = " ".join(documented.get((GcmStreamAttribute.__name__, name), [])).strip()
        assert len(text.split()) >= 4, f"GcmStreamAttribute.{name} has no doc comment"
        assert f'id="gcmstream.anyio_stream.GcmStreamAttribute.{name}"' in page, name
        assert re.search(r"\W+".join(re.findall(r"\w+", text)[:4]), page), name
    assert "object object" not in page  # anyio's key objects are not shown as if they were values


def test_every_test_the_documents_cite_exists() -> None:
    """SECURITY.md, README.md and docs/FORMAT.md point at tests by name: those tests exist."""
    root = DOCS.parent
    defined = set()
    for path in (root / "tests").rglob("test_*.py"):
        defined |= set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.MULTILINE))
    cited = set()
    for name in ("SECURITY.md", "README.md", "docs/FORMAT.md", "docs/TINK.md"):
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


@pytest.mark.parametrize("document", ["SECURITY.md", "docs/FORMAT.md", "docs/TINK.md"])
def test_every_test_a_document_names_exists(document: str) -> None:
    refs = references(document)
    assert refs or document == "docs/FORMAT.md"
    for path, name in refs:
        assert path, f"{document}: ::{name} without a file before it"
        assert name in defined(path), f"{document} points at {path}::{name}, which does not exist"


def test_every_invalid_vector_format_md_names_exists() -> None:
    """docs/FORMAT.md points its rules at invalid vectors by file name (in full, or the bare
    name after the first): each is a file of tests/vectors/invalid/."""
    text = (ROOT / "docs" / "FORMAT.md").read_text()
    named = set(re.findall(r"\b([a-z0-9_]+)\.json\b", text)) - {"valid", "lines", "recipients", "xwing"}
    named -= {"mlkem768_encapsulation"}  # tests/vectors/ itself
    assert {"channel_initiator_downgrade", "channel_initiator_reflected"} <= named
    missing = sorted(n for n in named if not (ROOT / "tests" / "vectors" / "invalid" / f"{n}.json").is_file())
    assert not missing, f"docs/FORMAT.md names vectors that do not exist: {missing}"


REPOSITORY_FILE = "https://github.com/gcmstream/gcmstream/blob/main/"
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_links_work_on_the_package_index() -> None:
    """PyPI renders README.md without the repository around it: every link is absolute, and one
    into the repository names a file (and a heading) that exists."""
    readme = (ROOT / "README.md").read_text()
    targets = LINK.findall(readme)
    assert len(targets) >= 8, targets
    for target in targets:
        assert target.startswith("https://"), f"README.md links to {target!r}, which PyPI cannot follow"
        if not target.startswith(REPOSITORY_FILE):
            continue
        path, _, anchor = target.removeprefix(REPOSITORY_FILE).partition("#")
        assert (ROOT / path).is_file(), f"README.md links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.MULTILINE)
            assert anchor in {github_anchor(h) for h in headings}, f"no heading {anchor!r} in {path}"


def test_readme_first_screen_says_why_and_how_safe_with_figures_from_the_benchmarks() -> None:
    """The README opens on what gcmstream is for, why over TLS and over age (each with a figure
    quoted from benchmarks/README.md as committed) and its security status, before installation."""
    readme = (ROOT / "README.md").read_text()
    first = readme[: readme.index("\n## ")]
    for needed in ("**Why not TLS?**", "**Why not age?**", "**Security status.**", "SECURITY.md"):
        assert needed in first, needed
    assert not re.search(r"\bdecrypt_into\b|\bring\b", first)  # implementation details come later
    benchmarks = (ROOT / "benchmarks" / "README.md").read_text()
    for paragraph in ("**Why not TLS?**", "**Why not age?**"):
        text = first[first.index(paragraph) :].split("\n\n")[0]
        assert f"{REPOSITORY_FILE}benchmarks/README.md" in text, paragraph
        figures = re.findall(r"\b\d[\d,]*(?:\.\d+)?(?=\s(?:MB/s|ms\b|against))", text)
        assert len(figures) >= 3, (paragraph, figures)
        for figure in figures:
            assert re.search(rf"(?<![\d,.]){re.escape(figure)}(?![\d,]|\.\d)", benchmarks), (
                f"{paragraph} quotes {figure}, which benchmarks/README.md does not say"
            )
