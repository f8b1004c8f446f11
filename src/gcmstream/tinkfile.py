"""Random access to a Tink AES-GCM-HKDF streaming ciphertext in a file, as Tink's seekable
decrypting channel (Java, C++) offers and Tink's Python package does not: ``open_tink_file``
returns a read-only, seekable binary file of the plaintext that opens only the segments a read
touches.

Every place is arithmetic: segment 0 lies after the header and is shorter by it, segment ``i``
starts at ``i * ciphertext_segment_size``, and the file's size gives the last segment. At open
the header is read, segment 0 is opened (each key of the keyset tried, as the sequential
reader does) and the last segment is authenticated as the last, so the plaintext length is
known and a cut or extended file fails at open, not at its end. A segment opened at index
``i`` with the nonce flag its place gives authenticates only as the writer's segment ``i``
of a stream that ends where the file ends: a segment moved, dropped or altered fails as
AuthenticationError naming its index, for the reads that touch it; the file stays usable for
the rest. Memory: two segment buffers, whatever the file size.
"""

from __future__ import annotations

import io
import os
import threading
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from cryptography.exceptions import InvalidTag

from .errors import AuthenticationError, MalformedHeaderError, StreamClosedError, TruncatedStreamError
from .format import TAG_SIZE, Buffer, byte_view
from .records import TinkSegments
from .seekable import open_regular
from .tinkstream import NONCE_PREFIX_SIZE, TinkKeyset, TinkStreamingKey, as_tink_keyset

if TYPE_CHECKING:
    from anyio import AsyncFile

__all__ = ("TinkDecryptedFile", "open_tink_file", "open_tink_file_async")

StrPath: TypeAlias = str | os.PathLike[str]


class _Layout:
    """Where the segments of a ``file_size``-byte ciphertext lie, for one key's sizes."""

    def __init__(self, header: int, wire: int, file_size: int) -> None:
        self.header, self.wire = header, wire
        body = file_size - header
        if body <= wire - header:
            self.count, self.last_wire = 1, body
        else:
            self.count = 1 + -(-(file_size - wire) // wire)
            self.last_wire = file_size - (self.count - 1) * wire
        self.first_plain = wire - header - TAG_SIZE
        self.plain = wire - TAG_SIZE
        self.length = self.plain_start(self.count - 1) + self.last_wire - TAG_SIZE

    def offset(self, index: int) -> int:
        return self.header if index == 0 else index * self.wire

    def wire_size(self, index: int) -> int:
        if index == self.count - 1:
            return self.last_wire
        return self.wire - self.header if index == 0 else self.wire

    def plain_start(self, index: int) -> int:
        return 0 if index == 0 else self.first_plain + (index - 1) * self.plain


class TinkDecryptedFile(io.RawIOBase):
    """The plaintext of a Tink ciphertext file, read by place (``open_tink_file``). ``key`` is
    the keyset's key it opened under; ``length`` the plaintext bytes, authenticated at open."""

    def __init__(self, fd: int, name: str, opened: _Opened) -> None:
        super().__init__()
        self._fd, self.name = fd, name
        self._layout, self._segments, self.key = opened.layout, opened.segments, opened.key
        self._plain, self._wire = opened.plain, opened.wire
        self._cached = opened.cached  # the index of the segment held decrypted in _plain
        self._pos = 0
        # threads sharing the file take turns: the position, the cache and the scratch
        # buffers are one reader's
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<TinkDecryptedFile name={self.name!r} length={self.length} segments={self.segments}>"

    @property
    def length(self) -> int:
        """Plaintext bytes, authenticated at open."""
        return self._layout.length

    @property
    def segments(self) -> int:
        return self._layout.count

    def readable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return True

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        with self._lock:
            return self._seek(offset, whence)

    def _seek(self, offset: int, whence: int) -> int:
        self._check_open()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.length}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence!r}, should be 0, 1 or 2)")
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Buffer) -> int:  # type: ignore[override]
        with self._lock:
            return self._readinto(buffer)

    def _readinto(self, buffer: Buffer) -> int:
        self._check_open()
        out = byte_view(buffer, writable=True)
        wanted = len(out)
        written = 0
        layout = self._layout
        length, first_plain, plain, last_index = (
            layout.length,
            layout.first_plain,
            layout.plain,
            layout.count - 1,
        )
        pos = self._pos
        try:
            while written < wanted and pos < length:
                # the segment holding ``pos`` and where it starts (plain_start, inlined)
                if pos < first_plain:
                    index, start = 0, 0
                else:
                    index = min(last_index, 1 + (pos - first_plain) // plain)
                    start = first_plain + (index - 1) * plain
                skip = pos - start
                size = layout.wire_size(index) - TAG_SIZE
                if skip == 0 and size <= wanted - written and index != self._cached:
                    self._open(index, out[written : written + size])  # a whole segment: in place
                    count = size
                else:
                    if index != self._cached:
                        self._cached = -1
                        self._open(index, memoryview(self._plain)[:size])
                        self._cached = index
                    count = min(size - skip, wanted - written)
                    out[written : written + count] = memoryview(self._plain)[skip : skip + count]
                written += count
                pos += count
        finally:
            self._pos = pos
        return written

    def _open(self, index: int, out: memoryview) -> None:
        _open_segment(self._fd, self._layout, self._segments, self._wire, index, out)

    def _check_open(self) -> None:
        if self.closed:
            raise StreamClosedError("I/O operation on a closed TinkDecryptedFile")

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self.closed:
            os.close(self._fd)
            plain = getattr(self, "_plain", None)
            if plain is not None:
                plain[:] = bytes(len(plain))
        super().close()


def open_tink_file(
    path: StrPath, keys: TinkKeyset | TinkStreamingKey, associated_data: Buffer = b""
) -> TinkDecryptedFile:
    """Open the Tink ciphertext file ``path`` for random-access reading of its plaintext.

    Segment 0 and the last segment are authenticated before this returns (the key found, the
    length known: a cut or extended file raises here, as the sequential reader would at its
    end); reads open only the segments they touch, and a segment that fails raises
    AuthenticationError for the reads that touch it. A path that is not a regular file raises
    UnsupportedEndpointError without waiting. Close it (or use ``with``)."""
    keyset = as_tink_keyset(keys)
    fd = open_regular(path)
    try:
        opened = _find_key(fd, keyset, bytes(associated_data), os.fstat(fd).st_size)
    except BaseException:
        os.close(fd)  # no file object owns it yet: closed once, here
        raise
    return TinkDecryptedFile(fd, os.fspath(path), opened)


class _Opened:
    """What opening found: the stream's key, its layout and segment cipher, and the scratch
    buffers with the segment left decrypted in ``plain``."""

    def __init__(
        self,
        key: TinkStreamingKey,
        layout: _Layout,
        segments: TinkSegments,
        plain: bytearray,
        wire: bytearray,
        cached: int,
    ) -> None:
        self.key, self.layout, self.segments = key, layout, segments
        self.plain, self.wire, self.cached = plain, wire, cached


def _find_key(fd: int, keys: TinkKeyset, associated_data: bytes, file_size: int) -> _Opened:
    """Read the header; try each key that makes such a header, in the sequential reader's
    order (``TinkOpener``: smallest segments first): the first whose layout of this file size
    fits and under which segment 0 authenticates is the stream's, as there, so the last
    segment's failure is its own verdict (its index, or a cut), the one ``tink_decrypt`` gives.
    A key whose layout or segment 0 fails is passed over, as Tink's reader passes over keys,
    and the verdict when none fits names a truncation if one of them saw one."""
    first = os.pread(fd, 1, 0)
    if not first:
        raise TruncatedStreamError("the Tink file is empty: no header")
    candidates = [key for key in keys.keys if key.header_size == first[0]]
    if not candidates:
        raise MalformedHeaderError(
            f"the Tink header's length byte is {first[0]}, and no key of this keyset makes such a header"
        )
    header = os.pread(fd, first[0], 0)
    if file_size < len(header) + TAG_SIZE:
        raise TruncatedStreamError(
            f"the Tink file ends after {file_size} bytes, inside its header or first segment"
        )
    salt, prefix = header[1:-NONCE_PREFIX_SIZE], header[-NONCE_PREFIX_SIZE:]
    truncation: TruncatedStreamError | None = None
    for key in sorted(candidates, key=lambda key: key.ciphertext_segment_size):
        layout = _Layout(len(header), key.ciphertext_segment_size, file_size)
        if layout.last_wire < TAG_SIZE:
            truncation = truncation or TruncatedStreamError(
                f"the Tink file ends {layout.last_wire} bytes into segment {layout.count - 1}, before its tag"
            )
            continue
        segments = key.segments(salt, prefix, associated_data)
        plain, wire = bytearray(layout.plain), bytearray(layout.wire)
        try:
            _open_segment(fd, layout, segments, wire, 0, memoryview(plain)[: layout.wire_size(0) - TAG_SIZE])
        except TruncatedStreamError as exc:
            truncation = truncation or exc
            continue
        except AuthenticationError:
            continue
        last = layout.count - 1
        if last:  # under the stream's key now: a failure here is the file's verdict
            _open_segment(fd, layout, segments, wire, last, memoryview(plain)[: layout.last_wire - TAG_SIZE])
        return _Opened(key, layout, segments, plain, wire, last)
    raise truncation or AuthenticationError(0)


def _open_segment(
    fd: int, layout: _Layout, segments: TinkSegments, scratch: bytearray, index: int, out: memoryview
) -> None:
    """Open segment ``index`` of the file (read into ``scratch``; the last flag its place
    gives) into ``out``: AuthenticationError with its index if it does not authenticate there;
    a last segment that opens as a middle one means the file was cut at a segment boundary."""
    wire = memoryview(scratch)[: layout.wire_size(index)]
    if os.preadv(fd, [wire], layout.offset(index)) != len(wire):
        raise TruncatedStreamError(f"segment {index}: the file is shorter than at open")
    last = index == layout.count - 1
    try:
        segments.open(index, last, wire, out)
    except InvalidTag:
        full = layout.wire - layout.header if index == 0 else layout.wire
        if last and len(wire) == full and segments.authenticates(index, False, wire):
            raise TruncatedStreamError(
                f"the Tink file ends after segment {index}, which is not its last segment"
            ) from None
        raise AuthenticationError(index) from None


async def open_tink_file_async(
    path: StrPath, keys: TinkKeyset | TinkStreamingKey, associated_data: Buffer = b""
) -> AsyncFile[bytes]:
    """``open_tink_file`` for anyio (asyncio or trio), as ``open_file_async`` is for
    ``open_file``: opening and every ``read``, ``readinto``, ``seek`` and ``tell`` run in a
    worker thread (``anyio.wrap_file``); ``async with`` and ``aclose`` close it."""
    import anyio  # here: the CLI's file commands (info --format tink) load no event loop
    from anyio import to_thread

    file = await to_thread.run_sync(open_tink_file, path, keys, associated_data)
    return anyio.wrap_file(cast("Any", file))
