"""The sans-IO record codec: Sealer (plaintext in, records out), Opener (records in, plaintext
out) and Channel (a Sealer and an Opener keyed for the two directions of one connection).

No awaits, no event loop, no sockets: adapters move bytes, this module decides what they mean.

Memory: the Opener receives into a fixed RecordRing (allocated when the first record's bytes
arrive, so idle connections hold none) and decrypts each record in place. The Sealer encrypts
into its own output buffer, allocated on first use and reused while nobody holds its output.

View lifetimes: a memoryview returned by ``Opener.peek``/``read_view`` is valid until the next
read-side call on the opener (feeding it more input does not disturb it); one returned by a
Sealer call is valid until the next Sealer call. The object releases that view at its next call,
so stale use raises ValueError instead of reading reused memory (slices you made of it are not
tracked: copy what you keep).
"""

from __future__ import annotations

from cryptography.exceptions import InvalidTag

from .errors import (
    AuthenticationError,
    BufferFullError,
    GcmStreamError,
    LimitReachedError,
    MalformedRecordError,
    NotReadyError,
    OutOfRangeError,
    ProtocolError,
    RecordTooLargeError,
    RoleMismatchError,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
)
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_SIZE,
    KNOWN_FLAGS,
    MAGIC,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    KeyLimits,
    Role,
    StreamHeader,
    Suite,
    TrafficKeys,
    channel_secret,
    check_context,
    check_header_start,
    check_record_size,
    make_header,
    parse_header,
    verify_header,
)
from .ring import RecordRing

__all__ = ("Channel", "Opener", "Sealer")

_OVERHEAD = RECORD_HEADER_SIZE + TAG_SIZE
_OUTPUT_RECORDS = 4  # the reusable output buffer grows to hold this many full records
_MIN_OUTPUT = 4096
_VIEW_SLOTS = 127  # opener's view cache (prime, so record positions spread over it)


def _byte_view(data: Buffer) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


class Sealer:
    """Seals plaintext into records. One direction, one stream.

    ``seal(data)`` returns the stream header (first time) and every complete record that
    ``data`` fills; a partial record waits in a pending buffer until more data, ``flush()``
    or ``close()`` (FINAL). Each returned view is valid until the next call (module docs);
    call ``detach_output()`` when something else (a transport) keeps referring to it, or pass
    ``reuse_output=False`` to get fresh memory for every output (for transports that may keep
    what they were given, such as anyio streams on asyncio).
    """

    def __init__(
        self,
        key: Buffer,
        *,
        context: Buffer = b"",
        record_size: int = DEFAULT_RECORD_SIZE,
        limits: KeyLimits | None = None,
        auto_key_update: bool = True,
        reuse_output: bool = True,
        _salt: bytes | None = None,
        _role: Role = Role.ONE_WAY,
    ) -> None:
        self.suite = Suite.for_key(key)
        self._reuse_output = reuse_output
        self.record_size = check_record_size(record_size)
        # _salt is for known-answer tests only: a repeated salt repeats every key and nonce
        self.header, secret = make_header(key, _role, record_size, context, _salt)
        self._keys = TrafficKeys(secret, self.suite) if _role is Role.ONE_WAY else None
        self._limits = limits or KeyLimits()
        self._auto = auto_key_update
        self._header_sent = False
        self._pending: bytearray | None = None
        self._pending_len = 0
        self._out: bytearray | None = None
        self._lent: memoryview | None = None
        self._closed = False
        self._update_requested = False
        self._seq = 0  # records sealed under the current key generation
        self._key_bytes = 0  # plaintext bytes sealed under the current key generation
        self.records_sealed = 0
        self.bytes_sealed = 0

    def __repr__(self) -> str:
        return (
            f"<Sealer {self.suite.name} record_size={self.record_size} "
            f"records={self.records_sealed} closed={self._closed}>"
        )

    @property
    def closed(self) -> bool:
        """True once the FINAL record was sealed."""
        return self._closed

    @property
    def pending(self) -> int:
        """Plaintext bytes waiting for a full record, ``flush()`` or ``close()``."""
        return self._pending_len

    @property
    def key_generation(self) -> int:
        return self._keys.generation if self._keys is not None else 0

    def seal(self, data: Buffer, *, flush: bool = False, final: bool = False) -> memoryview:
        """Seal ``data``. The rest of a record waits for more data unless ``flush=True`` (seal it
        now as a short record) or ``final=True`` (seal it, or an empty record, as FINAL)."""
        self._revoke()
        if self._closed:
            raise StreamClosedError("cannot seal: the FINAL record was already sealed")
        keys = self._keys
        if keys is None:
            raise NotReadyError("cannot seal before the peer's stream header has arrived")
        src = _byte_view(data)
        size = self.record_size
        total = self._pending_len + len(src)
        sizes = [size] * (total // size)
        if ((final or flush) and total % size) or (final and not sizes):
            sizes.append(total % size)
        self._check_limits(sizes, final)
        out_size = len(sizes) * _OVERHEAD + sum(sizes) + (0 if self._header_sent else HEADER_SIZE)
        out = self._output(out_size)
        pos = self._put_header(out)
        taken = 0
        for index, length in enumerate(sizes):
            last = final and index == len(sizes) - 1
            if self._pending_len:
                pending = self._pending_view(length)
                fill = length - self._pending_len
                pending[self._pending_len : length] = src[taken : taken + fill]
                taken += fill
                self._pending_len = 0
                pos = self._seal_record(out, pos, pending[:length], last)
            else:
                pos = self._seal_record(out, pos, src[taken : taken + length], last)
                taken += length
        if taken < len(src):  # the rest of a record: keep it until more data or a flush
            rest = len(src) - taken
            end = self._pending_len + rest
            self._pending_view(end)[self._pending_len : end] = src[taken:]
            self._pending_len = end
        if final:
            self._closed = True
        return self._lend(out, pos)

    def flush(self) -> memoryview:
        """Seal pending plaintext as a short record now (and the header, if not yet sent)."""
        self._revoke()
        if self._closed:
            raise StreamClosedError("cannot flush: the FINAL record was already sealed")
        if self._keys is None:
            raise NotReadyError("cannot seal before the peer's stream header has arrived")
        length = self._pending_len
        emit = length > 0 or self._update_requested
        sizes = [length] if emit else []
        # A requested key update whose record would carry the pending bytes past the old key's
        # byte limit goes first as an empty record, so update_key() + flush() always moves on.
        split = self._update_requested and self._key_bytes + length > self._limits.hard_bytes
        if split:
            sizes = [0, length]
        self._check_limits(sizes)
        out_size = len(sizes) * _OVERHEAD + length + (0 if self._header_sent else HEADER_SIZE)
        out = self._output(out_size)
        pos = self._put_header(out)
        if split:
            pos = self._seal_record(out, pos, memoryview(b""), False)
        if emit:
            self._pending_len = 0
            pos = self._seal_record(out, pos, self._pending_view()[:length], False)
        return self._lend(out, pos)

    def close(self) -> memoryview:
        """Seal pending plaintext and the FINAL record. Later seals raise StreamClosedError."""
        return self.seal(b"", final=True)

    def update_key(self) -> None:
        """Make the next record carry KEY_UPDATE; ``flush()`` sends it even with no data
        (``seal(b"", flush=True)`` does not: it seals nothing)."""
        self._update_requested = True

    def detach_output(self) -> None:
        """The last returned output is now owned elsewhere: never write into its memory again."""
        self._lent = None
        self._out = None

    def take_header(self) -> bytes:
        """Return the header for sending now; later output will not repeat it."""
        if self._header_sent:
            raise StreamClosedError("the stream header was already taken")
        self._header_sent = True
        return self.header

    def _install(self, secret: bytes) -> None:
        """Key a channel sealer once both headers are known."""
        self._keys = TrafficKeys(secret, self.suite)

    def _revoke(self) -> None:
        if self._lent is not None:
            self._lent.release()
            self._lent = None

    def _pending_view(self, need: int = 0) -> memoryview:
        """The pending-record buffer, holding at least ``need`` bytes. It starts small and
        doubles up to one record, so connections that send small messages stay small."""
        pending = self._pending
        if pending is None or len(pending) < need:
            size = max(need, _MIN_OUTPUT, 2 * len(pending) if pending is not None else 0)
            grown = bytearray(min(size, self.record_size))
            if pending is not None:
                grown[: self._pending_len] = pending[: self._pending_len]
            pending = self._pending = grown
        return memoryview(pending)

    def _output(self, size: int) -> memoryview:
        """Memory for ``size`` bytes of output. The reusable buffer starts small and doubles up
        to four full records, so a connection that sends small messages stays small; output
        larger than that gets one exact buffer of its own."""
        out = self._out
        if self._reuse_output and size and (out is None or size > len(out)):
            capacity = HEADER_SIZE + _OUTPUT_RECORDS * (self.record_size + _OVERHEAD)
            if size <= capacity:
                grown = max(size, 2 * len(out) if out is not None else _MIN_OUTPUT)
                out = self._out = bytearray(min(grown, capacity))
        if out is not None and size <= len(out):
            return memoryview(out)
        return memoryview(bytearray(size))

    def _put_header(self, out: memoryview) -> int:
        if self._header_sent:
            return 0
        self._header_sent = True
        out[:HEADER_SIZE] = self.header
        return HEADER_SIZE

    def _lend(self, out: memoryview, end: int) -> memoryview:
        result = out[:end]
        out.release()
        if self._out is not None and result.obj is self._out:
            self._lent = result  # our reusable memory: revoke this view at the next call
        return result

    def _check_limits(self, sizes: list[int], final: bool = False) -> None:
        """Refuse before sealing anything if a record would pass a hard per-key limit."""
        seq, key_bytes, update = self._seq, self._key_bytes, self._update_requested
        limits = self._limits
        if (  # the common case: this call stays far below every limit, nothing to simulate
            not update
            and seq + len(sizes) + 1 < limits.update_after_records
            and key_bytes + (len(sizes) + 1) * self.record_size < limits.update_after_bytes
        ):
            return
        for index, length in enumerate(sizes):
            last = final and index == len(sizes) - 1
            due = not last and (update or self._update_due(seq, key_bytes, length))
            # The last record slot of a key is kept for a record that carries KEY_UPDATE (or the
            # FINAL one): a plain record there would leave no way to move to the next key.
            if (
                seq >= limits.hard_records
                or key_bytes + length > limits.hard_bytes
                or (seq + 1 >= limits.hard_records and not due and not last)
            ):
                raise LimitReachedError(
                    f"sealing would pass the hard limit of {limits.hard_records} records or "
                    f"{limits.hard_bytes} bytes per key; call update_key() first"
                )
            if due:
                seq, key_bytes, update = 0, 0, False
            else:
                seq, key_bytes = seq + 1, key_bytes + length

    def _update_due(self, seq: int, key_bytes: int, length: int) -> bool:
        limits = self._limits
        return self._auto and (
            seq + 1 >= limits.update_after_records
            or key_bytes + length >= limits.update_after_bytes
            # update in time: the next full record must still fit under this key's hard limit
            or key_bytes + length + self.record_size > limits.hard_bytes
        )

    def _seal_record(self, out: memoryview, pos: int, chunk: memoryview, final: bool) -> int:
        keys = self._keys
        assert keys is not None  # checked by the public callers
        length = len(chunk)
        flags = FLAG_FINAL if final else 0
        if not final and (self._update_requested or self._update_due(self._seq, self._key_bytes, length)):
            flags |= FLAG_KEY_UPDATE
        body = pos + RECORD_HEADER_SIZE
        end = body + length + TAG_SIZE
        RECORD_HEADER.pack_into(out, pos, flags, length + TAG_SIZE)
        keys.aead.encrypt_into(keys.nonce_into(self._seq), chunk, out[pos:body], out[body:end])
        self.records_sealed += 1
        self.bytes_sealed += length
        if flags & FLAG_KEY_UPDATE:
            self._keys = keys.next()
            self._seq = self._key_bytes = 0
            self._update_requested = False
        else:
            self._seq += 1
            self._key_bytes += length
        return end


class Opener:
    """Opens records into plaintext. One direction, one stream.

    Feed it with ``receive_data(bytes)`` (copying) or ``get_buffer()`` + ``buffer_updated(n)``
    (zero-copy, the BufferedProtocol shape), and ``receive_eof()`` at the end of input. Read
    with ``read``/``readinto``/``read_view`` or ``peek`` + ``consume``: each returns None when
    more input is needed and empty at the authenticated end of the stream.

    Errors found while feeding are raised by the next read-side call, after every
    authenticated byte before them has been read. Feeding never raises a ProtocolError.
    """

    def __init__(
        self,
        key: Buffer,
        *,
        context: Buffer = b"",
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        limits: KeyLimits | None = None,
        _channel: Channel | None = None,
    ) -> None:
        self.suite = Suite.for_key(key)
        self.max_record_size = check_record_size(max_record_size, "max_record_size")
        self._key: bytes | None = bytes(key)  # kept only until the header is verified
        self._context = check_context(context)
        self._limits = limits or KeyLimits()
        self._channel = _channel
        self._header_buf = bytearray(HEADER_SIZE)
        self._header_got = 0
        self.header: StreamHeader | None = None
        self._ring: RecordRing | None = None
        self._keys: TrafficKeys | None = None
        self._backlog: memoryview | None = None
        self._eof_received = False
        self._final_seen = False
        self._error: GcmStreamError | None = None
        self._error_unreported = False
        self._pending_error: ProtocolError | None = None
        self._lent: memoryview | None = None
        # the record being read: plaintext [_pt_pos, _pt_end) of a record of _record_wire bytes
        self._record_open = False
        self._record_wire = 0
        self._pt_pos = self._pt_end = 0
        self._seq = 0  # records opened under the current key generation
        self._key_bytes = 0  # plaintext bytes opened under the current key generation
        self._records_before = 0  # records and bytes opened under earlier key generations
        self._bytes_before = 0
        self._hard_records = self._limits.hard_records
        self._hard_bytes = self._limits.hard_bytes
        # A small direct-mapped cache: ring position -> (position, ciphertext length, AAD view,
        # ciphertext view, plaintext view). Records of one size land on the same few positions,
        # so opening reuses views instead of slicing three new ones per record. Fixed size, so
        # it never allocates as it fills.
        self._views: list[tuple[int, int, memoryview, memoryview, memoryview] | None] = [None] * _VIEW_SLOTS

    @property
    def records_opened(self) -> int:
        return self._records_before + self._seq

    @property
    def bytes_opened(self) -> int:
        return self._bytes_before + self._key_bytes

    def __repr__(self) -> str:
        state = "failed" if self.failed else "eof" if self.at_eof else "open"
        return f"<Opener {self.suite.name} records={self.records_opened} {state}>"

    # -- feeding -------------------------------------------------------------------------

    @property
    def wants_data(self) -> bool:
        """True when input can be accepted now (reading frees space when it is False)."""
        if self._backlog is not None or self._eof_received or self._error is not None:
            return False
        if self.header is not None and self._ring is None:
            return self._pending_error is None  # the ring is made when bytes arrive
        return len(self._writable()) > 0

    @property
    def failed(self) -> bool:
        """True once an error was found (raised already, or waiting for the next read)."""
        ring_error = self._ring is not None and self._ring.error is not None
        return self._error is not None or self._pending_error is not None or ring_error

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Writable view of free ring space (empty when full: stop reading). ``sizehint`` is
        ignored: the ring offers what keeps records whole. Fill it and call
        ``buffer_updated`` before any other call on the opener."""
        return self._writable()

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the view ``get_buffer`` returned."""
        if self._eof_received:
            raise StreamClosedError("input already ended (receive_eof was called)")
        self._commit(nbytes)

    def _commit(self, nbytes: int) -> None:
        if nbytes == 0 or self._error is not None:
            return
        if self._final_seen:
            self._pending_error = self._pending_error or TrailingDataError("data follows the FINAL record")
            return
        if self.header is None:
            if nbytes < 0 or self._header_got + nbytes > HEADER_SIZE:
                raise OutOfRangeError(f"buffer_updated({nbytes}) exceeds the view that was offered")
            before = self._header_got
            self._header_got += nbytes
            if self._header_got == HEADER_SIZE:
                self._on_header()
            elif before <= len(MAGIC):
                try:
                    check_header_start(memoryview(self._header_buf)[: self._header_got])
                except ProtocolError as exc:
                    self._pending_error = exc
        else:
            self._get_ring().commit(nbytes)

    def receive_data(self, data: Buffer) -> None:
        """Copy ``data`` in. What does not fit waits (``wants_data`` is False) until reads free
        space; calling again before that raises BufferFullError."""
        if self._eof_received:
            raise StreamClosedError("input already ended (receive_eof was called)")
        if self._backlog is not None:
            raise BufferFullError("earlier input still waits for ring space: read first")
        rest = self._fill(_byte_view(data))
        if rest is not None:
            self._backlog = rest if isinstance(rest.obj, bytes) else memoryview(bytes(rest))

    def receive_eof(self) -> None:
        """The input ended. Reading past the last complete record now tells truncation from a
        clean end."""
        self._eof_received = True

    def _fill(self, data: memoryview) -> memoryview | None:
        """Copy as much of ``data`` as fits; return what is left, or None."""
        while data:
            if self.failed:  # a failed opener discards input: the I/O loop can run to its end
                return None
            if self._final_seen:
                self._pending_error = self._pending_error or TrailingDataError(
                    "data follows the FINAL record"
                )
                return None
            room = self._writable()
            if not room:
                return data
            count = min(len(room), len(data))
            room[:count] = data[:count]
            self._commit(count)
            data = data[count:]
        return None

    def _writable(self) -> memoryview:
        if self._error is not None or self._pending_error is not None:
            return memoryview(self._header_buf)[0:0]
        if self.header is None:
            return memoryview(self._header_buf)[self._header_got :]
        return self._get_ring().writable()

    def _get_ring(self) -> RecordRing:
        """The ring, allocated when the first record's bytes arrive, not at the header: a
        connection that never receives a record never holds one."""
        if self._ring is None:
            assert self.header is not None
            self._ring = RecordRing(self.header.record_size)
        return self._ring

    def _on_header(self) -> None:
        key = self._key
        assert key is not None
        self._key = None
        try:
            header = parse_header(self._header_buf)
            if header.record_size > self.max_record_size:
                raise RecordTooLargeError("announced record size", header.record_size, self.max_record_size)
            channel = self._channel
            expected = channel.role.peer if channel is not None else Role.ONE_WAY
            if header.role != expected:
                reason = (
                    " (a stream reflected back to its sender?)"
                    if channel and header.role == channel.role
                    else ""
                )
                raise RoleMismatchError(
                    f"peer header has role {header.role.name}, expected {expected.name}{reason}"
                )
            secret = verify_header(key, header, self._context)
            if channel is not None:
                secret = channel._on_peer_header(key, header.raw)
        except ProtocolError as exc:
            self._pending_error = exc
            return
        self.header = header
        self._keys = TrafficKeys(secret, header.suite)

    # -- reading ---------------------------------------------------------------------------

    @property
    def at_eof(self) -> bool:
        """True once the FINAL record authenticated and all its plaintext was read."""
        return (
            self._final_seen
            and self._pt_pos == self._pt_end
            and self._error is None
            and self._pending_error is None
        )

    def peek(self) -> memoryview | None:
        """Authenticated plaintext of the current record, not consumed; None: need input;
        empty: end of stream. Valid until the next call."""
        self._revoke()
        if self._error is not None:
            if self._error_unreported:  # a multi-record read stopped at it: raise it once as is
                self._error_unreported = False
                raise self._error
            raise StreamBrokenError(self._error) from self._error
        while self._pt_pos == self._pt_end:
            if self._record_open:
                self._close_record()
            if self._final_seen and not self._record_open:
                if self._pending_error is not None:
                    self._fail(self._pending_error)
                break
            if self._open_next() < 0:
                return None
        view = self._ring.view[self._pt_pos : self._pt_end] if self._ring else memoryview(b"")
        self._lent = view
        return view

    def consume(self, nbytes: int) -> None:
        """Mark ``nbytes`` of the last ``peek()`` as read."""
        self._revoke()
        if not 0 <= nbytes <= self._pt_end - self._pt_pos:
            raise OutOfRangeError(f"cannot consume {nbytes} bytes: {self._pt_end - self._pt_pos} available")
        self._pt_pos += nbytes

    def find(self, sub: Buffer) -> int:
        """Index of ``sub`` in the plaintext ``peek()`` returned (this record only), or -1.
        Searches the ring in place: no copy."""
        if self._ring is None or self._pt_pos == self._pt_end:
            return -1
        index = self._ring.buf.find(sub, self._pt_pos, self._pt_end)
        return index - self._pt_pos if index >= 0 else -1

    def read_view(self, max_bytes: int = -1) -> memoryview | None:
        """Up to ``max_bytes`` (all of the current record if < 0) as a view into the ring."""
        view = self.peek()
        if view is None or not view:
            return view
        if 0 <= max_bytes < len(view):
            view = view[:max_bytes]
            self._lent = view
        self._pt_pos += len(view)
        return view

    def read(self, max_bytes: int = -1) -> bytes | None:
        """Copy up to ``max_bytes`` (all that is ready if < 0) of plaintext, across records.
        None: need input; b"": end of stream."""
        if max_bytes == 0:
            return b""
        first = self.read_view(max_bytes)
        ring = self._ring
        ready = ring is not None and (ring.complete > 1 or self._backlog is not None)
        if first is None or not first or len(first) == max_bytes or not ready:
            data = None if first is None else bytes(first)
            self._revoke()
            return data
        parts = [bytes(first)]
        got = len(first)
        while max_bytes < 0 or got < max_bytes:
            try:
                more = self.read_view(max_bytes - got if max_bytes >= 0 else -1)
            except ProtocolError:
                self._error_unreported = True  # deliver what authenticated; raise it next call
                break
            if not more:
                break
            parts.append(bytes(more))
            got += len(more)
        self._revoke()
        return b"".join(parts)

    def readinto(self, buffer: Buffer) -> int | None:
        """Copy plaintext into ``buffer``; None: need input; 0: end of stream (or empty buffer).
        A whole record that fits in the rest of ``buffer`` is decrypted straight into it."""
        self._revoke()
        if self._error is not None:
            self.peek()  # raises the stored error
        target = _byte_view(buffer)
        size = len(target)
        got = 0
        while got < size:
            if self._pt_pos == self._pt_end:  # the current record is read: on to the next
                if self._record_open:
                    self._close_record()
                if self._final_seen:
                    if self._pending_error is not None and not got:
                        self._fail(self._pending_error)
                    break
                try:
                    opened = self._open_next(target[got:])
                except ProtocolError:
                    if got:
                        self._error_unreported = True  # deliver what authenticated; raise it next call
                        break
                    raise
                if opened < 0:
                    return got or None
                got += opened
                continue
            count = min(self._pt_end - self._pt_pos, size - got)
            assert self._ring is not None
            target[got : got + count] = self._ring.view[self._pt_pos : self._pt_pos + count]
            self._pt_pos += count
            got += count
        return got

    # -- internals ---------------------------------------------------------------------------

    def _revoke(self) -> None:
        if self._lent is not None:
            self._lent.release()
            self._lent = None

    def _fail(self, exc: GcmStreamError, cause: BaseException | None = None) -> None:
        self._error = exc
        self._record_open = False
        self._pt_pos = self._pt_end = 0
        if cause is not None:
            raise exc from cause
        raise exc

    def _close_record(self) -> None:
        assert self._ring is not None
        self._ring.pop(self._record_wire)
        self._record_open = False

    def _open_next(self, target: memoryview | None = None) -> int:
        """Open the next complete record: -1 if more input is needed. Decrypted in place in
        the ring (returns 0), or straight into ``target`` when its plaintext fits there
        (returns its size; the record then counts as read)."""
        ring = self._ring
        if ring is None and self.header is not None:
            if self._pending_error is None and not self._eof_received and self._backlog is None:
                return -1  # no record byte yet: stay without a ring (idle connections hold none)
            ring = self._get_ring()
        if ring is None:
            if self._pending_error is not None:
                self._fail(self._pending_error)
            if self._eof_received:
                self._fail(
                    TruncatedStreamError(
                        f"input ended inside the stream header ({self._header_got} of {HEADER_SIZE} bytes)"
                        if self._header_got
                        else "input ended before the stream header"
                    )
                )
            return -1
        if self._backlog is not None and ring.complete == 0:
            self._backlog = self._fill(self._backlog)
        if ring.complete == 0:
            error = ring.error or self._pending_error
            if error is not None:
                self._fail(error)
            if self._eof_received and self._backlog is None:
                where = "inside a record" if ring.stored else "at a record boundary"
                self._fail(
                    TruncatedStreamError(
                        f"input ended {where} after {self.records_opened} records, without a FINAL record"
                    )
                )
            return -1
        keys = self._keys
        assert keys is not None
        pos = ring.head
        flags, length = RECORD_HEADER.unpack_from(ring.buf, pos)
        views = self._views[pos % _VIEW_SLOTS]
        if views is None or views[0] != pos or views[1] != length:
            views = self._slice(ring.view, pos, length)
        _, _, aad, ciphertext, plaintext = views
        size = length - TAG_SIZE
        direct = target is not None and 0 < size <= len(target)
        if direct:
            assert target is not None
            plaintext = target[:size]  # skip the copy out of the ring: minio/sio does the same
        seq = self._seq
        number = self._records_before + seq
        if seq >= self._hard_records:
            self._fail(MalformedRecordError(f"record {number}: the peer passed the per-key record limit"))
        if self._key_bytes + size > self._hard_bytes:
            self._fail(MalformedRecordError(f"record {number}: the peer passed the per-key byte limit"))
        nonce = keys.nonce_into(seq)
        try:
            keys.aead.decrypt_into(nonce, ciphertext, aad, plaintext)
        except InvalidTag as exc:
            plaintext[:] = bytes(len(plaintext))  # never leave unauthenticated plaintext
            self._fail(AuthenticationError(number), exc)
        if flags & ~FLAG_FINAL:  # rare: check the other flags only then
            self._check_flags(flags, number, plaintext)
        if flags & FLAG_FINAL:
            if ring.stored > RECORD_HEADER_SIZE + length or self._backlog:
                plaintext[:] = bytes(size)
                self._fail(TrailingDataError(f"data follows the FINAL record (record {number})"))
            self._final_seen = True
        if flags & FLAG_KEY_UPDATE:
            self._keys = keys.next()
            self._records_before = number + 1
            self._bytes_before += self._key_bytes + size
            self._seq = self._key_bytes = 0
        else:
            self._seq = seq + 1
            self._key_bytes += size
        self._record_open = True
        self._record_wire = RECORD_HEADER_SIZE + length
        if direct:
            self._pt_pos = self._pt_end = 0  # all of it went to the target
            return int(size)
        self._pt_pos = pos + RECORD_HEADER_SIZE
        self._pt_end = self._pt_pos + size
        return 0

    def _slice(
        self, view: memoryview, pos: int, length: int
    ) -> tuple[int, int, memoryview, memoryview, memoryview]:
        body = pos + RECORD_HEADER_SIZE
        views = (
            pos,
            length,
            view[pos:body],
            view[body : body + length],
            view[body : body + length - TAG_SIZE],
        )
        self._views[pos % _VIEW_SLOTS] = views
        return views

    def _check_flags(self, flags: int, number: int, plaintext: memoryview) -> None:
        problem = None
        if flags & ~KNOWN_FLAGS:
            problem = f"record {number} has unknown flags 0x{flags:02x}"
        elif flags == FLAG_FINAL | FLAG_KEY_UPDATE:
            problem = f"record {number} has both FINAL and KEY_UPDATE"
        if problem is not None:
            plaintext[:] = bytes(len(plaintext))
            self._fail(MalformedRecordError(problem))


class Channel:
    """Both directions of one connection: a Sealer for what we send, an Opener for what we
    receive. Each side sends its header first (``initial_data()``); once the peer's header has
    arrived (``handshake_complete()``), each direction is keyed from both headers, so both
    fresh salts and both roles: a replayed session or a reflected stream fails to open.
    """

    def __init__(
        self,
        key: Buffer,
        *,
        role: Role,
        context: Buffer = b"",
        record_size: int = DEFAULT_RECORD_SIZE,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        limits: KeyLimits | None = None,
        auto_key_update: bool = True,
        reuse_output: bool = True,
        _salt: bytes | None = None,
    ) -> None:
        if role not in (Role.INITIATOR, Role.RESPONDER):
            raise ValueError("a channel role is Role.INITIATOR or Role.RESPONDER")
        self.role = role
        self._context = bytes(context)
        self.sealer = Sealer(
            key,
            context=context,
            record_size=record_size,
            limits=limits,
            auto_key_update=auto_key_update,
            _salt=_salt,
            reuse_output=reuse_output,
            _role=role,
        )
        self.opener = Opener(
            key, context=context, max_record_size=max_record_size, limits=limits, _channel=self
        )

    def __repr__(self) -> str:
        return f"<Channel {self.role.name} ready={self.sealer._keys is not None}>"

    def initial_data(self) -> bytes:
        """Our stream header: send it before anything else."""
        return self.sealer.take_header()

    def handshake_complete(self) -> bool:
        """True once the peer's header verified; raises its error if it did not, and
        TruncatedStreamError if the input ended before it was whole."""
        opener = self.opener
        if opener._error is not None:
            raise StreamBrokenError(opener._error) from opener._error
        if opener.header is None and (opener._pending_error is not None or opener._eof_received):
            opener._open_next()  # raises the header's error, or the truncation
        return self.sealer._keys is not None

    def _on_peer_header(self, key: bytes, peer_header: bytes) -> bytes:
        own = self.sealer.header
        self.sealer._install(channel_secret(key, own, peer_header, self._context))
        return channel_secret(key, peer_header, own, self._context)
