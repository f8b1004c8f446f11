"""Memory per connection, bounded and stated (SECURITY.md, "Memory per connection").

The receiving side holds at most max(ring_size, announced record size + 26) bytes of ring (the
announced size is at most max_record_size), the 76-byte header buffer and a view cache under
20 KB, plus input the caller hands over by reference. These tests measure it with tracemalloc
while a peer holding the key fills the ring with the largest records it may announce.
"""

from __future__ import annotations

import tracemalloc

import pytest

from gcmstream import Opener, Sealer
from gcmstream.format import RECORD_HEADER_SIZE, TAG_SIZE
from gcmstream.ring import DEFAULT_RING_SIZE

from .helpers import KEY

SLACK = 160 * 1024  # the feeding loop's own: a 64 KiB slice and its 64 KiB bytearray copy


def formula(ring_size: int, record_size: int) -> int:
    return max(ring_size, record_size + TAG_SIZE + 2 * RECORD_HEADER_SIZE)


@pytest.mark.parametrize(
    ("record_size", "ring_size"),
    [(64 * 1024, DEFAULT_RING_SIZE), (16 * 1024 * 1024, DEFAULT_RING_SIZE), (1024, 1 << 20)],
    ids=["64KiB-records", "16MiB-records", "1KiB-records-1MiB-ring"],
)
def test_a_full_ring_costs_what_the_formula_says(record_size: int, ring_size: int) -> None:
    sealer = Sealer(KEY, record_size=record_size)
    payload = bytes(record_size)
    wire = bytes(sealer.take_header())
    while len(wire) < 2 * formula(ring_size, record_size):  # more than the ring can take
        wire += sealer.seal(payload)
    opener = Opener(KEY, max_record_size=max(record_size, 1 << 20), ring_size=ring_size)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        pos = 0
        while pos < len(wire):  # a reader that never reads: feed until the ring refuses
            taken = opener.receive_some(bytearray(wire[pos : pos + 65536]))
            if not taken:
                break
            pos += taken
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = peak - base
    assert pos < len(wire), "the opener took more than its ring can hold"
    assert held <= formula(ring_size, record_size) + SLACK, held
    assert held >= formula(ring_size, record_size) * 0.9, "the ring was not filled"


def test_the_ring_of_a_16_mib_record_size_is_one_record_not_four() -> None:
    """At the 16 MiB cap a connection used to hold 4 records (64 MiB); now one and a header."""
    assert formula(DEFAULT_RING_SIZE, 16 * 1024 * 1024) < 17 * 1024 * 1024
