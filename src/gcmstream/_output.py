"""Where an output file goes, and the blocking steps of writing it: the one rule every writer
of the package follows (``pipeline.atomic_output``, the file engine ``files``, the CLI's
``-o``, key files and identity files). The temporary file, the rename and the directory fsync
are ``_atomic``'s.

``output_target`` decides, once: it walks the caller's path entry by entry, opening each one
(every directory along the path and along a link's text, and the last name) once without
following it (``O_PATH | O_NOFOLLOW``) relative to the directory before; owner, type and link
text come from that descriptor, and a link is followed only when this user or root owns it.
Everything after works on the last directory's descriptor and the final name (``openat``,
``renameat``), so a path swapped during or after the decision cannot send the output
elsewhere: a link planted at the name is replaced by the rename (never written through), an
in-place open refuses a link (``O_NOFOLLOW``) and any file other than the one checked (device,
inode number, type and owner). What remains: a directory along the path that another user can
write may have its entries replaced by them (with files of their own, never with their links).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import AsyncIterator, Container, Iterable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, TypeAlias

from ._atomic import create_exclusive, discard_at, fsync_directory, replace_at, temporary_in
from .errors import SameFileError

if TYPE_CHECKING:
    import anyio

__all__ = (
    "Destination",
    "FileRead",
    "Output",
    "finished",
    "open_output",
    "output_target",
    "refuse_same_file",
    "write_secret_file",
)

StrPath: TypeAlias = str | os.PathLike[str]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # POSIX only, as the package is
# One entry of a path, opened without following it: its owner, type and (for a link) text are
# read from this one descriptor, so nothing can be swapped between the check and the use.
# O_PATH is Linux's (and FreeBSD's); elsewhere an entry is looked at by name (lstat, then
# readlink), two lookups a user who can rename in the directory may race.
_O_PATH: int = getattr(os, "O_PATH", 0)
_ENTRY = _O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLLOWED = (_O_PATH or os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC  # reached by the kernel: "/", "."
_LINK_LIMIT = 40  # the kernel's own limit on nested links


def _refuse(path: str, what: str, uid: int) -> PermissionError:
    message = f"refusing to write through {what} owned by another user (uid {uid})"
    return PermissionError(errno.EPERM, message, path)


def _swapped(path: str) -> PermissionError:
    message = "refusing to write: the output was replaced while it was being opened"
    return PermissionError(errno.EPERM, message, path)


@dataclass
class Destination:
    """Where an output goes: ``name`` in the open ``directory``, decided by ``output_target``.
    ``found`` is what was there (None: nothing, the file is created); ``kernel_link``: the
    name is a /proc link that only the kernel follows (``/proc/self/fd/1`` to a pipe);
    ``inherited``: it is this process's own descriptor (``/dev/stdout``), written into as
    inherited (appending if it appends). Owns ``directory`` until ``open_output`` takes it."""

    path: str
    directory: int
    name: str
    found: os.stat_result | None
    kernel_link: bool = False
    inherited: int | None = None

    @property
    def in_place(self) -> bool:
        """A FIFO, socket or device (of this user or root), or a descriptor of this process,
        is written into, not replaced."""
        if self.kernel_link:
            return True
        return self.found is not None and not stat.S_ISREG(self.found.st_mode)

    def close(self) -> None:
        if self.directory >= 0:
            os.close(self.directory)
            self.directory = -1


def output_target(
    path: StrPath, *, follow_last: bool = True, given: Container[int] | None = None
) -> Destination:
    """The one decision of where an output goes. Symbolic links are followed only when this
    user or root owns them, and a FIFO, socket or device is written into only when one of
    them owns it: a link or a FIFO someone else planted (in a shared directory, say) would
    put the output into their hands, so it raises PermissionError naming ``path``. A regular
    file is replaced, never written into, so its owner does not matter.

    The path is walked one entry at a time, as the kernel would, but each entry (a directory
    along the path or the last name, and every entry along a link's text) is opened once
    without following it (``O_PATH | O_NOFOLLOW``): its owner and type come from that
    descriptor, a link's text is read through it, and the next entry is looked up relative
    to it. A /proc link (``/dev/stdout`` ends in one) is never followed by its text. Without
    ``follow_last`` a link at the last name is the destination itself (``found`` says so).
    ``given``: the descriptors this process was given (None: any it has), the only ones a
    /proc/self/fd/N (/dev/fd/N, /dev/stdout) may name: any other is this process's own (the
    command line's signal wake-up pipe, say), no output, refused as not open (EBADF)."""
    caller = os.fspath(path)
    if not caller:
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), caller)
    directory = _open_entry("/" if caller.startswith("/") else ".", None, caller, _FOLLOWED)
    pending = caller.split("/")[::-1]  # a stack: the next entry is last
    links = 0
    try:
        while pending:
            name = pending.pop()
            last = not pending
            if name in ("", ".") and not last:  # "a//b", "./a", or a link's leading "/"
                continue
            if name in ("", ".", "..") and last:
                raise _is_a_directory(caller)
            step = _step(caller, directory, name, last=last, follow_last=follow_last, given=given)
            if isinstance(step, Destination):
                return step
            if isinstance(step, str):  # the text of a link we may follow
                links += 1
                if links > _LINK_LIMIT:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), caller)
                pending.extend(step.split("/")[::-1])
                if not step.startswith("/"):
                    continue
                step = _open_entry("/", None, caller, _FOLLOWED)
            os.close(directory)
            directory = step
        raise _is_a_directory(caller)  # not reached: the last entry returns or raises
    finally:
        os.close(directory)


# The kinds of output that can be "the same file" as one read: a regular file (replaced by the
# rename at the end: the input lost) and a FIFO or a block device (written in place: what is
# written is read back). Two nodes of one block device are one device (st_rdev), though their
# inodes differ. A character device (/dev/null, a terminal) and a socket are not: on Linux what
# is read from one and what is written to it are separate streams, so `-o /dev/null <
# /dev/null` and a socket as both stdin and stdout are fine. Limits (SECURITY.md, the command
# line): BSD and macOS reach a disk through a character device too (/dev/rdisk0), which this
# rule lets through; and a partition and its disk, or a loop device and its backing file, are
# one storage under two identities, never compared.
_SAME_FILE_KINDS = frozenset((stat.S_IFREG, stat.S_IFIFO, stat.S_IFBLK))

# A file read, for the rule: (what, its path or descriptor), or (what, its path, the descriptor
# it is read through or what it was when it was read, its stat): compared by that (its name
# may lead elsewhere by now), named by its path.
FileRead: TypeAlias = tuple[str, StrPath | int] | tuple[str, StrPath, int | os.stat_result]


def _stat(path: StrPath | int) -> os.stat_result:
    if isinstance(path, bool):  # not a descriptor: True would be stdout
        raise TypeError(f"a path or a descriptor is needed, not {path!r}")
    return os.fstat(path) if isinstance(path, int) else os.stat(path)


def _same(found: os.stat_result, written: os.stat_result) -> bool:
    if stat.S_ISBLK(found.st_mode) and stat.S_ISBLK(written.st_mode):
        return found.st_rdev == written.st_rdev
    return os.path.samestat(found, written)


def refuse_same_file(output: StrPath | int | os.stat_result | None, read: Iterable[FileRead]) -> None:
    """The one rule of "the output is a file read" (``files.encrypt_path``/``decrypt_path``,
    so every file function of ``pipeline``, and the command line): raise SameFileError when
    ``output`` (a path, followed as the write will follow it; a descriptor: stdout; or what
    is there, found already: None for nothing) is a regular file, a FIFO or a block device
    that is one of ``read`` (``what``: "input file", "key file", ...). Called on the paths
    before anything is read or written (the early message), then on what is open, once the
    output was decided (``open_output``) and again just before the rename (``Output.commit``),
    so a name made to lead to a file read meanwhile is caught too. A file that does not exist
    (yet) is no file read; a path that cannot be looked at is left to its open's error."""
    try:
        written = output if isinstance(output, os.stat_result | None) else _stat(output)
    except (OSError, ValueError):  # nothing there, or no path ("a\0b"): the open says which
        return
    if written is None or stat.S_IFMT(written.st_mode) not in _SAME_FILE_KINDS:
        return
    for what, name, *opened in read:
        try:
            seen = opened[0] if opened else name
            found = seen if isinstance(seen, os.stat_result) else _stat(seen)
        except (OSError, ValueError):
            continue  # (its own error, when it is read)
        if _same(found, written):
            raise SameFileError(what, name if isinstance(name, int) else os.fsdecode(name))


def _step(
    caller: str, directory: int, name: str, *, last: bool, follow_last: bool, given: Container[int] | None
) -> Destination | int | str:
    """What ``name`` in ``directory`` is: the destination, a directory to go on in (its new
    descriptor) or the text of a link to follow."""
    try:
        entry, found = _look(directory, name)
    except FileNotFoundError:
        if last:  # nothing there: the file is created
            return Destination(caller, _writable_directory(directory), name, None)
        raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), caller) from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, caller) from None
    try:
        if last and not follow_last:  # whatever it is
            return Destination(caller, _writable_directory(directory), name, found)
        if stat.S_ISLNK(found.st_mode):
            return _link(caller, directory, name, entry, found, last=last, given=given)
        if stat.S_ISDIR(found.st_mode) and not last:
            if entry < 0:
                return _open_looked_at(caller, directory, name, found)
            kept, entry = entry, -1
            return kept
        if not last:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), caller)
        _check_owner(caller, found)
        return Destination(caller, _writable_directory(directory), name, found)
    finally:
        if entry >= 0:
            os.close(entry)


def _link(
    caller: str,
    directory: int,
    name: str,
    entry: int,
    found: os.stat_result,
    *,
    last: bool,
    given: Container[int] | None,
) -> Destination | int | str:
    if found.st_uid not in _trusted():
        raise _refuse(caller, "a symbolic link", found.st_uid)
    if _in_proc(found):  # /proc/self: only the kernel follows it (and the kernel wrote it)
        return (
            _kernel_link(caller, directory, name, given)
            if last
            else _open_entry(name, directory, caller, _FOLLOWED)
        )
    if entry < 0:
        return os.readlink(name, dir_fd=directory)  # without O_PATH: by name again
    return os.readlink("", dir_fd=entry)  # the text of this link, not of whatever the name is now


def _look(directory: int, name: str) -> tuple[int, os.stat_result]:
    """(a descriptor of the entry, or -1 without O_PATH; what it is), not following it."""
    if not _O_PATH:
        return -1, os.stat(name, dir_fd=directory, follow_symlinks=False)
    entry = os.open(name, _ENTRY, dir_fd=directory)
    try:
        return entry, os.fstat(entry)
    except BaseException:
        os.close(entry)
        raise


def _open_looked_at(caller: str, directory: int, name: str, found: os.stat_result) -> int:
    """Without O_PATH: the directory ``found`` by name, opened without following a link put
    there since, and still the one looked at."""
    opened = _open_entry(name, directory, caller, _DIRECTORY | os.O_NOFOLLOW)
    now = os.fstat(opened)
    if (now.st_dev, now.st_ino) != (found.st_dev, found.st_ino):
        os.close(opened)
        raise _swapped(caller)
    return opened


def _open_entry(name: str, directory: int | None, caller: str, flags: int) -> int:
    try:
        if directory is None:
            return os.open(name, flags)
        return os.open(name, flags, dir_fd=directory)
    except OSError as exc:  # name the caller's path, not an entry along the way
        raise OSError(exc.errno, exc.strerror, caller) from None


def _writable_directory(directory: int) -> int:
    """A descriptor of the same directory that can also be fsynced (an O_PATH one cannot);
    where the directory cannot be read (mode 0300, say) it stays O_PATH and is not synced."""
    try:
        return os.open(".", _DIRECTORY, dir_fd=directory)
    except OSError:
        return os.dup(directory)


def _is_a_directory(caller: str) -> OSError:
    return OSError(errno.EISDIR, "refusing to write: the output is a directory", caller)


def _trusted() -> set[int]:
    return {os.geteuid(), 0}


def _check_owner(caller: str, found: os.stat_result) -> None:
    """A regular file is replaced, so its owner does not matter; anything else is written into."""
    if stat.S_ISDIR(found.st_mode):
        raise _is_a_directory(caller)
    if not stat.S_ISREG(found.st_mode) and found.st_uid not in _trusted():
        raise _refuse(caller, "a FIFO, socket or device", found.st_uid)


def _in_proc(found: os.stat_result) -> bool:
    """Whether ``found`` is in /proc, whose links the kernel writes and follows (never a user):
    /proc/self/fd/1 reads "pipe:[...]" or "/tmp/x (deleted)", a text no one may follow."""
    try:
        return found.st_dev == os.stat("/proc").st_dev
    except OSError:
        return False


def _own_descriptor(directory: int, name: str) -> int | None:
    """N when ``name`` in ``directory`` is this process's descriptor N: /proc/<pid>/fd/N, or
    a thread's view of the same table, /proc/<pid>/task/<tid>/fd/N (/proc/thread-self/fd/N
    leads there: another inode, which was taken for another process's, a hostile review)."""
    if not name.isdigit():
        return None
    pid = os.getpid()
    try:
        here = os.fstat(directory)
        threads = os.listdir(f"/proc/{pid}/task")
        tables = [f"/proc/{pid}/fd", *(f"/proc/{pid}/task/{tid}/fd" for tid in threads)]
    except OSError:
        return None
    for table in tables:
        with contextlib.suppress(OSError):
            ours = os.stat(table)
            if (here.st_dev, here.st_ino) == (ours.st_dev, ours.st_ino):
                return int(name)
    return None


def _kernel_link(caller: str, directory: int, name: str, given: Container[int] | None) -> Destination:
    """A /proc link at the end of the path: this process's own descriptor is written into as
    inherited (``>> log`` keeps appending), if it is one it was ``given``; another is opened
    by the kernel, following it, and must still be what ``found`` says."""
    inherited = _own_descriptor(directory, name)
    if inherited is not None and given is not None and inherited not in given:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF), caller)
    if inherited is not None:
        found = os.fstat(inherited)
        if stat.S_ISDIR(found.st_mode):
            raise _is_a_directory(caller)
        return Destination(caller, os.dup(directory), name, found, kernel_link=True, inherited=inherited)
    found = os.stat(name, dir_fd=directory)
    _check_owner(caller, found)
    if stat.S_ISREG(found.st_mode):  # another process's file: not ours to write into
        message = "refusing to write into a regular file through another process's /proc link"
        raise OSError(errno.EPERM, message, caller)
    return Destination(caller, os.dup(directory), name, found, kernel_link=True)


class Output:
    """An output being written (``file``): to a temporary file that ``commit`` renames over
    the destination's name, or in place. ``discard`` (also after a failed commit) leaves the
    destination as it was. ``read``: the files read, which the rename must not replace."""

    def __init__(
        self,
        destination: Destination,
        file: BinaryIO,
        temp: str | None,
        mode: int = 0o600,
        read: tuple[FileRead, ...] = (),
    ) -> None:
        self.destination = destination
        self.file = file
        self.temp = temp
        self.mode = mode
        self.read = read

    @property
    def in_place(self) -> bool:
        return self.temp is None

    def fileno(self) -> int:
        return self.file.fileno()

    def commit(self) -> None:
        try:
            if self.temp is not None:
                self.file.flush()
                # 0600 while being written (a failed output may hold a part of a secret);
                # the mode asked for only once it is whole
                os.fchmod(self.file.fileno(), self.mode)
                os.fsync(self.file.fileno())
                self.file.close()
                # what the rename replaces is the entry at the name now (a link itself, not
                # followed): a file read moved there meanwhile would be lost
                refuse_same_file(self._at_name(), self.read)
                replace_at(self.destination.directory, self.temp, self.destination.name)
                self.temp = None
            self.file.close()
        except BaseException:
            self.discard()
            raise
        self.destination.close()

    def _at_name(self) -> os.stat_result | None:
        try:
            return os.stat(self.destination.name, dir_fd=self.destination.directory, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def discard(self) -> None:
        try:
            self.file.close()
        finally:
            if self.temp is not None and self.destination.directory >= 0:
                discard_at(self.destination.directory, self.temp)
                self.temp = None
            self.destination.close()


def _open_in_place(destination: Destination) -> int:
    if destination.inherited is not None:  # this process's own descriptor, as inherited
        return os.dup(destination.inherited)
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
    try:
        if not destination.kernel_link:
            flags |= os.O_NOFOLLOW
        fd = os.open(destination.name, flags, dir_fd=destination.directory)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link put where the checked file was
            raise _swapped(destination.path) from None
        raise OSError(exc.errno, exc.strerror, destination.path) from None
    opened, found = os.fstat(fd), destination.found
    if found is None or _identity(opened) != _identity(found):
        os.close(fd)
        raise _swapped(destination.path)
    return fd


def _identity(found: os.stat_result) -> tuple[int, int, int, int, int]:
    """Which file this is: a freed inode number can come back at once for the next file (on
    ext4, say), so its type, device number and owner tell our FIFO from whatever took its
    place (another user's FIFO is theirs: the owner rule would have refused it)."""
    return found.st_dev, found.st_ino, stat.S_IFMT(found.st_mode), found.st_rdev, found.st_uid


def open_output(target: StrPath | Destination, mode: int = 0o600, *, read: Iterable[FileRead] = ()) -> Output:
    """The output for ``target`` (a path is decided by ``output_target`` first): a new
    temporary file beside the destination (0600 until ``commit`` gives it ``mode``), or the
    destination itself when it is written in place (opening a FIFO waits for its reader).
    Takes ownership of a Destination. What was found there must be none of the files
    ``read`` (``refuse_same_file``, checked again by ``commit`` before its rename)."""
    destination = target if isinstance(target, Destination) else output_target(target)
    read = tuple(read)
    try:
        refuse_same_file(destination.found, read)
        if destination.in_place:
            return Output(destination, open(_open_in_place(destination), "wb", buffering=0), None)
        try:
            fd, temp = temporary_in(destination.directory, 0o600, suffix=".partial")
        except OSError as exc:  # name the caller's path, not the temporary file
            raise OSError(exc.errno, exc.strerror, destination.path) from None
        try:
            return Output(destination, open(fd, "wb", buffering=0), temp, mode, read)
        except BaseException:
            os.close(fd)
            discard_at(destination.directory, temp)
            raise
    except BaseException:
        destination.close()
        raise


@asynccontextmanager
async def finished(output: Output) -> AsyncIterator[anyio.AsyncFile[bytes]]:
    """``output`` as an AsyncFile, committed if the block exits normally, else discarded (even
    when cancelled)."""
    import anyio  # here: the CLI's file commands and the synchronous engine load no event loop
    from anyio import to_thread

    try:
        yield anyio.wrap_file(output.file)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await to_thread.run_sync(output.discard)
        raise
    await to_thread.run_sync(output.commit)  # discards on failure


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# what a caller who ran the same lines twice (the README's) needs to know
_EXISTS = f"{os.strerror(errno.EEXIST)} (force=True replaces it)"


def write_secret_file(path: StrPath, data: bytes, *, force: bool = False) -> None:
    """Write ``data`` to ``path`` with mode 0600, as ``write_key_file`` does (identity files
    share it). Without ``force`` any entry at ``path`` (a link too) raises FileExistsError;
    with it, ``output_target``'s rule decides what is replaced, and a secret goes only to a
    regular file (never into a FIFO or device, where mode 0600 would mean nothing, nor
    replacing one: as root, /dev/null)."""
    if force:
        destination = output_target(path)
        if destination.in_place:
            destination.close()
            message = (
                "refusing to write a secret into a FIFO, socket, device or descriptor: it goes to a file"
            )
            raise OSError(errno.EPERM, message, destination.path)  # PermissionError
        output = open_output(destination, 0o600)
        try:
            _write_all(output.fileno(), data)
        except BaseException:
            output.discard()
            raise
        output.commit()
        return
    destination = output_target(path, follow_last=False)  # directories by the same rule
    try:
        if destination.found is not None:
            raise OSError(errno.EEXIST, _EXISTS, destination.path)
        try:
            fd = create_exclusive(destination.directory, destination.name, 0o600)
        except OSError as exc:
            strerror = _EXISTS if exc.errno == errno.EEXIST else exc.strerror
            raise OSError(exc.errno, strerror, destination.path) from None
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with suppress(OSError):
                os.unlink(destination.name, dir_fd=destination.directory)
            raise
        os.close(fd)
        fsync_directory(destination.directory)
    finally:
        destination.close()
