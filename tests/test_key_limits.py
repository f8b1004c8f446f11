"""docs/FORMAT.md 6.3 rule 5 and 4.3, as written, against the Sealer (issue 21, 4.5).

Rule 5 taken without its "in time" condition made a writer with automatic key update reach
LimitReachedError when ``update_after_bytes = hard_bytes`` is not a multiple of
``record_size``, while 4.3 counted ``floor(hard_bytes / record_size)`` records per generation.
The Sealer always marked the record after which the next full record would pass
``hard_bytes``; the text now says so. These tests model the text, not the code: each record's
flags are predicted from rule 5's three conditions, each generation's length from 4.3's N.
"""

from __future__ import annotations

import random

import pytest

from gcmstream import KeyLimits, LimitReachedError, Sealer
from gcmstream.format import FLAG_FINAL, FLAG_KEY_UPDATE

from .helpers import KEY, wire_records

# (record_size, limits): the byte limits are equal and not a multiple of the record size, the
# issue's case; then the other shapes rule 5 and 4.3 name.
CASES = [
    (16, KeyLimits(update_after_bytes=100, hard_bytes=100)),
    (16, KeyLimits(update_after_bytes=50, hard_bytes=60)),
    (16, KeyLimits(update_after_bytes=64, hard_bytes=64)),
    (7, KeyLimits(update_after_bytes=30, hard_bytes=1000)),
    (7, KeyLimits(update_after_records=3, update_after_bytes=1000, hard_records=5, hard_bytes=1000)),
    (10, KeyLimits(update_after_records=4, hard_records=4)),
]


def rule_5(limits: KeyLimits, record_size: int, seq: int, key_bytes: int, n: int, final: bool) -> bool:
    """FORMAT.md 6.3 rule 5: does the record with sequence number ``seq``, ``n`` plaintext
    bytes and ``key_bytes`` sealed before it under its key carry KEY_UPDATE (no request)?"""
    if final:
        return False
    return (
        seq + 1 >= limits.update_after_records
        or key_bytes + n >= limits.update_after_bytes
        or key_bytes + n + record_size > limits.hard_bytes
    )


def records_per_generation(limits: KeyLimits, record_size: int) -> int:
    """FORMAT.md 4.3: N for a writer of full records with automatic key update."""
    by_bytes = -(-limits.update_after_bytes // record_size)
    return max(1, min(limits.update_after_records, by_bytes, limits.hard_bytes // record_size))


@pytest.mark.parametrize(("record_size", "limits"), CASES)
def test_rule_5_predicts_every_flag_and_never_reaches_the_hard_limit(
    record_size: int, limits: KeyLimits
) -> None:
    """With automatic key update on, random seals and flushes are never refused, and every
    record carries KEY_UPDATE exactly when rule 5's text says; no generation passes a hard
    limit (rule 6)."""
    rng = random.Random(record_size * 1000 + limits.hard_bytes)
    for _ in range(20):
        sealer = Sealer(KEY, record_size=record_size, limits=limits)
        wire = bytearray()
        for _ in range(rng.randrange(1, 12)):
            wire += sealer.seal(bytes(rng.randrange(0, 3 * record_size)), flush=rng.random() < 0.5)
        wire += sealer.close()
        seq = key_bytes = 0
        found = wire_records(bytes(wire))
        for index, (flags, size) in enumerate(found):
            final = index == len(found) - 1
            assert flags & FLAG_FINAL == (FLAG_FINAL if final else 0)
            expected = rule_5(limits, record_size, seq, key_bytes, size, final)
            assert bool(flags & FLAG_KEY_UPDATE) == expected, (index, seq, key_bytes, size)
            assert seq < limits.hard_records and key_bytes + size <= limits.hard_bytes
            seq, key_bytes = (0, 0) if expected else (seq + 1, key_bytes + size)


@pytest.mark.parametrize(("record_size", "limits"), CASES)
def test_full_records_update_every_n_as_section_4_3_counts(record_size: int, limits: KeyLimits) -> None:
    """Full records only: KEY_UPDATE on record ``i`` exactly when ``i mod N = N - 1``, N from
    4.3's formula, the same count rule 5 gives."""
    per_generation = records_per_generation(limits, record_size)
    sealer = Sealer(KEY, record_size=record_size, limits=limits)
    found = wire_records(bytes(sealer.seal(bytes(40 * record_size), final=True)))
    assert len(found) == 40
    for index, (flags, size) in enumerate(found):
        assert size == record_size
        if index == len(found) - 1:
            assert flags == FLAG_FINAL
        else:
            expected = FLAG_KEY_UPDATE if index % per_generation == per_generation - 1 else 0
            assert flags == expected, (index, per_generation)


def test_the_issue_case_counts_floor_of_hard_bytes_records() -> None:
    """``update_after_bytes = hard_bytes = 100`` at 16-byte records: 6 records per key (96
    bytes; a 7th would make 112), not the 7 that ``ceil(100 / 16)`` alone would give."""
    limits = KeyLimits(update_after_bytes=100, hard_bytes=100)
    assert records_per_generation(limits, 16) == 6
    sealer = Sealer(KEY, record_size=16, limits=limits)
    flags = [flags for flags, _ in wire_records(bytes(sealer.seal(bytes(16 * 13), final=True)))]
    assert flags == [0] * 5 + [FLAG_KEY_UPDATE] + [0] * 5 + [FLAG_KEY_UPDATE] + [FLAG_FINAL]


def test_a_record_size_over_hard_bytes_is_refused_at_its_first_record_over_hard_bytes() -> None:
    """No key can hold such a full record: short records pass (each carrying KEY_UPDATE, "in
    time"), the first one over ``hard_bytes`` is LimitReachedError, even with automatic update."""
    sealer = Sealer(KEY, record_size=16, limits=KeyLimits(update_after_bytes=10, hard_bytes=10))
    assert [flags for flags, _ in wire_records(bytes(sealer.seal(bytes(5), flush=True)))] == [FLAG_KEY_UPDATE]
    with pytest.raises(LimitReachedError):
        sealer.seal(bytes(12), flush=True)
