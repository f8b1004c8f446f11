"""The CLI's random-access commands, ``decrypt --offset/--length`` and ``info``: in process
(``run_cli``), with real processes where stdin is a file, a pipe or a FIFO."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest

from gcmstream.cli import (
    EXIT_IO,
    EXIT_RECORD_LIMIT,
    EXIT_TAMPERED,
    EXIT_TRUNCATED,
    EXIT_UNSUPPORTED,
    EXIT_USAGE,
    EXIT_WRONG_KEY,
    KEY_ENV,
)
from gcmstream.format import RECORD_HEADER_SIZE, TAG_SIZE, key_id
from gcmstream.keyfile import read_key_file, write_key_file
from gcmstream.tinkstream import TinkHash

from .helpers import record_offset, run_cli
from .test_cli import one_line_error

TIMEOUT = 120
RECORD = 4096
HEADER = 94 + 8  # with the FIXED_LAYOUT field


def gcm_process(
    *args: str | Path, stdin: int | IO[Any] = subprocess.DEVNULL
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gcmstream", *map(str, args)],
        stdin=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    """(key file, encrypted file, plaintext): 2 MiB + 5 in 4 KiB records, made by the CLI."""
    directory = tmp_path_factory.mktemp("cli-files")
    keyfile = directory / "key"
    write_key_file(keyfile, bytes(range(16)))
    plain = hashlib.shake_256(b"cli files").digest(2 * 1024 * 1024 + 5)
    (directory / "plain").write_bytes(plain)
    done = run_cli(
        "encrypt", "-k", keyfile, "--record-size", "4K", directory / "plain", "-o", directory / "enc"
    )
    assert done.status == 0, done.stderr
    return keyfile, directory / "enc", plain


@pytest.mark.parametrize(
    ("offset", "length", "start", "count"),
    [
        ("0", "10", 0, 10),
        ("4095", "2", 4095, 2),
        ("1K", "4K", 1024, 4096),
        ("2M", None, 2 * 1024 * 1024, 5),
        ("1M", "1m", 1024 * 1024, 1024 * 1024),
        ("1G", "1", 1 << 30, 0),  # past the end: nothing
        (None, "3", 0, 3),
    ],
)
def test_decrypt_a_range(
    sealed: tuple[Path, Path, bytes], offset: str | None, length: str | None, start: int, count: int
) -> None:
    keyfile, enc, plain = sealed
    args: list[str | Path] = ["decrypt", "-k", keyfile, enc]
    if offset is not None:
        args += ["--offset", offset]
    if length is not None:
        args += ["--length", length]
    done = run_cli(*args)
    assert done.status == 0, done.stderr
    assert done.stdout == plain[start : start + count]


def test_a_range_reads_only_its_records(sealed: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    """A record outside the range is damaged: the range still decrypts (it was not opened);
    a range that touches it fails as tampered, and -o leaves no file."""
    keyfile, enc, plain = sealed
    damaged = bytearray(enc.read_bytes())
    damaged[HEADER + 100 * (RECORD_HEADER_SIZE + RECORD + TAG_SIZE) + 50] ^= 1  # record 100
    bad = tmp_path / "bad"
    bad.write_bytes(damaged)
    done = run_cli("decrypt", "-k", keyfile, bad, "--offset", "1M", "--length", "64K")
    assert done.status == 0, done.stderr
    assert done.stdout == plain[1 << 20 : (1 << 20) + 65536]
    out = tmp_path / "out"
    done = run_cli("decrypt", "-k", keyfile, bad, "--offset", str(99 * RECORD), "--length", "8K", "-o", out)
    assert done.status == EXIT_TAMPERED, done.stderr
    assert "record 100" in done.stderr
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["bad"]


def test_a_range_of_a_cut_file_fails_at_open(sealed: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    keyfile, enc, _ = sealed
    cut = tmp_path / "cut"
    cut.write_bytes(enc.read_bytes()[:-1])
    done = run_cli("decrypt", "-k", keyfile, cut, "--offset", "0", "--length", "10")
    assert done.status == EXIT_TRUNCATED, done.stderr
    assert done.stdout == b""


def test_a_range_needs_a_file(sealed: tuple[Path, Path, bytes]) -> None:
    keyfile, enc, plain = sealed
    with enc.open("rb") as file:  # stdin that is a file: fine
        done = gcm_process("decrypt", "-k", keyfile, "--offset", "7", "--length", "3", stdin=file)
    assert done.returncode == 0, done.stderr
    assert done.stdout == plain[7:10]
    piped = subprocess.run(
        f"cat {enc} | {sys.executable} -m gcmstream decrypt -k {keyfile} --offset 7",
        shell=True,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert piped.returncode == EXIT_USAGE, piped.stderr
    assert b"stdin is not a file" in piped.stderr and b"give INPUT as a file" in piped.stderr
    bad = run_cli("decrypt", "-k", keyfile, enc, "--offset", "-3")
    assert bad.status == EXIT_USAGE


def test_info(sealed: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    keyfile, enc, plain = sealed
    done = run_cli("info", "-k", keyfile, enc)
    assert done.status == 0, done.stderr
    text = done.stdout.decode()
    key = read_key_file(keyfile)
    assert f"key ID: {key_id(key).hex()}" in text
    assert "gcmstream version 2, one-way stream" in text
    assert "suite: AES-128-GCM" in text
    assert "record size: 4K (4096 bytes)" in text
    assert f"records: {len(plain) // RECORD + 1}" in text
    assert f"plaintext length: {len(plain)} bytes" in text
    assert "layout: fixed" in text
    key_line = keyfile.read_text().strip()
    for secret in (key.hex(), key_line, key_line.rsplit(":", 1)[-1]):
        assert secret not in text
    other = tmp_path / "other"
    write_key_file(other, bytes(16))
    wrong = run_cli("info", "-k", other, enc)
    assert wrong.status == EXIT_WRONG_KEY and wrong.stdout == b""


def test_records_over_the_limit_name_the_option(sealed: tuple[Path, Path, bytes]) -> None:
    """4 KiB records read with --max-record-size 1K: the message names the option that reads them."""
    keyfile, enc, _ = sealed
    cases: list[tuple[str, list[str | Path]]] = [
        ("decrypt", [enc, "--offset", "0", "--max-record-size", "1K"]),
        ("info", ["--max-record-size", "1K", enc]),
    ]
    for command, args in cases:
        done = run_cli(command, "-k", keyfile, *args)
        assert done.status == EXIT_RECORD_LIMIT, done.stderr
        assert "--max-record-size 4K" in done.stderr


def test_decrypt_to_a_file_writes_a_final_record_straddling_the_buffer(tmp_path: Path) -> None:
    """FINAL across the end of the engine's 1 MiB output buffer (review of issue 13, C1)."""
    keyfile = tmp_path / "key"
    write_key_file(keyfile, bytes(range(16)))
    plain = hashlib.shake_256(b"straddle").digest(2 * 1024 * 1024 + 500)
    (tmp_path / "plain").write_bytes(plain)
    done = run_cli(
        "encrypt", "-k", keyfile, "--record-size", "1000", tmp_path / "plain", "-o", tmp_path / "enc"
    )
    assert done.status == 0, done.stderr
    done = run_cli("decrypt", "-k", keyfile, tmp_path / "enc", "-o", tmp_path / "back")
    assert done.status == 0, done.stderr
    assert (tmp_path / "back").read_bytes() == plain


def test_a_record_shortened_without_the_key_fails_range_and_info(
    sealed: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    """Record 1's length field shortened by 1,000 and 1,000 bytes of its body deleted (review of
    issue 13, C2): every later record still authenticates, 1,000 bytes early. A range after it
    used to print genuine plaintext from another offset, and info the wrong length; both fail
    as tampered now, printing nothing."""
    keyfile, enc, _ = sealed
    stream = bytearray(enc.read_bytes())
    offset = HEADER + RECORD_HEADER_SIZE + RECORD + TAG_SIZE  # record 1
    stream[offset : offset + RECORD_HEADER_SIZE] = bytes([0]) + (RECORD + TAG_SIZE - 1000).to_bytes(4, "big")
    end = offset + RECORD_HEADER_SIZE + RECORD + TAG_SIZE
    del stream[end - 1000 : end]
    shifted = tmp_path / "shifted"
    shifted.write_bytes(stream)
    done = run_cli("decrypt", "-k", keyfile, shifted, "--offset", "40K", "--length", "64")
    assert done.status == EXIT_TAMPERED, done.stderr
    assert done.stdout == b""
    done = run_cli("info", "-k", keyfile, shifted)
    assert done.status == EXIT_TAMPERED, done.stderr
    assert b"plaintext length" not in done.stdout


def test_info_reads_the_file_redirected_to_stdin_given_as_dash(sealed: tuple[Path, Path, bytes]) -> None:
    """``info -`` is stdin, as every command's input: a file redirected in is read (a new user's
    ``info - < FILE`` said "-: No such file or directory"); a pipe is refused as any FIFO is,
    since info seeks to the final record."""
    keyfile, enc, plain = sealed
    with enc.open("rb") as file:
        done = gcm_process("info", "-k", keyfile, "-", stdin=file)
    assert done.returncode == 0, done.stderr
    assert f"plaintext length: {len(plain)} bytes".encode() in done.stdout
    piped = subprocess.run(
        f"cat {enc} | {sys.executable} -m gcmstream info -k {keyfile} -",
        shell=True,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert piped.returncode == EXIT_USAGE, piped.stderr
    assert b"regular file" in piped.stderr


def test_info_and_a_range_refuse_a_fifo_at_once(sealed: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    """A FIFO with no writer used to hang info (Ctrl-C ignored) and decrypt --offset."""
    keyfile, _, _ = sealed
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (("info", "-k", keyfile, fifo), ("decrypt", "-k", keyfile, fifo, "--offset", "0")):
        done = subprocess.run(
            [sys.executable, "-m", "gcmstream", *map(str, args)], capture_output=True, timeout=30, check=False
        )
        assert done.returncode == EXIT_USAGE, done.stderr
        assert b"regular file" in done.stderr


@pytest.mark.parametrize("command", [["encrypt"], ["decrypt"], ["decrypt", "--offset", "0", "--length", "1"]])
def test_a_closed_stdin_is_an_io_error_that_says_so(
    tmp_path: Path, sealed: tuple[Path, Path, bytes], command: list[str]
) -> None:
    """``<&-`` in a shell: Python makes sys.stdin None; the CLI used to fail with an internal
    error (AttributeError) instead of saying stdin is closed (review 2, finding 3)."""
    options = ["-k", str(sealed[0]), "-o", str(tmp_path / "out")]
    line = shlex.join([sys.executable, "-m", "gcmstream", *command, *options])
    done = subprocess.run(["sh", "-c", f"{line} <&-"], capture_output=True, timeout=TIMEOUT, check=False)
    assert (done.returncode, done.stderr.decode()) == (EXIT_IO, f"gcmstream {command[0]}: stdin is closed\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["decrypt", "{enc}"],
        ["decrypt", "--offset", "5", "--length", "3", "{enc}"],
        ["encrypt", "{plain}"],
        ["info", "{enc}"],
        ["keygen", "-o", "-"],
        ["identity", "-o", "-"],
        ["recipient", "{identity}"],
    ],
    ids=lambda argv: " ".join(a for a in argv if not a.startswith("{")),
)
def test_a_closed_stdout_is_an_io_error_that_says_so(
    tmp_path: Path, sealed: tuple[Path, Path, bytes], command: list[str]
) -> None:
    """``>&-`` in a shell: Python makes sys.stdout None; encrypt, decrypt and info failed with
    exit 1 "internal error: AttributeError", keygen and identity -o - too, and recipient printed
    nothing and exited 0. Each command that writes to stdout says it is closed, with exit status 6."""
    keyfile, enc, _ = sealed
    (tmp_path / "plain").write_bytes(b"plaintext")
    identity = tmp_path / "me.identity"
    assert run_cli("identity", "-o", identity).status == 0
    names = {"enc": enc, "plain": tmp_path / "plain", "identity": identity}
    argv = [part.format(**names) for part in command]
    if command[0] not in ("keygen", "identity", "recipient"):
        argv += ["-k", str(keyfile)]
    line = shlex.join([sys.executable, "-m", "gcmstream", *argv])
    done = subprocess.run(["sh", "-c", f"{line} >&-"], capture_output=True, timeout=TIMEOUT, check=False)
    assert (done.returncode, done.stderr.decode()) == (EXIT_IO, f"gcmstream {command[0]}: stdout is closed\n")


def test_a_closed_stderr_never_sends_a_diagnostic_into_stdout(
    tmp_path: Path, sealed: tuple[Path, Path, bytes]
) -> None:
    """``2>&-`` in a shell: Python makes sys.stderr None, and print(file=None) writes to stdout.
    A failed decrypt wrote "gcmstream decrypt: internal error: AttributeError ..." into its
    output (the progress check asked None for isatty); identity's recipient line went there too.
    Now the diagnostics go nowhere, the output holds only output, and the status still tells."""
    keyfile, enc, plain = sealed
    (tmp_path / "plain").write_bytes(b"not a gcmstream file")

    def closed_stderr(*argv: str | Path) -> tuple[int, bytes]:
        line = shlex.join([sys.executable, "-m", "gcmstream", *map(str, argv)])
        done = subprocess.run(["sh", "-c", f"{line} 2>&-"], capture_output=True, timeout=TIMEOUT, check=False)
        return done.returncode, done.stdout

    assert closed_stderr("decrypt", "-k", keyfile, tmp_path / "plain") == (EXIT_UNSUPPORTED, b"")
    assert closed_stderr("decrypt", "-k", keyfile, enc) == (0, plain)
    assert closed_stderr("identity", "-o", tmp_path / "me.identity") == (0, b"")


def test_an_offset_past_the_end_writes_nothing_and_succeeds(
    tmp_path: Path, sealed: tuple[Path, Path, bytes]
) -> None:
    """A range at or past the end is empty with exit 0, as ``tail -c +N``, ``dd skip=`` and
    Python's seek then read give, so a loop reading slices stops at an empty one; --help and
    the README say so (they said nothing: a user could not tell an empty range from a bug).
    Only after the file authenticated: a cut file fails with 5 wherever the offset points."""
    keyfile, enc, plain = sealed
    size = len(plain)
    for offset in (size, size + 1, 10 * size):
        done = run_cli("decrypt", "-k", keyfile, enc, "--offset", str(offset))
        assert (done.status, done.stdout, done.stderr) == (0, b"", ""), offset
    done = run_cli("decrypt", "-k", keyfile, enc, "--offset", str(size - 3))
    assert (done.status, done.stdout) == (0, plain[-3:])
    cut = tmp_path / "cut"
    cut.write_bytes(enc.read_bytes()[:-1])
    done = run_cli("decrypt", "-k", keyfile, cut, "--offset", str(10 * size))
    assert (done.status, done.stdout) == (EXIT_TRUNCATED, b"")
    help_text = " ".join(run_cli("decrypt", "--help").stdout.decode().split())
    assert "N at or past the end of the plaintext writes nothing and exits 0" in help_text
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    assert "`--offset N` at or past the end writes nothing and exits 0" in readme


def test_a_cut_stream_on_stdin_is_named_a_truncated_input(tmp_path: Path) -> None:
    """A new user's finding: a cut file piped into ``decrypt`` was told "the sender closed
    without ending the stream, or the connection was cut", words for a connection; it is a
    truncated input, exit 5, whichever way it came."""
    keyfile = tmp_path / "key"
    assert run_cli("keygen", "-o", keyfile).status == 0
    sealed = run_cli("encrypt", "-k", keyfile, input=os.urandom(100_000)).stdout
    for cut in (sealed[:-1], sealed[: len(sealed) // 2]):
        run = run_cli("decrypt", "-k", keyfile, "-o", tmp_path / "out", input=cut)
        assert run.status == EXIT_TRUNCATED, run.stderr
        assert "truncated input: the input ends before its FINAL record" in run.stderr, run.stderr
        assert "sender" not in run.stderr and "connection" not in run.stderr, run.stderr
        assert not (tmp_path / "out").exists()


def test_info_says_what_it_verified_and_what_it_did_not(
    sealed: tuple[Path, Path, bytes], tmp_path: Path
) -> None:
    """A new user's finding: ``info -k`` on a file with one record altered in place said "final
    record authenticated" and exit 0, as if the file were sound. It reads the header and the
    final record only: its first line says so, counts the records it did not check, and names
    the command that checks them, which refuses the file (exit 4)."""
    keyfile, enc, plain = sealed
    altered = tmp_path / "altered file.gcms"
    wire = bytearray(enc.read_bytes())
    wire[record_offset(3, RECORD) + 100] ^= 1  # a byte of record 3's ciphertext
    altered.write_bytes(wire)
    done = run_cli("info", "-k", keyfile, altered)
    assert done.status == 0, done.stderr
    first = done.stdout.decode().splitlines()[0]
    records = len(plain) // RECORD + 1
    assert first.startswith("verified: the header and the final record only; ")
    assert f"the other {records - 1} records were not read, so not checked" in first
    command = f"gcmstream decrypt -k {shlex.quote(str(keyfile))} -o /dev/null {shlex.quote(str(altered))}"
    assert f"(to check every record: {command})" in first, first
    checked = run_cli("decrypt", "-k", keyfile, "-o", "/dev/null", altered)
    assert checked.status == EXIT_TAMPERED, checked.stderr
    key_line = keyfile.read_text().strip()
    assert key_line.rsplit(":", 1)[-1] not in done.stdout.decode()
    one = tmp_path / "one.gcms"  # a single record: all of it is checked, and said so
    assert run_cli("encrypt", "-k", keyfile, "-o", one, input=b"short").status == 0
    first = run_cli("info", "-k", keyfile, one).stdout.decode().splitlines()[0]
    assert first == "verified: the header and the final record, so every record", first


def test_an_altered_key_id_is_told_from_a_wrong_key(sealed: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    """A new user's finding: a key ID altered in the header was called "wrong key" only. The
    key ID check (H10) alone cannot tell the two apart; the commitment (FORMAT.md 5.1) covers
    the key ID, so the key given verifies the header once its own ID is put back only if the
    key ID alone was altered: then it is a corrupt header (4) on every path; a wrong key, or a
    pipe that cannot be read again, says both (3)."""
    keyfile, enc, _ = sealed
    altered = tmp_path / "altered.gcms"
    wire = bytearray(enc.read_bytes())
    wire[15] ^= 0x40  # a byte of the key ID (offset 12, 16 bytes)
    altered.write_bytes(wire)
    other = tmp_path / "other.key"
    write_key_file(other, bytes(range(1, 17)))
    paths: dict[str, list[str | Path]] = {
        "decrypt": ["decrypt", altered, "-o", tmp_path / "out"],
        "decrypt --offset": ["decrypt", "--offset", "1", altered, "-o", tmp_path / "out"],
        "info": ["info", altered],
    }
    secrets = [f.read_text().strip().rsplit(":", 1)[-1] for f in (keyfile, other)]
    for name, argv in paths.items():
        fits = one_line_error(run_cli(*argv, "-k", keyfile), EXIT_TAMPERED)
        assert f"{altered} has a corrupt stream header: its key ID was altered" in fits, (name, fits)
        assert "wrong key" not in fits, (name, fits)
        wrong = one_line_error(run_cli(*argv, "-k", other), EXIT_WRONG_KEY)
        assert "wrong key, or the header's key ID was altered" in wrong, (name, wrong)
        assert not any(secret in fits + wrong for secret in secrets)
        assert not (tmp_path / "out").exists()
    piped = one_line_error(run_cli("decrypt", "-k", keyfile, input=bytes(wire)), EXIT_WRONG_KEY)
    assert "wrong key, or the header's key ID was altered" in piped, piped  # not read again
    context = one_line_error(run_cli("info", "-k", keyfile, "--context", "x", altered), EXIT_WRONG_KEY)
    assert "wrong key, or the header's key ID was altered" in context, context  # no longer fits


def suggested_check(info_output: bytes, fill: dict[str, str]) -> list[str]:
    """The command info's first line suggests to check every record (or segment), as words,
    each placeholder it may use (KEYFILE, KEYSET, IDENTITY_FILE) replaced by ``fill``'s."""
    first = info_output.decode().splitlines()[0]
    found = re.search(r"\(to check every \w+(?:, with GCMSTREAM_KEY still set)?: gcmstream (.*)\)$", first)
    found = found or re.search(r"\('gcmstream (.*)' checks every \w+\)$", first)  # (before)
    assert found is not None, first
    return [fill.get(word, word) for word in shlex.split(found.group(1))]


def test_infos_suggested_check_runs_with_the_options_info_was_given(tmp_path: Path) -> None:
    """A new user's finding: info's suggested command dropped --context (and the format, the
    identity or passphrase file), so running it failed. It is now made of the options info
    was given (paths, never key text; a key from GCMSTREAM_KEY said so), and it runs: exit 0."""
    from .test_tink_surfaces import KEYSETS, keyset_for, write_keyset

    plain = tmp_path / "plain"
    plain.write_bytes(os.urandom(100_000))
    big = tmp_path / "big"
    big.write_bytes(os.urandom(2 * 1536 * 1024 + 5))
    key, identity, phrase = tmp_path / "k.key", tmp_path / "me id", tmp_path / "pass"
    assert run_cli("keygen", "-o", key).status == 0
    assert run_cli("identity", "-o", identity).status == 0
    phrase.write_bytes(b"a passphrase long enough to pass\n")
    phrase.chmod(0o600)
    _, keyset = keyset_for(16, TinkHash.SHA256, 4096)
    tink_keyset = write_keyset(KEYSETS[id(keyset)], tmp_path)
    key_line = key.read_text().strip()
    small = ("--record-size", "16K", "--context", "backup v1")
    cases: list[tuple[tuple[str | Path, ...], tuple[str | Path, ...], dict[str, str] | None]] = [
        (("-k", key, *small), ("-k", key, "--context", "backup v1"), None),
        (small, ("--context", "backup v1"), {KEY_ENV: key_line}),
        (("-i", identity, "--record-size", "16K"), ("-i", identity), None),
        (
            ("--passphrase-file", phrase, "--work-factor", "14", *small),
            ("--passphrase-file", phrase, "--context", "backup v1"),
            None,
        ),
        (
            ("--format", "tink", "-k", tink_keyset, "--context", "backup v1"),
            ("--format", "tink", "-k", tink_keyset, "--context", "backup v1"),
            None,
        ),
        (("-k", key, "--record-size", "1536K"), ("-k", key, "--max-record-size", "2M"), None),
    ]
    for number, (sealing, reading, environ) in enumerate(cases):
        sealed = tmp_path / f"sealed {number}.gcms"
        source = big if "1536K" in sealing else plain  # records over the default limit
        done = run_cli("encrypt", *sealing, source, "-o", sealed, environ=environ)
        assert done.status == 0, done.stderr
        info = run_cli("info", *reading, sealed, environ=environ)
        assert info.status == 0, (reading, info.stderr)
        fill = {"KEYFILE": str(key), "KEYSET": str(tink_keyset), "IDENTITY_FILE": str(identity)}
        words = suggested_check(info.stdout, fill)
        assert (KEY_ENV in info.stdout.decode().splitlines()[0]) == (environ is not None)
        assert key_line.rsplit(":", 1)[-1] not in info.stdout.decode()
        checked = run_cli(*words, environ=environ)
        assert checked.status == 0, (words, checked.stderr)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a mount namespace whose /proc is empty needs root and unshare",
)
def test_decrypt_offset_reads_its_input_without_proc(
    tmp_path: Path, sealed: tuple[Path, Path, bytes]
) -> None:
    """``decrypt --offset`` reads the input through the descriptor it opened first (so that a
    name moved meanwhile is not read), never by a /dev/fd path: where /proc is not mounted
    (a container, a chroot) that path does not exist, and it failed with "/dev/fd/5: No such
    file or directory", exit 6, a name the user never gave (a hostile review, rev8)."""
    keyfile, enc, plain = sealed
    line = shlex.join(
        [sys.executable, "-m", "gcmstream", "decrypt", "-q", "-k", str(keyfile), "--offset", "3", str(enc)]
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs none /proc && {line}"],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, plain[3:], b"")
