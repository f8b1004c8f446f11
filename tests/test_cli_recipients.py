"""The command line with recipients, identities and passphrases, in process (``run_cli``; real
processes for the terminal and for identity's output to stdout):
``identity``, ``recipient``, ``encrypt -r/-R/--passphrase[-file]``, ``decrypt --identity/
--passphrase[-file]`` (issue 14)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from gcmstream import Identity, Opener, Recipient, RecipientKind, __version__, read_identity_file
from gcmstream.cli import (
    EXIT_OK,
    EXIT_TAMPERED,
    EXIT_TRUNCATED,
    EXIT_UNSUPPORTED,
    EXIT_USAGE,
    EXIT_WRONG_KEY,
    KEY_ENV,
)

from .helpers import run_cli
from .test_cli import TIMEOUT, env, one_line_error
from .test_recipients import SECRET, assert_no_slice_of

PLAIN = os.urandom(200_000)
FAST = ("--work-factor", "14")  # the floor, scrypt at 1/16 of the default: these test the plumbing


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Identity files made by the CLI: three hybrid (its default), and dave's X25519."""
    folder = tmp_path_factory.mktemp("people")
    found = {}
    for name, extra in (("alice", ()), ("bob", ()), ("carol", ()), ("dave", ("--x25519",))):
        path = folder / f"{name}.identity"
        result = run_cli("identity", "-o", path, *extra)
        assert result.status == EXIT_OK, result.stderr
        line = result.stderr.strip()
        kind = "x25519" if extra else "mlkem768x25519"  # post-quantum unless asked
        # the form of every stderr line (README), the public key whole
        assert line.startswith(f"gcmstream identity: recipient: gcmstream-recipient-v1:{kind}:")
        assert read_identity_file(path).kind is RecipientKind(1 if extra else 2)
        recipient = line.removeprefix("gcmstream identity: recipient: ")
        assert Recipient.parse(recipient) == read_identity_file(path).recipient
        found[name] = path
    return found


def recipient_of(path: Path) -> str:
    result = run_cli("recipient", path)
    assert result.status == EXIT_OK and result.stderr == "", result.stderr
    return result.stdout.decode().strip()


def test_identity_file_is_private_and_not_overwritten(people: dict[str, Path]) -> None:
    path = people["alice"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    one_line_error(run_cli("identity", "-o", path), EXIT_USAGE)
    assert path.read_bytes() == before
    secret = before.decode().splitlines()[-1].split(":")[2]
    assert secret[:16] not in run_cli("recipient", path).stdout.decode()


def test_round_trip_with_r_and_R_and_identity(tmp_path: Path, people: dict[str, Path]) -> None:
    listed = tmp_path / "team.recipients"
    listed.write_text(f"# the team\n{recipient_of(people['bob'])}\n\n{recipient_of(people['carol'])}\n")
    plain = tmp_path / "plain"
    plain.write_bytes(PLAIN)
    sealed = tmp_path / "sealed"
    result = run_cli("encrypt", "-r", recipient_of(people["alice"]), "-R", listed, plain, "-o", sealed)
    assert result.status == EXIT_OK, result.stderr
    for name in ("alice", "bob", "carol"):
        identity = people[name]
        out = tmp_path / f"out-{name}"
        result = run_cli("decrypt", "--identity", identity, sealed, "-o", out)
        assert result.status == EXIT_OK, result.stderr
        assert out.read_bytes() == PLAIN
    # through pipes too, and with several --identity of which one matches
    stranger = tmp_path / "stranger.identity"
    assert run_cli("identity", "-o", stranger).status == EXIT_OK
    piped = run_cli(
        "decrypt", "--identity", stranger, "--identity", people["carol"], input=sealed.read_bytes()
    )
    assert piped.status == EXIT_OK and piped.stdout == PLAIN


def test_no_identity_matched_exits_3_before_any_output(tmp_path: Path, people: dict[str, Path]) -> None:
    sealed = run_cli("encrypt", "-r", recipient_of(people["alice"]), input=PLAIN).stdout
    out = tmp_path / "out"
    result = run_cli("decrypt", "--identity", people["bob"], "-", "-o", out, input=sealed)
    message = one_line_error(result, EXIT_WRONG_KEY)
    assert "identit" in message and "authentication" not in message
    assert not out.exists()
    piped = run_cli("decrypt", "--identity", people["bob"], input=sealed)
    assert piped.status == EXIT_WRONG_KEY and piped.stdout == b""


def test_passphrase_file_round_trip(tmp_path: Path, people: dict[str, Path]) -> None:
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    sealed = run_cli("encrypt", "--passphrase-file", secret, *FAST, input=PLAIN)
    assert sealed.status == EXIT_OK, sealed.stderr
    opened = run_cli("decrypt", "--passphrase-file", secret, input=sealed.stdout)
    assert opened.status == EXIT_OK and opened.stdout == PLAIN
    costly = run_cli("encrypt", "--passphrase-file", secret, "--work-factor", "20", input=PLAIN)
    assert "--work-factor" in one_line_error(costly, EXIT_USAGE)
    wrong = tmp_path / "wrong"
    wrong.write_text("correct horse battery stapler\n")
    wrong.chmod(0o600)
    message = one_line_error(
        run_cli("decrypt", "--passphrase-file", wrong, input=sealed.stdout), EXIT_WRONG_KEY
    )
    assert "passphrase" in message and "stapler" not in message
    one_line_error(run_cli("decrypt", "--identity", people["alice"], input=sealed.stdout), EXIT_WRONG_KEY)


def start_on_terminal(args: list[str], *, stdin_is_terminal: bool) -> tuple[subprocess.Popen[bytes], int]:
    """Start the CLI with a pseudo-terminal as its controlling terminal (where getpass asks),
    also as its stdin if ``stdin_is_terminal`` (else a pipe); the process and the pty's
    controller end."""
    controller, terminal = pty.openpty()

    def take_terminal() -> None:
        os.setsid()
        fcntl.ioctl(terminal, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        [sys.executable, "-m", "gcmstream", *args],
        stdin=terminal if stdin_is_terminal else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
        preexec_fn=take_terminal,
        pass_fds=(terminal,),
    )
    os.close(terminal)
    return process, controller


def on_terminal(args: list[str], typed: bytes, stdin: bytes) -> tuple[int, bytes, bytes]:
    """Run the CLI with a pseudo-terminal as its controlling terminal, typing ``typed`` there
    line by line at each passphrase prompt."""
    process, controller = start_on_terminal(args, stdin_is_terminal=False)
    shown = bytearray()
    deadline = time.monotonic() + TIMEOUT
    try:
        for answer in typed.splitlines(keepends=True):
            while b"passphrase" not in shown[-40:] and time.monotonic() < deadline:
                shown += os.read(controller, 1024)
            shown.clear()
            os.write(controller, answer)
    except OSError:  # EIO: the process stopped asking (it refused an answer) and left
        pass
    out, err = process.communicate(stdin, timeout=TIMEOUT)
    os.close(controller)
    return process.returncode, out, err


def test_passphrase_is_asked_twice_on_the_terminal(tmp_path: Path) -> None:
    code, sealed, err = on_terminal(["encrypt", "--passphrase", *FAST], b"pw one\npw one\n", PLAIN)
    assert code == EXIT_OK, err
    code, opened, err = on_terminal(["decrypt", "--passphrase"], b"pw one\n", sealed)
    assert code == EXIT_OK and opened == PLAIN, err
    code, _, err = on_terminal(["encrypt", "--passphrase", *FAST], b"pw one\npw two\n", PLAIN)
    assert code == EXIT_USAGE and b"differ" in err


def test_an_empty_passphrase_at_the_terminal_generates_one_shown_once(tmp_path: Path) -> None:
    """As age: encrypting, an empty answer makes a random passphrase (120 bits: 24 characters
    of a 32-letter alphabet, from secrets), printed once on stderr and asked for nowhere else;
    it opens the file. Decrypting, an empty answer stays refused."""
    code, sealed, err = on_terminal(["encrypt", "--passphrase", *FAST], b"\n", PLAIN)
    assert code == EXIT_OK, err
    lines = err.decode().splitlines()
    assert len(lines) == 1 and "generated passphrase (120 bits" in lines[0], err
    assert "its hyphens are part of it): " in lines[0], err  # said where it is shown
    generated = lines[0].rsplit(": ", 1)[1]
    groups = generated.split("-")
    assert [len(group) for group in groups] == [4] * 6
    assert set("".join(groups)) <= set("abcdefghijkmnpqrstuvwxyz23456789")
    secret = private_file(tmp_path / "pass", generated.encode() + b"\n")
    opened = run_cli("decrypt", "--passphrase-file", secret, input=sealed)
    assert opened.status == EXIT_OK and opened.stdout == PLAIN
    without = private_file(tmp_path / "without", "".join(groups).encode() + b"\n")  # as it says
    one_line_error(run_cli("decrypt", "--passphrase-file", without, input=sealed), EXIT_WRONG_KEY)
    code, again, err = on_terminal(["encrypt", "--passphrase", *FAST], b"\n", PLAIN)
    assert code == EXIT_OK and err.decode().rsplit(": ", 1)[1].strip() != generated  # a new one each time
    code, out, err = on_terminal(["decrypt", "--passphrase"], b"\n", sealed)
    assert code == EXIT_USAGE and out == b"" and b"empty passphrase" in err


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
    message = one_line_error(run_cli("encrypt", "-r", typo, input=b"data"), EXIT_USAGE)
    assert "checksum" in message and typo.split(":")[2][:20] not in message


def test_one_way_of_keying_at_a_time(tmp_path: Path, people: dict[str, Path], keyfile: Path) -> None:
    secret = tmp_path / "pass"
    secret.write_text("pw\n")
    secret.chmod(0o600)
    line = recipient_of(people["alice"])
    combinations: list[list[str | Path]] = [
        ["encrypt", "-k", keyfile, "-r", line],
        ["encrypt", "-r", line, "--passphrase-file", secret],
        ["decrypt", "--identity", people["alice"], "-k", keyfile],
        ["decrypt", "--passphrase", "--passphrase-file", secret],
    ]
    for args in combinations:  # each: a usage error, before anything is read
        one_line_error(run_cli(*args, input=b""), EXIT_USAGE)


def test_key_files_keep_working_beside_identities(keyfile: Path, people: dict[str, Path]) -> None:
    sealed = run_cli("encrypt", "-k", keyfile, input=PLAIN).stdout
    assert run_cli("decrypt", "-k", keyfile, input=sealed).stdout == PLAIN
    message = one_line_error(run_cli("decrypt", "--identity", people["alice"], input=sealed), EXIT_WRONG_KEY)
    assert "key" in message
    sealed_to_alice = run_cli("encrypt", "-r", recipient_of(people["alice"]), input=PLAIN).stdout
    one_line_error(run_cli("decrypt", "-k", keyfile, input=sealed_to_alice), EXIT_WRONG_KEY)


def test_identity_file_open_to_others_is_refused(tmp_path: Path, people: dict[str, Path]) -> None:
    exposed = tmp_path / "exposed.identity"
    exposed.write_bytes(people["alice"].read_bytes())
    exposed.chmod(0o644)
    message = one_line_error(run_cli("recipient", exposed), EXIT_USAGE)
    assert "chmod 600" in message


def test_stanza_count_over_the_limit_is_a_corrupt_header(people: dict[str, Path]) -> None:
    sealed = bytearray(run_cli("encrypt", "-r", recipient_of(people["alice"]), input=b"x").stdout)
    sealed[66:68] = (101).to_bytes(2, "big")  # the stanza count, after the field's type and length
    result = run_cli("decrypt", "--identity", people["alice"], input=bytes(sealed))
    message = one_line_error(result, EXIT_TAMPERED)  # magic and version fine: a corrupt header
    assert "101 recipient stanzas" in message


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("key") / "key"
    assert run_cli("keygen", "-o", path).status == EXIT_OK
    return path


# -- review of issue 14: the findings' tests, each written as the attacker tried it -------------


def private_file(path: Path, content: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(content)
    path.chmod(mode)
    return path


def test_post_quantum_and_classic_recipients_are_never_mixed(tmp_path: Path, people: dict[str, Path]) -> None:
    hybrid, classic = recipient_of(people["alice"]), recipient_of(people["dave"])
    listed = tmp_path / "team.recipients"
    listed.write_text(f"{hybrid}\n{classic}\n")
    only_classic = tmp_path / "classic.recipients"
    only_classic.write_text(f"{classic}\n")
    for args in (["-r", hybrid, "-r", classic], ["-R", listed], ["-r", hybrid, "-R", only_classic]):
        result = run_cli("encrypt", *args, input=PLAIN)
        assert "can't mix post-quantum and classic" in one_line_error(result, EXIT_USAGE)
        assert result.stdout == b""
    sealed = run_cli("encrypt", "-R", only_classic, input=PLAIN)  # one kind: fine
    assert run_cli("decrypt", "--identity", people["dave"], input=sealed.stdout).stdout == PLAIN


def test_hostile_scrypt_parameters_are_a_corrupt_header_not_an_internal_error(tmp_path: Path) -> None:
    secret = private_file(tmp_path / "pass", SECRET.encode() + b"\n")
    sealed = bytearray(run_cli("encrypt", "--passphrase-file", secret, *FAST, input=b"x").stdout)
    stanza = sealed.index(bytes([14, 8, 1]), 62)
    for params in ((16, 1, 1), (14, 8, 2)):  # (16, 1, 1): OpenSSL would refuse it (MemoryError)
        sealed[stanza : stanza + 3] = bytes(params)
        result = run_cli("decrypt", "--passphrase-file", secret, input=bytes(sealed))
        message = one_line_error(result, EXIT_TAMPERED)
        assert "the format fixes r=8, p=1" in message and "internal" not in message
        assert_no_slice_of(SECRET, message)


def test_a_passphrase_that_is_not_utf8_never_shows_in_a_message(tmp_path: Path) -> None:
    latin1 = SECRET[:6].encode() + b"\xe4" + SECRET[6:].encode()
    secret = private_file(tmp_path / "pass", latin1 + b"\n")
    for args in (["encrypt", *FAST], ["decrypt"]):
        message = one_line_error(run_cli(*args, "--passphrase-file", secret, input=b"x"), EXIT_USAGE)
        assert "not UTF-8" in message and "position" not in message and "0xe4" not in message
        assert_no_slice_of(latin1, message)
    for args in (["encrypt", "--passphrase", *FAST], ["decrypt", "--passphrase"]):
        code, out, err = on_terminal(args, latin1 + b"\n" + latin1 + b"\n", b"x")
        message = err.decode(errors="replace")
        assert code == EXIT_USAGE and out == b"", message
        assert "internal" not in message and "position" not in message and "0xe4" not in message
        assert_no_slice_of(latin1, message)


def test_wrong_passphrase_message_holds_no_part_of_it(tmp_path: Path) -> None:
    secret = private_file(tmp_path / "pass", SECRET.encode() + b"\n")
    guess = SECRET[:-1] + "?"
    wrong = private_file(tmp_path / "wrong", guess.encode() + b"\n")
    sealed = run_cli("encrypt", "--passphrase-file", secret, *FAST, input=PLAIN).stdout
    message = one_line_error(run_cli("decrypt", "--passphrase-file", wrong, input=sealed), EXIT_WRONG_KEY)
    assert_no_slice_of(SECRET, message)
    assert_no_slice_of(guess, message)


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"", b"\nsecond line\n"])
def test_passphrase_file_is_its_first_line_without_the_line_ending(tmp_path: Path, ending: bytes) -> None:
    # the CLI seals, the API opens: both sides agreeing on a wrong passphrase would not pass
    secret = private_file(tmp_path / "pass", SECRET.encode() + ending)
    sealed = run_cli("encrypt", "--passphrase-file", secret, *FAST, input=PLAIN)
    assert sealed.status == EXIT_OK, sealed.stderr
    opener = Opener(passphrase=SECRET)
    opener.receive_data(sealed.stdout)
    opener.receive_eof()
    assert opener.read(len(PLAIN) + 1) == PLAIN


def test_passphrase_file_rules(tmp_path: Path) -> None:
    empty = private_file(tmp_path / "empty", b"\nsecond line\n")
    assert "first line is empty" in one_line_error(
        run_cli("encrypt", "--passphrase-file", empty, *FAST), EXIT_USAGE
    )
    longest = private_file(tmp_path / "longest", b"a" * 4096 + b"\r\n")
    assert run_cli("encrypt", "--passphrase-file", longest, *FAST, input=b"x").status == EXIT_OK
    too_long = private_file(tmp_path / "long", b"a" * 4097 + b"\n")
    for args in (["encrypt", *FAST], ["decrypt"]):  # refused, not cut to its first 4,096 bytes
        message = one_line_error(run_cli(*args, "--passphrase-file", too_long, input=b"x"), EXIT_USAGE)
        assert "over 4096 bytes" in message
    for mode in (0o644, 0o640, 0o604):
        exposed = private_file(tmp_path / f"exposed-{mode:o}", SECRET.encode() + b"\n", mode)
        message = one_line_error(run_cli("encrypt", "--passphrase-file", exposed, *FAST), EXIT_USAGE)
        assert "passphrase file" in message and "chmod 600" in message


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620])
def test_identity_file_open_to_the_group_is_refused(
    tmp_path: Path, people: dict[str, Path], mode: int
) -> None:
    exposed = private_file(tmp_path / "exposed.identity", people["alice"].read_bytes(), mode)
    message = one_line_error(run_cli("recipient", exposed), EXIT_USAGE)
    assert "identity file" in message and "chmod 600" in message


def test_limits_the_user_passes_are_usage_errors(tmp_path: Path, people: dict[str, Path]) -> None:
    many = ["--identity", str(people["alice"])] * 11
    assert "at most 10" in one_line_error(run_cli("decrypt", *many, input=b""), EXIT_USAGE)
    crowds = {
        "101 x25519": [Identity.generate(RecipientKind.X25519).recipient for _ in range(101)],
        "56 hybrid": [Identity.generate().recipient for _ in range(56)],
    }
    for name, crowd in crowds.items():
        listed = tmp_path / name
        listed.write_text("".join(f"{recipient}\n" for recipient in crowd))
        message = one_line_error(run_cli("encrypt", "-R", listed, input=b"x"), EXIT_USAGE)
        assert "at most" in message
    secret = private_file(tmp_path / "pass", b"pw\n")
    for factor in ("13", "1", "0", "-1", "20", "300"):
        message = one_line_error(
            run_cli("encrypt", "--passphrase-file", secret, "--work-factor", factor), EXIT_USAGE
        )
        assert "--work-factor" in message


def test_recipients_file_over_the_limit_is_refused(tmp_path: Path, people: dict[str, Path]) -> None:
    listed = tmp_path / "big.recipients"
    padding = "#" * (1 << 20) + "\n"
    listed.write_text(f"{recipient_of(people['alice'])}\n{padding}{recipient_of(people['bob'])}\n")
    message = one_line_error(run_cli("encrypt", "-R", listed, input=b"x"), EXIT_USAGE)
    assert "over 1048576" in message


@pytest.mark.parametrize("count", [1, 4])
def test_a_key_given_for_a_recipient_file_is_wrong_key_whatever_the_stanzas(
    tmp_path: Path, people: dict[str, Path], keyfile: Path, count: int
) -> None:
    crowd = [recipient_of(people["alice"]), *(str(Identity.generate().recipient) for _ in range(count - 1))]
    listed = tmp_path / "team"
    listed.write_text("\n".join(crowd))
    sealed = run_cli("encrypt", "-R", listed, input=PLAIN).stdout
    message = one_line_error(run_cli("decrypt", "-k", keyfile, input=sealed), EXIT_WRONG_KEY)
    assert "wrong key" in message and "--identity" in message


def test_identity_to_stdout_as_keygen(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gcmstream", "identity", "-o", "-"],
        capture_output=True,
        timeout=TIMEOUT,
        env=env(),
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == EXIT_OK, result.stderr
    identity = Identity.parse(result.stdout.decode())
    assert result.stderr.decode().strip() == f"gcmstream identity: recipient: {identity.recipient}"
    assert identity.kind is RecipientKind.MLKEM768_X25519
    assert not (tmp_path / "-").exists()


def test_messages_name_the_recipient_format_but_hide_a_pasted_payload(people: dict[str, Path]) -> None:
    line = recipient_of(people["carol"])
    wrong_version = line.replace("-v1:", "-v9:")
    message = one_line_error(run_cli("encrypt", "-r", wrong_version, input=b"data"), EXIT_USAGE)
    assert "expected gcmstream-recipient-v1:<kind>:<base64url>" in message  # readable
    assert line.split(":")[2][:20] not in message


def test_decrypt_without_credentials_points_at_identities_and_passphrases() -> None:
    message = one_line_error(run_cli("decrypt", "-", input=b""), EXIT_USAGE)
    assert "-k KEYFILE" in message and "--identity" in message and "--passphrase-file" in message


def test_i_is_short_for_identity_and_the_input_is_an_argument(
    tmp_path: Path, people: dict[str, Path]
) -> None:
    """Issue 25: `decrypt -i IDENTITY FILE`, as age takes it; `encrypt -i` encrypts to the
    identity's recipient, as `age -e -i` does."""
    plain = tmp_path / "plain"
    plain.write_bytes(PLAIN)
    sealed = tmp_path / "plain.gcms"
    assert run_cli("encrypt", "-i", people["alice"], "-o", sealed, plain).status == EXIT_OK
    opened = run_cli("decrypt", "-i", people["alice"], sealed)
    assert opened.status == EXIT_OK and opened.stdout == PLAIN, opened.stderr
    dashed = run_cli(
        "decrypt", "--identity", people["alice"], "-o", tmp_path / "out", "-", input=sealed.read_bytes()
    )
    assert dashed.status == EXIT_OK and (tmp_path / "out").read_bytes() == PLAIN


def test_a_file_given_to_i_that_is_no_identity_names_the_change(
    tmp_path: Path, people: dict[str, Path]
) -> None:
    """The old habit `-i INPUT`: the message says -i is --identity now and how to give the input."""
    plain = tmp_path / "notes.txt"
    plain.write_bytes(b"not an identity\n")
    plain.chmod(0o644)  # an input's usual mode: the change is said, not "open to other users"
    sealed = tmp_path / "notes.gcms"
    assert run_cli("encrypt", "-r", recipient_of(people["bob"]), "-o", sealed, plain).status == EXIT_OK
    for command, path in (("encrypt", plain), ("decrypt", sealed)):
        message = one_line_error(run_cli(command, "-i", path, "-o", tmp_path / "out"), EXIT_USAGE)
        assert f"{path} is not an identity file" in message and "--identity" in message, message
        assert f"gcmstream {command} [OPTIONS] {path}" in message
        # the change is dated by what it came with, not by a release: `--version` of the very
        # tree that says it prints that release's number (a new user's finding)
        assert "gcmstream-identity-v1" in message and __version__ not in message, message
    assert not (tmp_path / "out").exists()
    for command in ("decrypt", "info"):
        helped = run_cli(command, "--help")
        assert helped.status == EXIT_OK and "identity files" in helped.stdout.decode()
        assert __version__ not in helped.stdout.decode(), helped.stdout.decode()


def test_an_identity_file_may_hold_several_identities_all_tried(
    tmp_path: Path, people: dict[str, Path]
) -> None:
    """As age's identity files: one a line, comments and blank lines skipped, every one tried."""
    sealed = run_cli("encrypt", "-r", recipient_of(people["carol"]), input=PLAIN).stdout
    several = tmp_path / "keys.txt"
    several.write_text(
        f"# alice\n{people['alice'].read_text()}\n# carol\n{people['carol'].read_text()}\n", encoding="ascii"
    )
    several.chmod(0o600)
    opened = run_cli("decrypt", "-i", several, input=sealed)
    assert opened.status == EXIT_OK and opened.stdout == PLAIN, opened.stderr
    assert run_cli("recipient", several).stdout.decode().splitlines() == [
        recipient_of(people["alice"]),
        recipient_of(people["carol"]),
    ]


def test_dash_reads_identities_or_recipients_from_stdin(tmp_path: Path, people: dict[str, Path]) -> None:
    """`-R -` and `-i -` read stdin, as in age; then the input must be a file."""
    plain = tmp_path / "plain"
    plain.write_bytes(PLAIN)
    sealed = tmp_path / "sealed"
    listed = recipient_of(people["dave"]).encode() + b"\n"
    assert run_cli("encrypt", "-R", "-", "-o", sealed, plain, input=listed).status == EXIT_OK
    opened = run_cli("decrypt", "-i", "-", sealed, input=people["dave"].read_bytes())
    assert opened.status == EXIT_OK and opened.stdout == PLAIN, opened.stderr
    message = one_line_error(run_cli("decrypt", "-i", "-", input=sealed.read_bytes()), EXIT_USAGE)
    assert "stdin is read by both" in message


def test_a_recipients_file_is_public_and_read_wherever_it_lies(
    tmp_path: Path, people: dict[str, Path]
) -> None:
    """A recipients file holds public keys: it is read as any input, not walked as a secret
    file (a team's list in a folder others can write in is used). Mutation run
    of 2026-12-05 (mut35): with every file ``_read_text`` reads walked as a secret one, the
    tests passed (they kept recipients files in private folders)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    listed = shared / "recipients"
    listed.write_text(recipient_of(people["dave"]) + "\n")
    listed.chmod(0o644)
    plain, sealed = tmp_path / "plain", tmp_path / "sealed"
    plain.write_bytes(PLAIN)
    result = run_cli("encrypt", "-R", listed, "-o", sealed, plain)
    assert result.status == EXIT_OK, result.stderr
    opened = run_cli("decrypt", "-i", people["dave"], sealed)
    assert opened.status == EXIT_OK and opened.stdout == PLAIN, opened.stderr


def test_decrypt_without_credentials_names_what_the_header_needs(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """Issue 25: the header says whether the file needs -k, --identity or a passphrase."""
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    made = {
        "recipients": run_cli("encrypt", "-r", recipient_of(people["alice"]), input=PLAIN),
        "passphrase": run_cli("encrypt", "--passphrase-file", secret, *FAST, input=PLAIN),
        "key": run_cli("encrypt", "-k", keyfile, input=PLAIN),
    }
    expected = {
        "recipients": "is encrypted to recipients: give -i/--identity FILE",
        "passphrase": "is encrypted with a passphrase: give --passphrase (asked on the terminal) "
        "or --passphrase-file FILE",
        "key": "is encrypted with a key: give -k KEYFILE or set GCMSTREAM_KEY",
    }
    for name, result in made.items():
        path = tmp_path / f"{name}.gcms"
        path.write_bytes(result.stdout)
        message = one_line_error(run_cli("decrypt", path), EXIT_USAGE)
        assert f"{path} {expected[name]}" in message, message


def test_info_without_a_key_shows_what_the_header_claims_marked_unverified(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """A new user's finding: `info FILE` needed the key even to say how FILE was sealed. Without
    -k, -i or a passphrase it prints what the fixed part and the stanza field claim, says that
    nothing verified it, asks for nothing, and exits 0; no salt, stanza or commitment is shown."""
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    made = {
        "recipients": ("encrypt", "-r", recipient_of(people["alice"])),
        "passphrase": ("encrypt", "--passphrase-file", secret, *FAST),
        "key": ("encrypt", "-k", keyfile, "--record-size", "16K"),
    }
    sealed_line = {
        "recipients": "sealed: to recipients (its header holds recipient stanzas); read with "
        "-i IDENTITY_FILE (--identity)",
        "passphrase": "sealed: with a passphrase (its header holds a passphrase stanza); read with "
        "--passphrase or --passphrase-file FILE",
        "key": "sealed: with a key; read with -k KEYFILE or GCMSTREAM_KEY",
    }
    for name, argv in made.items():
        path = tmp_path / f"{name}.gcms"
        assert run_cli(*argv, "-o", path, input=PLAIN).status == EXIT_OK
        shown = run_cli("info", path)
        assert shown.status == EXIT_OK and shown.stderr == "", shown.stderr
        lines = shown.stdout.decode().splitlines()
        # first, so that nothing before it (a file name) can push it out of sight
        assert lines[0].startswith("verified: NO: ") and lines[1] == f"file: {path}", lines
        assert sealed_line[name] in lines and "format: gcmstream version 2, one-way stream" in lines
        header = path.read_bytes()[:62]
        size = "16K (16384 bytes)" if name == "key" else "64K (65536 bytes)"
        assert f"record size: {size}" in lines and "layout: fixed" in lines, lines
        # the key ID names the key of a key-sealed file; a stanza file's only its random file key
        assert (f"key ID: {header[12:28].hex()}" in lines) == (name == "key"), lines
        # these lines and no other: no length, no record count, no field printed whole
        shown_fields = ["verified", "file", "format", "sealed", "suite", "record size", "layout"]
        shown_fields += ["key ID"] if name == "key" else []
        assert sorted(line.split(":")[0] for line in lines) == sorted(shown_fields), lines
        text = shown.stdout.decode()
        whole = path.read_bytes()
        fields_end = 62 + int.from_bytes(whole[60:62], "big")
        secret_parts = {
            "salt": whole[28:60],
            "commitment": whole[fields_end : fields_end + 32],
            **{f"field bytes {at}": whole[at : at + 8] for at in range(62, fields_end - 7)},
        }
        for part, value in secret_parts.items():  # as hex or as a bytes repr
            assert value.hex() not in text and repr(value)[2:-1] not in text, part
        verified = run_cli("info", "-k", keyfile, path) if name == "key" else None
        if verified is not None:  # with the key, as before: verified, with the length
            assert verified.status == EXIT_OK and "plaintext length: 200000 bytes" in verified.stdout.decode()
    for broken, code in ((b"not gcmstream at all", EXIT_UNSUPPORTED), (header[:30], EXIT_TRUNCATED)):
        path = tmp_path / "broken"
        path.write_bytes(broken)
        one_line_error(run_cli("info", path), code)  # the verdicts of info with a key


def test_a_key_given_for_a_file_sealed_to_recipients_or_a_passphrase_names_what_reads_it(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """A new user's finding: `-k` on a file sealed to recipients named --identity only as one
    possibility; the message now says what the header says and the option that reads it, on
    decrypt, decrypt --offset and info alike (exit 3, as a key the header does not name)."""
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    made = {
        "recipients": (
            ("-r", recipient_of(people["alice"])),
            "is sealed to recipients (its header "
            "holds recipient stanzas), not with a key: give -i IDENTITY_FILE (--identity) instead of a key",
        ),
        "passphrase": (
            ("--passphrase-file", secret, *FAST),
            "is sealed with a passphrase (its header "
            "holds a passphrase stanza), not with a key: give --passphrase or --passphrase-file FILE "
            "instead of a key",
        ),
    }
    for name, (options, says) in made.items():
        path = tmp_path / f"{name}.gcms"
        assert run_cli("encrypt", *options, "-o", path, input=PLAIN).status == EXIT_OK
        for argv in (
            ("decrypt", "-k", keyfile, path, "-o", tmp_path / "out"),
            ("decrypt", "-k", keyfile, "--offset", "1", path, "-o", tmp_path / "out"),
            ("info", "-k", keyfile, path),
        ):
            message = one_line_error(run_cli(*argv), EXIT_WRONG_KEY)
            assert f"{path} {says}" in message, message
        assert not (tmp_path / "out").exists()


def test_an_identity_given_for_a_file_sealed_with_a_key_names_k(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """A new user's finding: `decrypt -i alice.identity` on a file a key sealed said only "a
    key sealed it, or the header was altered"; the opposite mistake names -i, this one -k."""
    path = tmp_path / "backup.gcms"
    assert run_cli("encrypt", "-k", keyfile, "-o", path, input=PLAIN).status == EXIT_OK
    message = one_line_error(run_cli("decrypt", "-i", people["alice"], path), EXIT_WRONG_KEY)
    assert "a key sealed it (give -k KEYFILE" in message, message


def test_a_passphrase_file_at_a_terminal_asks_for_the_passphrase(tmp_path: Path) -> None:
    """No --passphrase given: the header names a passphrase, and the terminal is asked."""
    code, sealed, err = on_terminal(["encrypt", "--passphrase", *FAST], b"pw one\npw one\n", PLAIN)
    assert code == EXIT_OK, err
    path = tmp_path / "sealed"
    path.write_bytes(sealed)
    code, opened, err = on_terminal(["decrypt", str(path)], b"pw one\n", b"")
    assert code == EXIT_OK and opened == PLAIN, err


def test_info_without_a_key_asks_for_nothing_on_a_terminal(tmp_path: Path) -> None:
    """README and SECURITY.md: `info FILE` without a key asks for nothing, even for a file
    sealed with a passphrase and with a terminal there to ask on: stdin and the controlling
    terminal are a pty; nothing is written to it, nothing read from it, and info exits 0."""
    secret = tmp_path / "pass"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    path = tmp_path / "pp.gcms"
    assert run_cli("encrypt", "--passphrase-file", secret, *FAST, "-o", path, input=PLAIN).status == EXIT_OK
    process, controller = start_on_terminal(["info", str(path)], stdin_is_terminal=True)
    shown = bytearray()
    deadline = time.monotonic() + TIMEOUT
    try:  # what the command writes on the terminal, until it exits (EIO: the pty closed)
        while process.poll() is None and time.monotonic() < deadline and b"passphrase" not in shown:
            if select.select([controller], [], [], 0.1)[0]:
                shown += os.read(controller, 1024)
    except OSError:
        pass
    finally:
        os.close(controller)
        if process.poll() is None:  # it waits for an answer: asked
            process.kill()
        out, err = process.communicate(timeout=TIMEOUT)
    assert b"passphrase" not in shown and process.returncode == EXIT_OK, (shown, err)
    assert out.decode().splitlines()[0].startswith("verified: NO: ") and err == b"", err


# A name as an attacker would write it: lines that read like a verified `info`, then SGR 8
# ("conceal"), which hides the rest of the terminal's output on xterm-like terminals
FORGED_NAME = (
    "a.gcms\nformat: gcmstream version 2, one-way stream\nsuite: AES-256-GCM\nkey ID: 00\n"
    "plaintext length: 4 bytes (final record authenticated)\x1b[8m\u202e"
)


def test_a_file_name_cannot_forge_info_lines_or_hide_what_follows(tmp_path: Path, keyfile: Path) -> None:
    """Review M1: `info` printed the file name raw, so a newline in it added lines that looked
    like a verified description and an escape sequence hid "verified: NO". Every path the
    command line prints goes through one filter: no control character reaches stdout or
    stderr, each output keeps its number of lines, and a name that is not UTF-8 is shown
    (\\xff), not a crash. "verified: NO" is the first line."""
    (tmp_path / "inj").mkdir()
    forged = tmp_path / "inj" / FORGED_NAME
    assert run_cli("encrypt", "-k", keyfile, "-o", forged, input=PLAIN).status == EXIT_OK
    not_utf8 = os.fsdecode(bytes(tmp_path / "inj") + b"/b\xff.gcms")
    os.link(forged, not_utf8)
    escaped = "a.gcms\\nformat: gcmstream version 2, one-way stream\\nsuite"
    for path, shown_as in ((str(forged), escaped), (not_utf8, "b\\xff.gcms")):
        keyless = run_cli("info", path)
        assert keyless.status == EXIT_OK and keyless.stderr == "", keyless.stderr
        lines = keyless.stdout.decode().splitlines()
        assert len(lines) == 8 and lines[0].startswith("verified: NO: "), lines
        assert lines[1].startswith("file: ") and shown_as in lines[1], lines
        keyed = run_cli("info", "-k", keyfile, path)
        assert keyed.status == EXIT_OK and len(keyed.stdout.decode().splitlines()) == 9, keyed.stdout
        failed = one_line_error(
            run_cli("decrypt", "-k", keyfile, "--offset", "1", "-o", path, path), EXIT_USAGE
        )
        # argparse's own words: a stray word that is not plain ASCII is not shown at all (it may
        # be a flag pasted with look-alikes and its value: review rev16)
        stray = one_line_error(run_cli("info", path, path), EXIT_USAGE)
        assert "unrecognized arguments: (a word that is not shown)" in stray, stray
        for text in (keyless.stdout.decode(), keyed.stdout.decode(), failed, stray):
            assert not any((ord(c) < 32 and c != "\n") or 0x7F <= ord(c) < 0xA0 for c in text), text
            assert "\u202e" not in text
            assert "\\x1b[8m\\u202e" in text or path == not_utf8 or text == stray, text  # shown, escaped


def test_info_without_a_key_refuses_what_info_with_one_refuses_by_form(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """Review L2, L3: the keyless `info` exited 0 (and said "give one to verify it") for
    armored text, a channel's header and a key's header with fields over a key reader's
    bound, which `info` with the key refuses (7, 4, 4). It now gives the same exit status
    and the same message as `info` with the key or identity that fits, from the one verdict."""
    sealed = tmp_path / "k.gcms"
    assert run_cli("encrypt", "-k", keyfile, "-o", sealed, input=PLAIN).status == EXIT_OK
    armored = tmp_path / "r.asc"
    assert (
        run_cli("encrypt", "-a", "-r", recipient_of(people["dave"]), "-o", armored, input=PLAIN).status == 0
    )
    wire = sealed.read_bytes()
    channel = bytearray(wire)
    channel[5] = channel[7] = 1  # role and key exchange of a channel's initiator
    fields_length = int.from_bytes(wire[60:62], "big")
    extra = (0x9000).to_bytes(2, "big") + (5000).to_bytes(2, "big") + b"A" * 5000
    big = wire[:60] + (fields_length + len(extra)).to_bytes(2, "big") + wire[62 : 62 + fields_length]
    lines = armored.read_text().splitlines(keepends=True)
    cases = {
        "armored": (armored.read_bytes(), ("-i", people["dave"]), EXIT_UNSUPPORTED),
        "corrupt armor": (
            "".join([lines[0], "!" + lines[1][1:], *lines[2:]]).encode(),
            ("-i", people["dave"]),
            EXIT_UNSUPPORTED,
        ),
        "channel": (bytes(channel), ("-k", keyfile), EXIT_TAMPERED),
        "fields over 4096": (big + extra + wire[62 + fields_length :], ("-k", keyfile), EXIT_TAMPERED),
    }
    for name, (content, keying, code) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        keyed = one_line_error(run_cli("info", *keying, path), code)
        keyless = one_line_error(run_cli("info", path), code)
        assert keyless == keyed, (name, keyless, keyed)
        assert "give one to verify" not in keyless, name


def test_a_header_cut_short_is_said_to_end_inside_the_header(tmp_path: Path, keyfile: Path) -> None:
    """Review L9: a file that ends inside its stream header was reported as "ends before its
    FINAL record"; every path now says it ends inside its stream header (exit 5)."""
    sealed = run_cli("encrypt", "-k", keyfile, input=PLAIN).stdout
    for name, content in (("short", b"GCMS"), ("no fields", sealed[:70])):
        path = tmp_path / name
        path.write_bytes(content)
        for argv in (
            ("info", path),
            ("info", "-k", keyfile, path),
            ("decrypt", "-k", keyfile, "-o", tmp_path / "out", path),
            ("decrypt", "-k", keyfile, "--offset", "0", "-o", tmp_path / "out", path),
        ):
            message = one_line_error(run_cli(*argv), EXIT_TRUNCATED)
            assert f"{path} ends inside its stream header: it was cut short" in message, (argv, message)


def test_a_key_from_the_environment_is_named_where_the_header_names_another(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """Review L6: with GCMSTREAM_KEY set (README's own set-up), `info FILE` and `decrypt FILE`
    on a file sealed to recipients said "instead of a key" of a key the user did not type; the
    message now says the key came from GCMSTREAM_KEY and how to give none."""
    path = tmp_path / "rec.gcms"
    assert run_cli("encrypt", "-r", recipient_of(people["dave"]), "-o", path, input=PLAIN).status == EXIT_OK
    key_line = next(x for x in keyfile.read_text().splitlines() if x and not x.startswith("#"))
    for argv in (("info", path), ("decrypt", "-o", tmp_path / "out", path)):
        message = one_line_error(run_cli(*argv, environ={"GCMSTREAM_KEY": key_line}), EXIT_WRONG_KEY)
        assert "give -i IDENTITY_FILE (--identity) instead of a key" in message, message
        assert "the key came from GCMSTREAM_KEY" in message and "env -u GCMSTREAM_KEY" in message, message
        given = one_line_error(run_cli(*argv[:1], "-k", keyfile, *argv[1:]), EXIT_WRONG_KEY)
        assert "GCMSTREAM_KEY" not in given, given  # -k: the user typed it
    # stdin a regular file (`< rec.gcms`), in a real shell: its header, read from the
    # descriptor the command has open, names what reads it; it gave the generic words
    with path.open("rb") as stdin:
        piped = subprocess.run(
            [sys.executable, "-m", "gcmstream", "decrypt", "-k", str(keyfile)],
            stdin=stdin,
            capture_output=True,
            env=env(),
            timeout=TIMEOUT,
            check=False,
        )
    message = one_line_error(piped, EXIT_WRONG_KEY)
    assert (
        "the input is sealed to recipients (its header holds recipient stanzas), not with a key: give "
        in message
    )


def test_an_unmatched_identity_counts_every_stanza_of_the_header(
    tmp_path: Path, people: dict[str, Path]
) -> None:
    """Review L7: a stanza of a kind this version skips was left out of the count, so a header
    of one stanza read "any of the stream's 0 recipient stanzas", the words of a count of 0
    (exit 4). The count is the header's, the skipped ones said."""
    sealed = bytearray(run_cli("encrypt", "-r", recipient_of(people["dave"]), input=PLAIN).stdout)
    sealed[68] ^= 2  # the first stanza's kind byte: 62 fixed, 4 field header, 2 count
    path = tmp_path / "m68"
    path.write_bytes(sealed)
    message = one_line_error(
        run_cli("decrypt", "-i", people["dave"], "-o", tmp_path / "out", path), EXIT_WRONG_KEY
    )
    assert "does not open the stream's 1 recipient stanza (1 of a kind this version does not read)" in message


def test_a_key_file_given_to_i_is_told_to_go_to_k(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """Review L8: `-i KEYFILE` was told the file to decrypt is an argument of its own, and to
    run `gcmstream decrypt [OPTIONS] KEYFILE`; a gcmstream key file is meant for -k."""
    path = tmp_path / "rec.gcms"
    assert run_cli("encrypt", "-r", recipient_of(people["dave"]), "-o", path, input=PLAIN).status == EXIT_OK
    message = one_line_error(run_cli("decrypt", "-i", keyfile, path), EXIT_USAGE)
    assert (
        f"{keyfile} is a key file (gcmstream-key-v1: line), not an identity file: give it with -k" in message
    )
    assert "[OPTIONS]" not in message, message


def test_a_passphrase_given_where_its_files_name_goes_is_never_shown(tmp_path: Path) -> None:
    """A new user's slip: ``--passphrase-file "correct horse battery"``. The path names no file,
    and it may be the passphrase itself: the message says what happened without quoting it."""
    typed = "correct horse battery staple"
    for command in ("encrypt", "decrypt"):
        run = run_cli(command, "--passphrase-file", typed, input=b"x")
        assert run.status == 2
        assert typed not in run.stderr and "correct" not in run.stderr
        assert "--passphrase-file takes a file's name" in run.stderr


TYPED = "correct horse battery"  # a passphrase typed where a flag that takes no value is


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["encrypt", "--passphrase", TYPED, *FAST], "--passphrase takes no value"),
        (["encrypt", "--passphrase", TYPED, "-o", "out.gcms"], "--passphrase takes no value"),
        (["encrypt", "plain", "--passphrase", TYPED], "--passphrase takes no value"),  # an extra word
        (["decrypt", "--passphrase", TYPED], "--passphrase takes no value"),
        (["info", "--passphrase", TYPED], "--passphrase takes no value"),
        (["encrypt", f"--passphrase={TYPED}"], "--passphrase takes no value"),
        (["encrypt", "plain", "-p", TYPED], "age's -p is --passphrase here"),  # age's habit
        (["decrypt", "-p", TYPED], "age's -p is --passphrase here"),
        (["encrypt", "plain", f"-p{TYPED}"], "the text joined to it is not shown"),  # -pTEXT
        (["info", f"-p{TYPED}", "plain"], "age's -p is --passphrase here"),
        (["encrypt", "plain", f"--quiet={TYPED}"], "--quiet: takes no value"),  # every flag
        (["keygen", "-o", "k", f"-f{TYPED}"], "--force: takes no value"),
    ],
)
def test_a_passphrase_given_as_a_flags_value_is_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, words: list[str], says: str
) -> None:
    """A new user's slip: ``encrypt --passphrase "correct horse battery"``. --passphrase takes
    no value (it asks); the word after it was taken as the input and quoted in "correct horse
    battery: No such file" (or in argparse's "unrecognized arguments"). The message says that
    the flag takes no value and how to give a passphrase, without the word."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain").write_bytes(b"x")
    message = one_line_error(run_cli(*words, input=b"x"), EXIT_USAGE)
    assert says in message, message
    assert "correct" not in message and "battery" not in message, message
    if "passphrase" in says:
        assert "asks for the passphrase on the terminal, or give --passphrase-file FILE" in message


def test_a_passphrase_given_to_passphrase_at_a_terminal_is_refused_before_it_asks(tmp_path: Path) -> None:
    """At a terminal the slip asked for the passphrase twice, then quoted the word as a missing
    input; now it is refused at once, before any prompt, and never shown."""
    out = tmp_path / "out.gcms"
    code, written, err = on_terminal(
        ["encrypt", "--passphrase", TYPED, "-o", str(out), *FAST], b"x\nx\n", b""
    )
    assert code == EXIT_USAGE and written == b"" and not out.exists(), err
    assert b"--passphrase takes no value" in err and b"correct" not in err, err


IDENTITY_FILE = "is an identity file (gcmstream-identity-v1: line), not a"
KEY_FILE = "is a key file (gcmstream-key-v1: line), not a"
RECIPIENTS_FILE = "is a recipients file (gcmstream-recipient-v1: line), not a"
PUBLIC = "it holds public keys: give it to 'encrypt -R'"


@pytest.mark.parametrize(
    ("option", "given", "command", "says"),
    [
        ("-k", "identity", "decrypt", f"{IDENTITY_FILE} key file: give it with -i"),
        ("-k", "identity", "encrypt", f"{IDENTITY_FILE} key file: give it with -i"),
        ("-k", "recipients", "encrypt", f"{RECIPIENTS_FILE} key file: {PUBLIC}"),
        ("-R", "key", "encrypt", f"{KEY_FILE} recipients file: give it with -k"),
        ("-R", "identity", "encrypt", f"{IDENTITY_FILE} recipients file: give it with -i"),
        ("-i", "key", "decrypt", f"{KEY_FILE}n identity file: give it with -k"),
        (
            "-i",
            "recipients",
            "decrypt",
            f"{RECIPIENTS_FILE}n identity file: {PUBLIC}; decrypting needs the identity",
        ),
    ],
    ids=[
        "k-identity-decrypt",
        "k-identity-encrypt",
        "k-recipients",
        "R-key",
        "R-identity",
        "i-key",
        "i-recipients",
    ],
)
def test_a_file_of_another_kind_is_named_with_the_option_that_reads_it(
    tmp_path: Path, people: dict[str, Path], keyfile: Path, option: str, given: str, command: str, says: str
) -> None:
    """A new user's finding: -i KEYFILE said to give it with -k, but -k IDENTITYFILE and
    -R KEYFILE only said "not a key line" or "not a recipient line". Each file given to another
    kind's option says what it is and which option reads it (a recipients file, which is public,
    is not told to chmod 600), and never shows a line of it."""
    recipients = tmp_path / "team.recipients"
    recipients.write_text(recipient_of(people["alice"]) + "\n")
    recipients.chmod(0o644)  # public: what `gcmstream recipient > FILE` leaves
    path = {"identity": people["alice"], "key": keyfile, "recipients": recipients}[given]
    sealed = tmp_path / "sealed"
    sealed.write_bytes(b"GCMS")
    argv: list[str | Path] = [command, option, path, "-o", tmp_path / "out"]
    argv.append(sealed if command == "decrypt" else tmp_path / "team.recipients")
    message = one_line_error(run_cli(*argv), EXIT_USAGE)
    assert f"{path} {says}" in message, message
    assert "chmod" not in message
    for line in path.read_text().splitlines():
        assert line.rsplit(":", 1)[-1][:16] not in message, message  # no key text, public or secret


def test_recipient_given_a_public_recipients_or_key_file_says_what_it_is_before_any_chmod(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """A new user's finding: ``gcmstream recipient recipients.txt`` (a public file, mode 0644 as
    ``recipient > FILE`` leaves it) said "chmod 600": the kind of file is checked before its
    mode, so the message says what the file is and what to do, never to chmod it."""
    recipients = tmp_path / "recipients.txt"
    recipients.write_text(recipient_of(people["alice"]) + "\n")
    recipients.chmod(0o644)
    shared = tmp_path / "shared.key"
    shared.write_bytes(keyfile.read_bytes())
    shared.chmod(0o644)
    for path, says in (
        (recipients, f"{RECIPIENTS_FILE}n identity file: it holds recipient lines already (public keys)"),
        (shared, f"{KEY_FILE}n identity file: a key is a shared secret and has no recipient"),
    ):
        message = one_line_error(run_cli("recipient", path), EXIT_USAGE)
        assert f"{path} {says}" in message, message
        assert "chmod" not in message
        for line in path.read_text().splitlines():
            assert line.rsplit(":", 1)[-1][:16] not in message, message
    # an identity file open to others is still told to chmod 600
    exposed = tmp_path / "exposed.identity"
    exposed.write_bytes(people["bob"].read_bytes())
    exposed.chmod(0o644)
    assert "chmod 600" in one_line_error(run_cli("recipient", exposed), EXIT_USAGE)


def test_a_passphrase_under_15_characters_is_warned_about_when_encrypting(tmp_path: Path) -> None:
    """A new user's finding: any passphrase went through without a word. One shorter than 15
    characters (NIST SP 800-63B-4's least for a password used alone; counted in code points,
    not bytes) is warned about on stderr when encrypting, never shown, and not refused; 15 is
    not warned about, nor is decrypting."""
    short = "tr\u00e8s court!"  # 12 characters, 13 bytes
    fifteen = "\u00e9" * 15  # 15 characters, 30 bytes: not short
    for passphrase, warned in ((short, True), ("a" * 14, True), (fifteen, False)):
        path = private_file(tmp_path / "pass", passphrase.encode() + b"\n")
        sealed = run_cli("encrypt", "--passphrase-file", path, *FAST, input=b"x")
        assert sealed.status == EXIT_OK, sealed.stderr
        if warned:
            assert sealed.stderr.count("\n") == 1, sealed.stderr
            assert sealed.stderr.startswith("gcmstream encrypt: warning: the passphrase is shorter than 15 ")
            assert "NIST SP 800-63B-4" in sealed.stderr and passphrase not in sealed.stderr
            assert "court" not in sealed.stderr and "14" not in sealed.stderr  # nor its length
        else:
            assert sealed.stderr == "", sealed.stderr
        opened = run_cli("decrypt", "--passphrase-file", path, input=sealed.stdout)
        assert opened.status == EXIT_OK and opened.stdout == b"x" and opened.stderr == ""
    shown = " ".join(run_cli("encrypt", "--help").stdout.decode().split())  # (wrapped)
    assert "its hyphens part of it; one under 15 characters is warned about, not refused" in shown


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["-d", "{sealed}"], "age's -d is a command here: gcmstream decrypt [-i IDENTITY_FILE"),
        (["--decrypt", "{sealed}"], "age's --decrypt is a command here: gcmstream decrypt"),
        (["-e", "{plain}"], "age's -e is a command here: gcmstream encrypt [-r LINE | -R FILE"),
        (["decrypt", "-d", "{sealed}"], "-d is age's flag to decrypt: the command 'decrypt' does it"),
        (["encrypt", "-e", "{plain}"], "-e is age's flag to encrypt: the command 'encrypt' does it"),
        (["encrypt", "-d", "{plain}"], "age's -d is the command 'decrypt' here: gcmstream decrypt"),
        (["encrypt", "-p", "{plain}"], "age's -p is --passphrase here (it asks for the passphrase"),
        (["decrypt", "{sealed}", "-p"], "age's -p is --passphrase here (it asks for the passphrase"),
        (["decrypt", "--armor", "{sealed}"], "decrypt reads armored text ('encrypt -a') as it is"),
        (["decrypt", "-a", "{sealed}"], "decrypt reads armored text ('encrypt -a') as it is"),
        (["decrypt", "-r", "{recipient}", "{sealed}"], "-r names a recipient, for encrypt: decrypt with"),
        (["decrypt", "-R", "{recipients}", "{sealed}"], "-R names recipients, for encrypt: decrypt with"),
        (["encrypt", "-r", "{recipients}", "{plain}"], "names a file: -r takes a recipient line; give"),
        (["encrypt", "-r", "age1{secret}", "{plain}"], "is an age recipient (age1... or ssh-...)"),
        # age's flags before a command: argparse said "invalid choice" of the word after them
        (["-p", "{plain}"], "age's -p is `gcmstream encrypt --passphrase` (or decrypt"),
        (["-p"], "age's -p is `gcmstream encrypt --passphrase` (or decrypt"),
        (["-r", "{recipient}", "{plain}"], "age's -r RECIPIENT is `gcmstream encrypt -r RECIPIENT` here"),
        (["--recipient={recipient}", "{plain}"], "`gcmstream encrypt -r RECIPIENT` here"),
        (["-R", "{recipients}", "{plain}"], "age's -R PATH is `gcmstream encrypt -R FILE` here"),
        (["-i", "{secret}", "{sealed}"], "age's -i PATH is `gcmstream decrypt -i IDENTITY_FILE` here"),
        (["-a", "{plain}"], "age's -a is `gcmstream encrypt -a` here"),
        (["-o", "{secret}", "{plain}"], "age's -o OUTPUT is `gcmstream encrypt -o FILE` (or decrypt"),
    ],
)
def test_an_age_habit_is_told_what_gcmstream_spells_it(
    tmp_path: Path, people: dict[str, Path], words: list[str], says: str
) -> None:
    """A new user's (age user's) findings: ``gcmstream -d FILE`` said "invalid choice" of
    FILE, ``decrypt -d``, ``-p`` alone, ``decrypt --armor`` and ``decrypt -r`` said only
    "unrecognized arguments", ``encrypt -r FILE`` "not a recipient line". Each names
    gcmstream's way, exit 2, and never repeats a word given with the flag."""
    recipients = tmp_path / "team.recipients"
    recipients.write_text(recipient_of(people["alice"]) + "\n")
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    names = {
        "sealed": str(tmp_path / "sealed"),
        "plain": str(plain),
        "recipient": recipient_of(people["alice"]),
        "recipients": str(recipients),
        "secret": SECRET,
    }
    argv = [word.format(**names) for word in words]
    message = one_line_error(run_cli(*argv), EXIT_USAGE)
    assert says in message, message
    assert SECRET not in message and str(tmp_path) not in message, message
    assert names["recipient"][-20:] not in message


def test_two_ways_of_keying_name_the_flags_given_and_the_one_way_to_give(
    tmp_path: Path, people: dict[str, Path], keyfile: Path
) -> None:
    """A new user's finding: ``decrypt --passphrase-file P -k K`` said only "give one of -k,
    -i/--identity, --passphrase or --passphrase-file", as if none was given. The flags given
    are named (never their values), with the one way a reader takes; ``decrypt -i KEYFILE``
    says to give it with -k."""
    passphrase = private_file(tmp_path / "pass", SECRET.encode() + b"\n")
    sealed = tmp_path / "sealed"
    sealed.write_bytes(b"GCMS")
    message = one_line_error(
        run_cli("decrypt", "--passphrase-file", passphrase, "-k", keyfile, sealed), EXIT_USAGE
    )
    assert "-k and --passphrase-file were given together: a file is sealed one way, so give one of" in message
    assert "(without any, the file's header names the one it needs)" in message
    message = one_line_error(
        run_cli("encrypt", "-k", keyfile, "-i", people["alice"], "--passphrase-file", passphrase, sealed),
        EXIT_USAGE,
    )
    assert (
        "-k, -i and --passphrase-file were given together: give one of -k, -r/-R/-i (these together)"
        in message
    )
    message = one_line_error(run_cli("decrypt", "-i", keyfile, sealed), EXIT_USAGE)
    assert (
        f"{keyfile} is a key file (gcmstream-key-v1: line), not an identity file: give it with -k" in message
    )


@pytest.mark.parametrize("command", ["encrypt", "decrypt"])
def test_no_key_names_every_way_of_keying_and_the_help(tmp_path: Path, command: str) -> None:
    """A new user's finding: ``encrypt plan.txt`` with no key option said only "give -k
    KEYFILE or set GCMSTREAM_KEY", not -r/-R or the passphrase, nor pointed at --help as the
    usage errors do (README.md)."""
    message = one_line_error(run_cli(command, input=b""), EXIT_USAGE)
    ways = ["-k KEYFILE", KEY_ENV, "--passphrase", "--passphrase-file FILE"]
    ways += ["-r RECIPIENT", "-R FILE"] if command == "encrypt" else ["-i/--identity FILE"]
    assert all(way in message for way in ways), message
    assert message.endswith(f"(see gcmstream {command} --help)\n"), message
