"""Replacing a file atomically and durably, written once for every writer of files here.

A new content goes to a temporary file beside the target (same directory, so the rename is
atomic), made with the caller's mode (never the mode of a file found there), fsynced, renamed
over the target, and then the directory is fsynced so that the rename itself survives a crash
(where the platform can sync a directory). A reader sees the old file or the new one, whole.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress

__all__ = ("discard", "fsync_directory", "replace_durably", "temporary_beside", "write_secret_file")


def temporary_beside(target: str, mode: int, *, suffix: str = "") -> tuple[int, str]:
    """(descriptor, path) of a new temporary file in ``target``'s directory, with ``mode``.
    OSError names the caller's ``target``, not the temporary file."""
    directory, name = os.path.split(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=suffix, dir=directory or ".")
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, target) from None
    try:
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        discard(temp)
        raise
    return fd, temp


def fsync_directory(path: str) -> None:
    """Make the last rename or creation in ``path``'s directory durable, where directories
    can be synced (not on every platform or file system: then this does nothing)."""
    with suppress(OSError):
        directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def replace_durably(temp: str, target: str) -> None:
    """Rename the (already fsynced and closed) ``temp`` over ``target``, then sync the
    directory."""
    os.replace(temp, target)
    fsync_directory(target)


def discard(temp: str) -> None:
    """Remove a temporary file that will not be committed (already gone is fine)."""
    with suppress(FileNotFoundError):
        os.unlink(temp)


def write_secret_file(path: str | os.PathLike[str], data: bytes, *, force: bool = False) -> None:
    """Write ``data`` to ``path`` with mode 0600, as ``write_key_file`` does (identity files
    share it)."""
    if not force:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with suppress(OSError):
                os.unlink(path)
            raise
        os.close(fd)
        fsync_directory(os.fspath(path))
        return
    target = os.path.realpath(path)
    fd, temp = temporary_beside(target, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        fd = -1
        replace_durably(temp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        discard(temp)
        raise
