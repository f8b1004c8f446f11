"""The Opener: records in, authenticated plaintext out. Sans-IO, one direction.

Theory of operation
-------------------
Phases (``Opener.phase``), in order, each entered once:

* ``HEADER``: the stream header is arriving (its 62-byte fixed part, then a buffer of exactly
  the announced size, at most ``MAX_HEADER_SIZE``, or 62 + 65,535 + 32 bytes for a reader of
  recipient stanzas). The fixed part is checked as soon as it is
  whole (format, size, role, key ID), then the commitment and the fields; on a channel the
  first hook runs the key exchange, then the peer's 32-byte Finished is read into the same
  buffer and the second hook confirms it and keys both directions. No ring exists before.
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

Where input lives. Input comes in two ways, and the reader sees one stream:

* copied into the ring (``get_buffer``/``buffer_updated``, or ``receive_data`` of a mutable
  buffer): records are opened in place there (``ring.py`` has the ring's invariant);
* held by reference (``receive_data``/``receive_some`` of ``bytes`` or a read-only view, after
  the header): a record that lies whole in it is opened straight from it, so its ciphertext is
  never copied. Only a record split across inputs is copied into the ring, in two steps: its
  start once the reader reaches it, its rest as the next input arrives (then the record is
  whole in the ring and opens in the ring's run). Held input comes after everything in the
  ring, and at most one is held.

Where plaintext may exist. A record is decrypted straight into the caller's ``readinto``
buffer when its plaintext fits there, else into the ring (in place, or, for a held record, into
a slot the ring reserves for it). Plaintext is visible only after ``decrypt_into``
authenticated it; a record that fails has its output wiped wherever it was written. FINAL's
plaintext is withheld (wiped) when bytes already follow it. Views handed out (``peek``,
``read_view``) stay valid until the next read-side call, which releases them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from typing import NoReturn

from ._turn import Turn
from .errors import (
    BufferFullError,
    KeyCommitmentError,
    OutOfRangeError,
    ProtocolError,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
)
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    FINISHED_SIZE,
    HEADER_FIXED_SIZE,
    MAGIC,
    MAX_FIELDS_SIZE,
    MAX_STANZA_FIELDS_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Buffer,
    HeaderStart,
    KeyLimits,
    KeyRing,
    Keys,
    Role,
    StreamHeader,
    Suite,
    TrafficKeys,
    as_key_ring,
    byte_view,
    check_context,
    check_fields_length,
    check_header_start,
    check_record_size,
    find_key,
    header_fault,
    key_id,
    parse_fields,
    parse_header,
    parse_header_start,
    record_size_fault,
    verify_commitment,
)
from .recipients import STANZA_FIELD_TYPES, Identity, Unlocker
from .records import RecordLayer
from .ring import (
    DEFAULT_RING_SIZE,
    START_CAPACITY,
    VIEW_SLOTS,
    RecordRing,
    check_record_length,
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
_NO_PLAINTEXT = memoryview(bytearray())  # writable and empty: an empty record's output
_unpack_record_header = RECORD_HEADER.unpack_from

# A channel's hooks: once the peer's header verified, (key, header) runs our half of the key
# exchange; once the peer's Finished arrived, (finished) confirms it and returns this
# direction's secret (keying the channel's sealer as a side effect).
PeerHeaderHook = Callable[[bytes, StreamHeader], None]
PeerFinishedHook = Callable[[bytes], bytes]


def _handshake_ended(*_: object) -> NoReturn:
    """A channel opener's hooks once its handshake ended (unreachable: no header comes again)."""
    raise ProtocolError("the handshake already ended")


class Phase(enum.Enum):
    """Where an Opener is in its stream (see the module docstring)."""

    HEADER = "header"
    RECORDS = "records"
    FINAL = "final"
    FAILED = "failed"


# Module constants: an Enum member lookup costs ~0.2 us on CPython 3.11, paid per record.
_HEADER, _RECORDS, _FINAL, _FAILED = Phase.HEADER, Phase.RECORDS, Phase.FINAL, Phase.FAILED


class Opener:
    """Opens records into plaintext. One direction, one stream.

    Feed it with ``receive_data(data)`` or ``receive_some(data)`` (``bytes`` are held by
    reference and opened in place, mutable buffers are copied), or ``get_buffer()`` +
    ``buffer_updated(n)`` (zero-copy into the ring, the BufferedProtocol shape), and
    ``receive_eof()`` at the end of input. Read with ``read``/``readinto``/``read_view`` or
    ``peek`` + ``consume``: each returns None when more input is needed and empty at the
    authenticated end of the stream.

    Keyed by exactly one of: ``key`` (a pre-shared key or KeyRing), ``identities`` (at most 10,
    for a one-way stream sealed to recipients) or ``passphrase`` (docs/FORMAT.md 4.4); with the
    last two, the header's stanzas give the file key, or NoIdentityMatchedError.

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

    # Slots, not a dict: each unconfirmed connection holds an Opener (docs/FORMAT.md 5.2's bound).
    __slots__ = (
        "__weakref__",
        "_context",
        "_eof",
        "_error",
        "_final_length",
        "_header_base",
        "_header_buf",
        "_header_got",
        "_header_key",
        "_header_need",
        "_header_start",
        "_held",
        "_held_pos",
        "_key_refusal",
        "_keys",
        "_known_fields",
        "_lent",
        "_limits",
        "_max_ciphertext",
        "_max_fields_size",
        "_on_peer_finished",
        "_on_peer_header",
        "_peer_role",
        "_phase",
        "_pt_end",
        "_pt_pos",
        "_record_wire",
        "_records",
        "_ring",
        "_run_capped",
        "_turn",
        "_unlocker",
        "_untaken",
        "header",
        "max_record_size",
        "ring_size",
        "suite",
    )

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
        _peer_role: Role = Role.ONE_WAY,
        _on_peer_header: PeerHeaderHook | None = None,
        _on_peer_finished: PeerFinishedHook | None = None,
        _known_fields: frozenset[int] = frozenset(),
    ) -> None:
        if (key is not None) + (identities is not None) + (passphrase is not None) != 1:
            raise TypeError("an Opener takes exactly one of key, identities or passphrase")
        # A reader of recipient stanzas holds an Unlocker instead of keys: it finds the file key
        # in the header (docs/FORMAT.md 4.4), whose suite is known only then.
        self._unlocker = Unlocker(identities, passphrase) if key is None else None
        if self._unlocker is not None and (_peer_role is not Role.ONE_WAY or _on_peer_header is not None):
            raise ValueError("identities and passphrases are for one-way streams")
        keys = as_key_ring(key) if key is not None else None
        self.suite = Suite.for_key(keys.primary) if keys is not None else Suite.AES_256_GCM
        self.max_record_size = check_record_size(max_record_size, "max_record_size")
        ring_capacity(self.max_record_size, ring_size)  # refuse a bad size now, not at the header
        self.ring_size = ring_size
        self._keys: KeyRing | None = keys  # kept only until the header is verified
        stanza_types = STANZA_FIELD_TYPES if self._unlocker is not None else frozenset()
        # shared, not a copy per opener, when there are no stanzas: one less set per connection
        self._known_fields = _known_fields | stanza_types if stanza_types else _known_fields
        # stanzas need more room than a key's header (docs/FORMAT.md 4.4)
        self._max_fields_size = MAX_STANZA_FIELDS_SIZE if self._unlocker is not None else MAX_FIELDS_SIZE
        self._context = check_context(context)
        self._limits = limits or KeyLimits()
        self._peer_role = _peer_role
        self._on_peer_header = _on_peer_header
        self._on_peer_finished = _on_peer_finished
        self._turn = Turn("this Opener")  # one thread at a time (_turn.py)
        self._phase = _HEADER
        self._error: ProtocolError | None = None  # the one slot: waiting (or, once FAILED, raised)
        self._eof = False
        self._untaken = False  # receive_some left bytes outside that follow what it took
        self._run_capped = False  # the last run loop stopped at _CALL_RECORDS
        # the peer's header (its fixed part first, then exactly its size), and on a channel its
        # Finished: all an unconfirmed peer makes us hold
        self._header_buf = bytearray(HEADER_FIXED_SIZE)
        self._header_got = 0
        self._header_need = HEADER_FIXED_SIZE  # the whole header's size once its fixed part is read
        self._header_base = 0  # bytes received before the buffer (the header, while reading Finished)
        self._header_start: HeaderStart | None = None
        self._header_key = b""
        # a channel's refusal of the key ID, kept (never raised: no traceback) to the whole header
        self._key_refusal: KeyCommitmentError | None = None
        self.header: StreamHeader | None = None
        self._records: RecordLayer | None = None  # made once the header verified
        self._max_ciphertext = 0
        self._ring: RecordRing | None = None
        self._held: memoryview | None = None  # input held by reference, from _held_pos on
        self._held_pos = 0
        self._lent: memoryview | None = None
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
    def records_opened(self) -> int:
        return self._records.records if self._records is not None else 0

    @property
    def bytes_opened(self) -> int:
        return self._records.total_bytes if self._records is not None else 0

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

    # -- feeding -------------------------------------------------------------------------

    @property
    def receiving_record(self) -> bool:
        """True while part of a record has arrived and the rest has not (or input is held that
        the reader has not reached): what a record timeout measures."""
        ring = self._ring
        return self._held is not None or (ring is not None and ring.tail != ring.frontier)

    @property
    def wants_data(self) -> bool:
        """True when input can be accepted now (reading frees space when it is False)."""
        if self._held is not None or self._eof or self._error is not None or self._phase is _FAILED:
            return False
        if self._phase is _HEADER or self._ring is None:
            return True  # the ring is made when record bytes arrive
        return self._ring.can_take()

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
            if self._discarding():
                return len(view)
            count = len(view) - taken
            if hold and self._phase is _RECORDS and view.readonly and self._held is None:
                ring = self._ring
                if ring is None or ring.tail == ring.frontier:  # at a record boundary
                    self._hold(view[taken:] if taken else view)
                    return len(view)
                # the rest of a record split across inputs: copied now, in one piece, so that
                # the record is whole in the ring for the next run (measured: benchmarks/ab.py)
                count = min(count, ring.missing())
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
                check_record_length(length, self._max_ciphertext, self.records_opened)
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

    def _end_handshake(self, *, failed: bool, error: ProtocolError | None = None) -> None:
        """The channel's handshake ended: drop its hooks (bound to the channel, which holds
        this opener: a cycle). If it ``failed``, drop the header state too and keep an equal
        copy of the error without traceback, cause or context instead of the error itself:
        that one was raised, and its traceback's frames hold this opener. With no error found
        yet, ``error`` (why it ended) becomes the opener's: it never waits for input again."""
        self._on_peer_header = _handshake_ended
        self._on_peer_finished = _handshake_ended
        self._key_refusal = None
        if not failed:
            return
        if error is not None and self._phase is _HEADER:
            self._defer(error)
        error = self._error
        if error is not None:
            copy = type(error).__new__(type(error), *error.args)
            copy.__dict__.update(error.__dict__)
            self._error = copy
        self._header_buf = bytearray()
        self._header_key = b""

    def _writable(self) -> memoryview:
        if self._error is not None:
            return memoryview(b"")
        if self._phase is _HEADER:
            return memoryview(self._header_buf)[self._header_got : self._header_need]
        ring = self._ring or self._get_ring()
        head = ring.head
        view = ring.writable()
        if ring.head != head and self._record_wire:  # it grew and moved the current record
            self._pt_pos += ring.head - head
            self._pt_end += ring.head - head
        return view

    def _commit(self, nbytes: int) -> None:  # noqa: C901 (the Opener restructure splits it)
        if self._phase is _FINAL:
            self._defer(TrailingDataError(record_number=self.records_opened - 1))
        elif self._phase is _HEADER:
            if nbytes < 0 or self._header_got + nbytes > self._header_need:
                raise OutOfRangeError(f"buffer_updated({nbytes}) exceeds the view that was offered")
            before = self._header_got
            self._header_got += nbytes
            try:
                if self._header_start is None:
                    if self._header_got == HEADER_FIXED_SIZE:
                        self._on_header_start()
                    elif before <= len(MAGIC):
                        check_header_start(memoryview(self._header_buf)[: self._header_got])
                if self._header_start is not None and self._header_got == self._header_need:
                    if self.header is None:
                        self._on_header()
                    else:
                        self._on_finished()
            except ProtocolError as exc:
                self._defer(exc)
        else:
            try:
                (self._ring or self._get_ring()).commit(nbytes)
            except ProtocolError as exc:
                self._defer(exc)

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

    def _on_header_start(self) -> None:
        """The fixed part arrived: refuse what can be refused before reading more (checks
        H1..H11: format, sizes, role, key ID, suite), then wait for the rest of the header.
        H7 (the fields' bound) comes last: a key given for a file sealed to recipients is the
        wrong key (H10), not a header too long for a key's reader, however many its stanzas."""
        unlocker = self._unlocker
        start = parse_header_start(self._header_buf, MAX_STANZA_FIELDS_SIZE)  # H7 below
        if start.record_size > self.max_record_size:
            raise record_size_fault(start.record_size, self.max_record_size)
        expected = self._peer_role
        if start.role != expected:
            reason = " (a stream reflected back to its sender?)" if start.role == expected.peer else ""
            raise header_fault(
                "H9", f"peer header has role {start.role.name}, expected {expected.name}{reason}"
            )
        keys, self._keys = self._keys, None
        if unlocker is None:
            if keys is None:  # unreachable: the fixed part is read once
                raise ProtocolError("header already read")
            self._header_key = self._find_key(keys, start)
        check_fields_length(start, self._max_fields_size)
        self._header_start = start
        self._header_need = start.size
        whole = bytearray(start.size + (FINISHED_SIZE if self._on_peer_finished is not None else 0))
        whole[:HEADER_FIXED_SIZE] = self._header_buf  # (a view of the old buffer may still exist)
        self._header_buf = whole

    def _find_key(self, keys: KeyRing, start: HeaderStart) -> bytes:
        """The key the header names. A channel's peer that names no key held here (or names one
        with another suite) is refused only once its whole header arrived, after the same
        commitment check against a stand-in key: refused at the fixed part, the hang-up's time
        and the unread rest (a reset) would tell a keyless prober which key IDs a server holds
        (SECURITY.md, "Post-quantum authentication"; tests/hostile/test_probe.py)."""
        try:
            return find_key(keys, start)
        except KeyCommitmentError as exc:
            if self._on_peer_header is None:  # a one-way stream: no prober to hide from
                raise
            # kept without its traceback, whose frames hold this opener and its header buffer:
            # a cycle that made an unknown key ID's pending connection cost more (SECURITY.md)
            self._key_refusal = exc.with_traceback(None)
            return bytes(start.suite.key_size)  # never verifies: the refusal is raised anyway

    def _on_header(self) -> None:
        key, self._header_key = self._header_key, b""
        raw = bytes(memoryview(self._header_buf)[: self._header_need])
        # from here the header is held once, as ``raw`` (``header.raw``, its fields sliced from
        # it when asked for): the receive buffer goes, or shrinks to the Finished still to come
        self._header_buf = bytearray(FINISHED_SIZE if self._on_peer_header is not None else 0)
        self._header_base, self._header_got = self._header_got, 0
        self._header_need = len(self._header_buf)
        unlocker, self._unlocker = self._unlocker, None
        if unlocker is not None:
            key = self._unlock(unlocker, raw)
        refusal, self._key_refusal = self._key_refusal, None
        try:
            secret = verify_commitment(key, raw, self._context)
        except KeyCommitmentError:
            if refusal is None:
                raise
        if refusal is not None:  # raised here, outside the handler: no context to hold frames
            raise refusal
        header = parse_header(raw, self._known_fields, self._max_fields_size)
        self.header = header
        if self._on_peer_header is not None:  # a channel: its Finished comes next
            self._on_peer_header(key, header)
            return
        self._enter_records(secret)

    def _unlock(self, unlocker: Unlocker, raw: bytes) -> bytes:
        """The file key of a header sealed to recipients or a passphrase; the commitment,
        checked next, then covers every stanza. The fields' structure only (H13) is checked
        here: an unknown critical type (H14) is judged after the commitment, as with a key, so
        that one added by someone without the file key is tampering, not "unsupported"."""
        start = self._header_start
        if start is None:  # unreachable: the fixed part came first
            raise ProtocolError("no stream header")
        fields = parse_fields(raw[HEADER_FIXED_SIZE : HEADER_FIXED_SIZE + start.fields_length])
        self.suite = start.suite
        file_key = unlocker.unlock(start.suite, fields)
        if key_id(file_key) != start.key_id:  # the identity fits: the header was altered
            refusal = KeyCommitmentError(
                "the file key a stanza holds is not the one the header names (altered header)"
            )
            refusal.rule = "S8"  # damage, not a wrong key (cli.EXIT_CODES)
            raise refusal
        return file_key

    def _on_finished(self) -> None:
        if self._on_peer_finished is None:  # unreachable: only channels wait for Finished
            raise ProtocolError("no Finished expected")
        finished = bytes(self._header_buf)
        self._enter_records(self._on_peer_finished(finished))

    def _enter_records(self, secret: bytes) -> None:
        header = self.header
        if header is None:  # unreachable: called once the header verified
            raise ProtocolError("no stream header")
        self._max_ciphertext = header.record_size + TAG_SIZE
        self._records = RecordLayer(TrafficKeys(secret, header.suite), self._limits, header.record_size)
        self._phase = _RECORDS
        self._header_buf = bytearray()  # read and verified: ``header`` keeps what is needed

    @property
    def header_missing(self) -> int:
        """Bytes still needed to finish the header (and a channel's Finished) as far as known
        now; 0 once records are read. Adapters read no more than this before confirmation."""
        return self._header_need - self._header_got if self._phase is _HEADER else 0

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
        budget = self.records_opened + _CALL_RECORDS
        while (max_bytes < 0 or got < max_bytes) and self.records_opened < budget:
            if self._pt_pos == self._pt_end and (self._step(None, got) is None or self._at_end()):
                break
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

    def _readinto(self, buffer: Buffer) -> int | None:  # noqa: C901 (the Opener restructure splits it)
        if self._lent is not None:
            self._revoke()
        if self._phase is _FAILED:
            self._check_broken()
        if (
            type(buffer) is memoryview
            and buffer.format == "B"
            and buffer.c_contiguous
            and not buffer.readonly
            and buffer.ndim == 1
        ):
            target = buffer  # (no new view: this runs once per record for record-sized reads)
        else:
            target = byte_view(buffer, writable=True)  # refused before anything is opened
        size = len(target)
        got = steps = 0
        while got < size:
            if self._pt_pos == self._pt_end:  # the current record is read: on to the next
                if self._record_wire:
                    self._close_record()
                if self._phase is _RECORDS:  # runs of plain whole records, the hot paths
                    self._run_capped = False
                    ring = self._ring
                    if ring is not None and ring.complete:
                        got = self._open_ring_run(ring, target, got)
                    if self._held is not None and (ring is None or not ring.stored) and not self._run_capped:
                        got = self._open_run(target, got)  # (held input starts a record)
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
                continue
            count = min(self._pt_end - self._pt_pos, size - got)
            ring = self._ring
            if ring is not None:
                target[got : got + count] = ring.view[self._pt_pos : self._pt_pos + count]
            self._pt_pos += count
            got += count
        return got

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
            raise TruncatedStreamError(self._truncation())
        return False

    def _opens_in_place(self, held: memoryview, before: int, target: memoryview | None) -> bool:
        """At a record boundary in the held input: True when the record there is whole and is
        opened where it lies; else the held input is copied into the ring, a partial record
        in one step (its rest is all that is held), small records ``_ABSORB_BYTES`` at a time."""
        limit = _ABSORB_BYTES
        if len(held) - before >= RECORD_HEADER_SIZE:
            _, length = _unpack_record_header(held, before)
            check_record_length(length, self._max_ciphertext, self.records_opened)
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
        if self._phase is _HEADER and self._on_peer_finished is not None:
            received = self._header_base + self._header_got
            return (
                f"the connection ended during the handshake ({received} bytes received; "
                "a peer with another key or context hangs up here)"
            )
        if self._phase is _HEADER:
            if self._header_got:
                return (
                    f"input ended inside the stream header ({self._header_got} of {self._header_need} bytes)"
                )
            return "input ended before the stream header"
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
            views = ring.views[pos % VIEW_SLOTS]
            if views is None or views[0] != pos or views[1] != length:
                views = self._slice_views(ring, pos, length)
            aad, ciphertext, plaintext = views[2], views[3], views[4]
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
            plaintext = self._reserve_plaintext(ring, length)
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

    def _reserve_plaintext(self, ring: RecordRing, length: int) -> memoryview:
        """Room for a held record's plaintext: the body of a slot the ring reserves for it."""
        pos = ring.reserve(RECORD_HEADER_SIZE + length)
        views = ring.views[pos % VIEW_SLOTS]
        if views is None or views[0] != pos or views[1] != length:
            views = self._slice_views(ring, pos, length)
        return views[4]

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
            ring.release(pos - head, opened)
            budget -= opened
        self._run_capped = not budget
        return got

    def _slice_views(
        self, ring: RecordRing, pos: int, length: int
    ) -> tuple[int, int, memoryview, memoryview, memoryview]:
        """(position, length, AAD, ciphertext, plaintext) views of the record at ``pos``,
        kept in the view cache for the next record there."""
        view = ring.view
        body = pos + RECORD_HEADER_SIZE
        end = body + length
        views = (pos, length, view[pos:body], view[body:end], view[body : end - TAG_SIZE])
        ring.views[pos % VIEW_SLOTS] = views
        return views

    def _close_record(self) -> None:
        if self._ring is not None:
            self._ring.release(self._record_wire, 1)
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
