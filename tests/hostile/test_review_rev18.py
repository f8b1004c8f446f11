"""Review rev18 (docs/review-2026-12-05-server-fixes.md, "Review of rev17's fixes (rev18)"):
41b98bd (``cli._typed_like_an_option``, ``_unknown_flag``'s space rule, ``_check_private``'s
terminal rule). Each test is an xfail (strict) that fails on 41b98bd and passes once fixed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..helpers import cli_process, pasted_at_a_terminal, run_cli

# -- LOW-1: a file's name that starts with a symbol, an emoji, a modifier letter or an opening
# punctuation mark before an ASCII word and a space is refused as a look-alike option

PLAUSIBLE_NAMES = {
    "emoji": "\U0001f4c4 report.pdf",
    "emoji-only": "\U0001f389.txt",
    "copyright": "\u00a92024 report.pdf",
    "degree": "\u00b0C readings.csv",
    "increment-option-j": "\u2206t.csv",
    "numero": "\u21165.txt",
    "check-mark": "\u2713 done.txt",
    "arrow": "\u2192 next.md",
    "hawaiian-okina": "\u02bbIolani Palace.jpg",
    "transliterated-ayin": "\u02bfAl\u012b notes.txt",
    "spanish-inverted-exclamation": "\u00a1Hola amigos.txt",
    "curly-quotes": "\u201cProject plan\u201d v2.docx",
    "guillemets": "\u00abLe Monde\u00bb article.pdf",
    "superscript-ordinal": "\u00b2nd draft.txt",
    "katakana-prolonged-mark": "\u30fc\u30e1\u30e2.txt",
    "wave-dash": "\u301c\u30e1\u30e2.txt",
    "kanji-then-brand": "\u65e7iPhone \u30d0\u30c3\u30af\u30a2\u30c3\u30d7.zip",
    "hanzi-then-word": "\u7528Python \u7f16\u7a0b.pdf",
}


@pytest.mark.parametrize("name", list(PLAUSIBLE_NAMES.values()), ids=list(PLAUSIBLE_NAMES))
def test_a_file_whose_name_starts_with_a_symbol_or_a_mark_is_encrypted(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gcmstream encrypt -k k.key -o NAME.enc NAME``: argparse takes NAME for the input (it
    does not start with '-'); 41b98bd refuses it before parsing, "a word is typed as an option
    with a character that only looks like '-' or '='"."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    (tmp_path / name).write_text("hi\n")
    result = run_cli("encrypt", "-k", "k.key", "-o", name + ".enc", name)
    assert result.status == 0, result.stderr
    assert (tmp_path / (name + ".enc")).stat().st_size > 0


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--context", "\U0001f4c4 notes"),
        ("--context", "\u2211 totals"),
        ("--context", "\u00a1Hola amigos"),
        ("-o", "\U0001f512 sealed.enc"),
        ("--context", "- draft -"),
    ],
    ids=["context-emoji", "context-sum", "context-spanish", "output-emoji", "context-dash-space"],
)
def test_an_options_value_that_starts_with_a_symbol_is_taken(
    option: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value after an option that takes one is never an option to argparse; 41b98bd asks it
    the look-alike question all the same and refuses the line."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    (tmp_path / "in.txt").write_text("hi\n")
    out = [] if option == "-o" else ["-o", "o.enc"]
    result = run_cli("encrypt", "-k", "k.key", *out, option, value, "in.txt")
    assert result.status == 0, result.stderr


# -- LOW-2: /dev/tty is not asked, whatever the terminal behind it lets others read


def test_an_identity_pasted_at_dev_tty_of_a_terminal_others_may_read_is_refused(tmp_path: Path) -> None:
    """The controlling terminal is a pty of mode 0644: ``-i -`` from it is refused "a terminal
    open to other users (mode 0644)", ``-i /dev/tty`` (the same terminal, what README's users
    type to paste an identity) is read, and the file decrypted: another user reading the pty
    takes the identity either way."""
    assert run_cli("identity", "-o", tmp_path / "me.identity").status == 0
    (tmp_path / "in.txt").write_text("hi\n")
    sealed = run_cli("encrypt", "-i", tmp_path / "me.identity", "-o", tmp_path / "o", tmp_path / "in.txt")
    assert sealed.status == 0, sealed.stderr
    terminal = pasted_at_a_terminal((tmp_path / "me.identity").read_bytes(), 0o644)
    try:
        out = tmp_path / "out"
        result = cli_process(
            "decrypt", "-i", "/dev/tty", "-o", out, tmp_path / "o", stdin=terminal, controlling_terminal=True
        )
    finally:
        os.close(terminal)
    assert result.returncode == 2, result.stderr
    assert "open to other users" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


# -- LOW-3: a look-alike of '--' the rule names only single (U+4E00 before an ASCII name) or
# an ASCII control character before '--' is still taken for the input and quoted

DOUBLED_OR_CONTROL = {
    "cjk-one-twice": "\u4e00\u4e00password",
    "hangul-eu-twice": "\u3161\u3161password",
    "syllabics-stroke-twice": "\u1428\u1428password",
    "delete-first": "\x7f--password",
    "start-of-heading-first": "\x01--password",
}


@pytest.mark.parametrize("joined", [True, False], ids=["joined", "split"])
@pytest.mark.parametrize("flag", list(DOUBLED_OR_CONTROL.values()), ids=list(DOUBLED_OR_CONTROL))
def test_a_flag_typed_with_a_doubled_look_alike_or_a_control_character_is_never_quoted(
    flag: str, joined: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gcmstream encrypt -k k.key -o o 一一password=Hunter2x`` said "一一password=Hunter2x: No
    such file or directory"; ``... 一一password Hunter2x in.txt`` said "unrecognized arguments:
    Hunter2x in.txt". ``一password=Hunter2x`` (one U+4E00) is refused, the word not shown."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    (tmp_path / "in.txt").write_text("hi\n")
    words = [f"{flag}=Hunter2x"] if joined else [flag, "Hunter2x", "in.txt"]
    result = run_cli("encrypt", "-k", "k.key", "-o", "o", *words)
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


def test_a_passphrase_typed_at_dev_tty_of_a_terminal_others_may_read_is_refused(tmp_path: Path) -> None:
    """``--passphrase-file /dev/stdin`` from a 0644 terminal is refused; ``/dev/tty``, the same
    terminal, decrypts."""
    (tmp_path / "pw").write_text("correct horse battery Hunter2x\n")
    (tmp_path / "pw").chmod(0o600)
    (tmp_path / "in.txt").write_text("hi\n")
    sealed = run_cli(
        "encrypt", "--passphrase-file", tmp_path / "pw", "-o", tmp_path / "o", tmp_path / "in.txt"
    )
    assert sealed.status == 0, sealed.stderr
    terminal = pasted_at_a_terminal(b"correct horse battery Hunter2x\n", 0o644)
    try:
        given = ("--passphrase-file", "/dev/tty", "-o", tmp_path / "out", tmp_path / "o")
        result = cli_process("decrypt", *given, stdin=terminal, controlling_terminal=True)
    finally:
        os.close(terminal)
    assert result.returncode == 2, result.stderr
    assert "open to other users" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


# -- LOW-4: a short flag joined with its value, given before the command, is named whole


@pytest.mark.parametrize(
    "word", ["-PHunter2x", "-xHunter2x", "-h Hunter2x"], ids=["P-joined", "x-joined", "h-spaced"]
)
def test_a_short_flag_joined_with_its_value_before_the_command_is_named_without_it(
    word: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gcmstream -PHunter2x encrypt ...`` said "-PHunter2x is given before the command";
    after the command the same word says "unrecognized arguments: -P (its value is not
    shown)". ``'-h Hunter2x'`` passes the space rule because -h is a known option."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    (tmp_path / "in.txt").write_text("hi\n")
    result = run_cli(word, "encrypt", "-k", "k.key", "-o", "o", "in.txt")
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr
