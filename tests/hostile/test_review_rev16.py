"""Review rev16 (docs/review-2026-12-05-server-fixes.md, "Review of rev15's fixes (rev16)"):
3101721 (``-i -`` judged as a secret given through a descriptor, ``_refuse_unseen_folder``;
``_typed_with_look_alikes``, now ``_typed_like_an_option``) and c36433d before it. Each
finding's test failed on the code reviewed and passes since its fix (the commit after the
merge of rev16)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from ..helpers import cli_process, pasted_at_a_terminal, run_cli

TIMEOUT = 60


def _sealed_to_own_identity(tmp_path: Path) -> tuple[bytes, Path]:
    """The user's own identity (0600, one name) and a file sealed to it."""
    assert run_cli("identity", "-o", tmp_path / "me.identity").status == 0
    (tmp_path / "in.txt").write_text("hi\n")
    sealed = run_cli("encrypt", "-i", tmp_path / "me.identity", "-o", tmp_path / "o", tmp_path / "in.txt")
    assert sealed.status == 0, sealed.stderr
    return (tmp_path / "me.identity").read_bytes(), tmp_path / "o"


def _fed_through_a_socket(identity: bytes) -> socket.socket:
    """The reading end of a socket pair the identity is written into (then its end), as
    ``ssh host gcmstream decrypt -i - ... < me.identity`` or a service's socket gives it."""
    ours, theirs = socket.socketpair()

    def feed() -> None:
        with ours:
            ours.sendall(identity)
            ours.shutdown(socket.SHUT_WR)

    threading.Thread(target=feed, daemon=True).start()
    return theirs


# -- 3101721: -i - refuses what is not a file on stdin with the files' mode rule


@pytest.mark.parametrize("stdin_is", ["socket", "terminal-0620"])
def test_the_users_own_identity_given_as_stdin_through_a_socket_or_a_terminal_is_read(
    stdin_is: str, tmp_path: Path
) -> None:
    """README: "``-R -`` and ``-i -``: stdin". A pipe passes the new rule (mode 0600, the
    caller's); a socket (``ssh host 'gcmstream decrypt -i - F' < me.identity`` where sshd
    gives a socket pair, a service's socket) shows mode 0777, a terminal at which the user
    pastes the identity 0620: nobody else can put bytes into either, yet both are refused as
    a file "open to other users"."""
    identity, sealed = _sealed_to_own_identity(tmp_path)
    if stdin_is == "socket":
        with _fed_through_a_socket(identity) as stdin:
            given = stdin.fileno()
            result = cli_process("decrypt", "-i", "-", "-o", "-", sealed, stdin=given, new_session=True)
    else:
        terminal = pasted_at_a_terminal(identity, 0o620)  # (group-writable, as mesg y leaves it)
        try:
            result = cli_process(
                "decrypt", "-i", "-", "-o", tmp_path / "out", sealed, stdin=terminal, new_session=True
            )
        finally:
            os.close(terminal)
        result.stdout = (tmp_path / "out").read_text() if result.returncode == 0 else ""
    assert (result.returncode, result.stdout) == (0, "hi\n"), result.stderr


# -- 3101721: _typed_with_look_alikes knows the Pd dashes, three more, and Cf before '-'

SECRET = "correct Hunter2x staple"


@pytest.mark.parametrize(
    "word",
    [
        f"\u02d7password={SECRET}",  # a modifier letter minus sign (rev15 LOW-2 named it)
        f"\u30fcpassword={SECRET}",  # a katakana prolonged sound mark (rev15 LOW-2 named it)
        f"\u2500\u2500password={SECRET}",  # box drawings: what a terminal's font makes of '--'
        f"\u00a0--password={SECRET}",  # a no-break space pasted from a page's code block
        f"\u0301--password={SECRET}",  # a combining mark (category Mn) before the flag
        f"\u2800--password={SECRET}",  # a braille blank (category So), invisible
        f"\u3164--password={SECRET}",  # a Hangul filler (category Lo), invisible
        f" --password={SECRET}",  # an ASCII space first: "$OPTS" quoted in a script
    ],
    ids=[
        "modifier-minus",
        "prolonged-sound-mark",
        "box-drawing",
        "nbsp-first",
        "combining-first",
        "braille-blank-first",
        "hangul-filler-first",
        "space-first",
    ],
)
@pytest.mark.parametrize("where", ["before-the-command", "after-the-input"])
def test_a_flag_pasted_with_other_look_alikes_or_invisible_characters_never_quotes_its_value(
    word: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHANGELOG (3101721): "a word typed as a flag with look-alikes of '-' or '=' ... is
    refused without quoting it". Only a category-Pd dash, three symbols and category-Cf
    characters before '-' are taken for one; before the command argparse's "argument COMMAND:
    invalid choice: '...'" still quotes any other word whole, after the input "unrecognized
    arguments" does (``_unrecognized`` hides only words that start with an ASCII '-')."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    Path("in.txt").write_text("hi\n")
    argv = [word, "encrypt", "-k", "k.key", "-o", "o", "in.txt"]
    if where == "after-the-input":
        argv = [*argv[1:], word]
    result = run_cli(*argv)
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


@pytest.mark.parametrize("flag", ["\u00a0--password", "\u02d7password"], ids=["nbsp-first", "modifier-minus"])
def test_the_word_after_a_flag_pasted_with_a_look_alike_is_never_quoted(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_unrecognized`` hides the word after an unknown flag (it may be its value) only when
    the flag starts with an ASCII '-'; ``encrypt ... in.txt --password Hunter2x`` is hidden,
    the same typed with a leading no-break space or a modifier minus is not."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    Path("in.txt").write_text("hi\n")
    result = run_cli("encrypt", "-k", "k.key", "-o", "o", "in.txt", flag, "Hunter2x")
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


# -- the passphrase typed where --passphrase-file's name goes (CHANGELOG: "not quoted")

LONG_PASSPHRASE = "correct Hunter2x staple " + " ".join(f"battery horse {n}" for n in range(1, 26))


@pytest.mark.parametrize("joined", [False, True], ids=["a-word-of-its-own", "joined-by-equals"])
def test_a_long_passphrase_typed_where_the_passphrase_files_name_goes_is_never_quoted(
    joined: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CHANGELOG: "A path given to ``--passphrase-file`` that names no file is not quoted in
    the message: it may be the passphrase itself". A passphrase may be 4,096 bytes
    (SECURITY.md); one over a name's 255 (a long sentence, words with spaces: the key-text
    filter does not take it) names no file either, and the open's ENAMETOOLONG is reported
    with the path."""
    monkeypatch.chdir(tmp_path)
    Path("in.txt").write_text("hi\n")
    assert len(LONG_PASSPHRASE.encode()) > 255
    given = [f"--passphrase-file={LONG_PASSPHRASE}"] if joined else ["--passphrase-file", LONG_PASSPHRASE]
    result = run_cli("encrypt", *given, "-o", "o", "in.txt")
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr
