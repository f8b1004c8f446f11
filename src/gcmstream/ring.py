"""The receive ring: the memory incoming records land in and are opened in place.

Invariant
---------
``buf`` has a ``capacity`` C, at most ``limit`` (one largest record and the next record's
header, or the ring budget if that is more). Positions are offsets into it. Records are stored
whole: a record never wraps past C. The stored bytes, in stream order, occupy

* ``[head, tail)``                    when not wrapped (``wrap == -1``), or
* ``[head, wrap)`` then ``[0, tail)``  when wrapped (the top segment ends at ``wrap``).

Everything else is free. Inside the stored bytes, in order: ``complete`` whole records starting
at ``head`` (the first may be the record the opener is reading, already decrypted in place),
then at ``frontier`` the bytes received so far of the next, incomplete record, up to ``tail``.
``frontier_len`` is that record's wire length once its 5-byte header has arrived, else 0.

A fixed ring (``start`` = ``limit``, C = ``limit``): a record that starts in the last
``max_wire`` bytes (the zone ``[C - max_wire, C)``) might not fit before C, so there the ring
offers the transport only the record's header first, then exactly the rest of the record once
it is known to fit. A record that does not fit moves to 0; only its header bytes (at most 5)
are copied, and only when ``[0, len)`` is free. With C >= max_wire + 5 (one largest record and
the next record's header) this always becomes possible once the reader has consumed the
records ahead, so a reader that keeps reading never deadlocks and a reader that stops reading
stops the transport (backpressure: ``writable()`` is empty) instead of growing anything. A
larger C lets the transport go on receiving while the reader opens what arrived (measured:
benchmarks/README.md).

Memory that follows use: a ring made with ``start`` below its ``limit`` begins with no memory,
takes ``start`` bytes when the first bytes come (the limit at once for a larger reserved
record), and its zone is its last quarter: a record of up to C / 4 never crosses C; a larger
one that does moves to 0 with the bytes of it received so far (fewer than C), under the same
condition. At its limit the zone is the last ``max_wire`` bytes, or the last quarter if that is
smaller (a limit of under four largest records: one record announced larger than the ring
budget), so a run of small records still arrives many per transport read, not one header and
one body per read; there a view offers at most 4 KiB past the frontier record. Where it
would offer nothing (full, or a record larger than it), or once a burst stored more than half
of C (a stream, not a message: it would otherwise take a stream of small records a few KiB
per transport read), it grows instead: 4x (and to 4 records of the frontier
record's size at least), the whole ``limit`` once that is over ``limit / 8``, moving the stored
bytes to 0 in order (``head`` becomes 0: the Opener moves the positions it holds by as much),
so backpressure starts where it would with ``limit`` from the start; while it copies, it holds
its old memory too (at most ``limit / 8``, or ``start``). ``peak`` is the most bytes stored
since it was last empty, ``recent`` the larger of that and half the ``recent`` before (the
recent bursts, forgotten by halves). When it empties: if ``recent`` is at most ``start / 2``
(messages), it releases its memory (C = 0, no views) and takes ``start`` bytes again when the
next bytes come; else if ``recent`` is at most C / 32, it shrinks to 4 x ``recent`` (``start``
if that is at most 2 x ``start``). A burst that fits in half of C never grows it, so bursts of
one size settle on one size, and a ring grown by large bursts comes down only as ``recent``
halves over the small bursts after them. So a connection that exchanged 1 KiB messages holds no
ring memory between them (4 KiB while one arrives), and a bulk stream of 64 KiB records keeps
its full ring and allocates nothing per record (tests/test_allocations.py). Views into an older
buffer (the cache ``views``, views lent to a reader) keep only that buffer alive, unchanged.

Reserved records: when the ring is empty, ``reserve(n)`` stores a complete record of ``n`` wire
bytes at 0 without anything being written there. The Opener does this for a record it opens
straight from the caller's immutable input: only its plaintext lands in the ring (at the
record's body), and ``pop`` releases it like any other record.

Errors: a length field out of range makes ``commit`` raise (RecordTooLargeError or
MalformedRecordError naming the record's number: ``records.check_record_length``, the rule every
reader applies) after storing the bytes; the records completed before it stay readable,
and the Opener, which owns the error from then on, gives the ring no more input.

Stored where it lies: ``store`` copies bytes of the record being received (a record split
between inputs the Opener holds by reference) straight to ``tail`` when the present memory holds
that whole record without moving anything, in one call instead of a view and a commit; an
empty ring given the start of a record larger than its memory takes memory for it at once (what
growth would reach), not ``start`` bytes first. Anything else goes through ``writable()``.

Views: ``writable()`` returns a view of free space for the transport to fill, valid until the
next ``commit``. Ring memory of a record stays untouched until ``pop`` releases that record;
after that, the next ``writable()`` may hand it to the transport, which will overwrite it.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import OutOfRangeError
from .format import RECORD_HEADER, RECORD_HEADER_SIZE, TAG_SIZE
from .records import check_record_length

__all__ = (
    "DEFAULT_RING_SIZE",
    "START_CAPACITY",
    "VIEW_SLOTS",
    "RecordRing",
    "ring_capacity",
)

# The receive ring's byte budget: four 64 KiB records (their headers and tags included).
DEFAULT_RING_SIZE = 4 * (RECORD_HEADER_SIZE + 64 * 1024 + TAG_SIZE)
# The memory an Opener's ring takes with its first bytes (and again after it released it): a
# 1 KiB message and then some (benchmarks/bench_conns.py, benchmarks/README.md part 6).
START_CAPACITY = 4096
# View cache slots (see ``RecordRing.views``): prime, so the positions of equal records spread
# over it (16 records of 64 KiB, a 1 MiB ring, take 16 distinct slots); few, so it stays small.
VIEW_SLOTS = 31
# A ring shrinks when it empties after recent bursts that used at most 1/_SHRINK_USE of it, to
# _GROWTH times them (so at most 1/8 of its limit); it grows _GROWTH times (to its limit past
# 1/8 of it) when a burst fills more than half of it. The gap keeps bursts of one size from
# making it grow and shrink by turns.
_GROWTH = 4
_SHRINK_USE = 32
# What a view offers past the frontier record in a growing ring at a limit of under four
# largest records (its zone begins at 3/4 of it, far past the frontier): 4 KiB, ~190
# one-byte records for the Opener to commit in one call (as _ABSORB_BYTES in opener.py).
_RUN_VIEW = 4 * 1024


def _from_the_first() -> int:
    """The number of the record at ``head`` of a ring that holds a stream from its start."""
    return 0


def ring_capacity(record_size: int, ring_size: int = DEFAULT_RING_SIZE) -> int:
    """The ring's capacity for records of up to ``record_size`` plaintext bytes: the budget
    ``ring_size``, or one largest record and the next record's header if that is more."""
    if not isinstance(ring_size, int) or isinstance(ring_size, bool) or ring_size < 1:
        raise ValueError(f"ring_size must be a positive number of bytes, got {ring_size!r}")
    return max(ring_size, RECORD_HEADER_SIZE + record_size + TAG_SIZE + RECORD_HEADER_SIZE)


class RecordRing:
    """Ring of whole records. See the module docstring for the invariant."""

    __slots__ = (
        "_offered",
        "_run_view",
        "_zone",
        "buf",
        "capacity",
        "complete",
        "frontier",
        "frontier_len",
        "head",
        "limit",
        "max_ciphertext",
        "max_wire",
        "peak",
        "recent",
        "start",
        "tail",
        "view",
        "views",
        "wrap",
    )

    def __init__(self, record_size: int, capacity: int | None = None, start: int | None = None) -> None:
        # capacity: the most it holds, ring_capacity(record_size) unless a test or the Opener
        # says otherwise; start: what it holds at first and shrinks back to (None: capacity)
        self.max_ciphertext = record_size + TAG_SIZE
        self.max_wire = RECORD_HEADER_SIZE + self.max_ciphertext
        self.limit = ring_capacity(record_size) if capacity is None else capacity
        if self.limit < self.max_wire + RECORD_HEADER_SIZE:
            raise ValueError("ring capacity must hold a maximum-size record and the next record's header")
        self.start = (
            self.limit if start is None else max(2 * RECORD_HEADER_SIZE + TAG_SIZE, min(start, self.limit))
        )
        self.head = self.tail = self.frontier = self.frontier_len = self.complete = self.peak = 0
        self.recent = 0  # peak of the recent bursts: each burst's, or half the one before
        self.wrap = -1
        self._offered = 0
        # a growing ring takes its first memory with its first bytes: ``start``, or the limit
        # at once for a record reserved larger than that
        self._allocate(self.start if self.start == self.limit else 0)

    def _allocate(self, capacity: int) -> None:
        """New memory of ``capacity`` bytes (views into the old buffer stay valid, unchanged)."""
        self.capacity = capacity
        self.buf = bytearray(capacity)
        self.view = memoryview(self.buf)
        # The zone: below the limit, the last quarter, so records of up to C / 4 never cross C
        # (and no received part of one is copied to 0); a fixed ring at its limit, the last
        # max_wire bytes (it copies no more than a header); a growing ring at its limit, the
        # smaller of the two, so that a limit of one largest record still takes runs of small
        # records in one transport read (not two reads per record: benchmarks/README.md, the
        # flood). What a view offers past the frontier record: no bound, but in that last
        # ring, whose zone begins far from the frontier, where a view of tiny records would
        # cost the Opener's commit one loop step per record in one call (~12,000 in the flood).
        self._run_view = capacity
        if capacity < self.limit:
            self._zone = capacity - capacity // 4
        elif self.start == self.limit:
            self._zone = capacity - self.max_wire
        else:
            self._zone = capacity - min(self.max_wire, capacity // 4)
            if self.max_wire > capacity // 4:
                self._run_view = _RUN_VIEW
        # A small direct-mapped cache for the Opener: position -> (position, ciphertext length,
        # AAD view, ciphertext view, plaintext view). Records of one size land on the same few
        # positions, so opening reuses views instead of slicing three new ones per record.
        # Fixed size, so it never allocates as it fills; new with the memory it views.
        self.views: list[tuple[int, int, memoryview, memoryview, memoryview] | None] = (
            [None] * VIEW_SLOTS if capacity else []  # (no record is stored in no memory)
        )

    def _grow(self, need: int = RECORD_HEADER_SIZE) -> None:
        """More memory, the stored bytes moved to 0 in order (``head`` becomes 0: the Opener
        moves the positions it holds by as much): 4x, and 4 records of ``need`` bytes (the
        frontier record's) at least; the whole ``limit`` once that is over ``limit / 8``, so
        that while copying, the old memory held too is at most ``limit / 8`` (or ``start``)."""
        size = max(_GROWTH * self.capacity, _GROWTH * need + RECORD_HEADER_SIZE)
        if size > self.limit // 8:
            size = self.limit
        old, head, wrap, tail = self.view, self.head, self.wrap, self.tail
        self._allocate(size)
        if wrap >= 0:  # the top segment, then the bottom one (where the frontier is) after it
            top = wrap - head
            self.view[0:top] = old[head:wrap]
            self.view[top : top + tail] = old[0:tail]
            self.frontier += top
            self.tail = top + tail
        else:
            self.view[0 : tail - head] = old[head:tail]
            self.frontier -= head
            self.tail = tail - head
        self.head = 0
        self.wrap = -1
        self._offered = self.tail  # a view offered before this is stale: committing it fails

    def _room_for(self, wire_length: int) -> None:
        """An empty ring whose memory is smaller than a record of ``wire_length`` bytes: take
        ``start`` again if that holds it with room to spare, else grow for it."""
        if not self.capacity and 2 * wire_length <= self.start:
            self._allocate(self.start)
        else:
            self._grow(wire_length)

    def _fit(self, recent: int) -> None:
        """The ring just emptied after bursts that used little of it (``recent``): release or
        shrink its memory (see the module docstring)."""
        if 2 * recent <= self.start:
            if self.capacity:
                self._allocate(0)  # messages: no memory until the next one
        else:
            size = _GROWTH * recent
            self._allocate(size if size > 2 * self.start else self.start)

    @property
    def stored(self) -> int:
        """Bytes held: complete records plus the partial one."""
        if self.wrap >= 0:
            return self.wrap - self.head + self.tail
        return self.tail - self.head

    def missing(self) -> int:
        """Bytes the partial record at the frontier still lacks (its header's, while the
        header is incomplete)."""
        return (self.frontier_len or RECORD_HEADER_SIZE) - (self.tail - self.frontier)

    def writable(self) -> memoryview:
        """Free space the next incoming bytes go to; empty means "stop reading" (backpressure).
        A ring below its limit may grow first (``head`` may move to 0)."""
        if self.capacity < self.limit:
            if not self.capacity:
                self._allocate(self.start)  # released after the last burst: a new one begins
            elif 2 * self.peak > self.capacity:
                self._grow(self.frontier_len or RECORD_HEADER_SIZE)  # a burst filled it more than half
        need = self.frontier_len or RECORD_HEADER_SIZE
        if self.frontier + need > self.capacity and not self._relocate(need):
            return self._grown_or_full(need)
        stop = self.frontier + need
        if stop < self._zone:
            stop = self._zone
            if stop - self.tail > self._run_view:
                stop = max(self.frontier + need, self.tail + self._run_view)
        limit = self.head if self.wrap >= 0 else self.capacity
        if stop > limit:
            stop = limit
        if stop <= self.tail:
            return self._grown_or_full(need)
        self._offered = stop
        return self.view[self.tail : stop]

    def _grown_or_full(self, need: int) -> memoryview:
        """``writable()`` where the present memory offers nothing: grow and offer what that
        gives (never nothing below the limit), or nothing at the limit (backpressure)."""
        if self.capacity < self.limit:
            self._grow(need)
            return self.writable()
        return self.view[0:0]

    def can_take(self) -> bool:
        """Whether ``writable()`` would offer any space now. A pure check: it moves nothing
        (``writable()`` may move the frontier record's header to 0 first)."""
        need = self.frontier_len or RECORD_HEADER_SIZE
        if self.capacity < self.limit and self.stored - (self.tail - self.frontier) + need <= self.limit:
            return True  # writable() would grow it to the limit (the complete records, then this one)
        if self.frontier + need > self.capacity:  # writable() would move the header to 0
            if self.wrap >= 0:
                return False
            return self.head == self.frontier or need <= self.head
        stop = max(self.frontier + need, self._zone)
        return min(stop, self.head if self.wrap >= 0 else self.capacity) > self.tail

    def _relocate(self, need: int) -> bool:
        """Move the frontier record's first bytes (at most a header at the limit) to 0, if
        0.. is free."""
        if self.wrap >= 0:
            return False
        start, count = self.frontier, self.tail - self.frontier
        if self.head == start:  # nothing else is stored: start over at 0
            self.view[0:count] = self.view[start : start + count]
            self.head = self.frontier = 0
        elif need <= self.head:
            self.view[0:count] = self.view[start : start + count]
            self.wrap, self.frontier = start, 0
        else:
            return False
        self.tail = count
        self._offered = count
        return True

    def commit(self, nbytes: int, head_number: Callable[[], int] = _from_the_first) -> None:
        """``nbytes`` were written at the start of the last ``writable()`` view. ``head_number``:
        returns the stream's number of the record at ``head`` (its owner counts them; 0 for a
        ring that holds a stream from its first record), so that a length refused at the
        frontier names its record, ``head_number() + complete``; asked only then (counting it
        on every commit was three calls of the 64 KiB read path's few, benchmarks/README.md)."""
        if nbytes < 0 or self.tail + nbytes > self._offered:
            raise OutOfRangeError(f"commit of {nbytes} bytes exceeds the view that was offered")
        self.tail += nbytes
        stored = self.tail - self.head if self.wrap < 0 else self.wrap - self.head + self.tail
        if stored > self.peak:
            self.peak = stored
        while True:
            available = self.tail - self.frontier
            if not self.frontier_len:
                if available < RECORD_HEADER_SIZE:
                    return
                _, length = RECORD_HEADER.unpack_from(self.buf, self.frontier)
                if not TAG_SIZE <= length <= self.max_ciphertext:  # (the call only to raise)
                    check_record_length(length, self.max_ciphertext, head_number() + self.complete)
                self.frontier_len = RECORD_HEADER_SIZE + length
            if available < self.frontier_len:
                return
            self.frontier += self.frontier_len
            self.frontier_len = 0
            self.complete += 1

    def store(self, source: memoryview, start: int, count: int) -> int:
        """Copy ``source[start:start + count]``, bytes of the record being received (at most
        what it misses, its header first if none of it is stored), where the present memory holds
        that whole record without moving or growing anything; return ``count``, or 0 with nothing
        stored where it does not: then ``writable()`` and ``commit()`` take them. The split
        record's path: one copy and a few steps, against the view and the commit loop."""
        tail, frontier = self.tail, self.frontier
        wire = self.frontier_len
        if not wire:
            if tail != frontier or count < RECORD_HEADER_SIZE:
                return 0
            _, length = RECORD_HEADER.unpack_from(source, start)
            if not TAG_SIZE <= length <= self.max_ciphertext:
                return 0  # (commit raises the error)
            wire = RECORD_HEADER_SIZE + length
        end = frontier + wire
        if wire > self.capacity and self.capacity < self.limit and self.wrap < 0 and tail == self.head:
            self._room_for(wire)  # empty: memory for this record at once, not ``start`` first
            tail, frontier = self.tail, self.frontier
            end = frontier + wire
        if tail + count > end or end > (self.head if self.wrap >= 0 else self.capacity):
            return 0
        if self.capacity < self.limit and 2 * self.peak > self.capacity:
            return 0  # writable() grows it first
        self.view[tail : tail + count] = source[start : start + count]
        tail += count
        self.tail = self._offered = tail  # a view offered before this is stale
        stored = tail - self.head if self.wrap < 0 else self.wrap - self.head + tail
        if stored > self.peak:
            self.peak = stored
        if tail == end:
            self.frontier, self.frontier_len = end, 0
            self.complete += 1
        else:
            self.frontier_len = wire
        return count

    def reserve(self, wire_length: int) -> int:
        """Store a complete record of ``wire_length`` bytes at 0 without writing it (the ring
        must be empty); return its position. Views offered before this are stale."""
        if self.stored or wire_length > self.max_wire:
            raise OutOfRangeError(f"cannot reserve {wire_length} bytes in a ring holding {self.stored}")
        self.head = self.tail = self.frontier = 0
        self.wrap = -1
        if wire_length > self.peak:
            self.peak = wire_length
        if wire_length > self.capacity:
            self._room_for(wire_length)
        self.head = 0
        self.wrap = -1
        self.tail = self.frontier = wire_length
        self.frontier_len = 0
        self.complete = 1
        self._offered = 0
        return 0

    def clear(self) -> None:
        """Forget everything stored (after a fatal error: nothing in it may be opened)."""
        self.head = self.tail = self.frontier = self.frontier_len = self.complete = 0
        self.wrap = -1
        self._offered = 0
        self.views = [None] * VIEW_SLOTS

    def pop(self, wire_length: int) -> None:
        """Release the complete record at ``head``; its memory may be overwritten from now on."""
        self.release(wire_length, 1)

    def release(self, nbytes: int, records: int, *, more_held: bool = False) -> None:
        """Release ``records`` complete records, ``nbytes`` in all, from ``head`` (they lie in
        one piece: not past the wrap); their memory may be overwritten from now on.
        ``more_held``: the caller holds more of the stream already (input given by reference),
        so an emptied ring keeps its memory for the next record split between inputs rather than
        releasing it and allocating it again (once per input piece: benchmarks/README.md)."""
        self.complete -= records
        self.head += nbytes
        if self.wrap >= 0 and self.head == self.wrap:
            self.head, self.wrap = 0, -1
        if self.wrap < 0 and self.head == self.tail:  # empty: restart at 0 for the longest view
            self.head = self.tail = self.frontier = 0
            self._offered = 0  # a view offered before this is stale: committing it must fail
            if self.start < self.limit and not more_held:  # fit the memory to the bursts that ended
                recent = self.recent >> 1
                if self.peak > recent:
                    recent = self.peak
                self.recent = recent
                self.peak = 0
                if 2 * recent <= self.start or _SHRINK_USE * recent <= self.capacity:
                    self._fit(recent)
