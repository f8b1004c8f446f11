"""Replacing a file atomically and durably, written once for every writer of files here.

Every step works on a name inside a directory the caller opened once (``dir_fd``), never on a
path walked again: a directory renamed or a link planted along the path after the caller
decided where the output goes changes nothing. A new content goes to a temporary file in that
directory (created there with ``O_EXCL | O_NOFOLLOW``, so never through a link, and with the
mode the caller gives, never the mode of a file found there), is fsynced, renamed over the name (the
rename replaces whatever entry is there, a link included, and never writes through it), and
then the directory is fsynced so that the rename itself survives a crash (where the platform
can sync a directory). A reader sees the old file or the new one, whole.
"""

from __future__ import annotations

import errno
import os
from contextlib import suppress

__all__ = ("create_exclusive", "discard_at", "fsync_directory", "replace_at", "temporary_in")

_TEMPORARY_ATTEMPTS = 100  # a name taken 100 times in a row means someone is squatting


def create_exclusive(directory: int, name: str, mode: int) -> int:
    """A new file ``name`` in ``directory`` (write only, ``mode``); FileExistsError if any entry,
    a dangling link included, is already there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, 0o600, dir_fd=directory)
    try:
        os.fchmod(fd, mode)  # the umask does not narrow or widen what the caller asked
    except BaseException:
        os.close(fd)
        discard_at(directory, name)
        raise
    return fd


def temporary_in(directory: int, mode: int, *, suffix: str = "") -> tuple[int, str]:
    """(descriptor, name) of a new temporary file in ``directory``. Its name is short and
    random, not derived from the destination's: it fits wherever the destination's name does."""
    for _ in range(_TEMPORARY_ATTEMPTS):
        temp = f".gcmstream-{os.urandom(8).hex()}{suffix}"  # (secrets would load _hashlib)
        try:
            return create_exclusive(directory, temp, mode), temp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name")


# What fsync of a directory says where directories cannot be synced: EINVAL or ENOTSUP (some
# file systems and platforms), EBADF (an O_PATH descriptor of a directory we may not read).
# Anything else (EIO) means the rename may not be durable, and is raised.
_CANNOT_SYNC_DIRECTORY = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF})


def fsync_directory(directory: int) -> None:
    """Make the last rename or creation in ``directory`` durable, where directories can be
    synced (not on every platform or file system: then this does nothing)."""
    try:
        os.fsync(directory)
    except OSError as exc:
        if exc.errno not in _CANNOT_SYNC_DIRECTORY:
            raise


def replace_at(directory: int, temp: str, name: str) -> None:
    """Rename the (already fsynced and closed) ``temp`` over ``name``, then sync the directory."""
    os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory)
    fsync_directory(directory)


def discard_at(directory: int, temp: str) -> None:
    """Remove a temporary file that will not be committed (already gone is fine)."""
    with suppress(FileNotFoundError):
        os.unlink(temp, dir_fd=directory)
