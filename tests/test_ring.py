"""RecordRing invariants, driven by a model transport and a model reader (no crypto here)."""

from __future__ import annotations

import random

import pytest

from gcmstream.codec import Opener, Sealer
from gcmstream.errors import MalformedRecordError, OutOfRangeError, RecordTooLargeError
from gcmstream.format import RECORD_HEADER, RECORD_HEADER_SIZE, TAG_SIZE
from gcmstream.ring import DEFAULT_RING_SIZE, START_CAPACITY, VIEW_SLOTS, RecordRing, ring_capacity

from .helpers import KEY


class CheckedRing(RecordRing):
    """A RecordRing that records how many bytes each relocation copies."""

    __slots__ = ("relocations",)

    def __init__(self, record_size: int, capacity: int | None = None, start: int | None = None) -> None:
        super().__init__(record_size, capacity, start)
        self.relocations: list[int] = []

    def _relocate(self, need: int) -> bool:
        count = self.tail - self.frontier
        moved = super()._relocate(need)
        if moved:
            self.relocations.append(count)
        return moved


def wire_record(index: int, body_len: int) -> bytes:
    """A record as the ring sees it: flags, length, then ``body_len`` bytes naming the record."""
    body = (index.to_bytes(4, "big") * (body_len // 4 + 1))[:body_len]
    return RECORD_HEADER.pack(0, body_len) + body


class Model:
    """A transport that writes a byte stream into the ring and a reader that pops whole records."""

    def __init__(self, ring: CheckedRing, records: list[bytes]) -> None:
        self.ring = ring
        self.records = records
        self.stream = b"".join(records)
        self.sent = 0
        self.popped = 0
        self.buf_id = id(ring.buf)
        self.capacity = ring.capacity

    def check(self) -> None:
        ring = self.ring
        assert ring.view.obj is ring.buf
        assert ring.capacity == len(ring.buf) == len(ring.view) <= ring.limit
        assert 0 <= ring.stored <= ring.capacity
        if ring.start == ring.limit:  # a fixed ring: one buffer, and relocations copy a header
            assert id(ring.buf) == self.buf_id, "the buffer object was replaced"
            assert ring.capacity == self.capacity
            assert all(count <= RECORD_HEADER_SIZE for count in ring.relocations)
        else:
            assert all(count < ring.limit for count in ring.relocations)

    def send(self, most: int) -> int:
        """Write up to ``most`` bytes into what ``writable()`` offers; return how many."""
        state = (self.ring.head, self.ring.tail, self.ring.frontier, self.ring.wrap)
        promised = self.ring.can_take()
        assert state == (self.ring.head, self.ring.tail, self.ring.frontier, self.ring.wrap), "can_take moved"
        view = self.ring.writable()
        assert promised == (len(view) > 0), "can_take() disagrees with writable()"
        count = min(len(view), most, len(self.stream) - self.sent)
        if count:
            view[:count] = self.stream[self.sent : self.sent + count]
            self.ring.commit(count)
            self.sent += count
        self.check()
        return count

    def pop(self) -> bool:
        ring = self.ring
        if not ring.complete:
            return False
        _, length = RECORD_HEADER.unpack_from(ring.buf, ring.head)
        wire = RECORD_HEADER_SIZE + length
        assert ring.head + wire <= ring.capacity, "a record wrapped past the end of the ring"
        expected = self.records[self.popped]
        assert bytes(ring.view[ring.head : ring.head + wire]) == expected
        ring.pop(wire)
        self.popped += 1
        self.check()
        return True


def test_ring_capacity() -> None:
    assert ring_capacity(1) == DEFAULT_RING_SIZE == 4 * (RECORD_HEADER_SIZE + 64 * 1024 + TAG_SIZE)
    big = 1024 * 1024
    assert ring_capacity(big) == big + TAG_SIZE + 2 * RECORD_HEADER_SIZE  # one record + a header
    assert ring_capacity(big, 5 * big) == 5 * big
    with pytest.raises(ValueError, match="a maximum-size record and the next record's header"):
        RecordRing(1000, capacity=1000 + TAG_SIZE + 2 * RECORD_HEADER_SIZE - 1)
    RecordRing(1000, capacity=1000 + TAG_SIZE + 2 * RECORD_HEADER_SIZE)


@pytest.mark.parametrize("seed", range(40))
def test_reader_that_keeps_reading_never_deadlocks(seed: int) -> None:
    rng = random.Random(seed)
    record_size = rng.choice([1, 7, 100, 1000, 4000])
    max_body = record_size + TAG_SIZE
    max_wire = RECORD_HEADER_SIZE + max_body
    smallest = max_wire + RECORD_HEADER_SIZE  # one largest record and the next header
    capacity = rng.choice([None, smallest, smallest + rng.randrange(1, max_wire), 2 * max_wire, 3 * max_wire])
    # half the runs with a ring that starts small and grows and shrinks as records arrive
    start = rng.choice([None, 1, 64, max_wire // 2 + 1, max_wire + 1]) if seed % 2 else None
    ring = CheckedRing(record_size, capacity, start)
    sizes = [rng.choice([TAG_SIZE, max_body, max_body, rng.randint(TAG_SIZE, max_body)]) for _ in range(300)]
    model = Model(ring, [wire_record(i, size) for i, size in enumerate(sizes)])
    steps = 0
    while model.popped < len(sizes):
        steps += 1
        assert steps < 100_000, "no progress: deadlock"
        if rng.random() < 0.6:
            most = rng.choice([1, 2, 3, 5, 6, rng.randint(1, max_wire), rng.randint(1, 3 * max_wire)])
            sent = model.send(most)
        else:
            sent = 0
        if rng.random() < 0.4 or (sent == 0 and model.sent < len(model.stream)):
            popped = model.pop()
            if not sent and not popped and model.sent < len(model.stream):
                # Nothing to read and nothing accepted: only legal if a retry is offered space.
                assert len(ring.writable()) > 0, "deadlock: ring offers no space and holds no record"
        if model.sent == len(model.stream):
            model.pop()
    assert model.sent == len(model.stream)
    assert ring.stored == 0


@pytest.mark.parametrize("seed", range(10))
def test_backpressure_when_full_and_resume_when_popped(seed: int) -> None:
    rng = random.Random(seed)
    record_size = rng.choice([10, 1000, 3000])
    max_body = record_size + TAG_SIZE
    smallest = 2 * RECORD_HEADER_SIZE + max_body
    ring = CheckedRing(
        record_size,
        rng.choice([None, smallest, smallest + 37, 2 * (RECORD_HEADER_SIZE + max_body) + 37]),
        rng.choice([None, 64]) if seed % 2 else None,  # a small start grows before refusing input
    )
    count = 8 * ring.limit // (TAG_SIZE + max_body) + 10  # several ringfuls
    sizes = [rng.randint(TAG_SIZE, max_body) for _ in range(count)]
    model = Model(ring, [wire_record(i, size) for i, size in enumerate(sizes)])
    for _ in range(5):
        # A reader that stops reading: the transport fills the ring, then is offered nothing.
        while model.send(rng.randint(1, 5000)):
            pass
        assert len(ring.writable()) == 0
        assert ring.stored <= ring.capacity == ring.limit  # backpressure only at the limit
        assert ring.complete >= 1
        held = ring.stored
        # Still nothing after another try, and nothing was dropped or grown.
        assert model.send(1000) == 0
        assert ring.stored == held
        # The reader pops; space comes back no later than when the ring holds no complete record.
        while len(ring.writable()) == 0:
            assert model.pop(), "ring is full but holds no complete record: deadlock"
        assert model.send(1) == 1


def test_relocation_copies_only_a_record_header() -> None:
    record_size = 1000
    max_wire = RECORD_HEADER_SIZE + record_size + TAG_SIZE
    ring = CheckedRing(record_size, 2 * max_wire + 100)
    rng = random.Random(1)
    sizes = [rng.choice([TAG_SIZE, record_size + TAG_SIZE, 500]) for _ in range(500)]
    model = Model(ring, [wire_record(i, size) for i, size in enumerate(sizes)])
    while model.popped < len(sizes):
        model.send(rng.randint(1, 700))
        if rng.random() < 0.5:
            model.pop()
    assert ring.relocations, "the schedule never relocated: the test does not test anything"
    assert max(ring.relocations) <= RECORD_HEADER_SIZE


def test_record_header_alone_near_the_end() -> None:
    """In the last max_wire bytes the ring offers only the header until the length is known."""
    record_size = 100
    max_wire = RECORD_HEADER_SIZE + record_size + TAG_SIZE
    ring = RecordRing(record_size, 2 * max_wire)
    view = ring.writable()
    assert len(view) == max_wire  # up to the zone: the last max_wire bytes are offered piecewise
    full = wire_record(0, record_size + TAG_SIZE)
    view[:] = full
    ring.commit(len(full))
    assert ring.complete == 1
    view = ring.writable()
    assert len(view) == RECORD_HEADER_SIZE
    with pytest.raises(ValueError, match="exceeds the view"):
        ring.commit(RECORD_HEADER_SIZE + 1)
    with pytest.raises(ValueError, match="exceeds the view"):
        ring.commit(-1)
    short = wire_record(1, 30)
    view[:] = short[:RECORD_HEADER_SIZE]
    ring.commit(RECORD_HEADER_SIZE)
    view = ring.writable()
    assert len(view) == 30  # exactly the rest of the record, now known to fit
    view[:] = short[RECORD_HEADER_SIZE:]
    ring.commit(30)
    assert ring.complete == 2


@pytest.mark.parametrize("extra", [1, 1000, 0xFFFF_FFFF - 116])
def test_record_too_large_is_an_error_before_buffering(extra: int) -> None:
    record_size = 100
    ring = RecordRing(record_size)
    length = record_size + TAG_SIZE + extra
    header = RECORD_HEADER.pack(0, length)
    for i in range(RECORD_HEADER_SIZE - 1):
        view = ring.writable()
        view[0] = header[i]
        ring.commit(1)  # no error before the length is whole
    view = ring.writable()
    view[0] = header[-1]
    with pytest.raises(RecordTooLargeError) as info:
        ring.commit(1)
    error = info.value
    assert error.size == length
    assert error.limit == record_size + TAG_SIZE
    limit = record_size + TAG_SIZE
    assert str(error) == f"record ciphertext of {length} bytes exceeds the limit of {limit} bytes"
    assert ring.complete == 0
    assert ring.stored == RECORD_HEADER_SIZE
    # The opener that owns the ring takes not one byte of the body after that.
    opener = opener_after_header(record_size)
    for byte in header:
        view = opener.get_buffer()
        view[0] = byte
        opener.buffer_updated(1)
    assert opener.failed
    assert len(opener.get_buffer()) == 0


def opener_after_header(record_size: int) -> Opener:
    sealer = Sealer(KEY, record_size=record_size)
    opener = Opener(KEY, max_record_size=record_size)
    opener.receive_data(sealer.take_header())
    return opener


@pytest.mark.parametrize("length", [0, 1, TAG_SIZE - 1])
def test_length_below_tag_is_malformed(length: int) -> None:
    ring = RecordRing(100)
    good = wire_record(0, 20)
    view = ring.writable()
    data = good + RECORD_HEADER.pack(0, length)
    view[: len(data)] = data
    with pytest.raises(MalformedRecordError, match=str(length)):
        ring.commit(len(data))
    assert ring.complete == 1  # the good record before it stays readable
    opener = opener_after_header(100)
    opener.receive_data(bytearray(data))  # copied into the ring: the error waits behind the record
    assert opener.failed
    assert len(opener.get_buffer()) == 0


def test_exact_maximum_length_is_accepted() -> None:
    record_size = 100
    ring = RecordRing(record_size)
    data = wire_record(0, record_size + TAG_SIZE)
    view = ring.writable()
    view[: len(data)] = data
    ring.commit(len(data))  # no error
    assert ring.complete == 1


def test_empty_ring_restarts_at_zero() -> None:
    ring = RecordRing(100)
    data = wire_record(0, 50) + wire_record(1, 60)
    view = ring.writable()
    view[: len(data)] = data
    ring.commit(len(data))
    assert ring.complete == 2
    ring.pop(RECORD_HEADER_SIZE + 50)
    assert ring.head == RECORD_HEADER_SIZE + 50
    ring.pop(RECORD_HEADER_SIZE + 60)
    assert (ring.head, ring.tail, ring.frontier, ring.stored) == (0, 0, 0, 0)
    assert len(ring.writable()) == ring.capacity - ring.max_wire  # the zone is offered piecewise


# -- edges found by mutation testing (make mutate) ----------------------------------------------


def put(ring: RecordRing, data: bytes) -> None:
    """Write all of ``data`` into one ``writable()`` view, which must have room for it."""
    view = ring.writable()
    assert len(view) >= len(data), f"offered {len(view)} bytes, need {len(data)}"
    view[: len(data)] = data
    ring.commit(len(data))


def test_commit_without_an_offer_is_refused() -> None:
    ring = RecordRing(100)
    ring.commit(0)  # nothing written, nothing offered: fine
    with pytest.raises(OutOfRangeError, match="exceeds the view"):
        ring.commit(1)
    assert ring.stored == 0


def test_committing_nothing_changes_nothing() -> None:
    ring = RecordRing(100)
    offered = len(ring.writable())
    ring.commit(0)
    put(ring, wire_record(0, 20)[:3])
    ring.commit(0)
    assert (ring.stored, ring.complete) == (3, 0)
    assert len(ring.writable()) == offered - 3


def test_a_view_offered_before_the_ring_emptied_cannot_commit_a_byte() -> None:
    """pop() restarts an empty ring at 0; the view offered before it is stale, even for one byte."""
    ring = RecordRing(100)
    record = wire_record(0, 20)
    view = ring.writable()
    view[: len(record)] = record
    ring.commit(len(record))
    ring.pop(len(record))
    assert ring.stored == 0
    with pytest.raises(OutOfRangeError):
        ring.commit(1)


def test_two_maximum_records_fill_a_minimum_ring_without_a_pop() -> None:
    """A record that ends exactly at the capacity is offered in place: it needs no move to 0 (and
    with the first record still stored, a move could not happen: that would stall the stream)."""
    record_size = 100
    max_wire = RECORD_HEADER_SIZE + record_size + TAG_SIZE
    ring = RecordRing(record_size, 2 * max_wire)
    first, second = wire_record(0, record_size + TAG_SIZE), wire_record(1, record_size + TAG_SIZE)
    put(ring, first)
    put(ring, second[:RECORD_HEADER_SIZE])
    put(ring, second[RECORD_HEADER_SIZE:])  # the rest, up to the last byte of the ring
    assert ring.complete == 2
    assert ring.buf == first + second


def test_a_record_moves_to_zero_when_the_freed_space_is_exactly_its_size() -> None:
    record_size = 100
    max_wire = RECORD_HEADER_SIZE + record_size + TAG_SIZE
    ring = RecordRing(record_size, 2 * max_wire)
    first, second, third = wire_record(0, 95), wire_record(1, 116), wire_record(2, 95)
    put(ring, first + second[:21])
    put(ring, second[21:])
    put(ring, third[:RECORD_HEADER_SIZE])  # at 221: the third (100 bytes) cannot end by 242
    assert len(ring.writable()) == 0  # [0, 100) still holds the first record
    ring.pop(len(first))  # now [0, 100) is free: exactly the third record's size
    put(ring, third[RECORD_HEADER_SIZE:])
    assert ring.complete == 2
    assert ring.buf[: len(third)] == third
    ring.pop(len(second))
    assert ring.stored == len(third)


def test_reserve_needs_an_empty_ring_and_a_record_that_fits() -> None:
    """Kills reserve()'s refusal ``or`` -> ``and`` and its message losing the numbers it names."""
    ring = RecordRing(100)
    put(ring, wire_record(0, 20)[:12])
    with pytest.raises(OutOfRangeError, match="cannot reserve 30 bytes in a ring holding 12"):
        ring.reserve(30)
    empty = RecordRing(100)
    with pytest.raises(
        OutOfRangeError, match=f"cannot reserve {empty.max_wire + 1} bytes in a ring holding 0"
    ):
        empty.reserve(empty.max_wire + 1)
    assert empty.reserve(empty.max_wire) == 0
    assert (empty.head, empty.stored, empty.complete) == (0, empty.max_wire, 1)


def test_a_view_offered_before_a_reserve_cannot_commit_a_byte() -> None:
    ring = RecordRing(100)
    ring.writable()
    assert ring.reserve(40) == 0
    with pytest.raises(OutOfRangeError, match="exceeds the view"):
        ring.commit(1)
    ring.pop(40)
    assert ring.stored == 0
    put(ring, wire_record(0, 20))
    assert (ring.head, ring.complete) == (0, 1)


def test_clear_forgets_everything_and_stales_offered_views() -> None:
    """Kills clear() leaving None, a wrapped ``wrap`` or a non-zero offer behind."""
    ring = RecordRing(100)
    put(ring, wire_record(0, 20) + wire_record(1, 30)[:10])
    ring.clear()
    assert (ring.stored, ring.complete, ring.missing()) == (0, 0, RECORD_HEADER_SIZE)
    assert ring.views == [None] * VIEW_SLOTS  # the view cache emptied, not dropped
    with pytest.raises(OutOfRangeError, match="exceeds the view"):
        ring.commit(1)
    record = wire_record(2, 20)
    put(ring, record)  # starts over at 0
    assert (ring.head, ring.stored, ring.complete) == (0, len(record), 1)
    assert ring.buf[: len(record)] == record


def test_missing_counts_what_the_partial_record_lacks() -> None:
    """What the Opener asks of held input to complete a record split across inputs."""
    ring = RecordRing(100)
    assert ring.missing() == RECORD_HEADER_SIZE
    first, second = wire_record(0, 20), wire_record(1, 30)
    put(ring, first + second[:3])  # the second record's header is incomplete
    assert ring.missing() == RECORD_HEADER_SIZE - 3
    put(ring, second[3:12])
    assert ring.missing() == len(second) - 12
    put(ring, second[12:])
    assert (ring.complete, ring.missing()) == (2, RECORD_HEADER_SIZE)


def test_release_of_several_records_is_their_pops() -> None:
    """``release(nbytes, records)`` (the Opener's run releases a stretch of records at once)
    leaves the ring as popping them one by one does: at the wrap, when it empties, and when
    records stay."""
    rng = random.Random(23)
    for _ in range(200):
        records = [wire_record(i, rng.randrange(TAG_SIZE, 200)) for i in range(rng.randrange(2, 12))]
        capacity = rng.choice([None, 230 + RECORD_HEADER_SIZE, 700])
        rings = [RecordRing(200, capacity), RecordRing(200, capacity)]
        stream = b"".join(records)
        sent = [0, 0]
        for _step in range(50):
            most = rng.randrange(1, 300)
            for index, ring in enumerate(rings):
                room = ring.writable()
                count = min(len(room), len(stream) - sent[index], most)
                room[:count] = stream[sent[index] : sent[index] + count]
                ring.commit(count)
                sent[index] += count
            pops, ring_a, ring_b = 0, rings[0], rings[1]
            head, stop = ring_a.head, ring_a.wrap if ring_a.wrap >= 0 else ring_a.frontier
            take = rng.randrange(0, ring_a.complete + 1)
            pos = head
            while pops < take and pos < stop:
                _, length = RECORD_HEADER.unpack_from(ring_a.buf, pos)
                ring_a.pop(RECORD_HEADER_SIZE + length)
                pos += RECORD_HEADER_SIZE + length
                pops += 1
            if pops:
                ring_b.release(pos - head, pops)
            state = ("head", "tail", "frontier", "frontier_len", "complete", "wrap", "stored")
            assert [getattr(ring_a, name) for name in state] == [getattr(ring_b, name) for name in state]
            assert len(ring_a.writable()) == len(ring_b.writable())


def fill_and_read(ring: RecordRing, records: list[bytes]) -> None:
    """A transport that writes ``records`` and a reader that keeps popping until all are read."""
    stream = b"".join(records)
    sent = 0
    popped = 0
    for _ in range(10 * len(stream) + 100):
        if popped == len(records):
            return
        view = ring.writable()
        count = min(len(view), len(stream) - sent)
        if count:
            view[:count] = stream[sent : sent + count]
            ring.commit(count)
            sent += count
        while ring.complete:
            _, length = RECORD_HEADER.unpack_from(ring.buf, ring.head)
            assert bytes(ring.view[ring.head : ring.head + RECORD_HEADER_SIZE + length]) == records[popped]
            ring.pop(RECORD_HEADER_SIZE + length)
            popped += 1
    raise AssertionError("no progress")


def test_memory_follows_use() -> None:
    """ring.py "Memory that follows use": a message takes START_CAPACITY and leaves nothing once
    read, bulk records grow the ring to its limit (one buffer for the whole steady flow), medium
    bursts after that bring it down to 4x the burst, messages release it, and a burst of the
    size that grew it does not shrink it."""
    record_size = 64 * 1024
    ring = RecordRing(record_size, ring_capacity(record_size), START_CAPACITY)
    assert ring.capacity == len(ring.buf) == 0  # nothing before the first bytes
    echo = wire_record(0, 1024 + TAG_SIZE)
    ring.writable()[: len(echo)] = echo
    assert len(ring.buf) == START_CAPACITY
    ring.commit(len(echo))
    assert ring.capacity == START_CAPACITY  # a 1 KiB message fits: no growth
    ring.pop(len(echo))
    assert ring.capacity == len(ring.buf) == 0 and not ring.views  # released once read
    bulk = [wire_record(i, record_size + TAG_SIZE) for i in range(8)]
    fill_and_read(ring, bulk[:1])
    assert ring.capacity == ring.limit == ring_capacity(record_size)
    steady = ring.buf
    fill_and_read(ring, bulk)  # steady bulk flow: no new memory
    assert ring.buf is steady
    medium = wire_record(0, 5000)
    sizes = []
    for _ in range(10):  # bursts of one 5 KiB record: the ring comes down as bulk is forgotten
        fill_and_read(ring, [medium])
        sizes.append(ring.capacity)
    assert sizes == sorted(sizes, reverse=True), sizes
    assert sizes[-1] == sizes[-2] == sizes[-3] < ring.limit // 4, sizes  # and settles
    for _ in range(10):  # 1 KiB messages: down, then released
        fill_and_read(ring, [echo])
        sizes.append(ring.capacity)
    assert sizes == sorted(sizes, reverse=True), sizes
    assert sizes[-1] == 0
    # 16 KiB records arrive 4 at a time: the ring grows and single ones do not shrink it again
    sixteen = [wire_record(i, 16 * 1024 + TAG_SIZE) for i in range(4)]
    fill_and_read(ring, sixteen)
    grown = ring.buf
    assert ring.capacity == ring.limit
    for _ in range(3):
        fill_and_read(ring, sixteen[:1])
        assert ring.buf is grown


def test_a_limit_of_one_record_takes_runs_of_small_records_per_read() -> None:
    """A growing ring whose limit is one largest record (a peer announced records larger than
    the ring budget) offers the transport many small records at once at its limit, not a header
    and then a body per read (ring.py: its zone is the last quarter there, views of 4 KiB):
    the one-byte-record flood cost the asyncio server two ``recv_into`` calls per record
    (benchmarks/README.md)."""
    record_size = 1 << 20
    ring = CheckedRing(record_size, None, START_CAPACITY)
    big = wire_record(0, record_size + TAG_SIZE)
    tiny = [wire_record(i, 1 + TAG_SIZE) for i in range(1, 30_001)]
    model = Model(ring, [big, *tiny])
    while model.popped == 0:  # the large record takes the ring to its limit
        model.send(len(big))
        model.pop()
    assert ring.capacity == ring.limit == RECORD_HEADER_SIZE + ring.max_wire
    assert len(ring.writable()) == 4096  # 4 KiB of records at once (the old zone: a header, 5 B)
    reads = 0
    while model.popped < len(model.records):
        assert reads < 100_000, "no progress"
        for _ in range(3):  # a few reads per reader step, as uvloop's read loop makes
            reads += model.send(len(model.stream)) > 0
        while model.pop():
            pass
    stream = sum(len(record) for record in tiny)
    assert reads <= 2 * stream // 4096  # in 4 KiB views
    assert ring.stored == 0


def test_past_its_last_quarter_a_growing_ring_offers_only_the_next_header() -> None:
    """Below its limit, a ring's zone is its last quarter: past 3/4 of C, a view offers only
    what the frontier record needs (its header, then its rest once its length is known), so a
    record of up to C / 4 never crosses C and none of it is received where it must be copied."""
    ring = RecordRing(1000, None, 256)
    feed_keeping_one([wire_record(i, 25) for i in range(5)] + [wire_record(5, 40)], ring)
    assert (ring.capacity, ring.tail, ring.frontier) == (256, 195, 195)  # past 192 = 3/4 of 256
    assert len(ring.writable()) == RECORD_HEADER_SIZE


def test_past_its_zone_a_grown_ring_at_its_limit_offers_only_the_next_header() -> None:
    """At its limit a grown ring's zone is its last max_wire bytes, or its last quarter if that
    is smaller: past it, as below the limit, a view offers only the frontier record's need."""
    ring = RecordRing(100, 400, 64)  # max_wire 121: the zone is the last quarter, from 300
    feed_keeping_one([wire_record(i, 35) for i in range(7)] + [wire_record(7, 25)], ring)
    assert (ring.capacity, ring.tail, ring.frontier) == (400, 310, 310)  # grown to the limit
    assert len(ring.writable()) == RECORD_HEADER_SIZE


@pytest.mark.parametrize(
    ("limit", "offered"),
    [
        pytest.param(8083, 4096, id="under-four-largest-records"),  # max_wire 2,021 > 8,083 // 4
        pytest.param(8084, 6063 - 1000, id="four-largest-records"),  # zone 8,084 - 2,021
        pytest.param(9000, 6979 - 1000, id="more"),  # zone 9,000 - 2,021
    ],
)
def test_only_a_ring_of_under_four_largest_records_bounds_its_views_to_4_kib(
    limit: int, offered: int
) -> None:
    """At its limit a ring of under four largest records has its zone far past the frontier,
    and offers at most 4 KiB past it (so the Opener commits a bounded run of tiny records per
    call); a ring of four largest records or more offers up to its zone."""
    ring = RecordRing(2000, limit, 64)
    feed_keeping_one([wire_record(0, 995)], ring)  # 1,000 bytes: it grows to its limit at once
    assert (ring.capacity, ring.tail) == (limit, 1000)
    assert len(ring.writable()) == offered


def feed_keeping_one(records: list[bytes], ring: RecordRing) -> None:
    """The records written one at a time through the ring's views; the reader pops all but the
    last complete one, so the ring never empties (every record but the last of records[0]'s size)."""
    for record in records:
        sent = 0
        while sent < len(record):  # bounded: each pass writes at least one byte
            view = ring.writable()
            count = min(len(view), len(record) - sent)
            assert count > 0
            view[:count] = record[sent : sent + count]
            ring.commit(count)
            sent += count
        while ring.complete > 1:
            ring.pop(len(records[0]))


@pytest.mark.parametrize("start", [0, 1, 25, 26, 27, 64])
def test_a_growing_ring_takes_at_least_an_empty_record_and_a_header_at_first(start: int) -> None:
    """``start`` is what a growing ring takes with its first bytes, but never less than the
    smallest record (a header and a tag) and the next record's header: 26 bytes."""
    ring = RecordRing(1000, None, start)
    assert ring.capacity == 0  # no memory before the first bytes
    ring.writable()
    assert ring.capacity == max(2 * RECORD_HEADER_SIZE + TAG_SIZE, start)


def test_growth_moves_stored_records_in_order() -> None:
    """A small ring full of complete records and a partial one grows instead of refusing input;
    the records keep their order and bytes, and head becomes 0 (what the Opener shifts by)."""
    ring = RecordRing(1000, None, 64)
    records = [wire_record(i, 20) for i in range(5)]
    stream = b"".join(records) + wire_record(5, 900)[:30]
    view = ring.writable()
    view[: len(view)] = stream[: len(view)]
    ring.commit(len(view))
    sent = len(view)
    ring.pop(len(records[0]))  # head moves past the first record
    while sent < len(stream):
        view = ring.writable()
        assert view, "a ring below its limit refused input"
        count = min(len(view), len(stream) - sent)
        view[:count] = stream[sent : sent + count]
        ring.commit(count)
        sent += count
    assert ring.capacity > 64
    assert ring.head == 0 or ring.capacity == 64
    assert bytes(ring.view[ring.head : ring.head + ring.stored]) == stream[len(records[0]) :]
    assert ring.complete == 4


def test_an_emptied_ring_keeps_its_memory_while_more_input_is_held() -> None:
    """A stream of small records given in pieces: each piece's last record is split, copied
    into the ring, opened and released while the next piece is held. The ring kept releasing
    its 4 KiB and taking them again once per piece (1 KiB records in 8 KiB pieces: the split
    path 12 % slower, benchmarks/README.md issue 23); with ``more_held`` it keeps them, and
    without (a message, then silence) it still releases them (issue 24's idle memory)."""
    ring = RecordRing(1024, start=4096)
    assert ring.start < ring.limit
    record = RECORD_HEADER.pack(0, 1024 + TAG_SIZE) + bytes(1024 + TAG_SIZE)
    for more_held, capacity_after in ((True, 4096), (True, 4096), (False, 0)):
        view = ring.writable()
        view[: len(record)] = record
        ring.commit(len(record))
        memory = ring.buf
        ring.release(len(record), 1, more_held=more_held)
        assert ring.capacity == capacity_after
        assert (ring.buf is memory) == more_held


def test_a_ring_that_released_its_memory_reserves_a_small_record_in_start_bytes() -> None:
    """A ring with no memory (released after a message) reserving a record of up to half its
    ``start`` takes ``start`` bytes, as the first bytes of a message would; a larger one grows
    it. The record is whole at 0 and pops like a received one. (Mutation run of 2026-12-04:
    ``reserve``'s ``not self.capacity``, ``2 *`` and ``<=`` changed, ``_allocate(None)``.)"""
    for wire_length, capacity in [(128, 256), (129, 4 * 129 + RECORD_HEADER_SIZE)]:
        ring = RecordRing(1000, None, 256)
        assert ring.capacity == 0
        assert ring.reserve(wire_length) == 0
        assert ring.capacity == capacity
        assert (ring.head, ring.frontier, ring.tail, ring.complete, ring.stored) == (
            0,
            wire_length,
            wire_length,
            1,
            wire_length,
        )
        ring.pop(wire_length)
        assert ring.stored == 0


def test_a_reserve_of_exactly_the_capacity_keeps_the_memory() -> None:
    """A record as large as the ring's present memory fits in it: no new buffer."""
    ring = RecordRing(1000, None, 256)
    assert len(ring.writable()) > 0  # takes ``start`` bytes; nothing committed
    buffer = ring.buf
    assert ring.reserve(256) == 0
    assert ring.buf is buffer
    assert ring.capacity == 256


def test_can_take_promises_growth_to_exactly_the_limit() -> None:
    """A ring below its limit whose complete records plus the frontier record need exactly
    the limit: writable() grows to the limit and offers space, and can_take() says so
    beforehand (``<=``, not ``<``: mutation run of 2026-12-04)."""
    ring = RecordRing(100, 200, 180)
    data = RECORD_HEADER.pack(0, 74) + bytes(74) + RECORD_HEADER.pack(0, 116)  # 79 bytes + a header
    view = ring.writable()
    view[: len(data)] = data
    ring.commit(len(data))
    assert (ring.capacity, ring.complete, ring.frontier_len) == (180, 1, 121)  # 79 + 121 = 200
    assert ring.can_take()
    assert len(ring.writable()) > 0
    assert ring.capacity == ring.limit


def put_all(ring: RecordRing, data: bytes) -> None:
    """Write all of ``data`` through as many ``writable()`` views as it takes."""
    sent = 0
    for _ in range(len(data) + 1):
        if sent == len(data):
            return
        view = ring.writable()
        count = min(len(view), len(data) - sent)
        assert count, "the ring offered nothing"
        view[:count] = data[sent : sent + count]
        ring.commit(count)
        sent += count


def test_a_wrapped_ring_grows_with_its_records_in_order() -> None:
    """A ring below its limit whose frontier record moved to 0 (wrapped: the top segment, then
    the bottom one) and then fills past half grows: both segments are copied to 0 in stream
    order, and the records pop whole. (Mutation run of 2026-12-04: every change to _grow's
    wrapped branch went unnoticed; no test reached it.)"""
    ring = RecordRing(1000, None, 256)
    small = [wire_record(index, 35) for index in range(6)]  # 40 bytes each
    put_all(ring, small[0])
    for record in small[1:]:  # the frontier climbs while one record stays stored
        put_all(ring, record)
        ring.pop(len(record))
    big = wire_record(99, 95)  # 100 bytes: past the end of the memory, so it moves to 0
    put_all(ring, big[:RECORD_HEADER_SIZE])
    put_all(ring, big[RECORD_HEADER_SIZE:])
    assert ring.wrap >= 0 and ring.capacity == 256
    assert ring.writable()  # more than half stored: it grows
    assert ring.capacity > 256
    assert (ring.head, ring.wrap, ring.frontier, ring.tail, ring.complete) == (0, -1, 140, 140, 2)
    assert ring.view[:140] == small[-1] + big
    ring.pop(len(small[-1]))
    assert ring.view[ring.head : ring.head + len(big)] == big


def test_growth_takes_four_times_its_memory_until_an_eighth_of_the_limit() -> None:
    """Growth is 4x (and room for 4 records of the frontier record's size and the next
    header at least); past ``limit / 8`` it is the whole limit. At exactly ``limit / 8`` it
    is still 4x (the boundary of the mutation run of 2026-12-04)."""
    ring = RecordRing(1000, 8192, 256)
    fill = [wire_record(index, 35) for index in range(4)]  # 160 bytes, no pop: a burst
    put_all(ring, b"".join(fill[:3]))
    put_all(ring, fill[3])
    assert ring.writable()
    assert ring.capacity == 1024 == ring.limit // 8
    put_all(ring, b"".join(wire_record(index, 35) for index in range(12)))  # 640 bytes: past half
    assert ring.writable()
    assert ring.capacity == ring.limit
    large = RecordRing(1000, None, 256)
    header = wire_record(7, 1016)  # the largest record: 1,021 bytes
    put_all(large, header[:251])
    assert large.writable()  # grows for it
    assert large.capacity >= 4 * len(header) + RECORD_HEADER_SIZE


def burst(ring: RecordRing, sizes: list[int]) -> None:
    """A burst: records of ``sizes`` wire bytes written, then all of them read and popped."""
    records = [wire_record(index, size - RECORD_HEADER_SIZE) for index, size in enumerate(sizes)]
    put_all(ring, b"".join(records))
    for record in records:
        ring.pop(len(record))


def test_a_burst_of_half_the_memory_neither_grows_it_nor_keeps_it() -> None:
    """A burst that fits in half of C never grows the ring, and one of at most ``start / 2``
    releases its memory when read (the boundaries of the mutation run of 2026-12-04)."""
    ring = RecordRing(1000, None, 256)
    records = [wire_record(index, size - RECORD_HEADER_SIZE) for index, size in enumerate([40, 40, 48])]
    put_all(ring, b"".join(records))  # 128 bytes: half of 256
    assert ring.writable()
    assert ring.capacity == 256
    for record in records:
        ring.pop(len(record))
    assert (ring.capacity, ring.recent) == (0, 128)
    ring = RecordRing(1000, None, 256)
    put_all(
        ring,
        b"".join(wire_record(index, size - RECORD_HEADER_SIZE) for index, size in enumerate([40, 40, 49])),
    )
    assert ring.writable()  # 129 bytes: more than half, so it grew
    assert ring.capacity > 256


def test_a_grown_ring_shrinks_as_its_recent_bursts_halve() -> None:
    """After a large burst, ``recent`` halves at each smaller burst; the ring keeps its memory
    until ``recent`` is at most C / 32, then shrinks to 4 x ``recent`` (mutation run of
    2026-12-04: a faster decay, ``<`` at C / 32 and the shrink size at 3 x start)."""
    ring = RecordRing(1000, 32768, 256)
    burst(ring, [40] * 500)  # 20,000 bytes: grows to the limit
    assert (ring.capacity, ring.recent) == (32768, 20000)
    small = [40] * 25 + [24]  # 1,024 bytes = C / 32
    for recent in (10000, 5000, 2500, 1250):
        burst(ring, small)
        assert (ring.capacity, ring.recent) == (32768, recent)
    burst(ring, small)
    assert (ring.capacity, ring.recent) == (4 * 1024, 1024)
    ring = RecordRing(1000, 8192, 256)
    burst(ring, [40] * 75)  # 3,000 bytes: grows to the limit
    for _ in range(4):  # recent 1500, 750, 375, 187: 32 x 187 <= 8192
        burst(ring, [40])
    assert (ring.capacity, ring.recent) == (4 * 187, 187)  # 748: above 2 x start, below 3 x start


@pytest.mark.parametrize("seed", range(30))
def test_store_keeps_the_invariant_beside_writable_and_commit(seed: int) -> None:
    """The split record's path (``store``: bytes of the record being received copied where it
    lies) mixed at random with the transport's (``writable``/``commit``) and a reader that pops:
    every record comes out whole, in order, never past the end of the memory, and a view
    offered before a store cannot commit."""
    rng = random.Random(seed)
    record_size = rng.choice([1, 100, 1000, 4000])
    max_body = record_size + TAG_SIZE
    max_wire = RECORD_HEADER_SIZE + max_body
    capacity = rng.choice([None, max_wire + RECORD_HEADER_SIZE, 2 * max_wire, 3 * max_wire])
    ring = CheckedRing(record_size, capacity, rng.choice([None, 64, max_wire // 2 + 1]))
    sizes = [rng.choice([TAG_SIZE, max_body, rng.randint(TAG_SIZE, max_body)]) for _ in range(200)]
    model = Model(ring, [wire_record(i, size) for i, size in enumerate(sizes)])
    stream = memoryview(model.stream)
    stored = steps = 0
    while model.popped < len(sizes):
        steps += 1
        assert steps < 100_000, "no progress: deadlock"
        if rng.random() < 0.5 and model.sent < len(stream):
            missing = ring.missing() if ring.tail != ring.frontier else len(stream) - model.sent
            most = rng.choice([1, 5, missing, rng.randint(1, max_wire)])
            count = min(missing, most, len(stream) - model.sent)
            before = (ring.head, ring.tail, ring.frontier, ring.frontier_len, ring.complete)
            if ring.store(stream, model.sent, count):
                stale = model.sent
                model.sent += count
                stored += 1
                model.check()
                if stale + count < len(stream):
                    assert ring.tail >= count
            else:
                assert (ring.head, ring.tail, ring.frontier, ring.frontier_len, ring.complete) == before
        elif rng.random() < 0.5:
            model.send(rng.choice([1, 6, rng.randint(1, 3 * max_wire)]))
        if not model.pop() and model.sent == len(stream):
            break
    while model.pop():
        pass
    assert model.popped == len(sizes)
    assert stored > 50  # the path was taken, not refused every time


def test_store_takes_only_bytes_of_the_record_being_received() -> None:
    """``store`` refuses (0, nothing changed) more than the record lacks, a header not whole
    among the bytes, a length out of range, and a record the present memory does not hold
    without moving; it stores the rest exactly, and a view offered before cannot commit."""
    ring = RecordRing(1000, capacity=3000)
    record = wire_record(7, 900)
    source = memoryview(record + wire_record(8, 20))
    assert ring.store(source, 0, 3) == 0  # a header in part
    bad = memoryview(RECORD_HEADER.pack(0, TAG_SIZE - 1) + bytes(20))
    assert ring.store(bad, 0, len(bad)) == 0
    too_long = memoryview(RECORD_HEADER.pack(0, 1000 + TAG_SIZE + 1) + bytes(20))
    assert ring.store(too_long, 0, len(too_long)) == 0
    assert ring.store(source, 0, len(record) + 1) == 0  # past the record
    assert (ring.stored, ring.frontier_len) == (0, 0)
    view = ring.writable()
    assert ring.store(source, 0, 300) == 300
    assert (ring.stored, ring.frontier_len, ring.complete) == (300, len(record), 0)
    with pytest.raises(OutOfRangeError):
        ring.commit(len(view))
    assert ring.missing() == len(record) - 300
    assert ring.store(source, 300, ring.missing() + 1) == 0
    assert ring.store(source, 300, len(record) - 300) == len(record) - 300
    assert (ring.complete, ring.frontier, ring.frontier_len) == (1, len(record), 0)
    assert bytes(ring.view[: len(record)]) == record
    # the next record's start at the end of the memory: it does not fit there, so writable() moves it
    ring.head = ring.tail = ring.frontier = 2990
    ring.complete = 0
    assert ring.store(source, len(record), 20) == 0


def test_an_empty_ring_takes_a_split_records_memory_at_once() -> None:
    """A ring with no memory (released after a message, or new) given the start of a large
    record by ``store`` takes memory for that record at once: one buffer, the size growth would
    reach (four records, or the limit past an eighth of it), not ``start`` bytes and then a
    second buffer and a copy. A small record still takes ``start``."""
    ring = RecordRing(64 * 1024, start=4096)
    assert ring.capacity == 0
    record = wire_record(1, 64 * 1024 + TAG_SIZE)
    assert ring.store(memoryview(record), 0, 40_000) == 40_000
    assert ring.capacity == ring.limit  # 4 records of 64 KiB pass an eighth of the limit
    assert bytes(ring.view[:40_000]) == record[:40_000]
    small = RecordRing(64 * 1024, start=4096)
    assert small.store(memoryview(wire_record(2, 100)), 0, 50) == 50
    assert small.capacity == 4096


def feed(ring: RecordRing, data: bytes) -> None:
    """Write ``data`` through ``writable()``/``commit()`` (the transport's path), all of it."""
    sent = 0
    while sent < len(data):
        view = ring.writable()
        count = min(len(view), len(data) - sent)
        assert count, "the ring refused bytes it should hold"
        view[:count] = data[sent : sent + count]
        ring.commit(count)
        sent += count


def test_store_takes_a_record_the_memory_holds_up_to_each_bound() -> None:
    """``store`` takes what the memory holds as it is at each bound (mutation run of
    2026-12-04, mring: a header of exactly 5 bytes, a record of an empty plaintext, a record
    ending at the end of the memory, a burst at exactly half a growing ring, a record exactly
    the size of the memory all went to the slower path; ``peak`` counted one byte short)."""
    record_size = 1000
    largest = record_size + TAG_SIZE  # body of a largest record: its wire is 1,021 bytes
    ring = RecordRing(record_size, capacity=2 * (RECORD_HEADER_SIZE + largest))
    first, second = wire_record(1, largest), wire_record(2, largest)
    assert ring.store(memoryview(first), 0, RECORD_HEADER_SIZE) == RECORD_HEADER_SIZE  # the header alone
    assert (ring.stored, ring.frontier_len, ring.peak) == (RECORD_HEADER_SIZE, len(first), RECORD_HEADER_SIZE)
    assert ring.store(memoryview(first), RECORD_HEADER_SIZE, largest) == largest
    assert ring.store(memoryview(second), 0, len(second)) == len(second)  # ends at the end of the memory
    assert (ring.complete, ring.tail, ring.peak) == (2, ring.capacity, ring.capacity)
    assert bytes(ring.view[: ring.capacity]) == first + second
    ring.pop(len(first))
    ring.pop(len(second))
    empty = wire_record(3, TAG_SIZE)  # an empty plaintext: the shortest record
    assert ring.store(memoryview(empty), 0, len(empty)) == len(empty)
    assert ring.complete == 1

    growing = RecordRing(record_size, start=256)
    growing.writable()  # takes its first memory, ``start`` bytes
    buf = growing.buf
    exact = wire_record(4, 256 - RECORD_HEADER_SIZE)
    assert growing.store(memoryview(exact), 0, len(exact)) == len(exact)  # fills it exactly
    assert growing.capacity == 256
    assert growing.buf is buf  # not grown for a record it holds
    growing.pop(len(exact))
    half = wire_record(5, 128 - RECORD_HEADER_SIZE)
    after = wire_record(6, 100 - RECORD_HEADER_SIZE)
    assert growing.store(memoryview(half), 0, len(half)) == len(half)
    assert growing.peak == 128  # half of the memory: no reason to grow yet
    assert growing.store(memoryview(after), 0, len(after)) == len(after)
    assert (growing.capacity, growing.complete, growing.peak) == (256, 2, 228)
    assert bytes(growing.view[:228]) == half + after


def test_store_in_a_wrapped_ring_never_writes_over_the_records_at_head() -> None:
    """Wrapped (the frontier at 0, unread records from ``head`` up), ``store`` bounds a record
    by ``head``, not by the end of the memory: one that would reach past ``head`` is refused,
    the unread record there intact; one ending exactly at ``head`` is taken (mutation run of
    2026-12-04, mring: the bound taken as the end of the memory went unnoticed)."""
    largest = 1000 + TAG_SIZE
    ring = RecordRing(1000, capacity=3000)
    first, second = wire_record(1, largest), wire_record(2, largest)
    third = wire_record(3, 1000 - RECORD_HEADER_SIZE)
    feed(ring, first + second)
    ring.pop(len(first))
    feed(ring, third)  # past the end of the memory: moved to 0, the ring wraps
    assert (ring.wrap, ring.head, ring.frontier, ring.complete) == (2042, 1021, 1000, 2)
    over = wire_record(4, 100)  # would end at 1,105, past head
    before = (ring.head, ring.tail, ring.frontier, ring.frontier_len, ring.complete)
    assert ring.store(memoryview(over), 0, len(over)) == 0
    assert (ring.head, ring.tail, ring.frontier, ring.frontier_len, ring.complete) == before
    assert bytes(ring.view[1021:2042]) == second
    fits = wire_record(5, TAG_SIZE)  # 21 bytes: ends exactly at head
    assert ring.store(memoryview(fits), 0, len(fits)) == len(fits)
    assert (ring.tail, ring.complete) == (1021, 3)
    assert bytes(ring.view[1021:2042]) == second
    assert bytes(ring.view[:1021]) == third + fits


def test_store_counts_the_peak_before_and_after_the_ring_wraps() -> None:
    """``peak`` (what a growing ring's growth and shrinking go by) counts what ``store`` leaves
    stored, from ``head`` past the end of the memory when the ring has wrapped (mutation run of
    2026-12-04, mring: the count wrong in either layout went unnoticed)."""
    ring = RecordRing(1000, capacity=3000)
    first, second = wire_record(1, 500 - RECORD_HEADER_SIZE), wire_record(2, 500 - RECORD_HEADER_SIZE)
    third, fourth = wire_record(3, 1000 + TAG_SIZE), wire_record(4, 990 - RECORD_HEADER_SIZE)
    feed(ring, first + second)
    ring.pop(len(first))
    assert ring.store(memoryview(third), 0, len(third)) == len(third)  # at 1,000, head at 500
    assert (ring.head, ring.tail, ring.peak) == (500, 2021, 1521)
    ring.pop(len(second))
    feed(ring, fourth[:RECORD_HEADER_SIZE])  # at 2,021: the record does not fit before 3,000
    ring.writable()  # moves its header to 0: the ring wraps
    assert (ring.wrap, ring.head, ring.tail) == (2021, 1000, RECORD_HEADER_SIZE)
    rest = len(fourth) - RECORD_HEADER_SIZE
    assert ring.store(memoryview(fourth), RECORD_HEADER_SIZE, rest) == rest
    assert (ring.complete, ring.peak) == (2, 1021 + 990)
    assert bytes(ring.view[:990]) == fourth
    assert bytes(ring.view[1000:2021]) == third


def test_store_leaves_a_ring_filled_past_half_by_a_burst_to_grow() -> None:
    """A growing ring that a burst filled past half grows (so the transport's reads stay
    large); ``store`` refuses there even a record the memory still holds, and ``writable()``
    grows the ring first (hand-made removal of 2026-12-04, mring: without the refusal, bursts
    arriving by ``store`` filled the ring without growing it, unnoticed)."""
    ring = RecordRing(1000, start=256)
    ring.writable()  # takes its first memory, ``start`` bytes
    first, second = wire_record(1, 150 - RECORD_HEADER_SIZE), wire_record(2, 50 - RECORD_HEADER_SIZE)
    assert ring.store(memoryview(first), 0, len(first)) == len(first)
    assert (ring.capacity, ring.peak) == (256, 150)  # past half of the memory
    before = (ring.head, ring.tail, ring.frontier, ring.frontier_len, ring.complete)
    assert ring.store(memoryview(second), 0, len(second)) == 0  # it would fit: 200 of 256
    assert (ring.head, ring.tail, ring.frontier, ring.frontier_len, ring.complete) == before
    feed(ring, second)
    assert ring.capacity == 4 * 256 and ring.complete == 2
    assert bytes(ring.view[:200]) == first + second
