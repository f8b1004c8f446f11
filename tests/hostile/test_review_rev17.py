"""Review rev17 (docs/review-2026-12-05-server-fixes.md, "Review of rev16's fixes (rev17)"):
bd74b69 (``_plain_word``, ``_choice_shown``, ``_unrecognized``; ``_check_private`` for a
socket or a character device) and 97781a4. Each test fails on the code reviewed (strict
xfail) and is meant to pass once its finding is fixed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import run_cli

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
    }[command]


@pytest.mark.xfail(
    strict=True,
    reason="rev17 LOW-1: argparse takes the look-alike flag for the input (nargs='?'), so its "
    "value is the first stray word and _unrecognized, which looks only at the stray words, shows it",
)
@pytest.mark.parametrize("command", ["encrypt", "decrypt", "info", "recipient"])
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
