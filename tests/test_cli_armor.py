"""``encrypt -a/--armor`` and the armored input ``decrypt`` and ``info`` tell by themselves:
in process (``run_cli``), and one real shell pipeline (issue 25)."""

from __future__ import annotations

import os
import pty
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gcmstream.armor import BEGIN_LINE, END_LINE, dearmor
from gcmstream.cli import EXIT_OK, EXIT_TAMPERED, EXIT_TRUNCATED, EXIT_UNSUPPORTED, EXIT_USAGE

from .helpers import run_cli
from .test_cli import TIMEOUT, env, one_line_error

RECORD = 1024  # small records: a few KiB cross several record and line boundaries


@pytest.fixture
def key(tmp_path: Path) -> Path:
    path = tmp_path / "k.key"
    assert run_cli("keygen", "-o", path).status == EXIT_OK
    return path


def sealed(key: Path, plain: bytes, *extra: str | Path) -> bytes:
    result = run_cli("encrypt", "-a", "-k", key, "--record-size", str(RECORD), *extra, input=plain)
    assert result.status == EXIT_OK, result.stderr
    return result.stdout


# every record boundary and the line boundaries (48 bytes) next to them
SIZES = [0, 1, 47, 48, 49, RECORD - 1, RECORD, RECORD + 1, 3 * RECORD, 3 * RECORD + 47]


@pytest.mark.parametrize("size", SIZES)
def test_armored_round_trip(tmp_path: Path, key: Path, size: int) -> None:
    plain = random.Random(size).randbytes(size)
    text = sealed(key, plain)
    assert text.startswith(BEGIN_LINE + b"\n") and text.endswith(END_LINE + b"\n")
    binary = run_cli("encrypt", "-k", key, "--record-size", str(RECORD), input=plain).stdout
    assert len(dearmor(text)) == len(binary)  # the same file, only its form differs
    opened = run_cli("decrypt", "-k", key, input=text)  # told by its first line
    assert opened.status == EXIT_OK and opened.stdout == plain, opened.stderr
    path = tmp_path / "in.gcms.asc"
    path.write_bytes(text)
    assert run_cli("decrypt", "-k", key, "-o", tmp_path / "out", path).status == EXIT_OK
    assert (tmp_path / "out").read_bytes() == plain


def test_armored_input_is_not_seekable_and_info_and_offset_say_so(tmp_path: Path, key: Path) -> None:
    path = tmp_path / "in.asc"
    path.write_bytes(sealed(key, b"x" * 5000))
    message = one_line_error(run_cli("info", "-k", key, path), EXIT_UNSUPPORTED)
    assert "armored" in message and "info needs the binary file" in message and str(path) in message
    for option in ("--offset", "--length"):
        message = one_line_error(run_cli("decrypt", "-k", key, option, "10", path), EXIT_UNSUPPORTED)
        assert "armored" in message and "--offset and --length need the binary file" in message


def test_decrypt_names_what_an_armored_file_needs(tmp_path: Path) -> None:
    identity = tmp_path / "me.identity"
    assert run_cli("identity", "-o", identity, "--x25519").status == EXIT_OK
    path = tmp_path / "to-me.asc"
    result = run_cli("encrypt", "-a", "-i", identity, "-o", path, input=b"secret")
    assert result.status == EXIT_OK and path.read_bytes().startswith(BEGIN_LINE)
    message = one_line_error(run_cli("decrypt", path), EXIT_USAGE)
    assert "encrypted to recipients" in message and "--identity" in message
    opened = run_cli("decrypt", "-i", identity, path)
    assert opened.status == EXIT_OK and opened.stdout == b"secret"


def broken(text: bytes) -> dict[str, bytes]:
    lines = text.split(b"\n")
    last = lines[-3]  # the last base64 line (then the end line, then "")
    assert 0 < len(last) < 64 and len(last) % 4 == 0
    return {
        "trailing garbage": text + b"garbage\n",
        "missing end line": b"\n".join(lines[:-2]) + b"\n",
        "non-canonical last line": text.replace(last + b"\n", last[:-3] + b"B==\n")
        if last.endswith(b"==")
        else text.replace(last + b"\n", last[:-2] + b"B=\n"),
        "long line": text.replace(lines[2] + b"\n", lines[2] + b"A\n", 1),
        "short line before the last": text.replace(lines[2] + b"\n", lines[2][:60] + b"\n", 1),
        "padding in a full line": text.replace(lines[2] + b"\n", lines[2][:62] + b"==\n", 1),
    }


@pytest.mark.parametrize("case", ["trailing garbage", "missing end line", "non-canonical last line"])
@pytest.mark.parametrize("records", [1, 4])
def test_a_fault_after_the_last_record_releases_none_of_it(
    tmp_path: Path, key: Path, case: str, records: int
) -> None:
    """Malformed armor at the end: no output file, and on stdout nothing of the FINAL record
    (records before it may be: they authenticated, and go out as a binary stream's do)."""
    size = records * RECORD - 100
    plain = random.Random(records).randbytes(size)
    text = broken(sealed(key, plain))[case]
    # text cut before its end line is a cut file (5), as a binary one; other faults are damage (4)
    code, words = (
        (EXIT_TRUNCATED, "truncated input")
        if case == "missing end line"
        else (EXIT_TAMPERED, "corrupt armor")
    )
    out = tmp_path / "out"
    message = one_line_error(run_cli("decrypt", "-k", key, "-o", out, input=text), code)
    assert words in message and not out.exists()
    piped = run_cli("decrypt", "-k", key, input=text)
    assert piped.status == code and words in piped.stderr
    released = piped.stdout  # records before FINAL may be released, as a binary stream's are
    assert plain.startswith(released) and len(released) <= (records - 1) * RECORD


@pytest.mark.parametrize("case", ["long line", "short line before the last", "padding in a full line"])
def test_malformed_armor_is_refused_with_nothing_released(tmp_path: Path, key: Path, case: str) -> None:
    text = broken(sealed(key, os.urandom(900)))[case]  # one record
    out = tmp_path / "out"
    message = one_line_error(run_cli("decrypt", "-k", key, "-o", out, input=text), EXIT_TAMPERED)
    assert "corrupt armor" in message and not out.exists()
    piped = run_cli("decrypt", "-k", key, input=text)
    assert piped.status == EXIT_TAMPERED and piped.stdout == b""


def test_encrypt_armor_pipes_into_decrypt_in_a_real_shell(tmp_path: Path, key: Path) -> None:
    plain = os.urandom(300_000)
    (tmp_path / "plain").write_bytes(plain)
    gcm = f"{sys.executable} -m gcmstream"
    result = subprocess.run(
        ["sh", "-c", f"{gcm} encrypt -a -k k.key < plain | {gcm} decrypt -k k.key > out"],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    assert (tmp_path / "out").read_bytes() == plain


def test_the_binary_file_of_armored_text_as_info_and_the_readme_say_to_make_it(
    tmp_path: Path, key: Path
) -> None:
    """A new user's finding: `info` and `--offset` need the binary file, but nothing said how to
    get it from armored text. The message (and README.md) give the shell's way and the Python
    one; run as said, in a real shell, the binary file is the one `encrypt` without -a writes
    (as info verifies it) and the one ``dearmor`` gives."""
    text = sealed(key, b"y" * 3000)
    (tmp_path / "notes.asc").write_bytes(text)
    message = one_line_error(run_cli("info", tmp_path / "notes.asc"), EXIT_UNSUPPORTED)
    told = message.partition("the binary file: ")[2].partition(" (in Python, gcmstream.armor.dearmor)")
    assert told[1], message
    shell = told[0].replace("FILE.asc", "notes.asc").replace("FILE.gcms", "notes.gcms")
    result = subprocess.run(
        ["sh", "-c", shell], cwd=tmp_path, env=env(), capture_output=True, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    binary = (tmp_path / "notes.gcms").read_bytes()
    assert binary == dearmor(text)
    shown = run_cli("info", "-k", key, tmp_path / "notes.gcms")
    assert shown.status == EXIT_OK and b"verified: the header" in shown.stdout, shown.stderr
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert told[0] in readme and "gcmstream.armor.dearmor" in readme


def test_armored_output_may_go_to_a_terminal(key: Path) -> None:
    """Text, as age -a writes to a terminal; the binary form stays refused there."""
    controller, terminal = pty.openpty()
    try:
        shown = run_cli("encrypt", "-a", "-k", key, "-o", os.ttyname(terminal), input=b"secret")
        assert shown.status == EXIT_OK, shown.stderr
        assert os.read(controller, 4096).startswith(BEGIN_LINE)
        refused = run_cli("encrypt", "-k", key, "-o", os.ttyname(terminal), input=b"secret")
        assert refused.status == EXIT_USAGE and "terminal" in refused.stderr
    finally:
        os.close(controller)
        os.close(terminal)
