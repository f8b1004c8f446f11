"""Where an output goes (gcmstream._output): the one rule every writer of the package follows
(key files, identity files, the file pipelines, the file engine), tested with a symbolic link
owned by another user (nobody, uid 65534) and with paths swapped between the decision and the
write. The CLI's side, through real subprocesses, is tests/test_cli_output_safety.py."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from gcmstream import Identity, generate_key, pipeline, write_identity_file, write_key_file
from gcmstream import _output as output_module
from gcmstream.files import encrypt_path
from tests.helpers import KEY

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's link or FIFO needs root")

Writer = Callable[[Path, Path], None]


def _encrypt_file_async(src: Path, dst: Path) -> None:
    anyio.run(lambda: pipeline.encrypt_file_async(src, dst, key=KEY))


def _decrypt_file_async(src: Path, dst: Path) -> None:
    anyio.run(lambda: pipeline.decrypt_file_async(src, dst, key=KEY))


# Every library writer of a file, given (the input it reads, the output path).
WRITERS: dict[str, Writer] = {
    "write_key_file(force=True)": lambda _, dst: write_key_file(dst, generate_key(), force=True),
    "write_identity_file(force=True)": lambda _, dst: write_identity_file(
        dst, Identity.generate(), force=True
    ),
    "encrypt_file": lambda src, dst: pipeline.encrypt_file(src, dst, key=KEY),
    "decrypt_file": lambda src, dst: pipeline.decrypt_file(src.with_name("cipher"), dst, key=KEY),
    "encrypt_file_async": _encrypt_file_async,
    "decrypt_file_async": lambda src, dst: _decrypt_file_async(src.with_name("cipher"), dst),
    "files.encrypt_path": lambda src, dst: encrypt_path(src, dst, key=KEY),
}


def inputs(folder: Path) -> Path:
    """folder/plain and folder/cipher (its encryption), what the writers read."""
    plain = folder / "plain"
    plain.write_bytes(b"secret data")
    pipeline.encrypt_file(plain, folder / "cipher", key=KEY)
    return plain


def theirs(tmp_path: Path) -> Path:
    """A directory of another user holding their file 'bait' (mode 0666, as careless as can be)."""
    folder = tmp_path / "their"
    folder.mkdir()
    bait = folder / "bait"
    bait.write_bytes(b"theirs")
    bait.chmod(0o666)
    os.utime(bait, ns=(1_000_000_000, 1_000_000_000))  # an mtime any write would move
    os.chown(bait, NOBODY, NOBODY)
    os.chown(folder, NOBODY, NOBODY)
    return folder


def untouched(folder: Path) -> None:
    bait = folder / "bait"
    assert bait.read_bytes() == b"theirs"
    assert bait.stat().st_mtime_ns == 1_000_000_000
    assert bait.stat().st_uid == NOBODY
    assert sorted(p.name for p in folder.iterdir()) == ["bait"]  # no temporary file beside it


def shared_directory(tmp_path: Path, mode: int) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    return shared


@needs_root
@pytest.mark.parametrize("mode", [0o777, 0o1777], ids=["world-writable", "sticky-like-tmp"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_a_link_planted_by_another_user_is_refused_by_every_writer(
    tmp_path: Path, writer: str, mode: int
) -> None:
    """Before the fix, key and identity files with force=True resolved the link with realpath
    and renamed the new file over their bait."""
    plain = inputs(tmp_path)
    folder = theirs(tmp_path)
    shared = shared_directory(tmp_path, mode)
    planted = shared / "out"
    planted.symlink_to(folder / "bait")
    os.lchown(planted, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="symbolic link owned by another user") as info:
        WRITERS[writer](plain, planted)
    assert info.value.filename == str(planted)
    untouched(folder)
    assert sorted(p.name for p in shared.iterdir()) == ["out"]  # no temporary file left here
    assert planted.is_symlink() and os.lstat(planted).st_uid == NOBODY  # the link itself stays


@needs_root
@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "encrypt_file"])
def test_a_foreign_link_behind_one_of_ours_is_refused(tmp_path: Path, writer: str) -> None:
    """mine -> shared/out -> their/bait: the second hop is someone else's."""
    plain = inputs(tmp_path)
    folder = theirs(tmp_path)
    shared = shared_directory(tmp_path, 0o1777)
    (shared / "out").symlink_to(folder / "bait")
    os.lchown(shared / "out", NOBODY, NOBODY)
    (tmp_path / "mine").symlink_to(shared / "out")
    with pytest.raises(PermissionError, match="symbolic link owned by another user") as info:
        WRITERS[writer](plain, tmp_path / "mine")
    assert info.value.filename == str(tmp_path / "mine")
    untouched(folder)


@pytest.mark.parametrize(
    "writer", ["write_key_file(force=True)", "write_identity_file(force=True)", "encrypt_file"]
)
def test_a_link_of_ours_is_followed_and_its_target_replaced(tmp_path: Path, writer: str) -> None:
    plain = inputs(tmp_path)
    target = tmp_path / "target"
    target.write_bytes(b"old")
    target.chmod(0o644)
    (tmp_path / "link").symlink_to("target")  # relative, resolved from the link's directory
    WRITERS[writer](plain, tmp_path / "link")
    assert (tmp_path / "link").is_symlink()
    assert target.read_bytes() != b"old"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "link", "plain", "target"]


def after_the_decision(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> list[bool]:
    """Run ``swap`` right after output_target decides (the window a racing attacker has)."""
    decide = output_module.output_target
    swapped: list[bool] = []

    def deciding_then_swapped(path: os.PathLike[str] | str) -> object:
        decision = decide(path)
        swap()
        swapped.append(True)
        return decision

    monkeypatch.setattr(output_module, "output_target", deciding_then_swapped)
    return swapped


@needs_root
@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "encrypt_file", "files.encrypt_path"])
def test_a_directory_swapped_for_a_link_after_the_decision_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """out/ is moved away and replaced by a link to their directory between the decision and
    the write: the write goes on in the directory that was decided on (held open), never
    into theirs. Before the fix the temporary file and the rename went by path, into theirs."""
    plain = inputs(tmp_path)
    folder = theirs(tmp_path)
    decided = tmp_path / "out"
    decided.mkdir()
    (decided / "key").write_bytes(b"old")

    def swap() -> None:
        decided.rename(tmp_path / "moved")
        decided.symlink_to(folder)
        os.lchown(decided, NOBODY, NOBODY)

    swapped = after_the_decision(monkeypatch, swap)
    WRITERS[writer](plain, decided / "key")
    assert swapped == [True]
    untouched(folder)
    assert (tmp_path / "moved" / "key").read_bytes() != b"old"
    assert sorted(p.name for p in (tmp_path / "moved").iterdir()) == ["key"]


@needs_root
@pytest.mark.parametrize("writer", ["encrypt_file", "encrypt_file_async", "files.encrypt_path"])
def test_a_fifo_swapped_for_a_foreign_link_after_the_decision_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """Our FIFO is decided on (written in place), then replaced by their link before the
    open: O_NOFOLLOW on the directory's descriptor refuses it. Before the fix the open went by
    path and followed the link into their file."""
    plain = inputs(tmp_path)
    folder = theirs(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def swap() -> None:
        fifo.unlink()
        fifo.symlink_to(folder / "bait")
        os.lchown(fifo, NOBODY, NOBODY)

    swapped = after_the_decision(monkeypatch, swap)
    with pytest.raises(PermissionError, match="replaced while it was being opened") as info:
        WRITERS[writer](plain, fifo)
    assert swapped == [True]
    assert info.value.filename == str(fifo)
    untouched(folder)


@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "encrypt_file"])
def test_a_link_planted_at_the_name_after_the_decision_is_replaced_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """Nothing at the name when decided, a link there by the rename: the rename replaces the
    link itself (as rename(2) does), so nothing reaches what it points at."""
    plain = inputs(tmp_path)
    bait = tmp_path / "bait"
    bait.write_bytes(b"theirs")
    out = tmp_path / "out"
    swapped = after_the_decision(monkeypatch, lambda: out.symlink_to(bait))
    WRITERS[writer](plain, out)
    assert swapped == [True]
    assert bait.read_bytes() == b"theirs"
    assert not out.is_symlink() and out.read_bytes() != b"theirs"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc descriptor links")
@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "encrypt_file"])
def test_a_proc_link_to_a_deleted_file_is_not_replaced(tmp_path: Path, writer: str) -> None:
    """/dev/stdout -> /proc/self/fd/1 when stdout is a deleted file (pytest's capture): before
    the fix the output was renamed over the link itself (as root: /dev/stdout made a regular
    file for the whole machine). Here the link is ours, in tmp_path."""
    plain = inputs(tmp_path)
    with tempfile.TemporaryFile(dir=tmp_path) as deleted:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{deleted.fileno()}")
        with pytest.raises(FileNotFoundError, match="deleted file") as info:
            WRITERS[writer](plain, link)
        assert info.value.filename == str(link)
        assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain", "stdout"]


@pytest.mark.parametrize("writer", ["encrypt_file", "files.encrypt_path"])
def test_a_fifo_swapped_for_another_file_after_the_decision_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """No link this time: a regular file put where the checked FIFO was opens fine, and is
    refused because it is not the file that was checked."""
    plain = inputs(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def swap() -> None:
        fifo.unlink()
        fifo.write_bytes(b"someone's")

    swapped = after_the_decision(monkeypatch, swap)
    with pytest.raises(PermissionError, match="replaced while it was being opened"):
        WRITERS[writer](plain, fifo)
    assert swapped == [True]
    assert fifo.read_bytes() == b"someone's"


@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "write_identity_file(force=True)"])
def test_a_secret_is_never_written_into_or_over_a_fifo(tmp_path: Path, writer: str) -> None:
    """Before the fix the FIFO was renamed over (as root, ``keygen -o /dev/null --force``
    replaced /dev/null with a key file)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PermissionError, match="refusing to write a secret into a FIFO") as info:
        WRITERS[writer](tmp_path, fifo)
    assert info.value.filename == str(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
