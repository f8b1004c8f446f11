"""Where an output goes (gcmstream._output): the one rule every writer of the package follows
(key files, identity files, the file pipelines, the file engine), tested with a symbolic link
owned by another user (nobody, uid 65534) and with paths swapped between the decision and the
write. The CLI's side, through real subprocesses, is tests/test_cli_output_safety.py."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gcmstream import Identity, SameFileError, generate_key, pipeline, write_identity_file, write_key_file
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
    with pytest.raises(PermissionError, match=r"symbolic link owned by another user \(uid 65534\)") as info:
        WRITERS[writer](plain, planted)
    assert (info.value.errno, info.value.filename) == (errno.EPERM, str(planted))
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

    def deciding_then_swapped(path: os.PathLike[str] | str, *, follow_last: bool = True) -> object:
        decision = decide(path, follow_last=follow_last)
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


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc descriptor links")


@needs_proc
@needs_root
def test_a_proc_link_to_a_deleted_file_is_written_into_never_followed_by_its_text(tmp_path: Path) -> None:
    """/dev/stdout -> /proc/self/fd/1 when stdout is a deleted file (pytest's capture): the
    output goes into that descriptor. Its text, "<path> (deleted)", names another user's file
    here: before the fix that file was replaced. Here the link is ours, in tmp_path."""
    plain = inputs(tmp_path)
    with tempfile.TemporaryFile(dir=tmp_path) as deleted:
        deleted.write(b"before:")
        deleted.flush()
        bait = Path(os.readlink(f"/proc/self/fd/{deleted.fileno()}"))
        assert bait.name.endswith(" (deleted)")
        bait.write_bytes(b"theirs")
        os.chown(bait, NOBODY, NOBODY)
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{deleted.fileno()}")
        WRITERS["encrypt_file"](plain, link)
        deleted.seek(0)
        written = deleted.read()
    assert written.startswith(b"before:") and len(written) > len(b"before:secret data")
    assert bait.read_bytes() == b"theirs" and bait.stat().st_uid == NOBODY
    assert link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cipher", "plain", "stdout", bait.name])


@needs_proc
@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "write_identity_file(force=True)"])
def test_a_secret_is_not_written_into_a_descriptor(tmp_path: Path, writer: str) -> None:
    """A key goes to a file it can give mode 0600, not into whatever a /proc link opens."""
    with tempfile.TemporaryFile(dir=tmp_path) as deleted:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{deleted.fileno()}")
        with pytest.raises(PermissionError, match="refusing to write a secret") as info:
            WRITERS[writer](tmp_path, link)
        assert info.value.filename == str(link)
        assert deleted.read() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]


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
    with pytest.raises(PermissionError, match="replaced while it was being opened") as raised:
        WRITERS[writer](plain, fifo)
    assert (raised.value.errno, raised.value.filename) == (errno.EPERM, str(fifo))
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


@needs_root
@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "write_identity_file(force=True)"])
def test_a_secret_is_never_written_into_or_over_a_device(tmp_path: Path, writer: str) -> None:
    """A character device of root's (a copy of /dev/null's numbers, in tmp_path): refused like a FIFO."""
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(PermissionError, match="refusing to write a secret into a FIFO"):
        WRITERS[writer](tmp_path, device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def _renameat2() -> Callable[[bytes, bytes], int]:
    """renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) through libc (Linux, glibc 2.28+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    exchange = libc.renameat2
    exchange.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return lambda a, b: int(exchange(-100, a, -100, b, 2))


@needs_root
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RENAME_EXCHANGE is Linux's")
def test_a_link_exchanged_while_it_is_checked_is_never_followed(tmp_path: Path) -> None:
    """Our link 'key' and their link 'evil' (to their bait) swap places in a loop, in a
    directory anyone may rename in (0777, not sticky), while we write through 'key'. Before
    the fix the owner was checked on one lookup and the text read by a second: the check saw
    our link and the text was theirs: the reviewer's writes lost within 13-1645 iterations;
    the old decision here lost in rounds 1846, 8215 and 9926 of three runs (this test, with
    the old _output.py), hence 20000 rounds or 4 s."""
    exchange = _renameat2()
    folder = theirs(tmp_path)
    shared = shared_directory(tmp_path, 0o777)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (shared / "key").symlink_to(private / "key")
    (shared / "evil").symlink_to(folder / "bait")
    os.lchown(shared / "evil", NOBODY, NOBODY)
    a, b = os.fsencode(shared / "key"), os.fsencode(shared / "evil")
    if exchange(a, b) != 0 or exchange(a, b) != 0:
        pytest.skip("renameat2 RENAME_EXCHANGE is not available here")
    pid = os.fork()
    if pid == 0:  # the attacker: exchange for at most 5 s
        try:
            os.chdir(shared)  # tmp_path's parents are root's 0700: reach 'shared' first
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                exchange(b"key", b"evil")
        finally:
            os._exit(0)
    theirs_number = folder.stat().st_ino
    try:
        deadline, rounds = time.monotonic() + 4, 0
        while rounds < 20000 and time.monotonic() < deadline:
            rounds += 1
            try:  # the decision alone, thousands of times a second: where the output would go
                destination = output_module.output_target(shared / "key")
            except PermissionError:  # 'evil' was at the name: refused
                continue
            went_to = os.fstat(destination.directory).st_ino
            destination.close()
            assert went_to != theirs_number, f"their directory chosen in round {rounds}"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    untouched(folder)


@needs_root
@pytest.mark.parametrize("writer", ["encrypt_file", "files.encrypt_path"])
def test_a_fifo_swapped_for_their_fifo_with_the_same_inode_number_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """ext4 hands a freed inode number to the next file at once: our FIFO replaced by theirs
    under the same number passed the device/inode/type check; the owner now tells them apart."""
    plain = inputs(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    number = fifo.stat().st_ino
    readers: list[int] = []

    def swap() -> None:
        for _ in range(200):
            fifo.unlink()
            os.mkfifo(fifo)
            if fifo.stat().st_ino == number:
                break
        os.chown(fifo, NOBODY, NOBODY)
        readers.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # "their" reader

    swapped = after_the_decision(monkeypatch, swap)
    try:
        with pytest.raises(PermissionError, match="replaced while it was being opened"):
            WRITERS[writer](plain, fifo)
        assert swapped == [True]
        if fifo.stat().st_ino != number:
            pytest.skip("this file system did not reuse the inode number")
        with contextlib.suppress(BlockingIOError):
            assert os.read(readers[0], 100) == b""
    finally:
        for fd in readers:
            os.close(fd)


@needs_root
@pytest.mark.parametrize("mode", [0o777, 0o1777], ids=["world-writable", "sticky-like-tmp"])
@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "write_key_file", "encrypt_file"])
def test_a_foreign_link_among_the_directories_is_refused(tmp_path: Path, writer: str, mode: int) -> None:
    """shared/work -> their directory, planted by them: shared/work/out must not land in it.
    Before the fix the directories along the path were resolved by the kernel, links and all."""
    plain = inputs(tmp_path)
    folder = theirs(tmp_path)
    shared = shared_directory(tmp_path, mode)
    (shared / "work").symlink_to(folder)
    os.lchown(shared / "work", NOBODY, NOBODY)
    write = (
        (lambda _, dst: write_key_file(dst, generate_key()))
        if writer == "write_key_file"
        else WRITERS[writer]
    )
    with pytest.raises(PermissionError, match="symbolic link owned by another user") as info:
        write(plain, shared / "work" / "bait")
    assert info.value.filename == str(shared / "work" / "bait")
    untouched(folder)


def test_a_link_of_ours_among_the_directories_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to("real")
    (tmp_path / "up").symlink_to(tmp_path / "via" / ".." / "real")
    write_key_file(tmp_path / "up" / "key", generate_key(), force=True)
    write_key_file(tmp_path / "via" / "key2", generate_key())
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["key", "key2"]


def test_the_temporary_file_stays_0600_until_it_is_whole(tmp_path: Path) -> None:
    """Another user who opened the temporary file while it was readable kept reading: a failed
    decrypt's plaintext with --mode 644. Now it is 0600 until the rename gives it the mode."""
    out = tmp_path / "out"

    async def write() -> None:
        async with pipeline.atomic_output(out, mode=0o644) as file:
            await file.write(b"data")
            (temp,) = (
                n for n in await anyio.to_thread.run_sync(os.listdir, tmp_path) if n.endswith(".partial")
            )
            assert stat.S_IMODE(os.stat(tmp_path / temp).st_mode) == 0o600

    anyio.run(write)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644 and out.read_bytes() == b"data"


def test_a_name_as_long_as_the_file_system_allows_can_be_replaced(tmp_path: Path) -> None:
    """The temporary name no longer grows from the destination's: 255 bytes work with force."""
    out = tmp_path / ("k" * 255)
    write_key_file(out, generate_key())
    write_key_file(out, generate_key(), force=True)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


@needs_root
def test_a_directory_at_the_output_is_named_a_directory(tmp_path: Path) -> None:
    folder = theirs(tmp_path)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        pipeline.encrypt_file(inputs(tmp_path), folder, key=KEY)


@pytest.mark.parametrize(("code", "raised"), [(errno.EIO, True), (errno.EINVAL, False)])
def test_a_directory_fsync_failure_is_raised_unless_it_cannot_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, raised: bool
) -> None:
    """EIO from the directory's fsync means the rename may not survive a crash: said, not
    swallowed. EINVAL (a file system that cannot sync directories) is not a failure."""
    fsync = os.fsync

    def failing(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(code, os.strerror(code))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    if raised:
        with pytest.raises(OSError, match=os.strerror(code)):
            write_key_file(tmp_path / "key", generate_key())
    else:
        write_key_file(tmp_path / "key", generate_key())


@needs_root
def test_without_o_path_the_same_rule_holds_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the platform has no O_PATH (macOS) entries are looked at by name: same answers."""
    monkeypatch.setattr(output_module, "_O_PATH", 0)
    folder = theirs(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to("real")
    write_key_file(tmp_path / "via" / "key", generate_key(), force=True)
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["key"]
    (tmp_path / "work").symlink_to(folder)
    os.lchown(tmp_path / "work", NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="symbolic link owned by another user"):
        write_key_file(tmp_path / "work" / "bait", generate_key(), force=True)
    untouched(folder)


def test_an_empty_output_path_is_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As open("") says: no such file (not "a directory": the walk would take "" for the cwd)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as raised:
        output_module.output_target("")
    assert (raised.value.errno, raised.value.strerror, raised.value.filename) == (
        errno.ENOENT,
        os.strerror(errno.ENOENT),
        "",
    )
    with pytest.raises(FileNotFoundError):
        write_key_file("", generate_key(), force=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["here/", "here/.", "here/..", ".", ".."])
def test_an_output_path_naming_a_directory_is_refused_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A path ending in "/", "." or ".." names a directory: refused as one by every writer
    before anything is created (never a file named "" or ".")."""
    (tmp_path / "here").mkdir()
    source = inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(IsADirectoryError, match="the output is a directory") as raised:
        output_module.output_target(path)
    assert raised.value.filename == path
    with pytest.raises(IsADirectoryError):
        write_key_file(path, generate_key(), force=True)
    with pytest.raises(IsADirectoryError):
        write_key_file(path, generate_key())
    with pytest.raises(IsADirectoryError):
        pipeline.encrypt_file(source, path, key=KEY)  # (a Path would drop the "/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "here", "plain"]
    assert list((tmp_path / "here").iterdir()) == []


@contextlib.contextmanager
def child_writing_to(target: int) -> Iterator[str]:
    """/proc/PID/fd/1 of a child process whose stdout is ``target``: a /proc link to another
    process's descriptor (not this process's, which is written into as inherited)."""
    child = subprocess.Popen(["sleep", "60"], stdout=target)
    try:
        yield f"/proc/{child.pid}/fd/1"
    finally:
        child.kill()
        child.wait()


@needs_proc
def test_another_process_s_pipe_is_written_into_through_its_proc_link(tmp_path: Path) -> None:
    """The kernel opens another process's /proc link (its text "pipe:[N]" is no path): the
    pipe, ours, is written into in place, as it was when checked."""
    plain = inputs(tmp_path)
    read_end, write_end = os.pipe()
    with child_writing_to(write_end) as link:
        os.close(write_end)
        destination = output_module.output_target(link)
        try:
            assert destination.kernel_link and destination.in_place and destination.inherited is None
            assert destination.found is not None and stat.S_ISFIFO(destination.found.st_mode)
            assert destination.directory >= 0 and destination.name == "1"
        finally:
            destination.close()
        pipeline.encrypt_file(plain, link, key=KEY)
        with os.fdopen(read_end, "rb") as pipe:
            os.set_blocking(pipe.fileno(), False)
            written = pipe.read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain"]
    (tmp_path / "got").write_bytes(written)
    pipeline.decrypt_file(tmp_path / "got", tmp_path / "back", key=KEY)
    assert (tmp_path / "back").read_bytes() == b"secret data"


@needs_proc
def test_another_process_s_regular_file_is_not_written_through_its_proc_link(tmp_path: Path) -> None:
    """Another process's file is not ours to write into (nor its name, which may be gone)."""
    log = tmp_path / "log"
    log.write_bytes(b"theirs")
    with log.open("ab") as file, child_writing_to(file.fileno()) as link:
        with pytest.raises(
            PermissionError, match="regular file through another process's /proc link"
        ) as raised:
            output_module.output_target(link)
        assert (raised.value.errno, raised.value.filename) == (errno.EPERM, link)
        with pytest.raises(PermissionError):
            pipeline.encrypt_file(inputs(tmp_path), link, key=KEY)
    assert log.read_bytes() == b"theirs"


@needs_proc
def test_a_directory_behind_a_proc_link_is_refused_as_one(tmp_path: Path) -> None:
    """Whether the descriptor is this process's (as inherited) or another's (followed)."""
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with child_writing_to(folder) as theirs_link:
            for link in (f"/proc/self/fd/{folder}", f"/dev/fd/{folder}", theirs_link):
                with pytest.raises(IsADirectoryError, match="the output is a directory") as raised:
                    output_module.output_target(link)
                assert raised.value.filename == link
    finally:
        os.close(folder)
    assert list(tmp_path.iterdir()) == []


def test_an_output_written_in_place_is_opened_write_only_and_close_on_exec(tmp_path: Path) -> None:
    """A FIFO (or device) written into: opened O_WRONLY (a read-write open of a FIFO would
    never wait for its reader) and O_CLOEXEC (a child process must not inherit the output)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        output = output_module.open_output(fifo)
        try:
            assert output.in_place
            flags = fcntl.fcntl(output.fileno(), fcntl.F_GETFL)
            assert flags & os.O_ACCMODE == os.O_WRONLY
            assert fcntl.fcntl(output.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC
            output.file.write(b"data")
            assert os.read(reader, 100) == b"data"  # unbuffered: a pipe's reader gets it now
            output.commit()
        except BaseException:
            output.discard()
            raise
    finally:
        os.close(reader)


@needs_proc
def test_a_path_on_through_a_proc_link_names_the_callers_path(tmp_path: Path) -> None:
    """/proc/self/fd/N/x where N is a file: the kernel's ENOTDIR, said of the whole path."""
    with tempfile.TemporaryFile(dir=tmp_path) as file:
        path = f"/proc/self/fd/{file.fileno()}/x"
        with pytest.raises(NotADirectoryError) as raised:
            output_module.output_target(path)
    assert (raised.value.filename, raised.value.strerror) == (path, os.strerror(errno.ENOTDIR))


def test_without_proc_a_link_of_ours_is_still_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where /proc cannot be looked at, no link is taken for one of its links."""
    stat_of = os.stat

    def no_proc(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == "/proc":
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        return stat_of(path, *args, **kwargs)

    (tmp_path / "real").write_bytes(b"old")
    (tmp_path / "via").symlink_to("real")
    monkeypatch.setattr(os, "stat", no_proc)
    write_key_file(tmp_path / "via", generate_key(), force=True)
    monkeypatch.undo()
    assert (tmp_path / "via").is_symlink() and (tmp_path / "real").read_bytes().startswith(b"gcmstream-key")


@pytest.mark.parametrize("writer", ["encrypt_file", "files.encrypt_path"])
def test_a_fifo_removed_after_the_decision_is_not_found_under_the_callers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    plain = inputs(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    swapped = after_the_decision(monkeypatch, fifo.unlink)
    with pytest.raises(FileNotFoundError) as raised:
        WRITERS[writer](plain, fifo)
    assert swapped == [True]
    error = raised.value
    assert (error.errno, error.strerror) == (errno.ENOENT, os.strerror(errno.ENOENT))
    assert error.filename == str(fifo)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain"]


def test_an_entry_that_cannot_be_looked_at_is_named_by_the_callers_path(tmp_path: Path) -> None:
    path = tmp_path / ("x" * 300) / "out"  # ENAMETOOLONG at the entry, not at the end
    with pytest.raises(OSError, match="too long") as raised:
        write_key_file(path, generate_key(), force=True)
    assert (raised.value.errno, raised.value.filename) == (errno.ENAMETOOLONG, str(path))


@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "write_key_file", "encrypt_file"])
def test_a_file_along_the_path_is_not_a_directory_and_is_left_alone(tmp_path: Path, writer: str) -> None:
    """file/out: not a way to replace "file" itself."""
    plain = inputs(tmp_path)
    with pytest.raises(NotADirectoryError) as raised:
        (WRITERS.get(writer) or (lambda _, dst: write_key_file(dst, generate_key())))(plain, plain / "out")
    assert (raised.value.filename, raised.value.strerror) == (str(plain / "out"), os.strerror(errno.ENOTDIR))
    with pytest.raises(NotADirectoryError):  # "file/": a file named as a directory, as the kernel says
        output_module.output_target(f"{plain}/")
    assert plain.read_bytes() == b"secret data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain"]


def test_an_existing_file_is_replaced_where_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In its own directory, whatever the working directory is."""
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "key").write_bytes(b"old")
    monkeypatch.chdir(tmp_path / "elsewhere")
    write_key_file(tmp_path / "out" / "key", generate_key(), force=True)
    assert (tmp_path / "out" / "key").read_bytes().startswith(b"gcmstream-key")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def open_descriptors() -> list[str]:
    return sorted(os.listdir("/proc/self/fd"))


@needs_proc
def test_an_entry_whose_fstat_fails_is_closed_and_the_error_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fstat = os.fstat
    calls: list[int] = []

    def failing_once(fd: int) -> os.stat_result:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return fstat(fd)

    before = open_descriptors()
    monkeypatch.setattr(os, "fstat", failing_once)
    with pytest.raises(OSError, match=os.strerror(errno.EIO)):
        output_module.output_target(tmp_path / "out")
    monkeypatch.undo()
    assert len(calls) == 1
    assert open_descriptors() == before


def test_an_unreadable_directory_is_written_into_without_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory this user may write but not read (mode 0300) cannot be reopened for its
    fsync: the output is still written there, its directory left unsynced."""
    real_open = os.open

    def unreadable(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if path == "." and kwargs.get("dir_fd") is not None and not flags & os.O_WRONLY:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", unreadable)
    write_key_file(tmp_path / "key", generate_key(), force=True)
    write_key_file(tmp_path / "new", generate_key())
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key", "new"]


@pytest.mark.parametrize("replacement", ["directory", "link"])
def test_without_o_path_a_directory_swapped_after_its_look_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replacement: str
) -> None:
    """Without O_PATH a directory along the path is looked at by name, then opened by name:
    another directory put there in between is refused as a swap, a link is never followed."""
    monkeypatch.setattr(output_module, "_O_PATH", 0)
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    look = output_module._look

    def looked_then_swapped(directory: int, name: str) -> tuple[int, os.stat_result]:
        result = look(directory, name)
        if name == "out":
            (tmp_path / "out").rename(tmp_path / "moved")
            if replacement == "directory":
                (tmp_path / "out").mkdir()
            else:
                (tmp_path / "out").symlink_to("elsewhere")
        return result

    monkeypatch.setattr(output_module, "_look", looked_then_swapped)
    before = open_descriptors() if Path("/proc/self/fd").is_dir() else []
    path = tmp_path / "out" / "key"
    expected = PermissionError if replacement == "directory" else OSError
    with pytest.raises(expected) as raised:
        write_key_file(path, generate_key(), force=True)
    assert raised.value.filename == str(path)
    if replacement == "directory":
        assert raised.value.errno == errno.EPERM and "replaced while it was being opened" in str(raised.value)
    else:
        assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert (open_descriptors() if before else []) == before
    assert [list((tmp_path / d).iterdir()) for d in ("moved", "elsewhere")] == [[], []]


@needs_root
@pytest.mark.parametrize("owner", [NOBODY, 1], ids=["nobody", "uid-1"])
def test_only_this_user_and_root_are_trusted(tmp_path: Path, owner: int) -> None:
    """uid 1 (daemon) is another user like any other: its link and its FIFO are refused."""
    folder = theirs(tmp_path)
    (tmp_path / "link").symlink_to(folder / "bait")
    os.lchown(tmp_path / "link", owner, owner)
    os.mkfifo(tmp_path / "fifo")
    os.chown(tmp_path / "fifo", owner, owner)
    for name, what in (("link", "a symbolic link"), ("fifo", "a FIFO, socket or device")):
        path = tmp_path / name
        with pytest.raises(PermissionError) as raised:
            output_module.output_target(path)
        assert (raised.value.errno, raised.value.filename) == (errno.EPERM, str(path))
        assert (
            raised.value.strerror == f"refusing to write through {what} owned by another user (uid {owner})"
        )
    untouched(folder)


def test_a_directory_at_the_last_name_is_refused_under_the_callers_path(tmp_path: Path) -> None:
    (tmp_path / "here").mkdir()
    with pytest.raises(IsADirectoryError, match="the output is a directory") as raised:
        output_module.output_target(tmp_path / "here")
    assert raised.value.filename == str(tmp_path / "here")


def test_discarding_an_output_written_in_place_leaves_it(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        output = output_module.open_output(fifo)
        output.file.write(b"part")
        output.discard()
        assert output.destination.directory == -1 and output.file.closed
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]


@pytest.mark.parametrize("writer", ["write_key_file", "write_identity_file"])
def test_without_force_a_dangling_link_of_ours_is_an_existing_file(tmp_path: Path, writer: str) -> None:
    """Without force nothing at the name is replaced or written through, a link included:
    not even one of ours to a name that does not exist yet."""
    link = tmp_path / "key"
    link.symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError) as raised:
        if writer == "write_key_file":
            write_key_file(link, generate_key())
        else:
            write_identity_file(link, Identity.generate())
    error = raised.value
    assert (error.errno, error.strerror, error.filename) == (
        errno.EEXIST,
        f"{os.strerror(errno.EEXIST)} (force=True replaces it)",  # what to do about it
        str(link),
    )
    assert link.is_symlink() and not (tmp_path / "target").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


@needs_proc
def test_another_process_gone_after_the_decision_is_named_by_the_callers_path(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        with child_writing_to(write_end) as link:
            destination = output_module.output_target(link)
        with pytest.raises(FileNotFoundError) as raised:  # its /proc directory is gone
            output_module.open_output(destination)
        assert raised.value.filename == link
        assert destination.directory == -1  # closed by open_output's failure
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_file_created_at_the_name_after_the_decision_is_not_replaced_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing was there when decided, someone's file is by the creation: O_EXCL refuses it,
    said as the caller's path (not the name inside the directory)."""
    key = tmp_path / "key"

    def plant() -> None:
        key.write_bytes(b"theirs")

    swapped = after_the_decision(monkeypatch, plant)
    with pytest.raises(FileExistsError) as raised:
        write_key_file(key, generate_key())
    assert swapped == [True]
    error = raised.value
    assert (error.errno, error.strerror) == (
        errno.EEXIST,
        f"{os.strerror(errno.EEXIST)} (force=True replaces it)",
    )
    assert error.filename == str(key)
    assert key.read_bytes() == b"theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["key"]


@pytest.mark.parametrize("writer", ["write_key_file(force=True)", "encrypt_file", "files.encrypt_path"])
def test_a_directory_removed_after_the_decision_is_named_by_the_callers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """The temporary file cannot be created in a directory removed since: the error says the
    caller's path, not the temporary name."""
    plain = inputs(tmp_path)
    (tmp_path / "out").mkdir()
    path = tmp_path / "out" / "file"
    swapped = after_the_decision(monkeypatch, (tmp_path / "out").rmdir)
    with pytest.raises(FileNotFoundError) as raised:
        WRITERS[writer](plain, path)
    assert swapped == [True]
    assert (raised.value.errno, raised.value.filename) == (errno.ENOENT, str(path))
    assert raised.value.strerror == os.strerror(errno.ENOENT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cipher", "plain"]


@needs_proc
def test_a_descriptor_of_ours_is_written_into_where_proc_pid_fd_cannot_be_looked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether /proc/self/fd/N is this process's is unknown: the kernel opens it as any other
    process's link, and the pipe it reaches is written into all the same."""
    read_end, write_end = os.pipe()
    stat_of = os.stat
    ours = f"/proc/{os.getpid()}/fd"

    def unknown(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if path == ours:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return stat_of(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", unknown)
    try:
        destination = output_module.output_target(f"/proc/self/fd/{write_end}")
        try:
            assert destination.kernel_link and destination.inherited is None
        finally:
            destination.close()
    finally:
        monkeypatch.undo()
        os.close(read_end)
        os.close(write_end)


def test_an_output_is_0600_unless_a_mode_is_asked_for(tmp_path: Path) -> None:
    for name, mode in (("default", None), ("asked", 0o640)):
        output = (
            output_module.open_output(tmp_path / name)
            if mode is None
            else output_module.open_output(tmp_path / name, mode)
        )
        output.file.write(b"data")
        output.commit()
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == (mode or 0o600)


def test_a_destination_closes_its_directory_once(tmp_path: Path) -> None:
    destination = output_module.output_target(tmp_path / "new")
    directory = destination.directory
    destination.close()
    assert destination.directory == -1
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(directory)
    destination.close()  # again: nothing (not another descriptor)
    assert destination.directory == -1


def test_a_missing_directory_along_the_path_is_not_found(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "key"
    for write in (lambda: write_key_file(path, generate_key()), lambda: output_module.output_target(path)):
        with pytest.raises(FileNotFoundError) as raised:
            write()
        error = raised.value
        assert (error.errno, error.strerror, error.filename) == (
            errno.ENOENT,
            os.strerror(errno.ENOENT),
            str(path),
        )


def test_the_rename_is_made_durable_by_a_real_fsync_of_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory's fsync runs on a descriptor that can be synced (not an O_PATH one, whose
    EBADF would be taken for a file system that cannot sync directories)."""
    fsync = os.fsync
    directories: list[int] = []

    def spying(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            directories.append(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_PATH", 0))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", spying)
    write_key_file(tmp_path / "key", generate_key())
    write_key_file(tmp_path / "key", generate_key(), force=True)
    pipeline.encrypt_file(inputs(tmp_path), tmp_path / "out", key=KEY)
    assert len(directories) >= 3 and not any(directories)


def test_links_of_ours_are_followed_up_to_the_kernels_limit_of_40(tmp_path: Path) -> None:
    (tmp_path / "link0").symlink_to("key")
    for n in range(1, 41):
        (tmp_path / f"link{n}").symlink_to(f"link{n - 1}")
    write_key_file(tmp_path / "link39", generate_key(), force=True)  # 40 links
    assert (tmp_path / "key").read_bytes().startswith(b"gcmstream-key")
    with pytest.raises(OSError, match="Too many levels of symbolic links") as raised:
        output_module.output_target(tmp_path / "link40")  # 41
    assert (raised.value.errno, raised.value.filename) == (errno.ELOOP, str(tmp_path / "link40"))


def test_the_same_file_rule_leaves_a_bad_path_to_its_open_and_takes_no_bool(tmp_path: Path) -> None:
    """``encrypt_file(p, "a\\0b")`` raised "embedded null byte" from the same-file rule's own
    look at the path, before the key was taken: the rule now passes over a path it cannot look
    at, and the open says what is wrong, as for any file. ``True`` was taken for descriptor 1
    (stdout): a bool is refused, as a path or a descriptor is needed (a review)."""
    plain = tmp_path / "p.txt"
    plain.write_bytes(b"data")
    output_module.refuse_same_file("a\0b", [("input file", plain)])  # no error of its own
    output_module.refuse_same_file(plain, [("input file", "a\0b")])
    with pytest.raises(ValueError, match="embedded null byte") as raised:
        pipeline.encrypt_file(plain, "a\0b", key=generate_key())
    assert raised.traceback[-1].name != "_stat"  # the open's own error, not the rule's
    for output, read in ((True, plain), (plain, False)):
        with pytest.raises(TypeError, match="a path or a descriptor is needed"):
            output_module.refuse_same_file(output, [("input file", read)])  # (a bool is an int to mypy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.txt"]


def test_a_missing_file_read_does_not_hide_a_later_one_that_is_the_output(tmp_path: Path) -> None:
    """refuse_same_file (the one same-file rule) passes over a file read that does not exist
    (its own error comes when it is read) and goes on to check the others: mutation run of
    2026-12-05 (mop5), ``continue`` made ``break``, or the OSError raised."""
    output = tmp_path / "out"
    output.write_bytes(b"x")
    read = [("key file", tmp_path / "no such key"), ("input file", output)]
    with pytest.raises(SameFileError) as refused:
        output_module.refuse_same_file(output, read)
    assert (refused.value.what, refused.value.path) == ("input file", str(output))
    output_module.refuse_same_file(output, read[:1])  # nothing else read: no refusal, no OSError


def test_the_same_file_is_named_by_its_descriptor_or_by_its_path_as_text(tmp_path: Path) -> None:
    """SameFileError.path is the descriptor number a read file was given as, and a path given
    as a Path as text (mutation run of 2026-12-05, mop5: each way of naming it swapped)."""
    output = tmp_path / "out"
    output.write_bytes(b"x")
    with open(output, "rb") as reading:
        with pytest.raises(SameFileError) as by_descriptor:
            output_module.refuse_same_file(output, [("input file", reading.fileno())])
        assert by_descriptor.value.path == reading.fileno()
        # the output as a descriptor (stdout): fstat'ed, as the path (a Path) is stat'ed
        with pytest.raises(SameFileError) as by_path:
            output_module.refuse_same_file(reading.fileno(), [("input file", output)])
    assert by_path.value.path == str(output)
    assert isinstance(by_path.value.path, str)
