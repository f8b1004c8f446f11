"""The Opener: records in, authenticated plaintext out. Sans-IO, one direction.

Theory of operation
-------------------
Phases (``Opener.phase``), in order, each entered once:

* ``HEADER``: the stream header is arriving, into the buffer of its ``HeaderReader``
  (``header.py``), which checks and verifies it (on a channel, with the peer's Finished) and
  gives the record secret. No ring exists before; the reader is dropped after.
* ``RECORDS``: records are opened one at a time, in stream order.
* ``FINAL``: the FINAL record authenticated; its plaintext may still be unread. The end of the
  stream is reported once it is read (``read`` returns b"", ``at_eof`` is True).
* ``FAILED``: an error reached the caller. Every later read-side call raises
  StreamBrokenError (the error is its ``original``); input is discarded.

Errors wait in one slot (``_error``) until the reader reaches them: an error found while
feeding (a bad header, a record length out of range, bytes after FINAL) is raised once every
record completed before it has been read; an error found while opening (authentication, a
format rule, truncation) is raised at once, or, if the same call already gathered plaintext,
by the next call. Raising it is what enters FAILED. Feeding never raises a ProtocolError.

Where input lives (``_Input``, the class the Opener's input side is written in; ``Opener``
itself is the reading side). Input comes in two ways, and the reader sees one stream:

* copied into the ring (``get_buffer``/``buffer_updated``, or ``receive_data`` of a mutable
  buffer): records are opened in place there (``ring.py`` has the ring's invariant);
* held by reference (``receive_data``/``receive_some`` of ``bytes`` or a read-only view, after
  the header): a record that lies whole in it is opened straight from it, so its ciphertext is
  never copied. Only a record split across inputs is copied into the ring, in two steps: its
  start by the read call that reaches it, its rest as the next input arrives (then the record
  is whole in the ring and opens in the ring's run). Held input comes after everything in the
  ring, and at most one is held.

Where plaintext may exist. A record is decrypted straight into the caller's ``readinto``
buffer when its plaintext fits there, else into the ring (in place, or, for a held record, into
a slot the ring reserves for it). Plaintext is visible only after ``decrypt_into``
authenticated it; a record that fails has its output wiped wherever it was written. FINAL's
plaintext is withheld (wiped) when bytes already follow it. Views handed out (``peek``,
``read_view``) stay valid until the next read-side call, which releases them.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable

from ._turn import Turn
from .errors import (
    BufferFullError,
    OutOfRangeError,
    ProtocolError,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
)
from .format import (
    DEFAULT_KEY_LIMITS,
    DEFAULT_MAX_RECORD_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    KeyLimits,
    Keys,
    StreamHeader,
    Suite,
    TrafficKeys,
    byte_view,
    check_record_size,
)
from .header import HeaderReader
from .recipients import Identity
from .records import RecordLayer, check_record_length
from .ring import (
    DEFAULT_RING_SIZE,
    START_CAPACITY,
    VIEW_SLOTS,
    RecordRing,
    ring_capacity,
)

__all__ = ("Opener", "Phase")

# Held records smaller than this are copied into the ring unless they decrypt straight into
# the caller's buffer: measured, one bulk copy then opening in place beats slicing the held
# input per record below ~16 KiB (1 KiB records: 3.9 against 5.0 us per record).
_IN_PLACE_MIN = 16 * 1024
# Records one read call opens at most (it returns what it has, up to its size): a peer that
# slices its stream into 1-byte records cannot make one call run for long. 256: an anyio
# receive (one call per turn of the loop) of one-byte records then takes ~1-2 ms, where 1,024
# took 5-10 ms and let a flood push a concurrent echo past 100 ms on a loaded machine
# (benchmarks/ part 7); a 64 KiB read of 256-byte or larger records is not cut short.
_CALL_RECORDS = 256
# Held input copied into the ring at a record boundary, at most, per step: a held piece of
# tiny records is committed record by record (a few us each), so copying a 256 KiB read of
# one-byte records at once ran ~12,000 of them in one step (60-70 ms, benchmarks/ part 7);
# 4 KiB is ~190 of them, and still 4 records of 1 KiB per copy. Codec throughput with both
# limits against 1,024 records and no copy limit, A/B in one process: 0.95-1.05 at 1 and 4 KiB.
_ABSORB_BYTES = 4 * 1024
# Complete records waiting in the ring past which ``wants_data`` says stop (the transport
# pauses until the reader has read some): uvloop reads a socket up to 32 times per loop
# callback, and each read of tiny records is committed record by record, so a flood of
# one-byte records held the loop for tens of ms per callback (benchmarks/ part 7). 256, one
# read call's worth (_CALL_RECORDS): with 1,024 the echo beside a flood on uvloop waited a
# median 24-28 ms against 4-6 on main; with 256, 8-30 against 5-28 (same runs, load 12).
# Streams of 1 KiB records or larger never reach it in the default ring (256 KiB).
_WAITING_RECORDS = 256
_NO_PLAINTEXT = memoryview(bytearray())  # writable and empty: an empty record's output
_unpack_record_header = RECORD_HEADER.unpack_from


def _plaintext_target(buffer: Buffer) -> memoryview:
    """``buffer`` as a writable byte view (UnsupportedBufferError before anything is opened)."""
    if (
        type(buffer) is memoryview
        and buffer.format == "B"
        and buffer.c_contiguous
        and not buffer.readonly
        and buffer.ndim == 1
    ):
        return buffer  # (no new view: this runs once per record for record-sized reads)
    return byte_view(buffer, writable=True)


def _record_views(
    ring: RecordRing, pos: int, length: int
) -> tuple[int, int, memoryview, memoryview, memoryview]:
    """(position, length, AAD, ciphertext, plaintext) views of the record at ``pos`` in the
    ring, from the ring's view cache, or sliced and kept there for the next record there."""
    views = ring.views[pos % VIEW_SLOTS]
    if views is None or views[0] != pos or views[1] != length:
        view = ring.view
        body = pos + RECORD_HEADER_SIZE
        end = body + length
        views = (pos, length, view[pos:body], view[body:end], view[body : end - TAG_SIZE])
        ring.views[pos % VIEW_SLOTS] = views
    return views


class Phase(enum.Enum):
    """Where an Opener is in its stream (see the module docstring)."""

    HEADER = "header"
    RECORDS = "records"
    FINAL = "final"
    FAILED = "failed"


# Module constants: an Enum member lookup costs ~0.2 us on CPython 3.11, paid per record.
_HEADER, _RECORDS, _FINAL, _FAILED = Phase.HEADER, Phase.RECORDS, Phase.FINAL, Phase.FAILED


class _Input:
    """The input side of the Opener (the class below is its reading side): what is fed, where
    it is kept until read (the header's reader, the ring, input held by reference), and the
    errors found while feeding, which wait in ``_error`` for the reader (module docstring)."""

    # Slots, not a dict: each unconfirmed connection holds an Opener (docs/FORMAT.md 5.2's bound).
    __slots__ = (
        "__weakref__",
        "_eof",
        "_error",
        "_final_length",
        "_held",
        "_held_pos",
        "_lent",
        "_limits",
        "_max_ciphertext",
        "_phase",
        "_pt_end",
        "_pt_pos",
        "_reader",
        "_record_wire",
        "_records",
        "_ring",
        "_run_capped",
        "_turn",
        "_untaken",
        "header",
        "max_record_size",
        "ring_size",
        "suite",
    )

    _eof: bool
    _error: ProtocolError | None  # the one slot: waiting (or, once FAILED, raised)
    _final_length: int
    _held: memoryview | None  # input held by reference, from _held_pos on
    _held_pos: int
    _lent: memoryview | None
    _limits: KeyLimits
    _max_ciphertext: int
    _phase: Phase
    _pt_end: int
    _pt_pos: int
    _reader: HeaderReader | None  # until the header verified
    _record_wire: int
    _records: RecordLayer | None
    _ring: RecordRing | None
    _run_capped: bool
    _turn: Turn
    _untaken: bool
    header: StreamHeader | None
    max_record_size: int
    ring_size: int
    suite: Suite

    @property
    def records_opened(self) -> int:
        return self._records.records if self._records is not None else 0

    def _head_number(self) -> int:
        """The stream's number of the first record not yet released: the ring's head (the
        current record while it is read there, already counted opened), or, when the ring is
        empty, the held input's first. A length refused in the ring or in held input names its
        record from here, however the input was split (``records.check_record_length``)."""
        return self.records_opened - (1 if self._record_wire else 0)

    # -- feeding -------------------------------------------------------------------------

    @property
    def receiving_record(self) -> bool:
        """True while part of a record has arrived and the rest has not (or input is held that
        the reader has not reached): what a record timeout measures."""
        ring = self._ring
        return self._held is not None or (ring is not None and ring.tail != ring.frontier)

    @property
    def record_missing(self) -> int:
        """Bytes still to arrive of the record being received: 0 at a record boundary (or while
        input is held that the reader has not reached), the rest of its 5-byte header while
        that is incomplete. An adapter that chooses its read size asks for these first, so
        that its reads end on record boundaries (``receive_size`` in gcmstream's adapters)."""
        ring = self._ring
        if self._held is not None or self._phase is not _RECORDS or ring is None:
            return 0
        if ring.tail == ring.frontier:  # at a record boundary
            return 0
        return (ring.frontier_len or RECORD_HEADER_SIZE) - (ring.tail - ring.frontier)

    @property
    def wants_data(self) -> bool:
        """True when input can be accepted now (reading frees space when it is False); False
        too while 256 complete records wait to be read (a flood of tiny records: reading
        them makes it True again, as reading frees space)."""
        if self._held is not None or self._eof or self._error is not None or self._phase is _FAILED:
            return False
        ring = self._ring
        if self._phase is _HEADER or ring is None:
            return True  # the ring is made when record bytes arrive
        return ring.complete < _WAITING_RECORDS and ring.can_take()

    @property
    def failed(self) -> bool:
        """True once an error was found (raised already, or waiting for the next read). Input
        held by reference is examined as the reader reaches it."""
        return self._error is not None

    @property
    def broken(self) -> bool:
        """True once an error was raised: every later read raises StreamBrokenError."""
        return self._phase is _FAILED

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Writable view of free ring space (empty when full: stop reading). ``sizehint`` is
        ignored: the ring offers what keeps records whole. Fill it and call
        ``buffer_updated`` before any other call on the opener."""
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            if self._held is not None and not self._absorb():
                return memoryview(b"")  # held input comes first
            return self._writable()
        finally:
            token.append(None)

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written at the start of the view ``get_buffer`` returned."""
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            if self._eof:
                raise StreamClosedError("input already ended (receive_eof was called)")
            self._untaken = False
            if nbytes and self._error is None:
                self._commit(nbytes)
        finally:
            token.append(None)

    def receive_data(self, data: Buffer) -> None:
        """Take ``data``: ``bytes`` (or a read-only view) by reference, other buffers by copy.
        What does not fit the ring now waits (``wants_data`` is False) until reads free space;
        calling again before that raises BufferFullError."""
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            self._check_input_open()
            if self._held is not None and not self._absorb():
                raise BufferFullError("earlier input still waits for ring space: read first")
            self._untaken = False
            view = byte_view(data)
            taken = self._take(view)
            if taken < len(view):
                rest = view[taken:]
                self._hold(rest if rest.readonly else memoryview(bytes(rest)))
        finally:
            token.append(None)

    def receive_some(self, data: Buffer) -> int:
        """Take what can be taken of ``data`` without waiting for a read; return how many bytes.
        ``bytes`` (or a read-only view) are held by reference (after the rest of a record split
        across inputs, which is copied into the ring first); other buffers are copied
        into free ring space. 0 means: read first.

        Bytes not taken are known to follow in the stream: until the next feeding call, a FINAL
        record they would follow is refused (TrailingDataError) rather than released, so the
        release rules hold although those bytes are still outside (FORMAT.md 8.2)."""
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            self._check_input_open()
            view = byte_view(data)
            taken = 0 if self._held is not None and not self._absorb() else self._take(view)
            self._untaken = taken < len(view)
            return taken
        finally:
            token.append(None)

    def receive_eof(self) -> None:
        """The input ended. Reading past the last complete record now tells truncation from a
        clean end."""
        with self._turn:
            self._eof = True

    def _check_input_open(self) -> None:
        if self._eof:
            raise StreamClosedError("input already ended (receive_eof was called)")

    def _take(self, view: memoryview, *, hold: bool = True) -> int:
        """Take ``view`` from its start: header bytes and mutable input by copy, immutable
        record input by reference (unless ``hold`` is False). Returns the bytes taken (all of
        them once the opener discards input: failed, or after FINAL)."""
        taken = 0
        while taken < len(view):
            if (self._error is not None or self._phase is _FINAL) and self._discarding():
                return len(view)  # (the test inline: this runs per input piece)
            count = len(view) - taken
            if hold and self._phase is _RECORDS and view.readonly and self._held is None:
                ring = self._ring
                if ring is None or ring.tail == ring.frontier:  # at a record boundary
                    self._hold(view[taken:] if taken else view)
                    return len(view)
                # the rest of a record split across inputs: copied now, in one piece, so that
                # the record is whole in the ring for the next run (measured: benchmarks/ab.py)
                count = min(count, ring.missing())
            if self._phase is _RECORDS and (self._ring or self._get_ring()).store(view, taken, count):
                taken += count  # (bytes of the record being received, where it lies: one copy)
                continue
            room = self._writable()
            if not room:
                break
            count = min(len(room), count)
            room[:count] = view[taken : taken + count]
            self._commit(count)
            taken += count
        return taken

    def _hold(self, view: memoryview) -> None:
        """Hold ``view`` by reference. If it starts at a record boundary, its first length field
        is checked now, so a bad one is found (``failed``) as it would be in the ring."""
        self._held, self._held_pos = view, 0
        ring = self._ring
        if len(view) >= RECORD_HEADER_SIZE and (ring is None or not ring.stored):
            _, length = _unpack_record_header(view, 0)
            try:
                check_record_length(length, self._max_ciphertext, self._head_number())
            except ProtocolError as exc:
                self._defer(exc)

    def _absorb(self, limit: int = -1) -> bool:
        """Copy held input (at most ``limit`` bytes if >= 0) into the ring as far as it takes
        it; True once nothing is held."""
        held = self._held
        if held is not None:
            start = self._held_pos
            self._held = None
            taken = self._take(held[start:] if limit < 0 else held[start : start + limit], hold=False)
            if self._error is None and start + taken < len(held):  # (an error drops it)
                self._held, self._held_pos = held, start + taken
        return self._held is None

    def _discarding(self) -> bool:
        """True when input is dropped: an error was found, or FINAL already authenticated
        (then the input is itself the error)."""
        if self._phase is _FINAL:
            self._defer(TrailingDataError(record_number=self.records_opened - 1))
        return self._error is not None

    def _defer(self, exc: ProtocolError) -> None:
        """Keep ``exc`` for the reader (the first error wins) and take no more input. Kept
        without its traceback, whose frames hold this opener (a cycle)."""
        if self._error is None:
            self._error = exc.with_traceback(None)
        self._held = None

    def abandon_header(self, error: ProtocolError) -> None:
        """The header's source gave up on it before it verified (a channel whose handshake
        ended before it completed: a timeout, a cancellation, or its own failure). The opener
        is failed from then on: with ``error`` unless an error was found first (raised by the
        next read, then StreamBrokenError). The error it keeps is a copy without traceback:
        the one raised went through the caller's frames (a Channel's, which holds this
        opener), so that a failed connection is freed without the cyclic GC. Does nothing once
        the header verified."""
        reader = self._reader
        if reader is None:
            return
        reader.close()
        if self._phase is _HEADER:
            self._defer(error)
        if self._error is not None:
            self._error = copy.copy(self._error)

    def _writable(self) -> memoryview:
        if self._error is not None:
            return memoryview(b"")
        if self._reader is not None:  # (the header phase)
            return self._reader.writable()
        ring = self._ring or self._get_ring()
        head = ring.head
        view = ring.writable()
        if ring.head != head and self._record_wire:  # it grew and moved the current record
            self._pt_pos += ring.head - head
            self._pt_end += ring.head - head
        return view

    def _commit(self, nbytes: int) -> None:
        if self._phase is _FINAL:
            self._defer(TrailingDataError(record_number=self.records_opened - 1))
        elif self._reader is not None:  # (the header phase)
            self._commit_header(self._reader, nbytes)
        else:
            try:
                (self._ring or self._get_ring()).commit(nbytes, self._head_number)
            except ProtocolError as exc:
                self._defer(exc)

    def _commit_header(self, reader: HeaderReader, nbytes: int) -> None:
        try:
            secret = reader.commit(nbytes, self.max_record_size)
        except ProtocolError as exc:
            reader.close()  # nothing more is read into it
            self._defer(exc)
            return
        finally:
            self.header, self.suite = reader.header, reader.suite
        if secret is not None:
            self._enter_records(secret)

    def _get_ring(self) -> RecordRing:
        """The ring, allocated when the first record's bytes arrive, not at the header: a
        connection that never receives a record never holds one."""
        if self._ring is None:
            record_size = self.header.record_size if self.header is not None else self.max_record_size
            # it starts small and grows with the records that arrive (ring.py: memory that
            # follows use), so a connection that exchanges small messages holds a small ring
            capacity = ring_capacity(record_size, self.ring_size)
            self._ring = RecordRing(record_size, capacity, START_CAPACITY)
        return self._ring

    def _enter_records(self, secret: bytes) -> None:
        header = self.header
        if header is None:  # unreachable: called once the header verified
            raise ProtocolError("no stream header")
        self._max_ciphertext = header.record_size + TAG_SIZE
        self._records = RecordLayer(TrafficKeys(secret, header.suite), self._limits, header.record_size)
        self._phase = _RECORDS
        self._reader = None  # read and verified: ``header`` keeps what is needed

    @property
    def header_missing(self) -> int:
        """Bytes still needed to finish the header (and a channel's Finished) as far as known
        now; 0 once records are read. Adapters read no more than this before confirmation."""
        reader = self._reader
        return reader.missing if reader is not None and self._phase is _HEADER else 0


class Opener(_Input):
    """Opens records into plaintext. One direction, one stream.

    Feed it with ``receive_data(data)`` or ``receive_some(data)`` (``bytes`` are held by
    reference and opened in place, mutable buffers are copied), or ``get_buffer()`` +
    ``buffer_updated(n)`` (zero-copy into the ring, the BufferedProtocol shape), and
    ``receive_eof()`` at the end of input. Read with ``read``/``readinto``/``read_view`` or
    ``peek`` + ``consume``: each returns None when more input is needed and empty at the
    authenticated end of the stream.

    Keyed by exactly one of: ``key`` (a pre-shared key or KeyRing), ``identities`` (at most 10,
    for a one-way stream sealed to recipients) or ``passphrase`` (docs/FORMAT.md 4.4); with the
    last two, the header's stanzas give the file key, or NoIdentityMatchedError. Or, instead of
    those and ``context``, by ``header_reader``: a ``gcmstream.header.HeaderReader`` that holds
    them and reads the peer's header (a Channel passes its handshake's).

    Errors found while feeding are raised by the next read-side call, after every
    authenticated byte before them has been read. Feeding never raises a ProtocolError.
    Input held by reference must not change until the opener has read past it.

    Memory: the receive ring holds at most ``max(ring_size, record_size + 26)`` bytes (the
    announced record size, at most ``max_record_size``: one largest record and the next header
    at least), allocated when the first record byte arrives, 4 KiB at first, grown with the
    records that arrive, released once a message is read and shrunk after a small burst
    (``ring.py``, "Memory that follows use"); plus the header buffer (the 62-byte
    fixed part, then the announced header and a channel's Finished, released once records
    start) and at most one input held by reference (the caller's own object, not a copy, unless the
    caller passed a mutable buffer whose rest did not fit).
    """

    __slots__ = ()

    def __init__(
        self,
        key: Keys | None = None,
        *,
        identities: Iterable[Identity] | None = None,
        passphrase: str | bytes | None = None,
        context: Buffer = b"",
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        limits: KeyLimits | None = None,
        ring_size: int = DEFAULT_RING_SIZE,
        header_reader: HeaderReader | None = None,
    ) -> None:
        if header_reader is None:
            if (key is not None) + (identities is not None) + (passphrase is not None) != 1:
                raise TypeError("an Opener takes exactly one of key, identities or passphrase")
            header_reader = HeaderReader(key, identities=identities, passphrase=passphrase, context=context)
        elif key is not None or identities is not None or passphrase is not None or context:
            raise TypeError("a header_reader holds the keys and the context: pass them to it")
        self._reader = header_reader  # until the header verified
        self.suite = header_reader.suite
        self.max_record_size = check_record_size(max_record_size, "max_record_size")
        ring_capacity(self.max_record_size, ring_size)  # refuse a bad size now, not at the header
        self.ring_size = ring_size
        self._limits = limits or DEFAULT_KEY_LIMITS
        self._turn = Turn("this Opener")  # one thread at a time (_turn.py)
        self._phase = _HEADER
        self._error = None  # the one slot: waiting (or, once FAILED, raised)
        self._eof = False
        self._untaken = False  # receive_some left bytes outside that follow what it took
        self._run_capped = False  # the last run loop stopped at _CALL_RECORDS
        self.header = None
        self._records = None  # made once the header verified
        self._max_ciphertext = 0
        self._ring = None
        self._held = None  # input held by reference, from _held_pos on
        self._held_pos = 0
        self._lent = None
        # the record being read lies in the ring (its wire size; 0: none), its unread plaintext
        # at [_pt_pos, _pt_end)
        self._record_wire = 0
        self._pt_pos = self._pt_end = 0
        self._final_length = -1  # plaintext bytes of the FINAL record, once it authenticated

    @property
    def phase(self) -> Phase:
        """Where the opener is in its stream (read-only; see the module docstring)."""
        return self._phase

    @property
    def final_length(self) -> int:
        """Plaintext bytes of the FINAL record once it authenticated (-1 before): the last
        ones released, which a caller that finds bytes after it withholds (FORMAT.md 8.2)."""
        return self._final_length

    @property
    def bytes_opened(self) -> int:
        return self._records.total_bytes if self._records is not None else 0

    @property
    def untouched(self) -> bool:
        """True until it is given any input (or its end): a file's parallel decryption reads
        the header into it itself, by place."""
        reader = self._reader
        return self._phase is _HEADER and reader is not None and reader.received == 0 and not self._eof

    @property
    def record_layer(self) -> RecordLayer | None:
        """This stream's record layer (``gcmstream.records``: its keys, position and limits)
        once the header verified, else None. For gcmstream's random access (``open_file``),
        which opens records by their place with the keys the header gave; reading records
        through it directly would move them out of this Opener's sight."""
        return self._records

    def __repr__(self) -> str:
        state = "failed" if self.failed else "eof" if self.at_eof else "open"
        return f"<Opener {self.suite.name} records={self.records_opened} {state}>"

    # -- reading ---------------------------------------------------------------------------

    @property
    def at_eof(self) -> bool:
        """True once the FINAL record authenticated and all its plaintext was read."""
        return self._phase is _FINAL and self._pt_pos == self._pt_end and self._error is None

    def header_verified(self) -> bool:
        """True once the stream header verified. Raises its error if it did not, and
        TruncatedStreamError if the input ended before it was whole."""
        with self._turn:
            return self._header_verified()

    def _header_verified(self) -> bool:
        self._check_broken()
        if self._phase is not _HEADER:
            return True
        if self._error is not None or self._eof:
            self._step(None, 0)  # raises the header's error, or the truncation
        return False

    def peek(self) -> memoryview | None:
        """Authenticated plaintext of the current record, not consumed; None: need input;
        empty: end of stream. Valid until the next call."""
        with self._turn:
            return self._peek()

    def _peek(self) -> memoryview | None:
        self._revoke()
        if self._phase is _FAILED:
            self._check_broken()
        while self._pt_pos == self._pt_end:
            if self._step(None, 0) is None:
                return None
            if self._phase is _FINAL and self._at_end():
                break
        ring = self._ring
        view = ring.view[self._pt_pos : self._pt_end] if ring is not None else memoryview(b"")
        self._lent = view
        return view

    def consume(self, nbytes: int) -> None:
        """Mark ``nbytes`` of the last ``peek()`` as read."""
        with self._turn:
            self._revoke()
            if not 0 <= nbytes <= self._pt_end - self._pt_pos:
                available = self._pt_end - self._pt_pos
                raise OutOfRangeError(f"cannot consume {nbytes} bytes: {available} available")
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
        with self._turn:
            return self._read_view(max_bytes)

    def _read_view(self, max_bytes: int) -> memoryview | None:
        view = self._peek()
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
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            return self._read(max_bytes)
        finally:
            token.append(None)

    def _read(self, max_bytes: int) -> bytes | None:
        if max_bytes == 0:
            return b""
        if self._pt_pos == self._pt_end and self._phase is _RECORDS:
            single = self._read_single(max_bytes)
            if single is not None:
                return single
        first = self._read_view(max_bytes)
        if first is None or not first or len(first) == max_bytes or not self._another_ready():
            data = None if first is None else bytes(first)
            self._revoke()
            return data
        parts = [bytes(first)]
        got = len(first)
        opened = 0  # records opened by this call (counted here: the property costs two calls)
        while (max_bytes < 0 or got < max_bytes) and opened < _CALL_RECORDS:
            if self._pt_pos == self._pt_end:
                if self._step(None, got) is None or self._at_end():
                    break
                opened += 1  # (a step that does not end the stream opened one record)
            end = self._pt_end if max_bytes < 0 else min(self._pt_end, self._pt_pos + max_bytes - got)
            if end > self._pt_pos and self._ring is not None:
                parts.append(bytes(self._ring.view[self._pt_pos : end]))
                got += end - self._pt_pos
                self._pt_pos = end
        self._revoke()
        return b"".join(parts)

    def _read_single(self, max_bytes: int) -> bytes | None:
        """The small-message path of ``read``: when the only input is one whole plain record
        (in the ring or held), ``AESGCM.decrypt`` makes the returned ``bytes`` itself, with no
        copy through the ring. None (nothing changed) for anything else, which the general
        path handles: several records, a partial one, flags, a limit, a failed tag."""
        if self._lent is not None:
            self._revoke()
        if self._record_wire:
            self._close_record()
        ring, held = self._ring, self._held
        if ring is not None and ring.stored:
            if held is not None or ring.complete != 1:
                return None
            source, pos, available = ring.view, ring.head, ring.stored
        elif held is not None:
            source, pos = held, self._held_pos
            available = len(held) - pos
            if available < RECORD_HEADER_SIZE:
                return None
        else:
            return None
        flags, length = _unpack_record_header(source, pos)
        records = self._records
        if (
            records is None
            or not TAG_SIZE < length <= self._max_ciphertext
            or (0 < max_bytes < length - TAG_SIZE)
            or available != RECORD_HEADER_SIZE + length  # exactly one record
        ):
            return None
        plaintext = records.open_plain_bytes(flags, length, source, pos)
        if plaintext is None:
            return None  # the general path opens it and reports what it finds
        if ring is not None and ring.stored:
            ring.release(RECORD_HEADER_SIZE + length, 1)
        else:
            self._held = None
        return plaintext

    def readinto(self, buffer: Buffer) -> int | None:
        """Copy plaintext into ``buffer``; None: need input; 0: end of stream (or empty buffer).
        A whole record that fits in the rest of ``buffer`` is decrypted straight into it."""
        token = self._turn.token
        try:
            token.pop()
        except IndexError:
            raise self._turn.busy() from None
        try:
            return self._readinto(buffer)
        finally:
            token.append(None)

    def _readinto(self, buffer: Buffer) -> int | None:
        if self._lent is not None:
            self._revoke()
        if self._phase is _FAILED:
            self._check_broken()
        target = _plaintext_target(buffer)
        size = len(target)
        got = steps = 0
        while got < size:
            if self._pt_pos != self._pt_end:  # the current record's plaintext, in the ring
                got = self._copy_current(target, got)
                continue
            # the current record is read: on to the next (``_open_runs`` or ``_step`` closes it)
            if self._phase is _RECORDS:  # runs of plain whole records, the hot paths
                got = self._open_runs(target, got)
                if got == size or self._run_capped:
                    break  # (a run that opened _CALL_RECORDS records ends the call)
            steps += 1
            if got and steps > _CALL_RECORDS:
                break  # enough for one call, one record at a time
            opened = self._step(target[got:], got)
            if opened is None:
                return got or None
            got += opened
            if self._at_end():
                break
        return got

    def _copy_current(self, target: memoryview, got: int) -> int:
        """Copy what fits of the current record's plaintext from the ring into ``target``."""
        count = min(self._pt_end - self._pt_pos, len(target) - got)
        ring = self._ring
        if ring is not None:
            target[got : got + count] = ring.view[self._pt_pos : self._pt_pos + count]
        self._pt_pos += count
        return got + count

    def _open_runs(self, target: memoryview, got: int) -> int:
        """The runs of whole plain records ``readinto`` opens straight into ``target``: those at
        the ring's head, then those of the held input (which starts a record once the ring
        holds none); ``_run_capped`` once ``_CALL_RECORDS`` were opened."""
        if self._record_wire:
            self._close_record()
        self._run_capped = False
        ring = self._ring
        if ring is not None and ring.complete:
            got = self._open_ring_run(ring, target, got)
        if self._held is not None and (ring is None or not ring.stored) and not self._run_capped:
            got = self._open_run(target, got)
            held = self._held
            if held is not None and not self._run_capped and self._split_start(held, self._held_pos):
                self._take_split_start(held)  # now, not in a further call (benchmarks/README.md)
        return got

    def _take_split_start(self, held: memoryview) -> None:
        """Copy the held input's rest, the start of a record split across inputs, into the
        empty ring: where it lies in one ``store``, else as any held input is."""
        pos = self._held_pos
        if self._error is None and (self._ring or self._get_ring()).store(held, pos, len(held) - pos):
            self._held = None
        else:
            self._absorb()

    def _split_start(self, held: memoryview, pos: int) -> bool:
        """True when the held input from ``pos`` is only the start of a record (one split across
        inputs) whose length is in range: the rest of it comes with the next input."""
        rest = len(held) - pos
        if rest < RECORD_HEADER_SIZE:
            return True
        length: int = _unpack_record_header(held, pos)[1]
        return RECORD_HEADER_SIZE + length > rest and TAG_SIZE <= length <= self._max_ciphertext

    # -- the steps of reading ----------------------------------------------------------------

    def _check_broken(self) -> None:
        if self._phase is _FAILED and self._error is not None:
            raise StreamBrokenError(self._error) from self._error

    def _at_end(self) -> bool:
        """True when the FINAL record was read and closed: the authenticated end."""
        return self._phase is _FINAL and not self._record_wire and self._pt_pos == self._pt_end

    def _another_ready(self) -> bool:
        """True when a record after the current one can be opened without more input."""
        ring = self._ring
        return self._held is not None or (ring is not None and ring.complete > 1)

    def _step(self, target: memoryview | None, gathered: int) -> int | None:
        """Close the current record and open the next one. None: more input is needed (or an
        error waits for the next call because this one already ``gathered`` plaintext). Else
        the number of plaintext bytes decrypted straight into ``target`` (the record is then
        read); 0 when the plaintext is in the ring as the current record, or at the end."""
        if self._record_wire:
            self._close_record()
        try:
            if self._phase is _FINAL:
                if self._error is not None:
                    raise self._error  # bytes arrived after the end
                return 0
            ring = self._ring
            if (ring is None or not ring.complete) and not self._next_record(target):
                return None
            return self._open(target)
        except ProtocolError as exc:
            self._error = exc
            self._drop_input()
            if gathered:
                return None  # the caller returns what authenticated first; the next call raises
            self._phase = _FAILED
            raise

    def _next_record(self, target: memoryview | None) -> bool:
        """Find the next complete record: in the ring at its head, or whole in the held input.
        False if more input is needed; raises the waiting error or a truncation when the
        stream can go no further.

        A small held record whose plaintext will not go straight into ``target`` is copied
        into the ring with the held input after it: for records under ``_IN_PLACE_MIN``
        one bulk copy costs less than slicing and reserving per record (benchmarks/)."""
        while True:
            ring = self._ring
            if ring is not None and ring.complete:
                return True
            held = self._held
            if held is None:
                break
            before = self._held_pos
            if ring is not None and ring.stored:  # a record split across inputs: complete it
                self._absorb(ring.missing())
            elif self._opens_in_place(held, before, target):
                return True
            if self._held is held and self._held_pos == before:
                return False  # no room at all: cannot happen while the ring holds no whole record
        if self._error is not None:
            raise self._error
        if self._eof:
            if self._reader is not None:  # (the header phase: the reader says why it ended)
                raise self._reader.ended()
            raise TruncatedStreamError(self._truncation())
        return False

    def _opens_in_place(self, held: memoryview, before: int, target: memoryview | None) -> bool:
        """At a record boundary in the held input: True when the record there is whole and is
        opened where it lies; else the held input is copied into the ring, a partial record
        in one step (its rest is all that is held), small records ``_ABSORB_BYTES`` at a time."""
        limit = _ABSORB_BYTES
        if len(held) - before >= RECORD_HEADER_SIZE:
            _, length = _unpack_record_header(held, before)
            check_record_length(length, self._max_ciphertext, self._head_number())
            whole = before + RECORD_HEADER_SIZE + length <= len(held)
            size = length - TAG_SIZE
            fits = target is not None and size <= len(target)
            if whole and (length >= _IN_PLACE_MIN or fits or not size):
                return True
            if not whole:
                limit = -1
        self._absorb(limit)
        return False

    def _truncation(self) -> str:
        where = "inside a record" if self._ring is not None and self._ring.stored else "at a record boundary"
        records = f"{self.records_opened} record{'' if self.records_opened == 1 else 's'}"
        return (
            f"input ended {where} after {records}, without a FINAL record: "
            "the sender closed without ending the stream, or the connection was cut"
        )

    def _open(self, target: memoryview | None) -> int:
        """Open the record ``_next_record`` found (``RecordLayer.open_record``). Returns the
        bytes decrypted straight into ``target`` (when its plaintext fits there), else 0 with
        the plaintext in the ring as the current record."""
        records = self._records
        if records is None:  # unreachable: records are found only after the header
            raise ProtocolError("no stream header")
        ring = self._ring
        if ring is not None and ring.complete:  # in the ring, opened in place
            pos = ring.head
            flags, length = _unpack_record_header(ring.buf, pos)
            _, _, aad, ciphertext, plaintext = _record_views(ring, pos, length)
        else:  # whole in the held input: read in place, plaintext into a reserved ring slot
            flags, length, aad, ciphertext = self._take_held_record()
            ring = None
            plaintext = _NO_PLAINTEXT  # (chosen below)
        size = length - TAG_SIZE
        direct = target is not None and 0 < size <= len(target)
        if direct and target is not None:
            plaintext = target[:size]  # skip the copy out of the ring: minio/sio does the same
        elif ring is None and not size:
            plaintext = _NO_PLAINTEXT  # an empty held record needs no memory (no ring for it)
        elif ring is None:
            ring = self._get_ring()
            plaintext = _record_views(ring, ring.reserve(RECORD_HEADER_SIZE + length), length)[4]
        followed = flags != 0 and self._followed(ring, RECORD_HEADER_SIZE + length)
        if records.open_record(flags, size, aad, ciphertext, plaintext, followed):
            self._final_length = size
            self._phase = _FINAL
        if ring is not None:
            self._record_wire = RECORD_HEADER_SIZE + length
            if not direct:
                self._pt_pos = ring.head + RECORD_HEADER_SIZE
                self._pt_end = self._pt_pos + size
                return 0
        return size if direct else 0

    def _take_held_record(self) -> tuple[int, int, memoryview, memoryview]:
        """(flags, length, header, ciphertext) of the whole record at the held position,
        which moves past it."""
        held = self._held
        if held is None:  # unreachable: _next_record found it there
            raise ProtocolError("no record to open")
        start = self._held_pos
        flags, length = _unpack_record_header(held, start)
        body = start + RECORD_HEADER_SIZE
        self._held_pos = body + length
        if self._held_pos == len(held):
            self._held = None
        return flags, length, held[start:body], held[body : body + length]

    def _followed(self, ring: RecordRing | None, wire_length: int) -> bool:
        """Whether bytes are known to follow the record being opened (a FINAL record must be
        the last): after it in the ring, held, or left outside by ``receive_some``."""
        return (ring is not None and ring.stored > wire_length) or self._held is not None or self._untaken

    def _open_run(self, target: memoryview, got: int) -> int:
        """The hot path of ``readinto`` from held input: consecutive whole plain records
        straight into ``target`` (``RecordLayer.open_run``), leaving anything else to
        ``_step``."""
        held = self._held
        records = self._records
        if held is None or records is None:
            return got
        pos, got, opened = records.open_run(held, self._held_pos, len(held), target, got, _CALL_RECORDS)
        self._run_capped = opened == _CALL_RECORDS
        if pos == len(held):
            self._held = None
        else:
            self._held_pos = pos
        return got

    def _open_ring_run(self, ring: RecordRing, target: memoryview, got: int) -> int:
        """``_open_run`` for the whole records at the ring's head: each stretch of them that
        lies in one piece (up to the wrap, then from 0) in one ``RecordLayer.open_run``, and
        released with one ``RecordRing.release``."""
        records = self._records
        if records is None:
            return got
        budget = _CALL_RECORDS
        while ring.complete and budget:
            head = ring.head
            stop = ring.wrap if ring.wrap >= 0 else ring.frontier
            pos, got, opened = records.open_run(ring.view, head, stop, target, got, budget)
            if not opened:
                break
            ring.release(pos - head, opened, more_held=self._held is not None)
            budget -= opened
        self._run_capped = not budget
        return got

    def _close_record(self) -> None:
        if self._ring is not None:
            self._ring.release(self._record_wire, 1, more_held=self._held is not None)
        self._record_wire = 0

    def _drop_input(self) -> None:
        """After an error at the read position: nothing after it may ever be opened."""
        self._held = None
        if self._ring is not None:
            self._ring.clear()
        self._record_wire = 0
        self._pt_pos = self._pt_end = 0

    def _revoke(self) -> None:
        if self._lent is not None:
            self._lent.release()
            self._lent = None
