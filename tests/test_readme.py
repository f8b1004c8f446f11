"""Every code block in README.md runs as it stands, so the examples cannot rot: Python blocks
under ``-X dev`` with warnings as errors (an unclosed transport or file fails them), shell
blocks under ``bash -euo pipefail`` with this interpreter's ``gcmstream`` first on PATH. A
block can only be left out by a ``<!-- readme-test: skip (reason) -->`` line right above it."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
TIMEOUT = 120
_BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>\w+)\n(?P<code>.*?)\n```\n", re.DOTALL)
_SLOW_STEP = re.compile(r"^Executing <.*> took \d+\.\d+ seconds\n", re.MULTILINE)
_SKIP = re.compile(r"<!-- readme-test: skip \((?P<reason>[^)]+)\) -->")


def _blocks() -> list[Any]:  # pytest.param values
    params = []
    for number, match in enumerate(_BLOCK.finditer(README.read_text()), 1):
        line = README.read_text()[: match.start("code")].count("\n") + 1
        skip = _SKIP.fullmatch(match["before"].strip())
        marks = [pytest.mark.skip(reason=skip["reason"])] if skip else []
        if match["lang"] == "sh":  # each starts gcmstream processes: 2 to 6 s (pytest --durations)
            marks.append(pytest.mark.slow)
        params.append(
            pytest.param(match["lang"], match["code"], id=f"{number}-{match['lang']}-line{line}", marks=marks)
        )
    return params


BLOCKS = _blocks()


def test_the_readme_has_blocks_of_both_kinds() -> None:
    languages = [param.values[0] for param in BLOCKS]
    assert languages.count("python") >= 4 and languages.count("sh") >= 2, languages
    assert set(languages) <= {"python", "sh"}, "a block in a language this test does not run"


@pytest.mark.parametrize(("language", "code"), BLOCKS)
def test_readme_block_runs(language: str, code: str, tmp_path: Path) -> None:
    if language == "python":
        command = [sys.executable, "-X", "dev", "-W", "error", "-c", code]
    else:
        (tmp_path / "docs").mkdir()  # something for `tar c docs` to archive
        (tmp_path / "docs" / "notes.txt").write_text("what the README's commands archive\n")
        command = ["bash", "-euo", "pipefail", "-c", code]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GCMSTREAM_")}
    environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environ.get('PATH', '')}"
    result = subprocess.run(
        command, cwd=tmp_path, env=environ, capture_output=True, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    # no warning, no progress noise; only asyncio's debug-mode note of a step that took over 0.1 s,
    # which a loaded machine (make check's two workers among other jobs) causes, is not the code's
    stderr = _SLOW_STEP.sub("", result.stderr.decode())
    assert stderr == "", result.stderr.decode()
    # a server's socket file outlives it on Python 3.11 and 3.12 and with anyio: an example
    # that copied as it stands would leave one behind in the reader's directory
    sockets = [path.name for path in tmp_path.rglob("*") if stat.S_ISSOCK(path.lstat().st_mode)]
    assert sockets == [], f"the block leaves socket files behind: {sockets}"


@pytest.mark.parametrize(("language", "code"), [param for param in BLOCKS if param.values[0] == "python"])
def test_a_python_block_runs_again_in_its_own_directory(language: str, code: str, tmp_path: Path) -> None:
    """A new user's finding: pasted a second time into the same directory, the recipients block
    stopped at its first line with FileExistsError (its identity file, written without
    ``force=True``), where the key-file block, which passes it, ran again. A block that runs
    once and fails on its second run is a trap for whoever tries it twice."""
    command = [sys.executable, "-X", "dev", "-W", "error", "-c", code]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GCMSTREAM_")}
    for run in ("first", "second"):
        result = subprocess.run(
            command, cwd=tmp_path, env=environ, capture_output=True, timeout=TIMEOUT, check=False
        )
        assert result.returncode == 0, f"{run} run: {result.stderr.decode()}"


# a file name as the blocks write them: a word with one of the extensions the README's files have
_FILE_NAME = re.compile(r"[\w-]+\.(?:gcms|tar|key|txt|bin|asc|identity|recipients|tink|json)\b")


def test_the_python_blocks_share_no_file_with_the_commands_and_show_read_key_file() -> None:
    """A new user's finding: run in the directory of the command-line section, the Python
    blocks replaced its backup.gcms (under another key) and big.gcms, and no block showed how
    a key file `gcmstream keygen` wrote is read. Each Python block makes what it uses under names
    no shell block uses (test_readme_block_runs runs each in an empty directory, so they are
    self-contained), and one reads a key file with read_key_file."""
    shell: set[str] = set()
    python: list[set[str]] = []
    for param in BLOCKS:
        language, code = param.values
        names = set(_FILE_NAME.findall(code))
        if language == "sh":
            shell |= names
        else:
            python.append(names)
    assert {"backup.gcms", "backup.key", "big.gcms"} <= shell, shell  # the pattern finds them
    for names in python:
        assert not names & shell, sorted(names & shell)
    codes = [param.values[1] for param in BLOCKS if param.values[0] == "python"]
    assert any("gcmstream.read_key_file(" in code for code in codes)
