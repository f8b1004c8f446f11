"""Review rev15 (docs/review-2026-12-05-server-fixes.md, "Review of rev14's fixes (rev15)"):
c36433d (another user's secret file through a descriptor refused; flags refused before parsing
so that their values are never quoted) and 7f25d1b (the anyio listener's connection failures
caught in the connection's own frame). Each finding's test failed on the code reviewed and
passes since its fix (the commit after the merge of rev15)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..helpers import cli_process, run_cli

TIMEOUT = 60

NOBODY = 65534


def _sticky_folder(tmp_path: Path) -> Path:
    """A folder anyone may add names to, as /tmp (root's, mode 1777)."""
    sticky = tmp_path / "st"
    sticky.mkdir()
    sticky.chmod(0o1777)
    return sticky


# -- c36433d: a secret file given through a descriptor must be root's or the caller's


@pytest.mark.skipif(os.geteuid() != 0, reason="only root reads another user's 0600 file")
def test_another_users_identity_made_first_in_a_sticky_folder_is_never_used_by_root_as_stdin(
    tmp_path: Path,
) -> None:
    """SECURITY.md: another user's secret file "given through a descriptor (...), whose folder
    the CLI cannot see, it is refused". ``-i /dev/stdin < /tmp/NAME`` is; ``-i - < /tmp/NAME``,
    the same descriptor spelt as README's ``decrypt -i - ... < key.txt``, is not: root's file
    is sealed to her recipient ("encrypt -i: to yourself") and she decrypts it."""
    made = cli_process("identity", "-o", tmp_path / "hers.identity")
    assert made.returncode == 0, made.stderr
    planted = _sticky_folder(tmp_path) / "job.identity"  # hers, 0600, made before root's job ran
    planted.write_bytes((tmp_path / "hers.identity").read_bytes())
    planted.chmod(0o600)
    os.chown(planted, NOBODY, NOBODY)
    (tmp_path / "in.txt").write_text("root's secret\n")
    by_name = cli_process("encrypt", "-i", planted, "-o", tmp_path / "o1", tmp_path / "in.txt")
    assert by_name.returncode == 2, by_name.stderr  # (refused by name: _refuse_squatted)
    with open(planted, "rb") as stdin:
        result = cli_process(
            "encrypt", "-i", "-", "-o", tmp_path / "o2", tmp_path / "in.txt", stdin=stdin.fileno()
        )
    if result.returncode == 0:
        stolen = cli_process("decrypt", "-i", tmp_path / "hers.identity", "-o", "-", tmp_path / "o2")
        assert stolen.stdout != "root's secret\n", "root's file was sealed to the other user's identity"
    assert result.returncode == 2, result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="root's file, linked into root's sticky folder")
def test_a_hard_link_in_a_sticky_folder_is_never_used_as_a_passphrase_file_through_a_descriptor(
    tmp_path: Path,
) -> None:
    """By name, a file with other names found in a sticky folder is refused: another user may
    have linked it there (``_refuse_replaceable``; SECURITY.md names the one case not caught,
    the other name gone). Through a descriptor the folder is /proc/self/fd, not sticky, so the
    link count is never asked: the user's own 0600 file whose first line is known (an OpenSSH
    key's) becomes the passphrase, which she knows. The link is made by root here (another
    user can make it only where fs.protected_hardlinks is 0, as the review ran it); what the
    CLI can see is the same."""
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    private = home / "id"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    private.chmod(0o600)
    link = _sticky_folder(tmp_path) / "job.pass"
    os.link(private, link)
    (tmp_path / "in.txt").write_text("root's secret\n")
    by_name = cli_process(
        "encrypt",
        "--passphrase-file",
        link,
        "--work-factor",
        "14",
        "-o",
        tmp_path / "o1",
        tmp_path / "in.txt",
    )
    assert by_name.returncode == 2 and "has other names" in by_name.stderr, by_name.stderr
    with open(link, "rb") as stdin:
        result = cli_process(
            "encrypt",
            "--passphrase-file",
            "/dev/stdin",
            "--work-factor",
            "14",
            "-o",
            tmp_path / "o2",
            tmp_path / "in.txt",
            stdin=stdin.fileno(),
        )
    assert result.returncode == 2, result.stderr


# -- c36433d: flags refused before parsing, their values never quoted

SECRET = "correct Hunter2x staple"


@pytest.mark.parametrize(
    "word",
    [
        "--password\uff1dHunter2x",  # a fullwidth '=' (a CJK input method's)
        "--password\ua78aHunter2x",  # a modifier letter short equals sign
        "\u2e3apassword=Hunter2x",  # a two-em dash: what '---' may become
        "\u2043password=Hunter2x",  # a hyphen bullet
        "\u200b--password=Hunter2x",  # a zero-width space pasted before the flag
        "\u00ad--password=Hunter2x",  # a soft hyphen pasted before it
    ],
    ids=[
        "fullwidth-equals",
        "modifier-equals",
        "two-em-dash",
        "hyphen-bullet",
        "zero-width-space",
        "soft-hyphen",
    ],
)
@pytest.mark.parametrize("where", ["before-the-command", "after-the-input"])
def test_a_flag_pasted_with_a_look_alike_of_a_dash_or_an_equals_sign_never_quotes_its_value(
    word: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: "no other flag quotes a value given to it ... a flag pasted with a typographic
    dash (``—password=TEXT``)". What a page or an input method makes of ``--NAME=VALUE`` is
    not only that: the word, given before the command, is argparse's "invalid choice"; given
    after the input, "unrecognized arguments"; both quote it whole (``recipient WORD`` opens
    it as a file and names it)."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("keygen", "-o", "k.key").status == 0
    Path("in.txt").write_text("hi\n")
    argv = [word, "encrypt", "-k", "k.key", "in.txt"]
    if where == "after-the-input":
        argv = [*argv[1:], word]
    result = run_cli(*argv)
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr


@pytest.mark.parametrize(
    "word",
    [f"--={SECRET}", f"---password={SECRET}", f"--1password={SECRET}", f"-\u2014password={SECRET}"],
    ids=["--=", "---password", "--1password", "dash-then-em-dash"],
)
@pytest.mark.parametrize("where", ["before-the-command", "after-the-command"])
def test_a_flag_the_pre_check_does_not_recognise_as_one_never_quotes_a_passphrase_with_spaces(
    word: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev14's MEDIUM-2 listed ``--=`` among the spellings that quoted a passphrase after its
    first word; c36433d's pattern (``--?[A-Za-z][\\w-]*``) does not take ``--`` as a NAME, so
    argparse still says "ambiguous option: --= (its value is not shown) Hunter2x staple could
    match --help, ...". A typo of one dash too many, or a digit, fares the same: "invalid
    choice: '---password=correct Hunter2x staple'" before the command, "cannot read identity
    file ---password=correct Hunter2x staple" as recipient's file."""
    monkeypatch.chdir(tmp_path)
    argv = [word, "recipient"] if where == "before-the-command" else ["recipient", word]
    result = run_cli(*argv)
    assert result.status == 2, result.stderr
    assert "Hunter2x" not in result.stderr + result.stdout.decode(errors="replace"), result.stderr
