"""Random access to an encrypted file: ``open_file`` returns a read-only, seekable binary file
of its plaintext that decrypts only the records a read touches.

Opening reads and verifies the stream header (through an Opener: the same checks as every
reader), then finds every record's place and authenticates the FINAL record before any byte is
served, so the plaintext length is known and a truncated or extended file fails at open:

* A file whose header carries ``FIXED_LAYOUT`` (the file engine writes it; FORMAT.md 4.3) has
  full records except FINAL and a key update every N records: record ``i`` starts at
  ``header + i * (record_size + 21)``, so a seek is arithmetic. The file size gives the FINAL
  record's place; if it does not authenticate there, the file is walked as below for the
  precise error (or, had the writer lied, a correct index).
* Any other stream (flushed, variable records) is walked once at open, reading the 5-byte
  header of every record (no decryption): its plaintext offsets (8 bytes per record) and where
  each key generation starts are kept. The walk applies the reader's record checks (R1..R4),
  and the FINAL record it finds is authenticated and must end the file.

Reading record ``i``: its header and ciphertext are read with one ``preadv`` into a buffer of
one record, and opened with the nonce and key its position gives and the associated data its
position requires (the flags and length it must have): a record moved, cut, altered or
relabelled fails as AuthenticationError naming its number, its plaintext is wiped, and only
the reads that touch it fail; the file object stays usable for other ranges. One decrypted
record is kept for the next read; a read that covers a whole record decrypts it straight into
the caller's buffer. Memory: two record buffers, whatever the file size (plus the index of a
walked file). Reading one byte anywhere reads at most one record from disk after open, and
open reads the header and the FINAL record (and opening it leaves FINAL decrypted), so one byte
near the end of a large file costs at most two records of disk reads.
"""

from __future__ import annotations

import bisect
import io
import os
import threading
from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import anyio
from anyio import AsyncFile, to_thread
from cryptography.exceptions import InvalidTag

from .errors import (
    AuthenticationError,
    MalformedRecordError,
    RecordTooLargeError,
    TrailingDataError,
    TruncatedStreamError,
)
from .files import layout_generation_size, new_opener
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_FIXED_SIZE,
    KNOWN_FLAGS,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    FieldType,
    KeyLimits,
    Keys,
    StreamHeader,
    TrafficKeys,
    byte_view,
)
from .recipients import Identity
from .ring import check_record_length

if TYPE_CHECKING:
    from .opener import Opener

__all__ = ("DecryptedFile", "open_file", "open_file_async")

StrPath: TypeAlias = str | os.PathLike[str]
_OVERHEAD = RECORD_HEADER_SIZE + TAG_SIZE


class _Fixed:
    """Record places of a FIXED_LAYOUT file: arithmetic."""

    def __init__(self, header_size: int, record_size: int, per_generation: int, count: int, last: int):
        self.header_size, self.record_size, self.per_generation = header_size, record_size, per_generation
        self.count, self.last = count, last  # records, FINAL's plaintext bytes
        self.length = (count - 1) * record_size + last

    def find(self, pos: int) -> int:
        return min(pos // self.record_size, self.count - 1)

    def record(self, index: int) -> tuple[int, int, int, int, int]:
        """(plaintext start, plaintext size, generation, seq, flags) of record ``index``."""
        final = index == self.count - 1
        generation, seq = divmod(index, self.per_generation)
        flags = FLAG_FINAL if final else FLAG_KEY_UPDATE if seq == self.per_generation - 1 else 0
        return index * self.record_size, self.last if final else self.record_size, generation, seq, flags

    def wire_offset(self, index: int) -> int:
        return self.header_size + index * (self.record_size + _OVERHEAD)


class _Walked:
    """Record places found by walking the record headers: plaintext starts (and the total at
    the end), and the first record of each key generation."""

    def __init__(self, header_size: int, starts: array[int], generations: list[int]):
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


_Layout: TypeAlias = _Fixed | _Walked


class _KeyChain:
    """The keys of each key generation, derived (FORMAT.md 5.4) on first use and kept: a few
    per 64 GiB of a file."""

    def __init__(self, first: TrafficKeys) -> None:
        self._keys = [first]

    def __call__(self, generation: int) -> TrafficKeys:
        keys = self._keys
        while len(keys) <= generation:
            keys.append(keys[-1].next())
        return keys[generation]


class DecryptedFile(io.RawIOBase):
    """The plaintext of an encrypted file, read-only and seekable (``open_file`` makes it).

    ``read``/``readinto`` fill what they are asked for up to the end (they return fewer bytes
    only at the end, or before a record that fails: the next call then raises its error), so
    it works as is with ``shutil.copyfileobj``, ``tarfile`` and ``zipfile``. Thread-safe: one
    call at a time. ``length`` is the plaintext size, known since open."""

    def __init__(
        self,
        fd: int,
        name: str,
        header: StreamHeader,
        keys: _KeyChain,
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
        self._lock = threading.Lock()

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
        return isinstance(self._layout, _Fixed)

    def readable(self) -> bool:
        self._checkClosed()
        return True

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def tell(self) -> int:
        self._checkClosed()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
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
        buf = bytearray(max(0, self.length - self._pos))
        got = self.readinto(buf)
        del buf[got:]
        return bytes(buf)

    def readinto(self, buffer: Buffer) -> int:  # type: ignore[override]
        with self._lock:
            self._checkClosed()
            target = byte_view(buffer, writable=True)
            got = 0
            layout = self._layout
            try:
                while got < len(target) and self._pos < self.length:
                    index = layout.find(self._pos)
                    start, size, _, _, _ = layout.record(index)
                    skip = self._pos - start
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
                    self._pos += count
            except (AuthenticationError, MalformedRecordError, TruncatedStreamError):
                if got:
                    return got  # what authenticated first; the next read raises
                raise
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
    keys_for: _KeyChain,
    wire: bytearray,
    out: memoryview,
) -> None:
    """Read record ``index`` with one ``preadv`` into ``wire`` and decrypt it into ``out``
    (its plaintext size) with the flags and length its place requires, or raise with ``out``
    wiped."""
    _, size, generation, seq, flags = layout.record(index)
    length = size + _OVERHEAD
    view = memoryview(wire)[:length]
    try:
        got = os.preadv(fd, [view], layout.wire_offset(index))
        if got != length:
            raise TruncatedStreamError(f"the file ended inside record {index}: it shrank since it was opened")
        aad = RECORD_HEADER.pack(flags, size + TAG_SIZE)
        if view[:RECORD_HEADER_SIZE] != aad:  # moved, cut or relabelled: it cannot authenticate
            out[:] = bytes(len(out))
            raise AuthenticationError(index)
        keys = keys_for(generation)
        try:
            keys.aead.decrypt_into(keys.nonce(seq), view[RECORD_HEADER_SIZE:], aad, out)
        except InvalidTag:
            out[:] = bytes(len(out))
            raise AuthenticationError(index) from None
    finally:
        view.release()


# -- opening ----------------------------------------------------------------------------------


def _read_header(fd: int, opener: Opener) -> tuple[StreamHeader, TrafficKeys]:
    """Feed the header to ``opener`` (all of its checks) and return it with its keys."""
    offset = 0
    need = HEADER_FIXED_SIZE
    while not opener.header_verified():
        chunk = os.pread(fd, need, offset) if need else b""
        if not chunk:
            opener.receive_eof()
            continue
        opener.receive_data(chunk)
        offset += len(chunk)
        need = opener.header_missing
    header = opener.header
    direction = opener._direction  # the verified stream's generation-0 keys
    if header is None or direction is None:  # unreachable once header_verified() is True
        raise TruncatedStreamError("input ended before the stream header")
    return header, direction.keys


def _fixed_layout(header: StreamHeader, file_size: int) -> _Fixed | None:
    value = header.field(FieldType.FIXED_LAYOUT)
    per_generation = layout_generation_size(value) if value is not None else None
    body = file_size - len(header.raw)
    limits = KeyLimits()
    if per_generation is None or body < _OVERHEAD or per_generation > limits.hard_records:
        return None  # (walked instead: the walk applies the limits record by record)
    if per_generation * header.record_size > limits.hard_bytes:
        return None
    full, last = divmod(body - _OVERHEAD, header.record_size + _OVERHEAD)
    if last > header.record_size:
        return None
    return _Fixed(len(header.raw), header.record_size, per_generation, full + 1, last)


def _walk(fd: int, header: StreamHeader, file_size: int, keys: _KeyChain, limits: KeyLimits) -> _Walked:
    """Index the records by their 5-byte headers; authenticate the FINAL record found."""
    starts = array("Q", [0])
    generations = [0]
    try:
        return _walk_records(fd, header, file_size, keys, limits, starts, generations)
    except (TruncatedStreamError, RecordTooLargeError, MalformedRecordError):
        if len(starts) > 1:
            _authenticate_last(fd, _Walked(len(header.raw), starts, generations), keys)
        raise


def _walk_records(
    fd: int,
    header: StreamHeader,
    file_size: int,
    keys: _KeyChain,
    limits: KeyLimits,
    starts: array[int],
    generations: list[int],
) -> _Walked:
    header_size = len(header.raw)
    max_ciphertext = header.record_size + TAG_SIZE
    offset, plain, seq, key_bytes = header_size, 0, 0, 0
    while True:
        index = len(starts) - 1
        if file_size - offset < RECORD_HEADER_SIZE:
            where = "at a record boundary" if offset == file_size else "inside a record header"
            raise TruncatedStreamError(
                f"input ended {where} after {index} records, without a FINAL record: the file was cut short"
            )
        flags, length = RECORD_HEADER.unpack(os.pread(fd, RECORD_HEADER_SIZE, offset))
        check_record_length(length, max_ciphertext)
        size = length - TAG_SIZE
        if seq >= limits.hard_records or key_bytes + size > limits.hard_bytes:
            raise MalformedRecordError(f"record {index}: the writer passed a per-key limit")
        end = offset + RECORD_HEADER_SIZE + length
        if end > file_size:
            raise TruncatedStreamError(f"input ended inside record {index}, without a FINAL record")
        starts.append(plain + size)
        odd = bool(flags & ~KNOWN_FLAGS) or flags == FLAG_FINAL | FLAG_KEY_UPDATE
        if not size and not flags & FLAG_FINAL and not odd:
            # an empty record (a key update's) is never read for its plaintext: check it now,
            # 21 bytes, so that the whole walked structure is authenticated
            empty = bytearray(RECORD_HEADER_SIZE + TAG_SIZE)
            current = keys(len(generations) - 1)
            if os.preadv(fd, [empty], offset) != len(empty):
                raise TruncatedStreamError(f"input ended inside record {index}")
            try:
                current.aead.decrypt(current.nonce(seq), bytes(empty[RECORD_HEADER_SIZE:]), bytes(empty[:5]))
            except InvalidTag:
                raise AuthenticationError(index) from None
        elif flags & FLAG_FINAL or odd:
            # authenticate it as it is on disk (a forged flag fails here), then its rules
            layout = _Walked(header_size, starts, generations)
            wire = bytearray(RECORD_HEADER_SIZE + length)
            out = memoryview(bytearray(size))
            aad = RECORD_HEADER.pack(flags, length)
            current = keys(len(generations) - 1)
            view = memoryview(wire)
            os.preadv(fd, [view], offset)
            try:
                current.aead.decrypt_into(current.nonce(seq), view[RECORD_HEADER_SIZE:], aad, out)
            except InvalidTag:
                raise AuthenticationError(index) from None
            finally:
                out[:] = bytes(size)
            if flags & ~KNOWN_FLAGS:
                raise MalformedRecordError(f"record {index} has unknown flags 0x{flags:02x}")
            if odd:
                raise MalformedRecordError(f"record {index} has both FINAL and KEY_UPDATE")
            if end != file_size:
                raise TrailingDataError(f"data follows the FINAL record (record {index})")
            return layout
        plain += size
        offset = end
        if flags & FLAG_KEY_UPDATE:
            generations.append(index + 1)
            seq, key_bytes = 0, 0
        else:
            seq, key_bytes = seq + 1, key_bytes + size


def _authenticate_last(fd: int, layout: _Walked, keys: _KeyChain) -> None:
    """Open the last record the walk passed, as it is on disk: when the walk stops at a fault
    (no FINAL at the end, a length out of range), the record before it is the likely culprit
    (a cleared FINAL flag, an altered length), and a sequential reader would have failed its
    authentication first: AuthenticationError then, else nothing."""
    index = layout.count - 1
    _, size, generation, seq, _ = layout.record(index)
    wire = bytearray(size + _OVERHEAD)
    os.preadv(fd, [wire], layout.wire_offset(index))
    current = keys(generation)
    try:
        current.aead.decrypt(
            current.nonce(seq), bytes(wire[RECORD_HEADER_SIZE:]), bytes(wire[:RECORD_HEADER_SIZE])
        )
    except InvalidTag:
        raise AuthenticationError(index) from None


def open_file(
    path: StrPath,
    *,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer = b"",
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
) -> DecryptedFile:
    """Open the encrypted file ``path`` for random-access reading of its plaintext, keyed by
    ``key``, ``identities`` or ``passphrase`` as an Opener is.

    The header is verified and the FINAL record authenticated before this returns: a file for
    another key or context, cut short or followed by other bytes raises the same
    ``ProtocolError`` a sequential reader would (at open, not at the end). Reads decrypt only
    the records they touch; a record that fails raises AuthenticationError with its number
    for the reads that touch it, and the file stays usable for the rest. Close it (or use it
    as a context manager) to release the descriptor."""
    opener = new_opener(
        key, identities=identities, passphrase=passphrase, context=context, max_record_size=max_record_size
    )
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        file_size = os.fstat(fd).st_size
        header, first_keys = _read_header(fd, opener)
        keys = _KeyChain(first_keys)
        fixed = _fixed_layout(header, file_size)
        layout: _Layout | None = fixed
        plain = bytearray(header.record_size)
        wire = bytearray(header.record_size + _OVERHEAD)
        if fixed is not None:
            try:
                _open_record(fd, fixed, fixed.count - 1, keys, wire, memoryview(plain)[: fixed.last])
            except AuthenticationError:
                layout = None  # cut, extended or not as announced: the walk says which
        if layout is None:
            layout = _walk(fd, header, file_size, keys, KeyLimits())
            _, size, _, _, _ = layout.record(layout.count - 1)
            _open_record(fd, layout, layout.count - 1, keys, wire, memoryview(plain)[:size])
        # FINAL stays decrypted: reading the end costs no more disk reads
        return DecryptedFile(fd, os.fspath(path), header, keys, layout, plain, layout.count - 1)
    except BaseException:
        os.close(fd)
        raise


async def open_file_async(
    path: StrPath,
    *,
    key: Keys | None = None,
    identities: Iterable[Identity] | None = None,
    passphrase: str | bytes | None = None,
    context: Buffer = b"",
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
) -> AsyncFile[bytes]:
    """``open_file`` for anyio (asyncio or trio): opening and every ``read``, ``readinto``,
    ``seek`` and ``tell`` run in a worker thread (``anyio.wrap_file``); ``async with`` and
    ``aclose`` close it."""
    file = await to_thread.run_sync(
        lambda: open_file(
            path,
            key=key,
            identities=identities,
            passphrase=passphrase,
            context=context,
            max_record_size=max_record_size,
        )
    )
    return anyio.wrap_file(cast("Any", file))
