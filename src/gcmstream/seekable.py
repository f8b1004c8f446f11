"""Random access to an encrypted file: ``open_file`` returns a read-only, seekable binary file
of its plaintext that decrypts only the records a read touches.

Opening reads and verifies the stream header (through an Opener: the same checks as every
reader), then finds every record's place and authenticates the FINAL record before any byte is
served, so the plaintext length is known and a truncated or extended file fails at open. The
rule: a plaintext offset is served only when it is authenticated, that is, when every record
before it is known to be the writer's records in the writer's order:

* A file whose header carries ``FIXED_LAYOUT`` (the file engine writes it; FORMAT.md 4.3) has
  full records except FINAL and a key update every N records: record ``i`` starts at
  ``header + i * (record_size + 21)``, so a seek is arithmetic. The header (bound by the key
  commitment) carries the promise, and each record is opened with the nonce, flags and length
  its index gives, so a record that authenticates is the writer's record ``i`` at offset
  ``i * record_size``. The file size gives FINAL's place; if FINAL does not authenticate
  exactly there, the file is refused at open (never walked for places): the walk below runs
  only to name the fault as a sequential reader would (AuthenticationError with the record,
  TruncatedStreamError, TrailingDataError), else MalformedRecordError.
* Any other stream (flushed, variable records) is walked once at open, authenticating every
  record in order, as a sequential reader does, before its length or flags are used to find
  the next: its plaintext offsets and where each key generation starts are kept (``array``, 8
  bytes per record and per generation). So a record edited, dropped, duplicated or moved
  fails at open (not only the reads touching it: the places of the records after it could not
  be authenticated), and a file forged without the key fails at its first forged record,
  whatever its size. Cost: one decrypting pass over the file at open (a sequential decrypt's
  CPU, in blocks of 256 KiB, one record of scratch); an authenticated length and end need it
  anyway. A damaged FIXED_LAYOUT file costs the same pass to name its fault (no index kept).

Only regular files are opened (a FIFO would block and cannot be read by place). The length
and places are those found at open: bytes appended later are not seen (FORMAT.md 8.1: a reader
stops at FINAL), and a file shrunk or rewritten later fails the reads that reach the change.

Reading record ``i``: its header and ciphertext are read with one ``preadv`` into a buffer of
one record, and opened with the nonce and key its position gives and the associated data its
position requires (the flags and length it must have): a record moved, cut, altered or
relabelled fails as AuthenticationError naming its number, its plaintext is wiped, and only
the reads that touch it fail; the file object stays usable for other ranges. One decrypted
record is kept for the next read; a read that covers a whole record decrypts it straight into
the caller's buffer. Memory: two record buffers, whatever the file size, plus the index of a
walked file (8 bytes per genuine record) and a few key generations (``records.KeyChain``). Reading
one byte anywhere reads at most one record from disk after open; opening a FIXED_LAYOUT file
reads the header and the FINAL record (and leaves FINAL decrypted), so one byte near the end
of a large one costs at most two records of disk reads.
"""

from __future__ import annotations

import bisect
import io
import os
import stat
import threading
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from .errors import (
    AuthenticationError,
    MalformedRecordError,
    TruncatedStreamError,
    UnsupportedEndpointError,
)
from .files import FixedLayout, layout_of_size, new_opener, promised_layout, read_header
from .format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    Keys,
    StreamHeader,
    byte_view,
)
from .pipeline import file_keywords
from .recipients import Identity
from .records import KeyChain, RecordLayer, check_record_length

if TYPE_CHECKING:
    from anyio import AsyncFile

    from .config import Configuration

__all__ = ("DecryptedFile", "open_file", "open_file_async", "open_regular")

StrPath: TypeAlias = str | os.PathLike[str]
_OVERHEAD = RECORD_HEADER_SIZE + TAG_SIZE
# The walk's read size: a few hundred KiB per system call rather than one call per record.
_WALK_BLOCK = 256 * 1024


class _Walked:
    """Record places found by the walk at open, which authenticated every record in order:
    plaintext starts (and the total at the end) and the first record of each key generation,
    8 bytes per record and per generation (``array``)."""

    def __init__(self, header_size: int, starts: array[int], generations: array[int]):
        self.header_size, self.starts, self.generations = header_size, starts, generations
        self.count = len(starts) - 1
        self.length = starts[-1]

    def find(self, pos: int) -> int:
        # the last record starting at or before pos: empty records share a start with the next
        return min(bisect.bisect_right(self.starts, pos) - 1, self.count - 1)

    def record(self, index: int) -> tuple[int, int, int, int, int]:
        start = self.starts[index]
        generation = bisect.bisect_right(self.generations, index) - 1
        seq = index - self.generations[generation]
        if index == self.count - 1:
            flags = FLAG_FINAL
        elif generation + 1 < len(self.generations) and self.generations[generation + 1] == index + 1:
            flags = FLAG_KEY_UPDATE
        else:
            flags = 0
        return start, self.starts[index + 1] - start, generation, seq, flags

    def wire_offset(self, index: int) -> int:
        return self.header_size + self.starts[index] + index * _OVERHEAD


_Layout: TypeAlias = FixedLayout | _Walked
_KeyChain = KeyChain  # its name here before the record layer took it (tests/test_seekable.py)


class DecryptedFile(io.RawIOBase):
    """The plaintext of an encrypted file, read-only and seekable (``open_file`` makes it).

    ``read``/``readinto`` fill what they are asked for up to the end (they return fewer bytes
    only at the end, or before a record that fails: the next call then raises its error), so
    it works as is with ``shutil.copyfileobj``, ``tarfile`` and ``zipfile``. Thread-safe: one
    lock covers the position and every call that reads or moves it (``seek``, ``tell``,
    ``read``, ``readinto``, ``readall``, ``close``), so calls from several threads take turns
    and each read returns the plaintext at one offset. ``length`` is the plaintext size,
    authenticated at open. Bytes appended to the file after open are not seen: the length
    and record places are those found at open (FORMAT.md 8.1: a reader stops at FINAL)."""

    def __init__(
        self,
        fd: int,
        name: str,
        header: StreamHeader,
        keys: KeyChain,
        layout: _Layout,
        plain: bytearray,
        cached: int,
    ) -> None:
        super().__init__()
        self._fd = fd
        self.name = name
        self.header = header
        self._layout = layout
        self.length = layout.length
        self._keys = keys
        self._pos = 0
        self._wire = bytearray(header.record_size + _OVERHEAD)
        self._plain = plain  # one record's plaintext buffer
        self._cached = cached  # the record whose plaintext is in _plain (-1: none)
        self._lock = threading.RLock()  # (readall calls readinto)

    @property
    def mode(self) -> str:
        return "rb"

    @property
    def records(self) -> int:
        """Records in the stream, FINAL included."""
        return self._layout.count

    @property
    def fixed_layout(self) -> bool:
        """True when record places come from the header's FIXED_LAYOUT field (no walk)."""
        return isinstance(self._layout, FixedLayout)

    def readable(self) -> bool:
        self._checkClosed()
        return True

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def tell(self) -> int:
        with self._lock:
            self._checkClosed()
            return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset`` from the start, the current position or the end (``whence`` 0, 1,
        2) and return the new position. A position past the end is allowed (reads there return
        nothing). A position before the start raises ValueError and leaves the position as it
        was, whatever ``whence`` is: a deliberate difference from ``io.BytesIO``, which clamps a
        relative seek before the start to 0 (``io.FileIO`` refuses it too, with OSError)."""
        with self._lock:
            return self._seek(offset, whence)

    def _seek(self, offset: int, whence: int) -> int:
        self._checkClosed()
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.length + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readall(self) -> bytes:
        """Everything from the position to the end, or the error of the first record that fails:
        readinto returns what authenticated before a bad record and raises on the next call, so
        this loops to the end rather than take one short read for the end of the file."""
        with self._lock:
            buf = bytearray(max(0, self.length - self._pos))
            got = 0
            with memoryview(buf) as view:
                while got < len(buf) and (count := self.readinto(view[got:])):
                    got += count
            del buf[got:]
            return bytes(buf)

    def readinto(self, buffer: Buffer) -> int:  # type: ignore[override]
        with self._lock:
            self._checkClosed()
            target = byte_view(buffer, writable=True)
            got = 0
            layout = self._layout
            pos = self._pos
            try:
                while got < len(target) and pos < self.length:
                    index = layout.find(pos)
                    start, size, _, _, _ = layout.record(index)
                    skip = pos - start
                    if index != self._cached and skip == 0 and size <= len(target) - got:
                        self._open(index, target[got : got + size])  # straight into the caller's
                        count = size
                    else:
                        if index != self._cached:
                            self._cached = -1  # (a failure wipes the buffer)
                            self._open(index, memoryview(self._plain)[:size])
                            self._cached = index
                        count = min(size - skip, len(target) - got)
                        target[got : got + count] = memoryview(self._plain)[skip : skip + count]
                    got += count
                    pos += count
            except (AuthenticationError, MalformedRecordError, TruncatedStreamError):
                if got:
                    return got  # what authenticated first; the next read raises
                raise
            finally:
                self._pos = pos
            return got

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self._plain[:] = bytes(len(self._plain))
                self._cached = -1
                os.close(self._fd)
        super().close()

    def _open(self, index: int, out: memoryview) -> None:
        """Read record ``index`` from disk and decrypt it into ``out`` (its size), or raise,
        leaving ``out`` wiped."""
        _open_record(self._fd, self._layout, index, self._keys, self._wire, out)

    def __repr__(self) -> str:
        return f"<DecryptedFile {self.name!r} length={self.length} records={self.records}>"


def _open_record(
    fd: int,
    layout: _Layout,
    index: int,
    keys: KeyChain,
    wire: bytearray,
    out: memoryview,
) -> None:
    """Read record ``index`` with one ``preadv`` into ``wire`` and open it into ``out`` (its
    plaintext size) with the flags and length its place requires (``KeyChain.open_at``), or
    raise with ``out`` wiped."""
    _, size, generation, seq, flags = layout.record(index)
    length = size + _OVERHEAD
    view = memoryview(wire)[:length]
    try:
        got = os.preadv(fd, [view], layout.wire_offset(index))
        if got != length:
            raise TruncatedStreamError(f"the file ended inside record {index}: it shrank since it was opened")
        keys.open_at(generation, seq, flags, view, out, index)
    finally:
        view.release()


# -- opening ----------------------------------------------------------------------------------


class _Blocks:
    """Sequential reads of the file in blocks of a few hundred KiB (one ``preadv`` per block,
    not one per record), each record as a view into the block."""

    def __init__(self, fd: int, file_size: int, start: int, record_size: int) -> None:
        self._fd, self._file_size = fd, file_size
        self._block = bytearray(min(max(_WALK_BLOCK, record_size + _OVERHEAD), file_size - start))
        self._start = self._end = 0  # file offsets the block holds

    def view(self, offset: int, count: int) -> memoryview:
        """``count`` bytes at ``offset`` (the caller checked they are in the file)."""
        if offset < self._start or offset + count > self._end:
            size = min(len(self._block), self._file_size - offset)
            with memoryview(self._block)[:size] as target:
                got = os.preadv(self._fd, [target], offset)
            if got < count:
                raise TruncatedStreamError("the file shrank while it was being opened")
            self._start, self._end = offset, offset + got
        return memoryview(self._block)[offset - self._start : offset - self._start + count]


def _walk(fd: int, header: StreamHeader, file_size: int, records: RecordLayer, *, index: bool) -> _Walked:
    """Authenticate every record in order with ``records`` (at generation 0, no record opened),
    as a sequential reader does (``RecordLayer.open_record``: the same limits, record checks,
    R1..R4, and errors), and return their places (``index``) once the FINAL record
    authenticated and ends the file. A record is authenticated before anything it says (its
    length, its flags) is used to find the next one, so every place in the result comes from
    authenticated records only: a record edited, moved, dropped or duplicated fails here, and
    a file forged without the key costs one record before it fails. Cost: one decrypting pass
    over the file into one record of scratch memory, and (``index``) 8 bytes per record and
    per key generation."""
    header_size = len(header.raw)
    starts = array("Q", [0])
    generations = array("Q", [0])
    scratch = memoryview(bytearray(header.record_size))
    blocks = _Blocks(fd, file_size, header_size, header.record_size)
    offset, plain = header_size, 0
    try:
        while True:
            count = records.records
            if file_size - offset < RECORD_HEADER_SIZE:
                where = "at a record boundary" if offset == file_size else "inside a record header"
                raise TruncatedStreamError(
                    f"input ended {where} after {count} records, without a FINAL record: "
                    "the file was cut short"
                )
            flags, length = RECORD_HEADER.unpack(blocks.view(offset, RECORD_HEADER_SIZE))
            check_record_length(length, records.max_ciphertext, count)
            size = length - TAG_SIZE
            end = offset + RECORD_HEADER_SIZE + length
            if end > file_size:
                raise TruncatedStreamError(f"input ended inside record {count}, without a FINAL record")
            with blocks.view(offset, RECORD_HEADER_SIZE + length) as wire:
                # as it is on disk: a forged flag or length fails here
                final = records.open_record(
                    flags,
                    size,
                    wire[:RECORD_HEADER_SIZE],
                    wire[RECORD_HEADER_SIZE:],
                    scratch[:size],
                    end != file_size,
                )
            plain += size
            if index:
                starts.append(plain)
            if final:
                return _Walked(header_size, starts, generations)
            offset = end
            if index and flags & FLAG_KEY_UPDATE:
                generations.append(count + 1)
    finally:
        scratch[:] = bytes(len(scratch))


def _final_in_place(fd: int, fixed: FixedLayout, keys: KeyChain, wire: bytearray, plain: bytearray) -> bool:
    """True when the FINAL record authenticates where the layout puts it (left in ``plain``)."""
    try:
        _open_record(fd, fixed, fixed.count - 1, keys, wire, memoryview(plain)[: fixed.last])
    except AuthenticationError:
        return False
    return True


def open_regular(path: StrPath | int) -> int:
    """A descriptor of ``path`` if it is a regular file (every random-access reader: this
    module's and ``tinkfile``'s). Opened without blocking (a FIFO with
    no writer would block ``open``), then checked: anything else raises
    UnsupportedEndpointError. ``path`` may be a descriptor open for reading: it is duplicated
    (the caller keeps its own), not opened again by a name that may lead elsewhere by now."""
    if isinstance(path, bool):
        raise TypeError("a path or a file descriptor is needed, not a bool")
    fd = os.dup(path) if isinstance(path, int) else os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsupportedEndpointError(
                "random access needs a regular file (not a FIFO, socket or device): "
                "it reads records by their place"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(
    path: StrPath | int,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
) -> DecryptedFile:
    """Open the encrypted file ``path`` for random-access reading of its plaintext, keyed by
    ``key``, ``identities`` or ``passphrase`` as an Opener is.

    The header is verified and the FINAL record authenticated before this returns: a file for
    another key or context, cut short or followed by other bytes raises the same
    ``ProtocolError`` a sequential reader would (at open, not at the end). Every plaintext
    offset served is authenticated: a FIXED_LAYOUT file whose FINAL record is not where the
    layout puts it is refused, and any other file has every record authenticated in order at
    open (one pass; see the module docstring). Reads decrypt only the records they touch; a
    record that fails raises AuthenticationError with its number for the reads that touch it,
    and the file stays usable for the rest. A path that is not a regular file raises
    UnsupportedEndpointError without waiting (a FIFO is not opened for reading); ``path`` may
    also be a file descriptor open for reading, which is duplicated (yours stays yours). Bytes
    appended after open are not seen. Close it (or use it as a context manager) to release
    the descriptor. Keyed, or given ``config=``, as ``gcmstream.pipeline``'s functions
    (its key, ``context`` and ``max_record_size``)."""
    options = file_keywords(
        config,
        key=key,
        identities=identities,
        passphrase=passphrase,
        context=context,
        max_record_size=max_record_size,
    )
    opener = new_opener(**options)
    fd = open_regular(path)
    try:
        file_size = os.fstat(fd).st_size
        header, records = read_header(fd, opener)
        keys = KeyChain(records.keys)
        plain = bytearray(header.record_size)
        wire = bytearray(header.record_size + _OVERHEAD)
        layout: _Layout
        per_generation = promised_layout(header, records.limits)
        if per_generation is not None:
            fixed = layout_of_size(header, per_generation, file_size)
            if fixed is None or not _final_in_place(fd, fixed, keys, wire, plain):
                # Cut, extended, edited or not as announced: refused, never walked for places.
                # The walk (the sequential reader's checks, no index) names the fault; a
                # writer that broke its own promise is refused too.
                _walk(fd, header, file_size, records, index=False)
                raise MalformedRecordError(
                    "the records are not where the header's FIXED_LAYOUT field puts them"
                )
            layout = fixed
        else:
            layout = _walk(fd, header, file_size, records, index=True)
            _, size, _, _, _ = layout.record(layout.count - 1)
            _open_record(fd, layout, layout.count - 1, keys, wire, memoryview(plain)[:size])
        # FINAL stays decrypted: reading the end costs no more disk reads
        name = f"file descriptor {path}" if isinstance(path, int) else os.fspath(path)
        return DecryptedFile(fd, name, header, keys, layout, plain, layout.count - 1)
    except BaseException:
        os.close(fd)
        raise


async def open_file_async(
    path: StrPath,
    *,
    config: Configuration | None = None,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer | None = None,
    max_record_size: int | None = None,
) -> AsyncFile[bytes]:
    """``open_file`` for anyio (asyncio or trio): opening and every ``read``, ``readinto``,
    ``seek`` and ``tell`` run in a worker thread (``anyio.wrap_file``); ``async with`` and
    ``aclose`` close it."""
    import anyio  # here: the synchronous open_file (info, decrypt --offset) loads no event loop
    from anyio import to_thread

    file = await to_thread.run_sync(
        lambda: open_file(
            path,
            config=config,
            key=key,
            identities=identities,
            passphrase=passphrase,
            context=context,
            max_record_size=max_record_size,
        )
    )
    return anyio.wrap_file(cast("Any", file))
