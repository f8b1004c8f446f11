"""Opening records in steady state allocates nothing proportional to the record size.

The Opener receives into its fixed ring (zero-copy: get_buffer/buffer_updated) and decrypts in
place; readinto copies into the caller's buffer. tracemalloc sees every Python allocation, so
the per-record peak must be a small constant, the same for 1 KiB and 1 MiB records, and the
traced total must not grow over thousands of records.
"""

from __future__ import annotations

import tracemalloc

import pytest

from gcmstream import Opener, Sealer
from gcmstream.header import HeaderSpec
from gcmstream.ring import ring_capacity

from .helpers import KEY, SALT

PEAK_LIMIT = 2048  # bytes per record, whatever the record size
GROWTH_LIMIT = 2048  # bytes over the whole measured run, whatever the number of records


def warm_up(record_size: int) -> int:
    """Records opened before measuring: twice around the ring, so the ring and the opener's
    view cache (one entry per record position) are allocated before the steady state."""
    return 2 * ring_capacity(record_size) // record_size + 2


def presealed(record_size: int, count: int) -> bytes:
    sealer = Sealer(KEY, record_size=record_size, header_spec=HeaderSpec(salt=SALT))
    payload = bytes(range(256)) * (record_size // 256) + bytes(record_size % 256)
    wire = bytearray()
    for _ in range(count):
        wire += sealer.seal(payload)
    wire += sealer.close()
    return bytes(wire)


class Reader:
    """Moves pre-sealed bytes into the opener's ring and reads each record into ``target``."""

    def __init__(self, wire: bytes, record_size: int) -> None:
        self.src = memoryview(wire)
        self.pos = 0
        self.opener = Opener(KEY, max_record_size=record_size)
        self.target = bytearray(record_size)

    def next_record(self) -> int:
        opener, target, src = self.opener, self.target, self.src
        while True:
            got = opener.readinto(target)
            if got is not None:
                return got
            room = opener.get_buffer()
            count = min(len(room), len(src) - self.pos)
            assert count > 0, "the opener neither reads nor accepts input"
            room[:count] = src[self.pos : self.pos + count]
            opener.buffer_updated(count)
            self.pos += count


@pytest.mark.parametrize(
    ("record_size", "count"), [(1024, 10_000), (1024 * 1024, 200)], ids=["1KiB-x10000", "1MiB-x200"]
)
def test_opening_records_allocates_a_constant(record_size: int, count: int) -> None:
    wire = presealed(record_size, count + warm_up(record_size))
    reader = Reader(wire, record_size)
    expected = bytes(range(256)) * (record_size // 256)
    for _ in range(warm_up(record_size)):
        assert reader.next_record() == record_size
    assert reader.target == expected

    worst = 0
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(count):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            got = reader.next_record()
            _, peak = tracemalloc.get_traced_memory()
            worst = max(worst, peak - before)
            if got != record_size:
                break
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert got == record_size
    assert reader.target == expected  # really decrypted, not skipped
    assert worst < PEAK_LIMIT, f"opening one {record_size}-byte record allocated up to {worst} bytes"
    assert end - start < GROWTH_LIMIT, f"traced memory grew by {end - start} bytes over {count} records"
    # The stream is intact after the measured part: the FINAL record is next.
    assert reader.next_record() == 0
    assert reader.opener.at_eof
