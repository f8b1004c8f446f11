"""Review rev17 (docs/review-2026-12-05-server-fixes.md, "Review of rev16's fixes (rev17)"):
bd74b69 (``_plain_word``, ``_choice_shown``, ``_unrecognized``; ``_check_private`` for a
socket or a character device) and 97781a4. Each finding's test failed on the code reviewed
and passes since its fix (the commit after the merge of rev17)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..helpers import cli_process, pasted_at_a_terminal, run_cli

# -- a flag pasted with a look-alike, given before the input (LOW-1)

LOOK_ALIKE_FLAGS = {"nbsp-first": "\u00a0--password", "modifier-minus": "\u02d7\u02d7password"}


def _command_line(command: str, flag: str) -> list[str]:
    """``gcmstream COMMAND ... FLAG Hunter2x [INPUT]``: the flag where a user types options,
    before the input (the order README.md shows)."""
    return {
        "encrypt": ["encrypt", "-k", "k.key", "-o", "o", flag, "Hunter2x", "in.txt"],
        "decrypt": ["decrypt", "-k", "k.key", "-o", "out", flag, "Hunter2x", "o"],
        "info": ["info", "-k", "k.key", flag, "Hunter2x"],
        "recipient": ["recipient", flag, "Hunter2x"],
        "listen": ["listen", "-k", "k.key", flag, "Hunter2x", "0"],
    }[command]


@pytest.mark.parametrize("command", ["encrypt", "decrypt", "info", "recipient", "listen"])
@pytest.mark.parametrize("flag", list(LOOK_ALIKE_FLAGS.values()), ids=list(LOOK_ALIKE_FLAGS))
def test_the_value_of_a_look_alike_flag_given_before_the_input_is_never_quoted(
    command: str, flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bd74b69 hides a stray word that is not plain and the word after it. Given before the
    input, as options are, the pasted flag is no stray word: argparse takes it for the input
    (``[FILE]``, ``IDENTITY_FILE``), and its value, now the first stray word, is quoted:
    "unrecognized arguments: Hunter2x in.txt"."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    Path("in.txt").write_text("hi\n")
    assert run_cli("encrypt", "-k", "k.key", "-o", "o", "in.txt").status == 0
    result = run_cli(*_command_line(command, flag))
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


# -- a flag and its value in one word, before the command (LOW-2)

ONE_WORD_FLAGS = {
    "space": "--password correct Hunter2x staple",
    "tab": "--password\tHunter2x",
    "short-space": "-P Hunter2x",
}


@pytest.mark.parametrize("word", list(ONE_WORD_FLAGS.values()), ids=list(ONE_WORD_FLAGS))
def test_a_flag_and_its_value_given_as_one_word_before_the_command_is_never_quoted(
    word: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "--NAME is given before the command: ... what follows it is not shown" names the word up
    to its '='; ``gcmstream "$OPTS" encrypt ...`` with OPTS='--password correct Hunter2x
    staple' has no '=', and the message quotes the value twice."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    Path("in.txt").write_text("hi\n")
    result = run_cli(word, "encrypt", "-k", "k.key", "-o", "o", "in.txt")
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


# -- a flag and its value taken for the input's name (LOW-3)

INPUT_SLOT_WORDS = {
    "space-in-one-word": "--password correct Hunter2x staple",
    "short-space-in-one-word": "-P Hunter2x",
    "modifier-minus-joined": "\u02d7password=Hunter2x",
    "nbsp-first-joined": "\u00a0--password=Hunter2x",
    "space-first-joined": " --password=correct Hunter2x staple",  # (a quoted "$OPTS" with a space first)
}


@pytest.mark.parametrize(
    ("command", "word"),
    [
        pytest.param(command, word, id=f"{name}-{command}")
        for name, word in INPUT_SLOT_WORDS.items()
        for command in ["encrypt", "decrypt", "info", "recipient", "connect"]
        # (connect's "bad address \xa0--password=" is hidden by _Parser.error's '=' pattern)
        if (name, command) != ("nbsp-first-joined", "connect")
    ],
)
def test_a_flag_with_its_value_taken_for_the_input_is_never_quoted(
    command: str, word: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no input after it (stdin is the input), a flag and its value typed as one word
    is the input's name (argparse: a word with a space "was meant to be a positional"; the
    look-alike pre-check knows no U+02D7 nor a no-break space first), and the open's error
    names it: "--password correct Hunter2x staple: No such file or directory". No file by
    that name exists: the name was never meant as a path."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    given = {
        "encrypt": ["encrypt", "-k", "k.key", "-o", "o", word],
        "decrypt": ["decrypt", "-k", "k.key", "-o", "out", word],
        "info": ["info", "-k", "k.key", word],
        "recipient": ["recipient", word],
        "connect": ["connect", "-k", "k.key", word],  # (the address parser's "bad address")
    }[command]
    result = run_cli(*given, input=b"hi\n")
    assert result.status != 0, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


# -- 97781a4: a terminal's mode is not asked at all (LOW-4)


@pytest.mark.parametrize("mode", [0o644, 0o666], ids=["0644", "0666"])
def test_an_identity_pasted_at_a_terminal_others_may_read_is_refused(mode: int, tmp_path: Path) -> None:
    """A terminal's write bits for its group are harmless (writing to a tty shows on the
    screen: rev16 LOW-1), its read bits are not: another user who reads the terminal takes
    what is typed at it (``cat /dev/pts/N`` as uid 65534 read the pasted identity's first 40
    bytes in rev17's run). Before bd74b69 such a terminal given as ``-i -`` was refused "open
    to other users (mode 0644)", the files' rule; now nothing is said."""
    assert run_cli("identity", "-o", tmp_path / "me.identity").status == 0
    (tmp_path / "in.txt").write_text("hi\n")
    sealed = run_cli("encrypt", "-i", tmp_path / "me.identity", "-o", tmp_path / "o", tmp_path / "in.txt")
    assert sealed.status == 0, sealed.stderr
    terminal = pasted_at_a_terminal((tmp_path / "me.identity").read_bytes(), mode)
    try:
        result = cli_process(
            "decrypt", "-i", "-", "-o", tmp_path / "out", tmp_path / "o", stdin=terminal, new_session=True
        )
    finally:
        os.close(terminal)
    assert result.returncode == 2, result.stderr
    assert "open to other users" in result.stderr, result.stderr
