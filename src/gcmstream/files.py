"""The file engine: one synchronous loop per file over file descriptors.

Encrypting reads plaintext into one reused buffer and writes what the Sealer made; decrypting
reads ciphertext straight into the Opener's ring (``get_buffer``/``buffer_updated``) and lets
it decrypt straight into one reused output buffer. No event loop takes part: the synchronous
API runs the loop in the calling thread, the async API and the CLI in one worker thread per
file (``run_in_worker``), so a GiB costs two system calls per MiB and no thread hops.

Every Sealer and Opener the engine, ``open_file`` and the CLI's file commands use is made by
``new_sealer``/``new_opener``: the one place that takes key material.

Guarantees, beside the pipeline's (atomic output, fsync, mode 0600, links and FIFOs: see
``gcmstream.pipeline``):

* Files written here carry the optional header field ``FIXED_LAYOUT`` (docs/FORMAT.md 4.3):
  every record but FINAL is full, and key updates come every N records, so ``open_file``
  finds any record by arithmetic. The engine never flushes, so the claim holds.
* Decrypting releases no plaintext of the FINAL record when bytes follow it, even when they
  arrive in a later read (FORMAT.md 8.2 allows releasing it then; this engine does not): the
  output buffer always has room for a whole record, so all of FINAL is gathered in it (when
  it straddles the buffer's end, its start is moved back rather than written) and held back
  until one more read of the input found its end. The records before it are written, then
  TrailingDataError is raised; a stop or read error during that read releases none of FINAL.
  The loop ends when the Opener reports the authenticated end (``at_eof``: FINAL
  authenticated and all of its plaintext delivered), not when FINAL authenticates.
* A stop request (``threading.Event``: task cancellation, SIGTERM or Ctrl-C in the CLI) is
  seen before every read, so the loop stops within one read of at most ``CHUNK_SIZE`` bytes,
  and the output file is not created. Input from a pipe, FIFO, terminal or socket is waited
  for in polls of ``_POLL_MS``, each followed by a look at the stop request, so a stop
  is seen while no input comes (tests/test_cli_signals.py: the CLI exits well within 1 s of
  the signal). An ``O_NONBLOCK`` input's EAGAIN is "no input yet", never its end. A regular
  file is read as before, with no poll. A write blocked on a reader
  that stopped reading cannot see it: ``run_in_worker`` gives up waiting after
  ``STOP_WAIT`` (the CLI, with no temporary file to remove, sooner) and the CLI exits.
"""

from __future__ import annotations

import io
import os
import select
import stat
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import anyio
from anyio import to_thread

from ._output import open_output
from .armor import ArmorEncoder, dearmoring_reader
from .errors import StreamBrokenError, TrailingDataError, TruncatedStreamError
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    Buffer,
    FieldType,
    KeyLimits,
    Keys,
)
from .opener import Opener, Phase
from .pipeline import CHUNK_SIZE, file_keywords, tink_associated_data
from .recipients import DEFAULT_WORK_FACTOR, Identity, Recipient
from .records import records_per_generation
from .sealer import Sealer
from .tinkstream import TinkKeyset, TinkOpener, TinkSealer, TinkStreamingKey

if TYPE_CHECKING:
    from .config import Configuration

__all__ = (
    "STOP_WAIT",
    "Progress",
    "atomic_fd",
    "decrypt_fd",
    "decrypt_path",
    "encrypt_fd",
    "encrypt_path",
    "fixed_layout_field",
    "layout_generation_size",
    "new_opener",
    "new_sealer",
    "records_per_generation",
    "run_in_worker",
)

StrPath: TypeAlias = str | os.PathLike[str]
Progress: TypeAlias = Callable[[int], object]
_T = TypeVar("_T")

_LAYOUT = struct.Struct(">I")
# The ring of a decrypting engine (one read fills up to this much, plus one record) and its
# output buffer (this much, or two records). Half of CHUNK_SIZE: peak RSS decrypting 1 GiB
# 37.7 MiB instead of 38.7 at the same CPU, median of 5 (benchmarks/README.md, "Memory").
_RING_BYTES = CHUNK_SIZE // 2
# Seconds a cancelled async call waits for its worker to see the stop request. Reads see it
# within a poll (_POLL_MS); only a write blocked on a stalled reader (a full pipe) or a
# FIFO's open waiting for a writer can hold the worker this long, and is then given up.
STOP_WAIT = 5.0
# Milliseconds one poll of a pipe, FIFO, terminal or socket waits for input before the stop
# request is looked at again: a stop while no input comes is seen within this.
_POLL_MS = 20


class _Stopped(Exception):
    """The engine saw a stop request (cancellation, a signal) and left its loop."""


# Sealers and Openers whose engine loop failed (a write error, a stop, a bad record), with the
# first error: they are mid-stream, so a later loop would write records without their header
# or skip plaintext. Every later encrypt_fd/decrypt_fd with one raises StreamBrokenError.
_failed: weakref.WeakKeyDictionary[Sealer | Opener | TinkSealer | TinkOpener, BaseException] = (
    weakref.WeakKeyDictionary()
)


@contextmanager
def _fatal(coder: Sealer | Opener | TinkSealer | TinkOpener) -> Iterator[None]:
    """Refuse a coder whose loop failed before; mark this one failed if its loop fails."""
    earlier = _failed.get(coder)
    if earlier is not None:
        raise StreamBrokenError(earlier) from earlier
    try:
        yield
    except BaseException as exc:
        _failed[coder] = exc
        raise


# -- the one place that takes key material ----------------------------------------------------


def new_sealer(
    key: Keys | None = None,
    *,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    work_factor: int = DEFAULT_WORK_FACTOR,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    limits: KeyLimits | None = None,
    fixed_layout: bool = False,
) -> Sealer:
    """A one-way Sealer for the file engine. ``fixed_layout``: its header promises full
    records (``FIXED_LAYOUT``); only a caller that never flushes may ask for it."""
    fields = (fixed_layout_field(record_size, limits or KeyLimits()),) if fixed_layout else ()
    return Sealer(
        key,
        recipients=recipients,
        passphrase=passphrase,
        work_factor=work_factor,
        context=context,
        record_size=record_size,
        limits=limits,
        _fields=fields,
    )


def new_opener(
    key: Keys | None = None,
    *,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer = b"",
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    ring_size: int = _RING_BYTES,
) -> Opener:
    """A one-way Opener for the file engine, ``open_file`` and the CLI (keyed as Opener is)."""
    return Opener(
        key,
        identities=identities,
        passphrase=passphrase,
        context=context,
        max_record_size=max_record_size,
        ring_size=ring_size,
    )


def fixed_layout_field(record_size: int, limits: KeyLimits) -> tuple[int, bytes]:
    return FieldType.FIXED_LAYOUT, _LAYOUT.pack(records_per_generation(record_size, limits))


def layout_generation_size(value: bytes) -> int | None:
    """N from a ``FIXED_LAYOUT`` field's value, or None if it is not 4 bytes or 0 (then the
    reader walks the records instead of trusting it)."""
    if len(value) != _LAYOUT.size:
        return None
    (count,) = _LAYOUT.unpack(value)
    return count or None


# -- the loops ------------------------------------------------------------------------------


def _write_all(fd: int | _ArmoredOutput, view: memoryview) -> None:
    if not isinstance(fd, int):
        fd.write(view)
        return
    while view:
        view = view[os.write(fd, view) :]


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise _Stopped("stopped on request")


def _reader(fd: int, stop: threading.Event | None) -> Callable[[Buffer], int]:
    """``readinto`` of ``fd``, returning 0 only at the input's end. A pipe, FIFO, terminal or
    socket is first waited for in short polls, with a look at the stop request (if any) after
    each: a read() blocked on an idle pipe would never see it, and one of an ``O_NONBLOCK``
    descriptor returns None (EAGAIN), which is "no input yet", never the end. A regular file
    or block device (always readable, no EAGAIN) gets the plain ``readinto``: no poll on the
    hot path."""
    readinto = io.FileIO(fd, "rb", closefd=False).readinto
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode) or stat.S_ISBLK(mode):
        return readinto
    poller = select.poll() if hasattr(select, "poll") else None
    if poller is not None:
        poller.register(fd, select.POLLIN)  # (POLLHUP and POLLERR are always reported: EOF, errors)

    def wait_then_readinto(buffer: Buffer) -> int:
        while True:
            while poller is not None and not poller.poll(_POLL_MS):
                _check(stop)
            got: int | None = readinto(buffer)
            if got is not None:
                return got
            _check(stop)  # EAGAIN: another reader took the input, or no poll to wait with
            if poller is None:
                time.sleep(_POLL_MS / 1000)

    return wait_then_readinto


def encrypt_fd(
    src: int,
    dst: int,
    sealer: Sealer | TinkSealer,
    *,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    armor: bool = False,
) -> None:
    """Encrypt everything ``src`` delivers until its end into ``dst`` (header, records,
    FINAL). Neither descriptor is closed. ``armor``: write the armored text form
    (gcmstream.armor) rather than the binary file. After a failure (a write error, a stop)
    the Sealer is broken: every later call with it raises StreamBrokenError."""
    with _fatal(sealer):
        _encrypt_fd(src, _ArmoredOutput(dst) if armor else dst, sealer, progress, stop)


class _ArmoredOutput:
    """An output descriptor's stand-in that writes armored text (``_write_all`` calls it)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.encoder = fd, ArmorEncoder()

    def write(self, view: memoryview) -> None:
        _write_all(self.fd, memoryview(self.encoder.encode(view)))

    def close(self) -> None:
        _write_all(self.fd, memoryview(self.encoder.finish()))


def _encrypt_fd(
    src: int,
    dst: int | _ArmoredOutput,
    sealer: Sealer | TinkSealer,
    progress: Progress | None,
    stop: threading.Event | None,
) -> None:
    readinto = _reader(src, stop)
    buf = bytearray(CHUNK_SIZE)
    view = memoryview(buf)
    # Sealed four records at a time, the output fits the Sealer's reused buffer (sealer.py):
    # a larger call would get a freshly zeroed buffer every time.
    step = 4 * sealer.record_size
    try:
        while True:
            _check(stop)
            got = readinto(buf)
            if not got:
                break
            if progress is not None:
                progress(got)
            for start in range(0, got, step):
                out = sealer.seal(view[start : min(got, start + step)])
                if out:
                    _write_all(dst, out)
        _check(stop)
        _write_all(dst, sealer.close())
        if isinstance(dst, _ArmoredOutput):
            dst.close()
    finally:
        view.release()


def decrypt_fd(
    src: int,
    dst: int,
    opener: Opener | TinkOpener,
    *,
    eager: bool = False,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Decrypt the one stream ``src`` delivers into ``dst``, binary or armored (gcmstream.armor:
    told by its first bytes; text that breaks armor's rules raises ArmorError, FINAL's
    plaintext held back until the end line and what follows it passed). ``eager``: write what
    authenticated before every read (pipes, stdout) rather than a full buffer (512 KiB) at a time.
    On failure, the records that authenticated before it are written, then it is raised, and
    the Opener is broken: every later call with it raises StreamBrokenError."""
    with _fatal(opener):
        _decrypt_fd(src, dst, opener, eager, progress, stop)


def _decrypt_fd(
    src: int,
    dst: int,
    opener: Opener | TinkOpener,
    eager: bool,
    progress: Progress | None,
    stop: threading.Event | None,
) -> None:
    readinto = dearmoring_reader(_reader(src, stop))
    out: bytearray | None = None
    view = memoryview(b"")
    used = room = 0
    eof = False
    try:
        while True:
            got: int | None = None
            if out is None and opener.header_verified() and opener.header is not None:
                # room for a whole record after any write: FINAL always lands here whole
                record_size = opener.header.record_size
                out = bytearray(max(_RING_BYTES, 2 * record_size))
                view = memoryview(out)
                room = len(out) - record_size
            if out is not None:
                if used > room:
                    # FINAL may have authenticated with only its start delivered (it did not
                    # fit in this buffer): hold back as many bytes as FINAL has, moved to the
                    # start, so that all of FINAL is here when its trailing-data check runs
                    keep = min(used, opener.final_length) if opener.phase is Phase.FINAL else 0
                    _write_all(dst, view[: used - keep])
                    out[:keep] = out[used - keep : used]
                    used = keep
                got = opener.readinto(view[used:])
            if got:
                used += got
            if opener.at_eof:  # the authenticated end: FINAL authenticated and all of it here
                break
            if got is not None and got > 0:
                continue
            if eager and used:  # pass on what authenticated before waiting for input
                _write_all(dst, view[:used])
                used = 0
            if eof:  # the opener raises the truncation itself; this guards a silent stall
                raise TruncatedStreamError("input ended without a FINAL record")
            _check(stop)
            space = opener.get_buffer()
            if not space:
                raise RuntimeError("gcmstream bug: the opener's ring is full with nothing to read")
            count = readinto(space)
            if count:
                opener.buffer_updated(count)
                if progress is not None:
                    progress(count)
            else:
                opener.receive_eof()
                eof = True
        # FINAL authenticated and decrypted into the output: release it only if nothing follows
        if not eof:
            # held back while the probe reads: a stop or read error there releases none of it
            used -= opener.final_length
            if readinto(bytearray(1)):
                raise TrailingDataError("data follows the FINAL record")
            _check(stop)  # a stop that came while the end was awaited: the end came too late
            used += opener.final_length
    finally:
        if used > 0:  # on failure too: what is here authenticated (FINAL held back above)
            _write_all(dst, view[:used])
        view.release()


# -- paths ----------------------------------------------------------------------------------


@contextmanager
def atomic_fd(path: StrPath, *, mode: int = 0o600, stop: threading.Event | None = None) -> Iterator[int]:
    """A file descriptor whose content replaces ``path`` only if the block exits normally
    and no stop was requested by then (``pipeline.atomic_output``'s rules: temporary file,
    fsync, rename, mode; a FIFO or device of ours is written in place)."""
    output = open_output(path, mode)  # the one rule of where an output may go
    try:
        yield output.fileno()
        if not output.in_place:
            _check(stop)
    except BaseException:
        output.discard()
        raise
    output.commit()  # discards on failure


def encrypt_path(
    src: StrPath,
    dst: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    recipients: Iterable[Recipient] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    record_size: int | None = None,
    limits: KeyLimits | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    tink: TinkKeyset | TinkStreamingKey | None = None,
) -> None:
    """Encrypt the file ``src`` into ``dst`` atomically, in this thread. Keyed, or given
    ``config=``, as ``gcmstream.pipeline``'s functions (``limits`` too); ``tink``: in Tink's
    format (docs/TINK.md), with ``context`` alone beside it."""
    sealer: Sealer | TinkSealer
    if tink is not None:
        others = {"config": config, "key": key, "recipients": recipients, "passphrase": passphrase}
        sealer = TinkSealer(
            tink, tink_associated_data(context, **others, record_size=record_size, limits=limits)
        )
    else:
        options = file_keywords(
            config,
            key=key,
            recipients=recipients,
            passphrase=passphrase,
            context=context,
            record_size=record_size,
            limits=limits,
        )
        sealer = new_sealer(**options, fixed_layout=True)
    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with atomic_fd(dst, stop=stop) as out:
            encrypt_fd(fd, out, sealer, progress=progress, stop=stop)
    finally:
        os.close(fd)


def decrypt_path(
    src: StrPath,
    dst: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    tink: TinkKeyset | TinkStreamingKey | None = None,
) -> None:
    """Decrypt the file ``src`` into ``dst`` atomically, in this thread: ``dst`` appears only
    once the FINAL record authenticated and nothing followed it. Keyed, or given ``config=``,
    as ``gcmstream.pipeline``'s functions; ``tink``: Tink's format (docs/TINK.md), ``dst``
    appearing once the last segment authenticated at the end of ``src``."""
    opener: Opener | TinkOpener
    if tink is not None:
        others = {"config": config, "key": key, "identities": identities, "passphrase": passphrase}
        opener = TinkOpener(tink, tink_associated_data(context, **others, max_record_size=max_record_size))
    else:
        options = file_keywords(
            config,
            key=key,
            identities=identities,
            passphrase=passphrase,
            context=context,
            max_record_size=max_record_size,
        )
        opener = new_opener(**options)
    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with atomic_fd(dst, stop=stop) as out:
            decrypt_fd(fd, out, opener, progress=progress, stop=stop)
    finally:
        os.close(fd)


async def run_in_worker(
    work: Callable[..., _T], *, on_abandon: Callable[[], object] | None = None, stop_wait: float = STOP_WAIT
) -> _T:
    """Run ``work(stop=stop)`` in one worker thread. When the calling task is cancelled, ``stop``
    is set and the task waits (shielded) for ``work`` to leave, so its cleanup (removing a
    temporary output) is done when the cancellation arrives (an output committed before the
    stop request was seen stays: the cancellation came after the work was done). A worker
    blocked where it cannot see ``stop`` (a write to a pipe nobody reads) is given up after
    ``stop_wait`` seconds: ``on_abandon``."""
    stop = threading.Event()
    left = threading.Event()

    def target() -> _T:
        try:
            return work(stop=stop)
        finally:
            left.set()

    try:
        return await to_thread.run_sync(target, abandon_on_cancel=True)
    except BaseException:
        stop.set()
        with anyio.CancelScope(shield=True):
            if not await to_thread.run_sync(left.wait, stop_wait) and on_abandon is not None:
                on_abandon()
        raise
