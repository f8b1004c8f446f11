"""The file engine: one synchronous loop per file over file descriptors.

Encrypting reads plaintext into one reused buffer and writes what the Sealer made; decrypting
reads ciphertext straight into the Opener's ring (``get_buffer``/``buffer_updated``) and lets
it decrypt straight into one reused output buffer. No event loop takes part: the synchronous
API runs the loop in the calling thread, the async API in one worker thread per file
(``run_in_worker``), the CLI's file commands in their one worker thread (``cli._FileRun``, with
no event loop), so a GiB costs two system calls per MiB and no thread hops.

Every Sealer and Opener the engine, ``open_file`` and the CLI's file commands use is made by
``new_sealer``/``new_opener``: the one place that takes key material.

Several workers (``jobs`` > 1, a regular file to a regular file): the records of the fixed layout
(``FixedLayout``) are sealed or opened in blocks of about ``CHUNK_SIZE`` by that many threads,
each block by one thread at its place (``preadv`` of the input, ``os.pwrite`` of the output),
each thread with its own ``KeyChain``. A record's place fixes its key generation and nonce, so
no two threads can use one (key, nonce) (FORMAT.md 4.3.1), and the bytes are those one worker
writes. On any failure the output is cut back to where it started; a record that fails to
authenticate makes the engine read the stream again with one worker, so that it writes and
raises exactly what one worker does. AES-GCM releases the GIL, so threads are enough (no
process has to be handed key material).

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
  ``STOP_WAIT``, and so does the CLI (writing to a pipe or FIFO, with no temporary file to
  remove, sooner), which then exits.
"""

from __future__ import annotations

import errno
import fcntl
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
from functools import partial
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from ._output import Destination, FileRead, open_output, refuse_same_file
from .armor import BEGIN_LINE, ArmorEncoder, dearmoring_reader, is_armored
from .errors import (
    AuthenticationError,
    ProtocolError,
    StoppedError,
    StreamBrokenError,
    TrailingDataError,
    TruncatedStreamError,
    UnknownKeyError,
)
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_FIXED_SIZE,
    MAX_STANZA_FIELDS_SIZE,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    FieldType,
    KeyLimits,
    Keys,
    StreamHeader,
    TrafficKeys,
    header_fault,
    parse_fields,
    parse_header_start,
    sealed_with,
)
from .header import HeaderSpec
from .opener import Opener, Phase
from .pipeline import CHUNK_SIZE, opener_for, sealer_for
from .recipients import DEFAULT_WORK_FACTOR, Identity, Recipient
from .records import KeyChain, RecordLayer, records_per_generation
from .sealer import Sealer
from .tinkstream import TinkKeyset, TinkOpener, TinkSealer, TinkStreamingKey

if TYPE_CHECKING:
    from .config import Configuration

__all__ = (
    "PARALLEL_MIN_SIZE",
    "STOP_WAIT",
    "TINK_IN_ORDER",
    "FixedLayout",
    "Progress",
    "atomic_fd",
    "check_stop",
    "decrypt_fd",
    "decrypt_path",
    "default_jobs",
    "encrypt_fd",
    "encrypt_path",
    "fixed_layout_field",
    "layout_generation_size",
    "layout_of_size",
    "new_opener",
    "new_sealer",
    "one_worker_reason",
    "placeable",
    "promised_layout",
    "read_header",
    "records_per_generation",
    "run_in_worker",
    "usable_cores",
)

StrPath: TypeAlias = str | os.PathLike[str]
Progress: TypeAlias = Callable[[int], object]
_T = TypeVar("_T")

_LAYOUT = struct.Struct(">I")
_OVERHEAD = RECORD_HEADER_SIZE + TAG_SIZE
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
        header_spec=HeaderSpec(fields=fields),
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


# -- the fixed layout (FORMAT.md 4.3): record places by arithmetic ----------------------------


class FixedLayout:
    """Record places of a FIXED_LAYOUT stream: arithmetic (``open_file``'s reads and the
    parallel engine below both use it)."""

    def __init__(self, header_size: int, record_size: int, per_generation: int, count: int, last: int):
        self.header_size, self.record_size, self.per_generation = header_size, record_size, per_generation
        self.count, self.last = count, last  # records, FINAL's plaintext bytes
        self.length = (count - 1) * record_size + last

    @classmethod
    def for_plaintext(cls, header_size: int, record_size: int, per_generation: int, size: int) -> FixedLayout:
        """The layout a writer of full records gives ``size`` plaintext bytes: every full record
        sealed as it fills, then FINAL with the rest (empty when ``size`` is a multiple)."""
        full, last = divmod(size, record_size)
        return cls(header_size, record_size, per_generation, full + 1, last)

    @property
    def wire_size(self) -> int:
        """Bytes of the whole stream, header included."""
        return self.wire_offset(self.count - 1) + _OVERHEAD + self.last

    def find(self, pos: int) -> int:
        return min(pos // self.record_size, self.count - 1)

    def record(self, index: int) -> tuple[int, int, int, int, int]:
        """(plaintext start, plaintext size, generation, seq, flags) of record ``index``."""
        final = index == self.count - 1
        generation, seq = divmod(index, self.per_generation)
        flags = FLAG_FINAL if final else FLAG_KEY_UPDATE if seq == self.per_generation - 1 else 0
        return index * self.record_size, self.last if final else self.record_size, generation, seq, flags

    def runs(self, start: int, stop: int) -> Iterator[tuple[int, int, int, int, int]]:
        """Records ``start`` up to ``stop`` as runs that one key generation seals alike:
        (generation, seq of the first, records, plaintext size each, flags of the last).
        A run ends at a key update (its last record carries KEY_UPDATE) and FINAL is a run
        of its own, so each run's flags are ``record``'s."""
        final, per_generation = self.count - 1, self.per_generation
        index = start
        while index < stop:
            generation, seq = divmod(index, per_generation)
            if index == final:
                yield generation, seq, 1, self.last, FLAG_FINAL
                index += 1
                continue
            boundary = (generation + 1) * per_generation
            end = min(stop, boundary, final)
            yield generation, seq, end - index, self.record_size, FLAG_KEY_UPDATE if end == boundary else 0
            index = end

    def wire_offset(self, index: int) -> int:
        return self.header_size + index * (self.record_size + _OVERHEAD)


def read_header(fd: int, opener: Opener, base: int = 0) -> tuple[StreamHeader, RecordLayer]:
    """Feed the header at ``base`` in ``fd`` to ``opener`` (all of its checks; ``pread``, the
    file position untouched) and return it with its record layer (generation 0, no record
    opened)."""
    offset = base
    need = HEADER_FIXED_SIZE
    try:
        while not opener.header_verified():
            chunk = os.pread(fd, need, offset) if need else b""
            if not chunk:
                opener.receive_eof()
                continue
            opener.receive_data(chunk)
            offset += len(chunk)
            need = opener.header_missing
    except UnknownKeyError:
        refused = _key_for_stanzas(fd, base)
        if refused is None:
            raise
        raise refused from None
    header = opener.header
    records = opener.record_layer
    if header is None or records is None:  # unreachable once header_verified() is True
        raise TruncatedStreamError("input ended before the stream header", in_header=True)
    return header, records


# What reads a header sealed to recipients or a passphrase, said to a caller who gave a key
_READ_WITH = {
    "recipients": (
        "to recipients (its header holds recipient stanzas)",
        "identities= (gcmstream.read_identity_file)",
    ),
    "passphrase": ("with a passphrase (its header holds a passphrase stanza)", "passphrase="),
}


def _key_for_stanzas(fd: int, base: int = 0) -> ProtocolError | None:
    """The error for a key given to read the header at ``base`` of the regular file ``fd``
    that is sealed to recipients or a passphrase (H10: its key ID names no key, as any other
    key's header): it says so and names the keyword to pass. None if the header is sealed
    with a key, or cannot be read. The header's fields are read unverified: they word the
    message, the header was refused anyway."""
    try:
        start = parse_header_start(os.pread(fd, HEADER_FIXED_SIZE, base), MAX_STANZA_FIELDS_SIZE)
        fields = os.pread(fd, start.fields_length, base + HEADER_FIXED_SIZE)
        sealing = sealed_with(parse_fields(fields))
    except (OSError, ProtocolError):
        return None
    if sealing not in _READ_WITH:
        return None
    how, give = _READ_WITH[sealing]
    return header_fault("H10", f"the file is sealed {how}, not with a key: pass {give} instead of key=")


def promised_layout(header: StreamHeader, limits: KeyLimits) -> int | None:
    """N of the header's FIXED_LAYOUT field, or None when there is none or FORMAT.md 4.3 says
    to ignore it (N is 0, not 4 bytes, or past the hard ``limits``): then the file is walked."""
    value = header.field(FieldType.FIXED_LAYOUT)
    per_generation = layout_generation_size(value) if value is not None else None
    if per_generation is None or per_generation > limits.hard_records:
        return None
    if per_generation * header.record_size > limits.hard_bytes:
        return None
    return per_generation


def layout_of_size(header: StreamHeader, per_generation: int, file_size: int) -> FixedLayout | None:
    """The arithmetic layout of a stream of ``file_size`` bytes; None when no such stream exists."""
    body = file_size - len(header.raw)
    if body < _OVERHEAD:
        return None
    full, last = divmod(body - _OVERHEAD, header.record_size + _OVERHEAD)
    if last > header.record_size:
        return None
    return FixedLayout(len(header.raw), header.record_size, per_generation, full + 1, last)


# -- the loops ------------------------------------------------------------------------------


def _write_all(fd: int | _ArmoredOutput, view: memoryview) -> None:
    if not isinstance(fd, int):
        fd.write(view)
        return
    while view:
        view = view[os.write(fd, view) :]


def check_stop(stop: threading.Event | None) -> None:
    """Leave the work at hand (the engine's loops, the command line's) if a stop was requested:
    StoppedError, what a caller that passed ``stop=`` gets (a cancelled async call gets its
    cancellation instead, a command its signal's exit status)."""
    if stop is not None and stop.is_set():
        raise StoppedError("stopped on request")


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
                check_stop(stop)
            got: int | None = readinto(buffer)
            if got is not None:
                return got
            check_stop(stop)  # EAGAIN: another reader took the input, or no poll to wait with
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
    jobs: int = 1,
) -> None:
    """Encrypt everything ``src`` delivers until its end into ``dst`` (header, records,
    FINAL). Neither descriptor is closed. ``armor``: write the armored text form
    (gcmstream.armor) rather than the binary file. After a failure (a write error, a stop)
    the Sealer is broken: every later call with it raises StreamBrokenError.

    ``jobs`` > 1 with two regular files (``dst`` without ``O_APPEND``, nothing after its
    position), a fresh Sealer (``Sealer.hand_off_places``) and binary output (armored text
    has no places): that many threads seal disjoint blocks of records at their places and
    write them there (``os.pwrite``), the same bytes as one worker (FORMAT.md 4.3.1); ``src``
    is read as large as it is when this starts (a size change meanwhile is an OSError), and on
    any failure ``dst`` is cut back to where it was. Otherwise one worker, as ``jobs=1``."""
    _check_jobs(jobs)
    with _fatal(sealer):
        placed = None
        if (
            jobs > 1
            and isinstance(sealer, Sealer)
            and one_worker_reason(src, dst, opening=False, armor=armor) is None
        ):
            placed = sealer.hand_off_places()
        if placed is None:
            _encrypt_fd(src, _ArmoredOutput(dst) if armor else dst, sealer, progress, stop)
        else:
            _encrypt_placed(src, dst, placed, sealer.record_size, jobs, progress, stop)


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
            check_stop(stop)
            got = readinto(buf)
            if not got:
                break
            if progress is not None:
                progress(got)
            for start in range(0, got, step):
                out = sealer.seal(view[start : min(got, start + step)])
                if out:
                    _write_all(dst, out)
        check_stop(stop)
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
    jobs: int = 1,
    one_worker: Callable[[str], object] | None = None,
) -> None:
    """Decrypt the one stream ``src`` delivers into ``dst``, binary or armored (gcmstream.armor:
    told by its first bytes; text that breaks armor's rules raises ArmorError, FINAL's
    plaintext held back until the end line and what follows it passed). ``eager``: write what
    authenticated before every read (pipes, stdout) rather than a full buffer (512 KiB) at a time.
    On failure, the records that authenticated before it are written, then it is raised, and
    the Opener is broken: every later call with it raises StreamBrokenError.

    ``jobs`` > 1 with two regular files (``dst`` without ``O_APPEND``, nothing after its
    position), a fresh Opener and not ``eager``: once the FINAL record authenticated at the
    place the header's fixed layout and the file size give it, that many threads open disjoint
    blocks of records at their places and write their plaintext there (``os.pwrite``). A
    record that fails cuts ``dst`` back and the stream is read again by one worker, which
    writes and raises exactly what ``jobs=1`` does; a stop, Ctrl-C or I/O error cuts ``dst``
    back to where it was and is raised. A stream without the fixed layout is read by one
    worker. ``one_worker``: told once why, when ``jobs`` > 1 but one worker reads the stream in
    order (any condition above unmet, the fixed layout included), as soon as the header
    authenticated: never before the key or the input is refused, never for a record that
    failed in the workers (its error says what is wrong)."""
    _check_jobs(jobs)
    with _fatal(opener):
        why = None
        if jobs > 1:
            tink = not isinstance(opener, Opener)
            why = one_worker_reason(src, dst, opening=True, eager=eager, tink=tink)
            if why is None and isinstance(opener, Opener) and not opener.untouched:
                why = "the opener has read part of the stream already"
        if jobs > 1 and why is None and isinstance(opener, Opener):  # (Tink: a reason)
            placed = _decrypt_placed(src, dst, opener, jobs, progress, stop)
            if placed == "done":
                return
            why = _UNPLACED if placed == "unplaced" else None
        _decrypt_fd(
            src, dst, opener, eager, progress, stop, partial(one_worker, why) if one_worker and why else None
        )


_UNPLACED = "the stream does not keep the fixed layout: its records are found by reading them in order"


TINK_IN_ORDER = "Tink's segments are sealed and opened in order by one worker"


def one_worker_reason(
    src: int,
    dst: int,
    *,
    opening: bool,
    eager: bool = False,
    armor: bool = False,
    tink: bool = False,
    names: tuple[str, str] = ("the input", "the output"),
) -> str | None:
    """The one rule for when the file engine seals (``opening`` False) or opens records in
    order in one worker between ``src`` and ``dst``, known before a header is read: why, or
    None when it places them (a decrypted header's layout can still say no: ``_UNPLACED``).
    ``eager``: each record passed on as it authenticates; ``armor``: armored text written;
    ``tink``: Tink's segments. ``names``: the input and output as the user named them, for
    the reason's words (the command line gives "stdin", "stdout", paths)."""
    src_name, dst_name = names
    if tink:
        return TINK_IN_ORDER
    if eager:
        return f"{dst_name} is written in order by one worker"
    if armor:
        return "armored text is written in order by one worker"
    if not stat.S_ISREG(os.fstat(src).st_mode):
        return f"{src_name} is read in order by one worker (no regular file)"
    if not placeable(src, dst):
        return f"{dst_name} is written in order by one worker (no regular file, or opened to append)"
    if opening and _armored_at(src):
        return "armored input is read in order by one worker"
    return None


def _armored_at(fd: int) -> bool:
    """Whether the regular file ``fd`` holds armored text from its position (its begin line):
    armored text has no places, so it is read by one worker."""
    return is_armored(os.pread(fd, len(BEGIN_LINE), os.lseek(fd, 0, os.SEEK_CUR)))


def _decrypt_fd(
    src: int,
    dst: int,
    opener: Opener | TinkOpener,
    eager: bool,
    progress: Progress | None,
    stop: threading.Event | None,
    on_header: Callable[[], object] | None = None,
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
                if on_header is not None:  # the header authenticated: the command goes on
                    on_header()
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
            check_stop(stop)
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
            check_stop(stop)  # a stop that came while the end was awaited: the end came too late
            used += opener.final_length
    finally:
        if used > 0:  # on failure too: what is here authenticated (FINAL held back above)
            _write_all(dst, view[:used])
        view.release()


# -- several workers: records by their places (FORMAT.md 4.3.1) ------------------------------

# The CLI's default: every usable core for a regular input from this size up, else one worker
# (below it the threads' start and the header's derivations weigh more than they save).
PARALLEL_MIN_SIZE = 64 * 1024 * 1024


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (no affinity on this platform)
        return os.cpu_count() or 1


def default_jobs(size: int | None) -> int:
    """Workers for an input of ``size`` bytes (None: a pipe, FIFO or terminal): the usable
    cores from ``PARALLEL_MIN_SIZE`` up, else 1."""
    return usable_cores() if size is not None and size >= PARALLEL_MIN_SIZE else 1


def _check_jobs(jobs: int) -> None:
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a whole number of workers, at least 1 (got {jobs!r})")


def placeable(src: int, dst: int) -> bool:
    """True when records can be read and written by their places: both are regular files,
    ``dst`` has no ``O_APPEND`` (Linux's pwrite then ignores the offset) and nothing after
    its position (so that a failure can cut it back to where it was)."""
    src_stat, dst_stat = os.fstat(src), os.fstat(dst)
    if not (stat.S_ISREG(src_stat.st_mode) and stat.S_ISREG(dst_stat.st_mode)):
        return False
    if fcntl.fcntl(dst, fcntl.F_GETFL) & os.O_APPEND:
        return False
    return dst_stat.st_size <= os.lseek(dst, 0, os.SEEK_CUR)


# Plaintext a worker takes at a time (one read and one write): a stop or another worker's failure
# is seen within one such block. (Tests lower it to spread a few records over many blocks.)
_BLOCK_BYTES = CHUNK_SIZE


def _block_records(record_size: int) -> int:
    return max(1, _BLOCK_BYTES // record_size)


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    """Fill ``view`` from ``offset``; fewer bytes only at the file's end."""
    got = 0
    while got < len(view):
        count = os.preadv(fd, [view[got:]], offset + got)
        if not count:
            break
        got += count
    return got


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        count = os.pwrite(fd, view, offset)
        view, offset = view[count:], offset + count


def _worker_keys(first: TrafficKeys) -> KeyChain:
    """A worker's own KeyChain (its own AES contexts and key cache) from the first generation."""
    return KeyChain(TrafficKeys(first.secret, first.suite, first.generation))


def _in_parallel(
    jobs: int, blocks: int, worker: Callable[[], Callable[[int], None]], stop: threading.Event | None
) -> None:
    """Run every block ``0 .. blocks - 1`` once, in ``jobs`` threads (this one and ``jobs - 1``
    more), each taking the next block when done with one; ``worker()`` makes one thread's
    block function (its buffers, its keys). The first failure anywhere (an error, a stop
    request, KeyboardInterrupt) halts every thread after its current block, and all have left
    when this returns or raises, so nothing writes into the output after it: a Ctrl-C while
    waiting for them is kept, not raised, until they left. The failure raised is the first one
    that is not a ProtocolError (Ctrl-C, a stop, an I/O error: what the caller must hear),
    else the first."""
    taken = iter(range(blocks))
    take = threading.Lock()
    halt = threading.Event()
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            run = worker()
            while not halt.is_set():
                check_stop(stop)
                with take:
                    block = next(taken, None)
                if block is None:
                    return
                run(block)
        except BaseException as exc:
            failures.append(exc)
            halt.set()

    threads = [threading.Thread(target=loop, name=f"gcmstream-job-{n}", daemon=True) for n in range(1, jobs)]
    try:
        for thread in threads:
            thread.start()
        loop()
    finally:
        for thread in threads:
            while thread.is_alive():
                try:
                    thread.join()
                except BaseException as exc:  # Ctrl-C while waiting: they leave within a block
                    failures.append(exc)
                    halt.set()
    if failures:
        raise next((exc for exc in failures if not isinstance(exc, ProtocolError)), failures[0])


def _encrypt_placed(
    src: int,
    dst: int,
    placed: tuple[bytes, TrafficKeys, int],
    record_size: int,
    jobs: int,
    progress: Progress | None,
    stop: threading.Event | None,
) -> None:
    """Seal the regular file ``src`` from its position to its end into ``dst`` at its position,
    in ``jobs`` workers, each sealing whole blocks of records at their places (``FixedLayout``,
    ``KeyChain.seal_run_at``). On any failure ``dst`` is cut back to where it started."""
    header, first, per_generation = placed
    in_base, out_base = os.lseek(src, 0, os.SEEK_CUR), os.lseek(dst, 0, os.SEEK_CUR)
    size = max(0, os.fstat(src).st_size - in_base)
    layout = FixedLayout.for_plaintext(len(header), record_size, per_generation, size)
    per_block = _block_records(record_size)
    blocks = -(-layout.count // per_block)
    report = threading.Lock()

    def worker() -> Callable[[int], None]:
        chain = _worker_keys(first)
        plain = memoryview(bytearray(per_block * record_size))
        wire = memoryview(bytearray(per_block * (record_size + _OVERHEAD)))

        def run(block: int) -> None:
            start = block * per_block
            end = min(layout.count, start + per_block)
            offset = start * record_size
            length = min(size, end * record_size) - offset
            if _pread_into(src, plain[:length], in_base + offset) != length:
                raise OSError(errno.EIO, "the input file shrank while it was encrypted")
            pos = taken = 0
            for generation, seq, count, each, flags in layout.runs(start, end):
                pos += chain.seal_run_at(generation, seq, count, each, flags, plain[taken:], wire[pos:])
                taken += count * each
            _pwrite_all(dst, wire[:pos], out_base + layout.wire_offset(start))
            if progress is not None:
                with report:
                    progress(length)

        return run

    try:
        _pwrite_all(dst, memoryview(header), out_base)
        _in_parallel(min(jobs, blocks), blocks, worker, stop)
        if os.fstat(src).st_size != in_base + size:  # what was sealed is not the whole input
            raise OSError(errno.EIO, "the input file changed size while it was encrypted")
    except BaseException:
        os.ftruncate(dst, out_base)  # no output: some records may be missing (holes of zeros)
        raise
    os.lseek(src, in_base + size, os.SEEK_SET)
    os.lseek(dst, out_base + layout.wire_size, os.SEEK_SET)


def _final_at_place(src: int, in_base: int, layout: FixedLayout, first: TrafficKeys) -> bytearray | None:
    """The FINAL record's plaintext, if it authenticates exactly where the layout puts it."""
    _, size, generation, seq, flags = layout.record(layout.count - 1)
    wire = memoryview(bytearray(size + _OVERHEAD))
    plain = bytearray(size)
    if _pread_into(src, wire, in_base + layout.wire_offset(layout.count - 1)) != len(wire):
        return None
    try:
        _worker_keys(first).open_at(generation, seq, flags, wire, memoryview(plain), layout.count - 1)
    except AuthenticationError:
        return None
    return plain


def _decrypt_placed(
    src: int,
    dst: int,
    opener: Opener,
    jobs: int,
    progress: Progress | None,
    stop: threading.Event | None,
) -> str:
    """Open the stream in the regular file ``src`` (from its position) into ``dst`` (at its
    position) in ``jobs`` workers, each opening whole blocks of records at their places, after
    the FINAL record authenticated at its place; "done" when done. With nothing written and
    ``src`` just after the header (read into ``opener``): "unplaced" when the stream does not
    keep the fixed layout, "failed" when a record fails (``dst`` cut back to where it
    started); then the caller reads it sequentially, which writes what a sequential reader
    writes and raises its error. A stop, Ctrl-C or I/O error cuts ``dst`` back and is raised."""
    in_base, out_base = os.lseek(src, 0, os.SEEK_CUR), os.lseek(dst, 0, os.SEEK_CUR)
    header, records = read_header(src, opener, in_base)
    os.lseek(src, in_base + len(header.raw), os.SEEK_SET)  # where a sequential reader goes on
    per_generation = promised_layout(header, records.limits)
    if per_generation is None:
        return "unplaced"
    layout = layout_of_size(header, per_generation, os.fstat(src).st_size - in_base)
    first = records.keys
    final = _final_at_place(src, in_base, layout, first) if layout is not None else None
    if layout is None or final is None:  # a size or a FINAL not where the layout puts them
        return "failed"
    record_size = layout.record_size
    per_block = _block_records(record_size)
    full = layout.count - 1  # the records before FINAL: all full
    blocks = -(-full // per_block)
    report = threading.Lock()

    def worker() -> Callable[[int], None]:
        chain = _worker_keys(first)
        wire = memoryview(bytearray(per_block * (record_size + _OVERHEAD)))
        plain = memoryview(bytearray(per_block * record_size))

        def run(block: int) -> None:
            start = block * per_block
            end = min(full, start + per_block)
            length = (end - start) * (record_size + _OVERHEAD)
            if _pread_into(src, wire[:length], in_base + layout.wire_offset(start)) != length:
                raise TruncatedStreamError("the file shrank while it was decrypted")
            pos = got = 0
            index = start
            for generation, seq, count, each, flags in layout.runs(start, end):
                chain.open_run_at(generation, seq, count, each, flags, wire[pos:], plain[got:], index)
                pos += count * (each + _OVERHEAD)
                got += count * each
                index += count
            _pwrite_all(dst, plain[:got], out_base + start * record_size)
            if progress is not None:
                with report:
                    progress(length)

        return run

    try:
        _in_parallel(max(1, min(jobs, blocks)), blocks, worker, stop)
        if _pread_into(src, memoryview(bytearray(1)), in_base + layout.wire_size):
            raise TrailingDataError("data follows the FINAL record")  # (it grew since)
        _pwrite_all(dst, memoryview(final), out_base + full * record_size)
    except ProtocolError:
        os.ftruncate(dst, out_base)
        return "failed"
    except BaseException:
        os.ftruncate(dst, out_base)
        raise
    finally:
        final[:] = bytes(len(final))
    if progress is not None:
        progress(len(header.raw) + layout.wire_size - layout.wire_offset(full))
    os.lseek(src, in_base + layout.wire_size, os.SEEK_SET)
    os.lseek(dst, out_base + layout.length, os.SEEK_SET)
    return "done"


# -- paths ----------------------------------------------------------------------------------


@contextmanager
def atomic_fd(
    path: StrPath | Destination,
    *,
    mode: int = 0o600,
    stop: threading.Event | None = None,
    read: Iterable[FileRead] = (),
) -> Iterator[int]:
    """A file descriptor whose content replaces ``path`` only if the block exits normally
    and no stop was requested by then (``pipeline.atomic_output``'s rules: temporary file,
    fsync, rename, mode; a FIFO or device of ours is written in place). ``path`` may be where
    ``_output.output_target`` decided it goes (the CLI decides first, then opens). ``read``:
    the files being read (``_output.FileRead``), which the output must not be, when it is
    opened and when it is renamed (SameFileError)."""
    output = open_output(path, mode, read=read)  # the one rule of where an output may go
    try:
        yield output.fileno()
        if not output.in_place:
            check_stop(stop)
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
    jobs: int = 1,
    tink: TinkKeyset | TinkStreamingKey | None = None,
) -> None:
    """Encrypt the file ``src`` into ``dst`` atomically, in this thread and ``jobs - 1`` more
    (``encrypt_fd``). Keyed, or given ``config=``, as ``gcmstream.pipeline``'s functions
    (``limits`` too); ``tink``: in Tink's format (docs/TINK.md), with ``context`` alone beside
    it (one worker: Tink's segments are sealed in order). ``dst`` being ``src`` (a regular
    file, a FIFO or a block device) raises SameFileError before anything is read or written,
    and so does ``dst`` made to lead to ``src`` meanwhile, before ``dst`` is replaced."""
    refuse_same_file(dst, [("input file", src)])
    sealer = sealer_for(
        config,
        tink,
        context=context,
        make=partial(new_sealer, fixed_layout=True),
        key=key,
        recipients=recipients,
        passphrase=passphrase,
        record_size=record_size,
        limits=limits,
    )
    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:  # the rule again on what is open: ``dst`` may lead to ``src`` by now (a link made)
        with atomic_fd(dst, stop=stop, read=[("input file", src, fd)]) as out:
            encrypt_fd(fd, out, sealer, progress=progress, stop=stop, jobs=jobs)
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
    jobs: int = 1,
    tink: TinkKeyset | TinkStreamingKey | None = None,
) -> None:
    """Decrypt the file ``src`` into ``dst`` atomically, in this thread and ``jobs - 1`` more
    (``decrypt_fd``): ``dst`` appears only once every record, FINAL included, authenticated
    and nothing followed it. Keyed, or given ``config=``, as ``gcmstream.pipeline``'s
    functions; ``tink``: Tink's format (docs/TINK.md), ``dst`` appearing once the last segment
    authenticated at the end of ``src`` (one worker). ``dst`` being ``src`` raises
    SameFileError before anything is read or written (made to lead to it meanwhile: before
    ``dst`` is replaced)."""
    refuse_same_file(dst, [("input file", src)])
    opener = opener_for(
        config,
        tink,
        context=context,
        make=new_opener,
        key=key,
        identities=identities,
        passphrase=passphrase,
        max_record_size=max_record_size,
    )
    fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:  # the rule again on what is open: ``dst`` may lead to ``src`` by now (a link made)
        with atomic_fd(dst, stop=stop, read=[("input file", src, fd)]) as out:
            decrypt_fd(fd, out, opener, progress=progress, stop=stop, jobs=jobs)
    except UnknownKeyError:
        refused = _key_for_stanzas(fd)  # (the placed path's read_header said it already)
        if refused is None:
            raise
        raise refused from None
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
    ``stop_wait`` seconds: ``on_abandon``. A cancellation before the worker thread started
    ``work`` returns at once, and ``work`` never runs."""
    import anyio  # here: the synchronous engine and the CLI's file commands load no event loop
    from anyio import to_thread

    stop = threading.Event()
    left = threading.Event()
    # Whether ``work`` started, decided once under the lock: a cancellation that comes before
    # the worker thread took the call (anyio then never runs it) has nothing to wait for, and
    # the call, if the thread takes it after all, does not start.
    turn = threading.Lock()
    started: list[bool] = []

    def target() -> _T:
        with turn:
            if stop.is_set():
                raise StoppedError("stopped before it started")
            started.append(True)
        try:
            return work(stop=stop)
        finally:
            left.set()

    try:
        return await to_thread.run_sync(target, abandon_on_cancel=True)
    except BaseException:
        with turn:
            stop.set()
            running = bool(started)
        if running:
            with anyio.CancelScope(shield=True):
                if not await to_thread.run_sync(left.wait, stop_wait) and on_abandon is not None:
                    on_abandon()
        raise
