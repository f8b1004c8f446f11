"""Review 2026-12-05 of three merged changes (docs/review-2026-12-05-server-fixes.md): the
kernel look at admission (merge fix1), a same-process refusal reaching only its own client
(merge fix2), and the CLI's output safety (d19ac2f), then of their fixes (fix3). Each test here
failed on the code reviewed because of a finding and passes since its fix."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import gcmstream
import gcmstream._server
from gcmstream import AdmissionPolicy, Role
from gcmstream.admission import Admission

from ..helpers import KEY, SERVER_PATHS, closing_server, run_cli

HOST = "127.0.0.1"


@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_a_first_flight_queued_before_accept_is_never_admitted_as_silent(
    path: str, backend: str, options: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECURITY.md: "at admission they ask the kernel: a connection whose first bytes already
    arrived counts as having received part of a header, not as one that sent nothing", on
    every server. A client's whole header is in the kernel before the server accepts (the loop
    is held while it connects and sends); when the server first reports what it read
    (``Admission.observe``), the admission must not have held it as silent meanwhile. The
    anyio listener on asyncio (and on uvloop) admitted it as silent: anyio had read it."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    silent_at_first_read: list[bool] = []

    class Spy(Admission[Any]):
        def __init__(self, policy: AdmissionPolicy, drop: Callable[[Any], object], **kwargs: Any) -> None:
            super().__init__(policy, drop, **kwargs)
            self.seen: set[int] = set()

        def observe(self, connection: Any, opener: Any) -> None:
            if id(connection) not in self.seen:
                self.seen.add(id(connection))
                silent_at_first_read.append(self.silent > 0)  # one connection: was it silent?
            super().observe(connection, opener)

    monkeypatch.setattr(gcmstream._server, "Admission", Spy)  # the one every server path makes

    async def scenario() -> None:
        async with contextlib.AsyncExitStack() as stack:
            port, start = await closing_server(stack, path)
            client = stack.enter_context(socket.create_connection((HOST, port)))
            client.sendall(gcmstream.Channel(KEY, role=Role.INITIATOR).initial_data())
            time.sleep(0.1)  # noqa: ASYNC251 (it holds the loop on purpose: the header is in the kernel before any accept)
            await start()
            for _ in range(50):  # bounded: until the server read it
                if silent_at_first_read:
                    break
                await anyio.sleep(0.01)

    anyio.run(scenario, backend=backend, backend_options=options)
    assert silent_at_first_read == [False], "a header that was in the kernel at admission was held as silent"


# -- d19ac2f read the key file once and checked its mode as read; the other secret files were
# checked by name apart from their reading until the review (MEDIUM-1): now each is the file read


def _swap_at_the_mode_check(
    monkeypatch: pytest.MonkeyPatch, path: Path, replacement: Path, *, before: bool
) -> list[str]:
    """The attacker's rename onto ``path`` at the worst moment, made deterministic: when the CLI
    checks ``path``'s mode (just before the check: ``before``; else just after it)."""
    import gcmstream.cli

    checked: list[str] = []
    check = gcmstream.cli._check_private

    def racing(where: str, what: str, *args: Any) -> None:
        checked.append(what)
        if before and where == str(path):
            os.replace(replacement, path)
        check(where, what, *args)
        if not before and where == str(path):
            os.replace(replacement, path)

    monkeypatch.setattr(gcmstream.cli, "_check_private", racing)
    return checked


def test_a_passphrase_file_open_to_others_renamed_in_after_its_mode_check_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECURITY.md: the CLI "refuses identity, key and passphrase files that the group or
    others can read or write". A private passphrase file passes the check by name; a
    world-readable one (the attacker's passphrase, which she can also read) renamed onto it
    before it is opened is the one read: the output is sealed under the attacker's passphrase
    (on main, exit 0 and the attacker's passphrase decrypts it)."""
    mine = tmp_path / "pass"
    mine.write_bytes(b"the owner's passphrase\n")
    mine.chmod(0o600)
    theirs = tmp_path / "planted"
    theirs.write_bytes(b"the attacker's passphrase\n")
    theirs.chmod(0o644)
    attacker_copy = tmp_path / "attacker-copy"  # what the attacker keeps to decrypt with
    attacker_copy.write_bytes(theirs.read_bytes())
    attacker_copy.chmod(0o600)
    checked = _swap_at_the_mode_check(monkeypatch, mine, theirs, before=False)
    sealed = _sealed_with_passphrase_file(mine, tmp_path)
    assert "passphrase file" in checked  # the race was run
    monkeypatch.undo()
    _never_opened_with(attacker_copy, sealed, tmp_path)


def test_an_identity_file_open_to_others_is_refused_though_a_private_one_is_renamed_in_for_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gcmstream recipient ID`` reads ID, then checks ID's mode by name: an identity file
    open to others (here the attacker's own, whose recipient line she wants published) is read,
    a private one renamed onto ID passes the check, and the attacker's recipient line is
    printed (exit 0). Read once and checked as read, it is refused."""
    exposed = tmp_path / "id"
    assert run_cli("identity", "--x25519", "-o", exposed).status == 0
    exposed.chmod(0o644)
    private = tmp_path / "private"
    assert run_cli("identity", "--x25519", "-o", private).status == 0
    checked = _swap_at_the_mode_check(monkeypatch, exposed, private, before=True)
    result = run_cli("recipient", exposed)
    assert "identity file" in checked  # the race was run
    assert result.status != 0, "an identity file open to others was used (its recipient printed)"


def test_a_keyset_file_open_to_others_renamed_in_after_its_mode_check_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--format tink -k KEYSET`` checks KEYSET's mode by name, then reads it by name: the
    attacker's world-readable keyset renamed in between is the one the output is sealed under
    (on main, exit 0 and the attacker's copy of her keyset decrypts it)."""
    from gcmstream.tinkstream import TinkHash

    from ..test_tink_surfaces import KEYSETS, keyset_for

    _, owners = keyset_for(16, TinkHash.SHA256, 4096)
    _, attackers = keyset_for(16, TinkHash.SHA256, 4096)
    mine, theirs, attacker_copy = tmp_path / "keyset.json", tmp_path / "planted", tmp_path / "copy"
    for path, keyset, mode in (
        (mine, owners, 0o600),
        (theirs, attackers, 0o644),
        (attacker_copy, attackers, 0o600),
    ):
        path.write_text(KEYSETS[id(keyset)])
        path.chmod(mode)
    plain, out = tmp_path / "plain", tmp_path / "out"
    plain.write_bytes(b"secret data")
    tink = ("--format", "tink", "--context", "review")
    checked = _swap_at_the_mode_check(monkeypatch, mine, theirs, before=False)
    status = run_cli("encrypt", *tink, "-k", mine, "-o", out, plain).status
    assert "keyset file" in checked  # the race was run
    monkeypatch.undo()
    if status == 0:  # sealed: never under the keyset the attacker planted
        stolen = run_cli("decrypt", *tink, "-k", attacker_copy, "-o", tmp_path / "back", out)
        assert stolen.status != 0, "the output was sealed under the attacker's planted keyset"


def _sealed_with_passphrase_file(given: Path, tmp_path: Path) -> Path | None:
    """The output of ``encrypt --passphrase-file given`` of a small file, or None if refused."""
    plain, out = tmp_path / "plain", tmp_path / "out"
    plain.write_bytes(b"secret data")
    status = run_cli("encrypt", "--passphrase-file", given, "--work-factor", "14", "-o", out, plain).status
    return out if status == 0 else None


def _never_opened_with(passphrase_file: Path, sealed: Path | None, tmp_path: Path) -> None:
    """What was sealed (if anything was) never opens with the attacker's passphrase file."""
    if sealed is not None:
        stolen = run_cli("decrypt", "--passphrase-file", passphrase_file, "-o", tmp_path / "back", sealed)
        assert stolen.status != 0, "the output was sealed under a passphrase the attacker knows"


# -- review of the fixes (rev10): merge fix3 (e381cb5) checks each secret file as it is read;
# what the attacker who can write in its folder still did, until such a folder was refused


def test_a_passphrase_file_symlinked_by_another_user_to_a_private_file_with_a_known_first_line_is_never_used(
    tmp_path: Path,
) -> None:
    """The owner check refuses a file the attacker made, but not a symlink she made to a file
    the user owns: the attacker who can write in the passphrase file's directory (the threat
    `_check_private` is for: "could swap it for theirs") replaces the file with a symlink to one
    of the user's own private files whose first line is public, here an OpenSSH private key
    (every one begins "-----BEGIN OPENSSH PRIVATE KEY-----"). On main the symlink is followed,
    mode 0600 and owner passed, the output was sealed (exit 0) and the known line decrypted it;
    now a secret file in a folder others can write in is refused."""
    shared = tmp_path / "shared"  # the directory others can write in (not sticky)
    shared.mkdir()
    shared.chmod(0o777)
    users_key, known = _a_file_whose_first_line_is_known(tmp_path)  # (outside `shared`)
    planted = shared / "pass"
    planted.symlink_to(users_key)  # where the user's passphrase file was
    _never_opened_with(known, _sealed_with_passphrase_file(planted, tmp_path), tmp_path)


def test_a_tink_keyset_named_dash_is_no_internal_error(tmp_path: Path) -> None:
    """``-k -`` names a file called '-' for gcmstream's format since fix3 (``_load_key``'s
    ``named=True``); for ``--format tink`` the same flag still reads stdin, and the check that
    now looks only at what ``_note_read`` recorded has nothing for it: the command fails with
    "internal error: KeyError: '-'" (exit 1) after stdin was consumed. Before fix3 it was a
    usage error (the name '-' was looked at)."""
    from gcmstream.tinkstream import TinkHash

    from ..test_tink_surfaces import KEYSETS, keyset_for

    _, keyset = keyset_for(16, TinkHash.SHA256, 4096)
    plain = tmp_path / "plain"
    plain.write_bytes(b"secret data")
    result = run_cli(
        "encrypt",
        "--format",
        "tink",
        "-k",
        "-",
        "-o",
        tmp_path / "out",
        plain,
        input=KEYSETS[id(keyset)].encode(),
    )
    assert "internal error" not in result.stderr, result.stderr
    assert result.status in (0, 2), result.stderr


# -- review of the folder rule (rev11): merge fix3's third round asked every folder the name goes
# through, as given (lexically) and once the folder's links are resolved, by name after the
# open; the kernel resolves more than that (the file's own link, `..` after a link). Now the
# name is walked as the kernel does, each folder opened from the one before (_open_secret)


def _a_file_whose_first_line_is_known(tmp_path: Path) -> tuple[Path, Path]:
    """One of the user's own private files whose first line anyone knows (an OpenSSH private
    key), and the attacker's copy of that line, to decrypt with."""
    users_key = tmp_path / "home" / "id_ed25519"
    users_key.parent.mkdir(mode=0o700)
    users_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    users_key.chmod(0o600)
    known = tmp_path / "known"
    known.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    known.chmod(0o600)
    return users_key, known


@pytest.mark.parametrize("way", ["the-files-own-link", "dotdot-after-a-link"])
def test_a_passphrase_file_reached_through_the_users_link_into_a_folder_others_can_write_in_is_never_used(
    tmp_path: Path, way: str
) -> None:
    """SECURITY.md: a secret file is refused when its name goes through a folder others can
    write in, "as given and with its links resolved". The user's own link into a shared folder
    (a dotfile manager's link to a team folder) is followed by the kernel, but the folder walk
    resolves only the links of the name's folder: `cfg/pass -> shared/pass` walks `cfg` alone,
    and `cfg/team/../pass` (team -> shared/sub) is `cfg/pass` to os.path.abspath while the
    kernel opens shared/pass. The attacker, who can write in `shared`, puts a symlink there to
    the user's OpenSSH key: on main the output is sealed (exit 0) under its known first line.
    (Resolving the whole name with realpath is not enough: it ends in the user's folder.)"""
    users_key, known = _a_file_whose_first_line_is_known(tmp_path)
    shared = tmp_path / "shared"  # a folder others can write in (not sticky)
    shared.mkdir()
    (shared / "sub").mkdir(mode=0o700)
    shared.chmod(0o777)
    config = tmp_path / "cfg"  # the user's own folder
    config.mkdir(mode=0o700)
    if way == "the-files-own-link":
        (config / "pass").symlink_to(shared / "pass")
        given = config / "pass"
    else:
        (config / "team").symlink_to(shared / "sub")
        given = Path(f"{config}/team/../pass")
    (shared / "pass").symlink_to(users_key)  # the attacker's symlink, where the user's file was
    _never_opened_with(known, _sealed_with_passphrase_file(given, tmp_path), tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root reads another user's 0600 file")
def test_a_passphrase_file_another_user_left_in_a_sticky_folder_is_never_used_by_root(tmp_path: Path) -> None:
    """SECURITY.md: "A file another user owns is used, in that user's folders (root with a
    user's key under `sudo`)". A sticky folder (/tmp) is root's, not that user's: anyone can
    take a name there first, and the sticky bit then keeps root from replacing it. Root's
    `--passphrase-file /tmp/NAME` (or -k) of a name it meant to create finds the attacker's
    file, mode 0600, owned by her: on main it is used (exit 0) and her passphrase decrypts the
    output. ssh's StrictModes has no sticky exception and wants the file the user's or root's."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    planted = sticky / "pass"
    planted.write_text("the attacker's passphrase, long enough\n")
    planted.chmod(0o600)
    os.chown(planted, 65534, 65534)  # nobody's: the attacker's
    attacker_copy = tmp_path / "copy"
    attacker_copy.write_text(planted.read_text())
    attacker_copy.chmod(0o600)
    _never_opened_with(attacker_copy, _sealed_with_passphrase_file(planted, tmp_path), tmp_path)


def test_a_passphrase_file_opened_through_a_link_swapped_before_the_folder_walk_is_never_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's link `cfg/team -> shared/sub` into a folder others can write in is refused
    when nothing moves (the walk resolves `cfg/team` and finds `shared`). But the walk runs
    after the open, by name: at the open `shared/sub` is the attacker's link to her folder
    whose `pass` links to the user's OpenSSH key; at the walk (the swap made deterministic: just
    before it) it is a link to the user's own folder, and `shared` was never seen: the output
    was sealed (exit 0) under the key's known first line. Now the walk is the open (each folder
    opened from the one before, ``_open_secret``): the swap, made just before its verdict,
    changes nothing it looked at."""
    import gcmstream.cli

    users_key, known = _a_file_whose_first_line_is_known(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    evil = shared / "evil"  # the attacker's folder
    evil.mkdir()
    (evil / "pass").symlink_to(users_key)
    config = tmp_path / "cfg"
    config.mkdir(mode=0o700)
    (config / "team").symlink_to(shared / "sub")  # the user's link
    (shared / "sub").symlink_to(evil)  # the attacker's, at the open
    verdict = gcmstream.cli._refuse_replaceable
    walked: list[str] = []

    def racing(path: str, *args: Any) -> None:
        walked.append(path)
        (shared / "sub").unlink()  # the attacker's, before the verdict: the user's own folder
        (shared / "sub").symlink_to(users_key.parent)
        verdict(path, *args)

    monkeypatch.setattr(gcmstream.cli, "_refuse_replaceable", racing)
    given = config / "team" / "pass"
    sealed = _sealed_with_passphrase_file(given, tmp_path)
    assert walked == [str(given)]  # the race was run
    monkeypatch.undo()
    _never_opened_with(known, sealed, tmp_path)


def test_this_processs_descriptors_are_read_and_links_through_proc_are_walked(tmp_path: Path) -> None:
    """A secret file given as one of the command's own descriptors (``<(...)``, ``/dev/fd/3
    3<K``, ``/dev/stdin <K``: a link in /proc as the last name) is opened by the kernel and
    used. Any other link through /proc is walked like any link: the first version of the walk
    let the kernel resolve everything below /proc, so the user's own link through
    ``/proc/self/root`` into a folder others can write in was never looked at (found while
    answering rev12's brief)."""
    from ..test_cli import TIMEOUT, env

    key, plain = tmp_path / "k", tmp_path / "plain"
    assert run_cli("keygen", "-o", key).status == 0
    plain.write_bytes(b"secret data")
    program = f"{sys.executable} -m gcmstream encrypt -o {tmp_path / 'out'}"
    for given in (f"<(cat {key})", f"/dev/fd/3 3<{key}", f"/dev/stdin <{key}"):
        run = subprocess.run(
            ["bash", "-c", f"{program} -k {given} {plain}"], capture_output=True, env=env(), timeout=TIMEOUT
        )
        assert run.returncode == 0, (given, run.stderr)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    planted = shared / "k"
    planted.write_bytes(key.read_bytes())
    planted.chmod(0o600)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "k").symlink_to(f"/proc/self/root{planted}")  # the user's own link
    for through in (private / "k", Path(f"/proc/self/root{planted}")):
        result = run_cli("encrypt", "-k", through, "-o", tmp_path / "out2", plain)
        assert result.status == 2 and "could be replaced by other users" in result.stderr, result.stderr
        assert f"they can write in {shared} (mode 0777)" in result.stderr, result.stderr


# -- review of the path walk (rev12): merge fix5 walks the name one folder at a time
# (_open_secret); below /proc's device the kernel resolves the rest, /proc found by its st_dev


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="a private mount namespace needs root"
)
def test_a_passphrase_file_in_a_folder_others_can_write_in_is_never_used_where_proc_is_no_procfs(
    tmp_path: Path,
) -> None:
    """``_open_secret`` let the kernel open a link as soon as its folder had the st_dev of
    /proc, taking /proc to be procfs. In a chroot where procfs is not mounted, /proc is an empty
    folder on the chroot's own filesystem: every folder there had its st_dev, so links were
    followed unseen. Made here as in such a chroot: an empty folder of the test's filesystem
    bound on /proc in a private mount namespace. Two attacks: the rev10 one (the attacker's
    link in a 0777 folder to the user's OpenSSH key, used on fix5), and the user's own link
    from a private folder to that planted link (used on fix6, where only a last-name link in
    "/proc" was the kernel's). /proc is now procfs only if its ``self`` names the process."""
    users_key, known = _a_file_whose_first_line_is_known(tmp_path)
    shared = tmp_path / "shared"  # a folder others can write in (not sticky)
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "pass").symlink_to(users_key)  # the attacker's
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "pass").symlink_to(shared / "pass")  # the user's own
    empty = tmp_path / "proc"  # a chroot's /proc, procfs not mounted: a folder of its filesystem
    empty.mkdir()
    plain, out = tmp_path / "plain", tmp_path / "out"
    plain.write_bytes(b"secret data")
    source = str(Path(gcmstream.__file__).resolve().parent.parent)
    command = 'mount --make-rprivate / && mount --bind "$1" /proc && shift && exec "$@"'
    namespace = ["unshare", "--mount", "sh", "-c", command, "sh", str(empty)]
    program = [sys.executable, "-m", "gcmstream", "encrypt", "--work-factor", "14", "-o", str(out)]
    for given in (shared / "pass", private / "pass"):
        run = subprocess.run(
            [*namespace, *program, str(plain), "--passphrase-file", str(given)],
            env={**os.environ, "PYTHONPATH": source},
            capture_output=True,
            timeout=120,
        )
        if b"mount" in run.stderr and run.returncode not in (0, 2):
            pytest.skip(f"no private mount namespace here: {run.stderr[-200:]!r}")
        assert run.returncode == 2 and b"could be replaced by other users" in run.stderr, (given, run.stderr)


def test_what_another_user_could_have_put_at_the_name_is_refused_unopened(tmp_path: Path) -> None:
    """rev12's LOW findings. A FIFO at a secret file's name in a folder others can write in
    hung the command in ``open`` before any verdict (``timeout 5``: exit 124): the verdict now
    comes before the open. A hard link to the user's key made by another user in a sticky
    folder (where ``fs.protected_hardlinks`` is 0) was used: a file with other names in a
    sticky folder is refused. ``-k ""`` and a folder given as the key are plain errors."""
    from ..test_cli import env

    key, plain = tmp_path / "k", tmp_path / "plain"
    assert run_cli("keygen", "-o", key).status == 0
    plain.write_bytes(b"secret data")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    os.mkfifo(shared / "pass", 0o600)
    run = subprocess.run(
        [sys.executable, "-m", "gcmstream", "encrypt", "--passphrase-file", str(shared / "pass"), str(plain)],
        capture_output=True,
        env=env(),
        timeout=30,  # (it hung in open for ever)
    )
    assert run.returncode == 2 and b"could be replaced by other users" in run.stderr, run.stderr
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    os.link(key, sticky / "k")
    result = run_cli("encrypt", "-k", sticky / "k", "-o", tmp_path / "out", plain)
    assert result.status == 2 and "has other names" in result.stderr, result.stderr
    (sticky / "k").unlink()
    for given, said in (("", "No such file or directory"), (str(tmp_path), "Is a directory")):
        result = run_cli("encrypt", "-k", given, "-o", tmp_path / "out", plain)
        assert result.status == 2 and said in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "internal error" not in result.stderr


# -- review of the walk, last round (rev13): merge 70420c8 judges the last name's lstat
# (``entry``) before opening it


@pytest.mark.parametrize("given", ["/", ".", "./", "//"])
def test_a_secret_file_name_that_is_only_folders_is_a_plain_error(given: str, tmp_path: Path) -> None:
    """rev12 ran ``-k /`` (exit 2, "Is a directory"). Since 70420c8 the walk reaches the end of
    a name made only of "/" and "." without looking at a last name, and ``_judge_opened`` is
    called with ``entry`` unset: every reader of a secret file (-k, --passphrase-file, -i,
    --format tink -k) says "internal error: UnboundLocalError" and exits 1."""
    plain, sealed = tmp_path / "plain", tmp_path / "sealed"
    plain.write_bytes(b"secret data")
    sealed.write_bytes(b"not read")
    for args in (
        ("encrypt", "-k", given, "-o", tmp_path / "out", plain),
        ("encrypt", "--passphrase-file", given, "-o", tmp_path / "out", plain),
        ("decrypt", "-i", given, "-o", tmp_path / "out", sealed),
        ("encrypt", "--format", "tink", "-k", given, "-o", tmp_path / "out", plain),
    ):
        result = run_cli(*args)
        assert "internal error" not in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.status == 2, (args, result.status, result.stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="reading another user's 0600 file needs root")
def test_a_secret_file_in_a_folder_another_user_made_first_in_a_sticky_folder_is_never_used_by_root(
    tmp_path: Path,
) -> None:
    """rev11's MEDIUM-2 one folder down. Another user's file directly in a sticky folder is
    refused ("anyone could have made it there first"), but a folder she made first there
    (``mkdir /tmp/job``, hers, 0755) holding her 0600 key passes: the file's owner owns the
    last folder, and a folder owned by the file's owner is trusted. Root's ``-k /tmp/job/k.key``
    or ``--passphrase-file /tmp/job/pass`` then encrypts under her secret (exit 0, run)."""
    attacker = 65534
    plain, out = tmp_path / "plain", tmp_path / "out"
    plain.write_bytes(b"secret data")
    sticky = tmp_path / "tmp"  # a /tmp
    sticky.mkdir()
    sticky.chmod(0o1777)
    job = sticky / "job"  # hers, made before the user's job ran
    job.mkdir(mode=0o755)
    key = job / "k.key"
    assert run_cli("keygen", "-o", key).status == 0
    passphrase = job / "pass"
    passphrase.write_bytes(b"her passphrase, known to her\n")
    passphrase.chmod(0o600)
    for made in (job, key, passphrase):
        os.chown(made, attacker, attacker)
    for args in (("-k", key), ("--passphrase-file", passphrase, "--work-factor", "14")):
        result = run_cli("encrypt", *args, "-o", out, plain)
        assert result.status == 2 and not out.exists(), (args, result.stderr)
