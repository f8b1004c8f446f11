"""Where an output file goes, and the blocking steps of writing it atomically: shared by the
file pipelines (``pipeline.atomic_output``), the file engine (``files``) and the CLI. The
temporary file, the rename and the directory fsync are ``_atomic``'s.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO, TypeAlias

from ._atomic import discard, replace_durably, temporary_beside

__all__ = ("commit_output", "discard_output", "output_target", "prepare_output")

StrPath: TypeAlias = str | os.PathLike[str]


def _refuse(path: StrPath, what: str, uid: int) -> PermissionError:
    return PermissionError(
        errno.EPERM, f"refusing to write through {what} owned by another user (uid {uid})", os.fspath(path)
    )


def output_target(path: StrPath) -> tuple[str, bool]:
    """(where the output goes, whether it is written in place). Symbolic links are followed
    only when this user or root owns them, and a FIFO, socket or device is written into only
    when one of them owns it: a link or a FIFO someone else planted (in a shared directory,
    say) would put the output into their hands, so it raises PermissionError naming ``path``.
    A regular file is replaced, never written into, so its owner does not matter.
    The CLI checks a target with it before writing."""
    current = os.path.abspath(path)
    trusted = {os.geteuid(), 0}
    for _ in range(40):  # the kernel's own limit on nested links
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            if current == os.path.abspath(path):
                return current, False
            try:  # /dev/stdout -> /proc/self/fd/1 -> "pipe:[...]": only the kernel can follow it
                st = os.stat(path)
            except FileNotFoundError:  # a dangling link (of ours): the file is created where it points
                return current, False
            current = os.fspath(path)
        if not stat.S_ISLNK(st.st_mode):
            if stat.S_ISREG(st.st_mode):
                return current, False
            if st.st_uid not in trusted:
                raise _refuse(path, "a FIFO, socket or device", st.st_uid)
            return current, True
        if st.st_uid not in trusted:
            raise _refuse(path, "a symbolic link", st.st_uid)
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path))


def prepare_output(path: StrPath, mode: int) -> tuple[BinaryIO, str, str] | None:
    """(open temporary file, its path, target) for an atomic write; None for a target that
    is written in place (a FIFO, a device: see ``output_target``)."""
    target, in_place = output_target(path)
    if in_place:
        return None
    try:
        fd, temp = temporary_beside(target, mode, suffix=".partial")
    except OSError as exc:  # name the caller's path, not the resolved target
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    try:
        return open(fd, "wb", buffering=0), temp, target
    except BaseException:
        os.close(fd)
        discard(temp)
        raise


def commit_output(file: BinaryIO, temp: str, target: str) -> None:
    file.flush()
    os.fsync(file.fileno())
    file.close()
    replace_durably(temp, target)


def discard_output(file: BinaryIO, temp: str) -> None:
    try:
        file.close()
    finally:
        discard(temp)
