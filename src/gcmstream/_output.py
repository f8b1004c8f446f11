"""Where an output file goes, and the blocking steps of writing it: the one rule every writer
of the package follows (``pipeline.atomic_output``, the file engine ``files``, the CLI's
``-o``, key files and identity files). The temporary file, the rename and the directory fsync
are ``_atomic``'s.

``output_target`` decides, once: it opens the directory of the caller's path, then walks the
last component's chain of symbolic links entry by entry (``lstat``/``readlink`` relative to
the directory's descriptor), following a link only when this user or root owns it. Everything
after works on that descriptor and the final name (``openat``, ``renameat``), so a path swapped
after the decision cannot send the output elsewhere: a link planted at the name is replaced by
the rename (never written through), an in-place open refuses a link (``O_NOFOLLOW``) and any
file other than the one checked. What remains: the directories along the path and along a
link's text (not the last component) are resolved by the kernel once, when opened, without the
owner rule.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from typing import BinaryIO, TypeAlias

import anyio
from anyio import to_thread

from ._atomic import create_exclusive, discard_at, fsync_directory, replace_at, temporary_in

__all__ = ("Destination", "Output", "finished", "open_output", "output_target", "write_secret_file")

StrPath: TypeAlias = str | os.PathLike[str]

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # POSIX only, as the package is
_LINK_LIMIT = 40  # the kernel's own limit on nested links


def _refuse(path: str, what: str, uid: int) -> PermissionError:
    message = f"refusing to write through {what} owned by another user (uid {uid})"
    return PermissionError(errno.EPERM, message, path)


def _swapped(path: str) -> PermissionError:
    message = "refusing to write: the output was replaced while it was being opened"
    return PermissionError(errno.EPERM, message, path)


def _open_directory(path: str, relative_to: int | None, caller: str) -> int:
    try:
        if relative_to is None:
            return os.open(path, _DIRECTORY)
        return os.open(path, _DIRECTORY, dir_fd=relative_to)
    except OSError as exc:  # name the caller's path, not a directory along the way
        raise OSError(exc.errno, exc.strerror, caller) from None


@dataclass
class Destination:
    """Where an output goes: ``name`` in the open ``directory``, decided by ``output_target``.
    ``found`` is what was there (None: nothing, the file is created); ``kernel_link``: the
    name is a link only the kernel can follow (``/proc/self/fd/1`` to a pipe). Owns
    ``directory`` until ``open_output`` takes it."""

    path: str
    directory: int
    name: str
    found: os.stat_result | None
    kernel_link: bool = False

    @property
    def in_place(self) -> bool:
        """A FIFO, socket or device (of this user or root) is written into, not replaced."""
        return self.found is not None and not stat.S_ISREG(self.found.st_mode)

    def close(self) -> None:
        if self.directory >= 0:
            os.close(self.directory)
            self.directory = -1


def output_target(path: StrPath) -> Destination:
    """The one decision of where an output goes. Symbolic links are followed only when this
    user or root owns them, and a FIFO, socket or device is written into only when one of
    them owns it: a link or a FIFO someone else planted (in a shared directory, say) would
    put the output into their hands, so it raises PermissionError naming ``path``. A regular
    file is replaced, never written into, so its owner does not matter."""
    caller = os.fspath(path)
    parent, name = os.path.split(caller)
    directory = _open_directory(parent or ".", None, caller)
    try:
        for _ in range(_LINK_LIMIT):
            step = _step(caller, directory, name)
            if isinstance(step, Destination):
                return step
            os.close(directory)
            directory, name = step
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), caller)
    except BaseException:
        os.close(directory)
        raise


def _step(caller: str, directory: int, name: str) -> Destination | tuple[int, str]:
    """What ``name`` in ``directory`` is: the destination, or (directory, name) its link
    leads to, opened here."""
    if name in ("", ".", ".."):
        raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), caller)
    try:
        found = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return Destination(caller, directory, name, None)
    if not stat.S_ISLNK(found.st_mode):
        _check_owner(caller, found)
        return Destination(caller, directory, name, found)
    if found.st_uid not in _trusted():
        raise _refuse(caller, "a symbolic link", found.st_uid)
    text = os.readlink(name, dir_fd=directory)
    if not _exists(directory, text) and _in_proc(directory):
        # /dev/stdout -> /proc/self/fd/1 -> "pipe:[...]": only the kernel can follow it. Only
        # in /proc: elsewhere a dangling link (of ours) is followed to where its text points,
        # and the file is created there.
        return _kernel_link(caller, directory, name)
    link_parent, link_name = os.path.split(text)
    return _open_directory(link_parent or ".", directory, caller), link_name


def _trusted() -> set[int]:
    return {os.geteuid(), 0}


def _check_owner(caller: str, found: os.stat_result) -> None:
    """A regular file is replaced, so its owner does not matter; anything else is written into."""
    if not stat.S_ISREG(found.st_mode) and found.st_uid not in _trusted():
        raise _refuse(caller, "a FIFO, socket or device", found.st_uid)


def _exists(directory: int, text: str) -> bool:
    try:
        os.stat(text, dir_fd=directory, follow_symlinks=False)
    except OSError:  # missing, or a directory along the text missing or not one
        return False
    return True


def _in_proc(directory: int) -> bool:
    """Whether ``directory`` is in /proc, whose links' texts the kernel writes (never a user)."""
    try:
        return os.fstat(directory).st_dev == os.stat("/proc").st_dev
    except OSError:
        return False


def _kernel_link(caller: str, directory: int, name: str) -> Destination:
    """``name`` itself is opened, following it, and must still be what ``found`` says."""
    found = os.stat(name, dir_fd=directory)
    _check_owner(caller, found)
    if stat.S_ISREG(found.st_mode):  # a deleted file behind /proc: nothing to replace in place
        raise OSError(errno.ENOENT, "the link leads to a deleted file", caller)  # FileNotFoundError
    return Destination(caller, directory, name, found, kernel_link=True)


class Output:
    """An output being written (``file``): to a temporary file that ``commit`` renames over
    the destination's name, or in place. ``discard`` (also after a failed commit) leaves the
    destination as it was."""

    def __init__(self, destination: Destination, file: BinaryIO, temp: str | None) -> None:
        self.destination = destination
        self.file = file
        self.temp = temp

    @property
    def in_place(self) -> bool:
        return self.temp is None

    def fileno(self) -> int:
        return self.file.fileno()

    def commit(self) -> None:
        try:
            if self.temp is not None:
                self.file.flush()
                os.fsync(self.file.fileno())
                self.file.close()
                replace_at(self.destination.directory, self.temp, self.destination.name)
                self.temp = None
            self.file.close()
        except BaseException:
            self.discard()
            raise
        self.destination.close()

    def discard(self) -> None:
        try:
            self.file.close()
        finally:
            if self.temp is not None and self.destination.directory >= 0:
                discard_at(self.destination.directory, self.temp)
                self.temp = None
            self.destination.close()


def _open_in_place(destination: Destination) -> int:
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


def _identity(found: os.stat_result) -> tuple[int, int, int, int]:
    """Which file this is: a freed inode number can come back for the next file, so its type
    (and device number) tell a FIFO from whatever took its place."""
    return found.st_dev, found.st_ino, stat.S_IFMT(found.st_mode), found.st_rdev


def open_output(target: StrPath | Destination, mode: int = 0o600) -> Output:
    """The output for ``target`` (a path is decided by ``output_target`` first): a new
    temporary file with ``mode`` beside the destination, or the destination itself when it is
    written in place (opening a FIFO waits for its reader). Takes ownership of a Destination."""
    destination = target if isinstance(target, Destination) else output_target(target)
    try:
        if destination.in_place:
            return Output(destination, open(_open_in_place(destination), "wb", buffering=0), None)
        try:
            fd, temp = temporary_in(destination.directory, destination.name, mode, suffix=".partial")
        except OSError as exc:  # name the caller's path, not the temporary file
            raise OSError(exc.errno, exc.strerror, destination.path) from None
        try:
            return Output(destination, open(fd, "wb", buffering=0), temp)
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
            message = "refusing to write a secret into a FIFO, socket or device: it goes to a regular file"
            raise OSError(errno.EPERM, message, destination.path)  # PermissionError
        output = open_output(destination, 0o600)
        try:
            _write_all(output.fileno(), data)
        except BaseException:
            output.discard()
            raise
        output.commit()
        return
    caller = os.fspath(path)
    parent, name = os.path.split(caller)
    directory = _open_directory(parent or ".", None, caller)
    try:
        try:
            fd = create_exclusive(directory, name, 0o600)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, caller) from None
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with suppress(OSError):
                os.unlink(name, dir_fd=directory)
            raise
        os.close(fd)
        fsync_directory(directory)
    finally:
        os.close(directory)
