"""The Sealer: records out of plaintext, flush and close, key updates and the per-key limits
across one seal() that makes several records.

The limit tests are written against the public API only (constructors, methods, KeyLimits, the
error tree, records on the wire), so they keep pinning the behaviour while the internals move;
each names the mutant it was written to kill (see CONTRIBUTING.md, "Mutation testing").
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from gcmstream import (
    ConcurrencyError,
    KeyLimits,
    LimitReachedError,
    NotReadyError,
    Opener,
    ProtocolError,
    Sealer,
    StreamClosedError,
    UnsupportedBufferError,
    UsageError,
)
from gcmstream.format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_SIZE,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
    Suite,
)
from gcmstream.header import HeaderSpec

from .helpers import (
    FEEDS,
    KEY,
    WAYS,
    check_valid,
    drain,
    read_all,
    records,
    refuses_untouched,
    seal_stream,
    wire_records,
)


def test_sealer_output_view_dies_at_the_next_call() -> None:
    sealer = Sealer(KEY, record_size=4, header_spec=HeaderSpec(salt=bytes(32)))
    first = sealer.seal(b"abcd")
    kept = bytes(first)
    sealer.seal(b"efgh")
    with pytest.raises(ValueError, match="released"):
        bytes(first)
    # A detached output stays valid and is never written again.
    sealer = Sealer(KEY, record_size=4, header_spec=HeaderSpec(salt=bytes(32)))
    out = sealer.seal(b"abcd")
    sealer.detach_output()
    assert len(sealer.seal(b"")) == 0  # nothing to seal: an empty view, also right after a detach
    sealer.seal(b"efgh")
    assert bytes(out) == kept


# -- sealer behaviour ------------------------------------------------------------------------


def test_empty_stream() -> None:
    sealer = Sealer(KEY)
    wire = bytes(sealer.close())
    assert len(wire) == HEADER_SIZE + RECORD_HEADER_SIZE + TAG_SIZE
    assert [(flags, length) for _, flags, length in records(wire)] == [
        (FLAG_FINAL, RECORD_HEADER_SIZE + TAG_SIZE)
    ]
    assert sealer.closed
    for way in WAYS:
        check_valid(wire, b"", way, "copy")


def test_empty_final_after_full_records() -> None:
    wire = seal_stream([b"1234567"], record_size=7)
    assert [(f, n) for _, f, n in records(wire)] == [(0, RECORD_HEADER_SIZE + 7 + TAG_SIZE), (FLAG_FINAL, 21)]
    check_valid(wire, b"1234567", "all", "copy")


def test_seal_final_puts_the_last_data_in_the_final_record() -> None:
    sealer = Sealer(KEY, record_size=7)
    wire = bytes(sealer.seal(b"123456789", final=True))
    assert [(f, n - RECORD_HEADER_SIZE - TAG_SIZE) for _, f, n in records(wire)] == [(0, 7), (FLAG_FINAL, 2)]
    assert sealer.closed


def test_flush_seals_a_short_record_now() -> None:
    sealer = Sealer(KEY, record_size=100)
    out = bytearray(sealer.seal(b"abc"))
    assert len(out) == HEADER_SIZE  # the header alone: "abc" is pending
    assert sealer.pending == 3
    out += sealer.flush()
    assert sealer.pending == 0
    opener = Opener(KEY)
    opener.receive_data(out)
    assert opener.read() == b"abc"  # readable before the stream ends
    assert opener.read() is None
    assert len(sealer.flush()) == 0  # nothing pending: nothing sealed
    out2 = bytes(sealer.seal(b"de", flush=True))
    opener.receive_data(out2)
    assert opener.read() == b"de"
    opener.receive_data(sealer.close())
    assert opener.read() == b""
    assert sealer.records_sealed == 3
    assert sealer.bytes_sealed == 5


def test_flush_before_any_data_sends_the_header() -> None:
    sealer = Sealer(KEY)
    assert bytes(sealer.flush()) == sealer.header
    assert len(sealer.flush()) == 0


def test_flush_into_fresh_memory_sizes_its_output_exactly() -> None:
    """With ``reuse_output=False`` every output gets exactly the memory it needs, with no reusable
    buffer's slack to hide a wrong size: kills flush() sizing its output as ``- HEADER_SIZE`` or
    ``_OVERHEAD - length``."""
    sealer = Sealer(KEY, record_size=64, reuse_output=False)
    out = bytearray(sealer.flush())
    assert out == sealer.header
    out += sealer.seal(b"x" * 30)
    assert sealer.pending == 30
    out += sealer.flush()
    assert sealer.pending == 0
    out += sealer.close()
    check_valid(bytes(out), b"x" * 30, "all", "copy")


def test_closed_sealer_refuses_more() -> None:
    sealer = Sealer(KEY)
    sealer.close()
    calls: list[Callable[[], object]] = [lambda: sealer.seal(b"x"), sealer.flush, sealer.close]
    for call in calls:
        with pytest.raises(StreamClosedError) as info:
            call()
        assert isinstance(info.value, RuntimeError)
        assert isinstance(info.value, UsageError)


def test_seal_accepts_any_bytes_like() -> None:
    import array

    data = array.array("I", [1, 2, 3])
    for source in (bytes(data), bytearray(data), memoryview(data), memoryview(bytes(data))):
        sealer = Sealer(KEY, record_size=5, header_spec=HeaderSpec(salt=bytes(32)))
        wire = bytes(sealer.seal(source)) + bytes(sealer.close())
        check_valid(wire, data.tobytes(), "all", "copy")


def test_pending_plaintext_survives_its_buffer_growing() -> None:
    """The pending-record buffer starts small and grows toward a record as plaintext waits in it;
    what waits is carried over (kills the carry-over being dropped)."""
    plaintext = random.Random(8).randbytes(9000)
    sealer = Sealer(KEY, record_size=16384)
    wire = bytearray(sealer.seal(plaintext[:3000]))
    wire += sealer.seal(plaintext[3000:6000])  # 6000 bytes wait: past the first buffer (3000 bytes)
    wire += sealer.seal(plaintext[6000:], final=True)
    assert sealer.pending == 0
    check_valid(bytes(wire), plaintext, "all", "copy")


def test_large_write_beyond_the_reusable_output() -> None:
    plaintext = random.Random(0).randbytes(100_000)
    sealer = Sealer(KEY, record_size=1000)
    wire = bytes(sealer.seal(plaintext)) + bytes(sealer.close())
    check_valid(wire, plaintext, "all", "zero-copy")


# -- key update --------------------------------------------------------------------------------


def flags_of(wire: bytes) -> list[int]:
    return [flags for _, flags, _ in records(wire)]


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize("way", WAYS)
def test_explicit_key_update(way: str, how: str) -> None:
    sealer = Sealer(KEY, record_size=10)
    out = bytearray(sealer.seal(b"before"))
    sealer.update_key()
    out += sealer.flush()  # carries "before" and KEY_UPDATE
    assert sealer.key_generation == 1
    out += sealer.seal(b"between", flush=True)
    sealer.update_key()
    out += sealer.flush()  # nothing pending: an empty KEY_UPDATE record
    assert sealer.key_generation == 2
    out += sealer.seal(b"after the second update", final=True)
    wire = bytes(out)
    assert flags_of(wire) == [FLAG_KEY_UPDATE, 0, FLAG_KEY_UPDATE, 0, 0, FLAG_FINAL]
    assert [n - RECORD_HEADER_SIZE - TAG_SIZE for _, _, n in records(wire)] == [6, 7, 0, 10, 10, 3]
    check_valid(wire, b"beforebetweenafter the second update", way, how)


def test_a_key_update_request_waits_through_calls_that_seal_no_record() -> None:
    """update_key() marks the next record, even when the calls after it only add to the
    pending record (a seal that makes no record must not drop the request: mutation run of
    2026-12-04, ``records.RecordLayer.seal_run``'s ``updated = True``)."""
    sealer = Sealer(KEY, record_size=10)
    out = bytearray(sealer.seal(b"ab"))
    sealer.update_key()
    out += sealer.seal(b"cd")  # pending: no record yet
    out += sealer.seal(b"")
    assert wire_records(bytes(out)) == []
    out += sealer.flush()
    assert sealer.key_generation == 1
    out += sealer.close()
    assert wire_records(bytes(out)) == [(FLAG_KEY_UPDATE, 4), (FLAG_FINAL, 0)]
    check_valid(bytes(out), b"abcd", WAYS[0], FEEDS[0])


@pytest.mark.parametrize(
    "limits",
    [
        KeyLimits(update_after_records=1, hard_records=1),
        KeyLimits(update_after_records=3, hard_records=5),
        KeyLimits(update_after_bytes=25, hard_bytes=30),
        KeyLimits(update_after_records=2, update_after_bytes=15, hard_records=2, hard_bytes=20),
    ],
    ids=["every-record", "every-third-record", "bytes", "both"],
)
@pytest.mark.parametrize("how", FEEDS)
def test_automatic_key_update(limits: KeyLimits, how: str) -> None:
    plaintext = bytes(range(256)) * 2
    sealer = Sealer(KEY, record_size=10, limits=limits)
    wire = bytes(sealer.seal(plaintext)) + bytes(sealer.close())
    updates = flags_of(wire).count(FLAG_KEY_UPDATE)
    assert updates >= 5
    assert sealer.key_generation == updates
    for way in WAYS:
        check_valid(wire, plaintext, way, how, lambda: Opener(KEY, limits=limits))
    opener = Opener(KEY)
    opener.receive_data(wire)
    assert drain(opener, bytearray())


def test_limit_reached_without_automatic_update() -> None:
    limits = KeyLimits(update_after_records=3, hard_records=3)
    sealer = Sealer(KEY, record_size=4, limits=limits, auto_key_update=False)
    out = bytearray(sealer.seal(b"aaaabbbb"))  # two records under the first key
    out += sealer.seal(b"cc")  # not a whole record: pending, nothing to refuse yet
    state = (sealer.records_sealed, sealer.bytes_sealed, sealer.pending, sealer.key_generation)
    assert state == (2, 8, 2, 0)
    # The third record would take the key's last slot without moving to a new key.
    with pytest.raises(LimitReachedError) as info:
        sealer.seal(b"cc")
    assert "update_key()" in str(info.value)
    assert not isinstance(info.value, UsageError | ProtocolError)
    # Nothing was sealed and nothing was taken from the refused call.
    assert (sealer.records_sealed, sealer.bytes_sealed, sealer.pending, sealer.key_generation) == state
    with pytest.raises(LimitReachedError):
        sealer.flush()
    with pytest.raises(LimitReachedError):
        sealer.seal(b"cccccccc")
    assert sealer.pending == 2
    sealer.update_key()
    out += sealer.seal(b"cc")  # now the record carries KEY_UPDATE
    assert sealer.key_generation == 1
    out += sealer.seal(b"dddd", final=True)
    wire = bytes(out)
    assert flags_of(wire) == [0, 0, FLAG_KEY_UPDATE, FLAG_FINAL]
    check_valid(wire, b"aaaabbbbccccdddd", "all", "copy", lambda: Opener(KEY, limits=limits))


def test_the_final_record_may_use_the_last_slot() -> None:
    limits = KeyLimits(update_after_records=2, hard_records=2)
    sealer = Sealer(KEY, record_size=4, limits=limits, auto_key_update=False)
    out = bytes(sealer.seal(b"aaaa")) + bytes(sealer.seal(b"bb", final=True))
    check_valid(out, b"aaaabb", "all", "copy", lambda: Opener(KEY, limits=limits))


@pytest.mark.parametrize("pending", [0, 1, 3])
def test_byte_limit_without_automatic_update_is_never_a_dead_end(pending: int) -> None:
    """Whatever is pending when the byte limit is reached, update_key() + flush() moves on."""
    limits = KeyLimits(update_after_bytes=10, hard_bytes=10)
    sealer = Sealer(KEY, record_size=4, limits=limits, auto_key_update=False)
    plaintext = bytes(range(40))
    out = bytearray()
    refused = 0
    pos = 0
    while pos < len(plaintext):
        step = 4 if sealer.pending or pos else pending or 4
        try:
            out += sealer.seal(plaintext[pos : pos + step])
        except LimitReachedError:
            refused += 1
            state = (sealer.records_sealed, sealer.bytes_sealed, sealer.pending, sealer.key_generation)
            sealer.update_key()
            out += sealer.flush()
            assert sealer.key_generation > state[3], "update_key() + flush() did not move to a new key"
            continue
        pos += step
    out += sealer.close()
    assert refused >= 2
    check_valid(bytes(out), plaintext, "all", "copy", lambda: Opener(KEY, limits=limits))


@pytest.mark.parametrize(
    "limits",
    [
        KeyLimits(update_after_bytes=10, hard_bytes=10),
        KeyLimits(update_after_bytes=10, hard_bytes=11),
        KeyLimits(update_after_records=3, hard_records=3),
    ],
    ids=["bytes-equal", "bytes-close", "records-equal"],
)
def test_automatic_update_never_gets_stuck_at_tight_limits(limits: KeyLimits) -> None:
    plaintext = bytes(range(200))
    sealer = Sealer(KEY, record_size=4, limits=limits)
    out = bytearray()
    for start in range(0, len(plaintext), 7):
        out += sealer.seal(plaintext[start : start + 7])
    out += sealer.close()
    check_valid(bytes(out), plaintext, "all", "copy", lambda: Opener(KEY, limits=limits))


def test_seal_flush_of_a_wider_format_counts_bytes_not_items() -> None:
    """Review finding: the one-record path of seal(flush=True) took len() as a byte count."""
    import array

    data = array.array("I", range(100))
    sealer = Sealer(KEY)
    wire = bytes(sealer.seal(b"")) + bytes(sealer.seal(data, flush=True))  # type: ignore[arg-type]
    wire += bytes(sealer.close())
    opener = Opener(KEY)
    opener.receive_data(wire)
    opener.receive_eof()
    assert opener.read() == data.tobytes()


RECORD = 4  # record size of every sealer here: limits are reached within a few records


def per_key_usage(wire: bytes) -> list[tuple[int, int]]:
    """(records, plaintext bytes) sealed under each key generation, read off the flags."""
    usage = [(0, 0)]
    for flags, size in wire_records(wire):
        sealed, count = usage[-1]
        usage[-1] = (sealed + 1, count + size)
        if flags & FLAG_KEY_UPDATE:
            usage.append((0, 0))
    return usage


def assert_within(wire: bytes, limits: KeyLimits) -> None:
    """No key generation on the wire passes a hard limit, and a reader held to them opens it all."""
    for generation, (sealed, count) in enumerate(per_key_usage(wire)):
        assert sealed <= limits.hard_records, f"generation {generation} sealed {sealed} records"
        assert count <= limits.hard_bytes, f"generation {generation} sealed {count} bytes"
    opener = Opener(KEY, limits=limits)
    opener.receive_data(wire)
    while opener.read():
        pass  # raises MalformedRecordError if the sealer passed a limit
    assert opener.records_opened == len(wire_records(wire))


def sealer(limits: KeyLimits, *, auto: bool = False) -> Sealer:
    return Sealer(KEY, record_size=RECORD, limits=limits, auto_key_update=auto)


# -- one seal(), several records ---------------------------------------------------------------
# A refusal has to be decided for the whole call before its first record is sealed, so the
# sealer simulates the key's record and byte counts over every record the call makes.


def test_one_call_cannot_cross_the_hard_record_limit() -> None:
    """Kills ``seq + 1`` -> ``seq - 1`` in the simulated count (then no call ever refuses)."""
    limits = KeyLimits(update_after_records=3, hard_records=3)
    refuses_untouched(sealer(limits), bytes(3 * RECORD))  # the third record takes the last slot
    refuses_untouched(sealer(limits), bytes(10 * RECORD))
    wire = bytes(sealer(limits).seal(bytes(2 * RECORD), flush=True))
    assert [flags for flags, _ in wire_records(wire)] == [0, 0]
    # the last slot of a key is kept for the FINAL record
    closing = sealer(limits)
    wire = bytes(closing.seal(bytes(3 * RECORD), final=True))
    assert [flags for flags, _ in wire_records(wire)] == [0, 0, FLAG_FINAL]
    assert_within(wire, limits)


def test_one_call_cannot_cross_the_hard_byte_limit() -> None:
    """Kills ``key_bytes + length`` -> ``key_bytes - length`` (then no call ever refuses)."""
    limits = KeyLimits(update_after_bytes=10, hard_bytes=10)
    refuses_untouched(sealer(limits), bytes(3 * RECORD))  # 12 bytes under one key
    refuses_untouched(sealer(limits), bytes(2 * RECORD + 3), flush=True)  # 11 bytes
    refuses_untouched(sealer(limits), bytes(3 * RECORD), final=True)
    fits = sealer(limits)
    wire = bytes(fits.seal(bytes(2 * RECORD + 2), final=True))  # exactly 10 bytes
    assert [size for _, size in wire_records(wire)] == [4, 4, 2]
    assert_within(wire, limits)


def test_one_call_after_update_key_counts_the_new_key_from_zero_once() -> None:
    """Kills leaving the simulated update request set after the record that carries it (then every
    later record of the call looks like a key update and the new key's limit is never checked)."""
    limits = KeyLimits(update_after_records=3, hard_records=3)
    updating = sealer(limits)
    updating.update_key()
    # the first record carries KEY_UPDATE; the new key then has room for two plain records
    refuses_untouched(updating, bytes(4 * RECORD))
    refuses_untouched(updating, bytes(10 * RECORD))
    wire = bytes(updating.seal(bytes(3 * RECORD)))
    assert [flags for flags, _ in wire_records(wire)] == [FLAG_KEY_UPDATE, 0, 0]
    assert updating.key_generation == 1
    refuses_untouched(updating, bytes(RECORD))  # the new key's last slot: update first
    wire += bytes(updating.close())
    assert_within(wire, limits)

    bytewise = KeyLimits(update_after_bytes=10, hard_bytes=10)
    updating = sealer(bytewise)
    updating.update_key()
    refuses_untouched(updating, bytes(4 * RECORD))  # 4 bytes under the old key, 12 under the new
    wire = bytes(updating.seal(bytes(3 * RECORD), final=True))
    assert wire_records(wire) == [(FLAG_KEY_UPDATE, 4), (0, 4), (FLAG_FINAL, 4)]
    assert_within(wire, bytewise)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        # the record that brings the key to exactly update_after_bytes carries KEY_UPDATE
        (KeyLimits(update_after_bytes=12, hard_bytes=1000), [0, 0, FLAG_KEY_UPDATE] * 2),
        # in time: after 4 + 4 bytes one more full record still fits exactly, so no update yet
        (KeyLimits(update_after_bytes=12, hard_bytes=12), [0, 0, FLAG_KEY_UPDATE] * 2),
    ],
    ids=["threshold", "in-time"],
)
def test_automatic_update_on_bytes_comes_at_the_exact_record(limits: KeyLimits, expected: list[int]) -> None:
    """Kills, in the byte-based update decision, ``key_bytes + length`` -> ``key_bytes - length``,
    ``>= update_after_bytes`` -> ``>`` and the in-time test's ``> hard_bytes`` -> ``>=`` (each moves
    the update by a record or more; the differential test above cannot see it, both sides plan)."""
    wire = bytes(sealer(limits, auto=True).seal(bytes(6 * RECORD)))
    assert [flags for flags, _ in wire_records(wire)] == expected
    assert_within(wire, limits)


def test_update_key_then_one_call_fills_the_new_key_to_its_byte_limit() -> None:
    """Kills the simulated byte count of the new key starting at 1 instead of 0 after the record
    that carries KEY_UPDATE (then a call that fills the new key exactly is refused)."""
    limits = KeyLimits(update_after_bytes=10, hard_bytes=10)
    updating = sealer(limits)
    updating.update_key()
    wire = bytes(updating.seal(bytes(RECORD + 10), final=True))  # 4 under the old key, 10 under the new
    assert wire_records(wire) == [(FLAG_KEY_UPDATE, 4), (0, 4), (0, 4), (FLAG_FINAL, 2)]
    assert_within(wire, limits)


def test_update_key_and_flush_that_reaches_the_byte_limit_exactly_is_one_record() -> None:
    """Kills ``>`` -> ``>=`` where flush() decides to send an empty KEY_UPDATE record first: pending
    bytes that bring the old key exactly to its limit go in the KEY_UPDATE record itself."""
    limits = KeyLimits(update_after_bytes=10, hard_bytes=10)
    updating = sealer(limits)
    wire = bytes(updating.seal(bytes(10)))  # two records (8 bytes), 2 pending
    updating.update_key()
    wire += bytes(updating.flush())
    assert wire_records(wire) == [(0, 4), (0, 4), (FLAG_KEY_UPDATE, 2)]
    wire += bytes(updating.close())
    assert_within(wire, limits)


LIMITS = [
    KeyLimits(update_after_records=1, hard_records=1),
    KeyLimits(update_after_records=2, hard_records=3),
    KeyLimits(update_after_records=3, hard_records=3),
    KeyLimits(update_after_bytes=10, hard_bytes=10),
    KeyLimits(update_after_bytes=6, hard_bytes=13),
    KeyLimits(update_after_records=2, update_after_bytes=9, hard_records=4, hard_bytes=11),
]


@pytest.mark.parametrize(
    "limits",
    LIMITS,
    ids=["records-1-1", "records-2-3", "records-3-3", "bytes-10-10", "bytes-6-13", "both"],
)
def test_one_call_decides_as_record_by_record_calls_do(limits: KeyLimits) -> None:
    """Differential: sealing n records in one call must refuse exactly when sealing the same records
    one call each refuses at one of them, and otherwise put the same records on the wire. One
    record per call needs no simulation over several records, so it is the reference."""
    for count in range(1, 8):
        for auto in (False, True):
            for update_first in (False, True):
                for final in (False, True):
                    case = f"{count} records, auto={auto}, update_key={update_first}, final={final}"
                    reference, batch = sealer(limits, auto=auto), sealer(limits, auto=auto)
                    if update_first:
                        reference.update_key()
                        batch.update_key()
                    expected = bytearray(reference.take_header())
                    try:
                        for index in range(count):
                            last = final and index == count - 1
                            expected += reference.seal(bytes(RECORD), final=last)
                    except LimitReachedError:
                        refuses_untouched(batch, bytes(count * RECORD), final=final)
                        continue
                    got = bytes(batch.seal(bytes(count * RECORD), final=final))
                    assert wire_records(got) == wire_records(bytes(expected)), case
                    assert_within(got, limits)


def test_counts_add_up_across_key_generations() -> None:
    """records_sealed / bytes_sealed and records_opened / bytes_opened count every key generation
    and every record: kills the bytes of earlier generations being replaced (``=``) or subtracted
    at a key update instead of added, and a FINAL record's bytes replacing the key's count."""
    limits = KeyLimits(update_after_records=2, hard_records=4)
    writer = sealer(limits, auto=True)
    size = 9 * RECORD + 3  # the FINAL record (3 bytes) follows a plain record under its key
    wire = bytes(writer.seal(bytes(range(size)))) + bytes(writer.close())
    found = wire_records(wire)
    assert [flags for flags, _ in found].count(FLAG_KEY_UPDATE) == writer.key_generation >= 3
    assert found[-2:] == [(0, RECORD), (FLAG_FINAL, 3)]
    assert (writer.records_sealed, writer.bytes_sealed) == (len(found), size)
    reader = Opener(KEY, limits=limits)
    reader.receive_data(wire)
    assert reader.read() == bytes(range(size))
    assert reader.read() == b""
    assert (reader.records_opened, reader.bytes_opened) == (len(found), size)


def test_each_misuse_of_a_sealer_is_refused_with_its_error() -> None:
    """The Sealer's refusals, each by its class and words (hand-made removals of the
    mutation run of 2026-12-04: each ``raise`` turned into a bare expression went unnoticed
    by this file): not exactly one keying, sealing before the handshake, keying twice, taking
    the header twice."""
    with pytest.raises(TypeError, match=r"^a Sealer takes exactly one of key, recipients or passphrase$"):
        Sealer()
    with pytest.raises(TypeError, match=r"^a Sealer takes exactly one of key, recipients or passphrase$"):
        Sealer(KEY, passphrase="both")
    channel_end = Sealer.unkeyed(Suite.for_key(KEY))  # a channel's: no key until the handshake
    assert channel_end.header == b""  # a channel's headers are the Channel's to send
    with pytest.raises(NotReadyError, match=r"^cannot seal before the channel handshake is complete$"):
        channel_end.seal(b"early")
    with pytest.raises(NotReadyError, match="before the channel handshake is complete"):
        channel_end.seal(b"early", flush=True)  # the one-record path refuses the same way
    channel_end.install_secret(bytes(32))
    assert channel_end.ready
    with pytest.raises(UsageError, match=r"^this sealer is already keyed$"):
        channel_end.install_secret(bytes(32))
    one_way = Sealer(KEY)
    assert one_way.closed is False
    busy = pytest.raises(ConcurrencyError, match=r"^this Sealer is in use by another thread: ")
    with one_way._turn, busy:  # another thread's call is under way
        one_way.seal(b"x")
    assert one_way.take_header() == one_way.header
    with pytest.raises(StreamClosedError, match=r"^the stream header was already taken$"):
        one_way.take_header()
    one_way.close()
    with pytest.raises(StreamClosedError, match=r"^cannot seal: the FINAL record was already sealed$"):
        one_way.seal(b"late")
    with pytest.raises(StreamClosedError, match=r"^cannot flush: the FINAL record was already sealed$"):
        one_way.flush()


def sealer_past_its_header(**options: Any) -> tuple[Sealer, bytearray]:
    """A Sealer whose header was taken: its next ``seal(data, flush=True)`` of one record may
    take the one-record path (``_seal_single``)."""
    sealer = Sealer(KEY, **options)
    return sealer, bytearray(sealer.take_header())


def opened_plaintext(wire: bytes) -> bytes:
    return read_all(Opener(KEY), wire)


def test_the_one_record_path_keeps_every_rule_of_the_general_one() -> None:
    """``seal(data, flush=True)`` of one record (the message path) keeps what the general
    path guarantees: a pending record goes first, ``final`` makes it FINAL, a requested key
    update rides on it, a record of nearly ``record_size`` bytes fits its output, and the view
    dies at the next call. (Mutation run of 2026-12-04: each went unnoticed.)"""
    sealer, wire = sealer_past_its_header(record_size=1024)
    wire += sealer.seal(b"ab")
    wire += sealer.seal(b"cd", flush=True)  # pending "ab" first
    sealer.update_key()
    wire += sealer.seal(b"ef", flush=True)
    assert sealer.key_generation == 1
    message = bytes(range(256)) * 4  # 1,024 bytes: a full record
    first = sealer.seal(message[:1000], flush=True)
    kept = bytes(first)
    wire += kept
    wire += sealer.seal(b"gh", flush=True)
    with pytest.raises(ValueError, match="released"):
        bytes(first)
    wire += sealer.seal(b"ij", flush=True, final=True)
    assert sealer.closed
    found = wire_records(bytes(wire))
    assert [flags for flags, _ in found] == [0, FLAG_KEY_UPDATE, 0, 0, FLAG_FINAL]
    assert opened_plaintext(bytes(wire)) == b"abcdef" + message[:1000] + b"ghij"


@pytest.mark.parametrize(
    "view",
    [
        memoryview(bytearray(range(12))).cast("I"),
        memoryview(bytearray(range(12))).cast("H"),
        memoryview(bytearray(range(12))).cast("B", (3, 4)),
    ],
    ids=["uint32", "uint16", "2-d"],
)
def test_a_view_of_other_items_is_sealed_as_its_bytes(view: memoryview) -> None:
    """A view whose items are not single bytes, or that has two dimensions, is sealed as all
    its bytes (``len()`` would count items or rows)."""
    sealer, wire = sealer_past_its_header(record_size=64)
    wire += sealer.seal(view, flush=True)
    wire += sealer.close()
    assert opened_plaintext(bytes(wire)) == bytes(range(12))


def test_a_non_contiguous_view_is_refused_on_the_one_record_path_too() -> None:
    sealer, _ = sealer_past_its_header(record_size=64)
    with pytest.raises(UnsupportedBufferError, match="not contiguous"):
        sealer.seal(memoryview(bytes(8))[::2], flush=True)


def test_outputs_in_fresh_memory_stay_valid_and_unchanged() -> None:
    """With ``reuse_output=False`` each output is the caller's to keep: later calls neither
    release nor overwrite it (a transport may still hold it)."""
    sealer = Sealer(KEY, record_size=16, reuse_output=False)
    outputs = [sealer.seal(b"a" * 10, flush=True), sealer.seal(b"b" * 40), sealer.flush()]
    kept = [bytes(output) for output in outputs]
    outputs.append(sealer.seal(b"c" * 5, flush=True))
    outputs.append(sealer.close())
    assert [bytes(output) for output in outputs[:3]] == kept
    assert opened_plaintext(b"".join(bytes(output) for output in outputs)) == b"a" * 10 + b"b" * 40 + b"c" * 5
