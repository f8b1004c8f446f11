"""The command line with recipients, identities and passphrases, as real subprocesses:
``identity``, ``recipient``, ``encrypt -r/-R/--passphrase[-file]``, ``decrypt --identity/
--passphrase[-file]`` (issue 14)."""

from __future__ import annotations

import fcntl
import os
import pty
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from gcmstream import Recipient, read_identity_file
from gcmstream.cli import EXIT_OK, EXIT_TAMPERED, EXIT_USAGE, EXIT_WRONG_KEY

from .test_cli import TIMEOUT, env, gcm, one_line_error

PLAIN = os.urandom(200_000)
FAST = ("--work-factor", "10")  # scrypt at 1/256 of the default: the tests are about the plumbing


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three identity files made by the CLI: two hybrid, one X25519."""
    folder = tmp_path_factory.mktemp("people")
    found = {}
    for name, extra in (("alice", ()), ("bob", ()), ("carol", ("--x25519",))):
        path = folder / f"{name}.identity"
        result = gcm("identity", "-o", path, *extra)
        assert result.returncode == EXIT_OK, result.stderr
        line = result.stderr.decode().strip()
        assert line.startswith("recipient: gcmstream-recipient-v1:")
        assert Recipient.parse(line.removeprefix("recipient: ")) == read_identity_file(path).recipient
        found[name] = path
    return found


def recipient_of(path: Path) -> str:
    result = gcm("recipient", path)
    assert result.returncode == EXIT_OK and result.stderr == b"", result.stderr
    return result.stdout.decode().strip()


def test_identity_file_is_private_and_not_overwritten(people: dict[str, Path]) -> None:
    path = people["alice"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    one_line_error(gcm("identity", "-o", path), EXIT_USAGE)
    assert path.read_bytes() == before
    secret = before.decode().splitlines()[-1].split(":")[2]
    assert secret[:16] not in gcm("recipient", path).stdout.decode()


def test_round_trip_with_r_and_R_and_identity(tmp_path: Path, people: dict[str, Path]) -> None:
    listed = tmp_path / "team.recipients"
    listed.write_text(f"# the team\n{recipient_of(people['bob'])}\n\n{recipient_of(people['carol'])}\n")
    plain = tmp_path / "plain"
    plain.write_bytes(PLAIN)
    sealed = tmp_path / "sealed"
    result = gcm("encrypt", "-r", recipient_of(people["alice"]), "-R", listed, "-i", plain, "-o", sealed)
    assert result.returncode == EXIT_OK, result.stderr
    for name, identity in people.items():
        out = tmp_path / f"out-{name}"
        result = gcm("decrypt", "--identity", identity, "-i", sealed, "-o", out)
        assert result.returncode == EXIT_OK, result.stderr
        assert out.read_bytes() == PLAIN
    # through pipes too, and with several --identity of which one matches
    stranger = tmp_path / "stranger.identity"
    assert gcm("identity", "-o", stranger).returncode == EXIT_OK
    piped = gcm("decrypt", "--identity", stranger, "--identity", people["carol"], input=sealed.read_bytes())
    assert piped.returncode == EXIT_OK and piped.stdout == PLAIN


def test_no_identity_matched_exits_3_before_any_output(tmp_path: Path, people: dict[str, Path]) -> None:
    sealed = gcm("encrypt", "-r", recipient_of(people["alice"]), input=PLAIN).stdout
    out = tmp_path / "out"
    result = gcm("decrypt", "--identity", people["bob"], "-i", "-", "-o", out, input=sealed)
    message = one_line_error(result, EXIT_WRONG_KEY)
    assert "identit" in message and "authentication" not in message
    assert not out.exists()
    piped = gcm("decrypt", "--identity", people["bob"], input=sealed)
    assert piped.returncode == EXIT_WRONG_KEY and piped.stdout == b""


def test_passphrase_file_round_trip(tmp_path: Path, people: dict[str, Path]) -> None:
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery staple\n")
    sealed = gcm("encrypt", "--passphrase-file", secret, *FAST, input=PLAIN)
    assert sealed.returncode == EXIT_OK, sealed.stderr
    opened = gcm("decrypt", "--passphrase-file", secret, input=sealed.stdout)
    assert opened.returncode == EXIT_OK and opened.stdout == PLAIN
    costly = gcm("encrypt", "--passphrase-file", secret, "--work-factor", "20", input=PLAIN)
    assert "--work-factor" in one_line_error(costly, EXIT_USAGE)
    wrong = tmp_path / "wrong"
    wrong.write_text("correct horse battery stapler\n")
    message = one_line_error(gcm("decrypt", "--passphrase-file", wrong, input=sealed.stdout), EXIT_WRONG_KEY)
    assert "passphrase" in message and "stapler" not in message
    one_line_error(gcm("decrypt", "--identity", people["alice"], input=sealed.stdout), EXIT_WRONG_KEY)


def test_passphrase_is_asked_twice_on_the_terminal(tmp_path: Path) -> None:
    def on_terminal(args: list[str], typed: bytes, stdin: bytes) -> tuple[int, bytes, bytes]:
        controller, terminal = pty.openpty()

        def take_terminal() -> None:  # the child's controlling terminal, where getpass asks
            os.setsid()
            fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)

        process = subprocess.Popen(
            [sys.executable, "-m", "gcmstream", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env(),
            preexec_fn=take_terminal,
            pass_fds=(terminal,),
        )
        os.close(terminal)
        shown = bytearray()
        deadline = time.monotonic() + TIMEOUT
        for answer in typed.splitlines(keepends=True):
            while b"passphrase" not in shown[-40:] and time.monotonic() < deadline:
                shown += os.read(controller, 1024)
            shown.clear()
            os.write(controller, answer)
        out, err = process.communicate(stdin, timeout=TIMEOUT)
        os.close(controller)
        return process.returncode, out, err

    code, sealed, err = on_terminal(["encrypt", "--passphrase", *FAST], b"pw one\npw one\n", PLAIN)
    assert code == EXIT_OK, err
    code, opened, err = on_terminal(["decrypt", "--passphrase"], b"pw one\n", sealed)
    assert code == EXIT_OK and opened == PLAIN, err
    code, _, err = on_terminal(["encrypt", "--passphrase", *FAST], b"pw one\npw two\n", PLAIN)
    assert code == EXIT_USAGE and b"differ" in err


def test_passphrase_without_a_terminal_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gcmstream", "encrypt", "--passphrase"],
        input=PLAIN,
        capture_output=True,
        timeout=TIMEOUT,
        env=env(),
        start_new_session=True,  # no controlling terminal: getpass would read the data
        check=False,
    )
    message = one_line_error(result, EXIT_USAGE)
    assert "--passphrase-file" in message and result.stdout == b""


def test_bad_recipient_line_is_a_usage_error_that_hides_it(people: dict[str, Path]) -> None:
    line = recipient_of(people["carol"])
    typo = line[:-3] + ("x" if line[-3] != "x" else "y") + line[-2:]
    message = one_line_error(gcm("encrypt", "-r", typo, input=b"data"), EXIT_USAGE)
    assert "checksum" in message and typo.split(":")[2][:20] not in message


def test_one_way_of_keying_at_a_time(tmp_path: Path, people: dict[str, Path], keyfile: Path) -> None:
    secret = tmp_path / "pass"
    secret.write_text("pw\n")
    line = recipient_of(people["alice"])
    combinations: list[list[str | Path]] = [
        ["encrypt", "-k", keyfile, "-r", line],
        ["encrypt", "-r", line, "--passphrase-file", secret],
        ["decrypt", "--identity", people["alice"], "-k", keyfile],
        ["decrypt", "--passphrase", "--passphrase-file", secret],
    ]
    for args in combinations:  # each: a usage error, before anything is read
        one_line_error(gcm(*args, input=b""), EXIT_USAGE)


def test_key_files_keep_working_beside_identities(keyfile: Path, people: dict[str, Path]) -> None:
    sealed = gcm("encrypt", "-k", keyfile, input=PLAIN).stdout
    assert gcm("decrypt", "-k", keyfile, input=sealed).stdout == PLAIN
    message = one_line_error(gcm("decrypt", "--identity", people["alice"], input=sealed), EXIT_WRONG_KEY)
    assert "key" in message
    sealed_to_alice = gcm("encrypt", "-r", recipient_of(people["alice"]), input=PLAIN).stdout
    one_line_error(gcm("decrypt", "-k", keyfile, input=sealed_to_alice), EXIT_WRONG_KEY)


def test_identity_file_open_to_others_is_refused(tmp_path: Path, people: dict[str, Path]) -> None:
    exposed = tmp_path / "exposed.identity"
    exposed.write_bytes(people["alice"].read_bytes())
    exposed.chmod(0o644)
    message = one_line_error(gcm("recipient", exposed), EXIT_USAGE)
    assert "chmod 600" in message


def test_stanza_count_over_the_limit_is_a_corrupt_header(people: dict[str, Path]) -> None:
    sealed = bytearray(gcm("encrypt", "-r", recipient_of(people["alice"]), input=b"x").stdout)
    sealed[66:68] = (101).to_bytes(2, "big")  # the stanza count, after the field's type and length
    result = gcm("decrypt", "--identity", people["alice"], input=bytes(sealed))
    message = one_line_error(result, EXIT_TAMPERED)  # magic and version fine: a corrupt header
    assert "101 recipient stanzas" in message


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "key"
    assert gcm("keygen", "-o", path).returncode == EXIT_OK
    return path
