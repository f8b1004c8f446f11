"""Per-key limits across one seal() that makes several records, the options a Channel hands to its
two directions, and a stream that ends right after its header.

Written against the public API only (constructors, methods, KeyLimits, the error tree, records
on the wire), so they keep pinning the behaviour while the codec's internals move. Each test
names the mutant of the codec it was written to kill (see CONTRIBUTING.md, "Mutation testing").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gcmstream import (
    Channel,
    KeyLimits,
    LimitReachedError,
    MalformedRecordError,
    Opener,
    RecordTooLargeError,
    Role,
    Sealer,
    StreamBrokenError,
    TruncatedStreamError,
)
from gcmstream.format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
)
from gcmstream.testing import run_handshake

KEY = bytes(range(16))
RECORD = 4  # record size of every sealer here: limits are reached within a few records


def wire_records(wire: bytes) -> list[tuple[int, int]]:
    """(flags, plaintext length) of each record after the stream header."""
    found = []
    pos = HEADER_SIZE
    while pos < len(wire):
        flags, length = RECORD_HEADER.unpack_from(wire, pos)
        found.append((flags, length - TAG_SIZE))
        pos += RECORD_HEADER_SIZE + length
    assert pos == len(wire), "the last record is cut"
    return found


def per_key_usage(wire: bytes) -> list[tuple[int, int]]:
    """(records, plaintext bytes) sealed under each key generation, read off the flags."""
    usage = [(0, 0)]
    for flags, size in wire_records(wire):
        records, count = usage[-1]
        usage[-1] = (records + 1, count + size)
        if flags & FLAG_KEY_UPDATE:
            usage.append((0, 0))
    return usage


def assert_within(wire: bytes, limits: KeyLimits) -> None:
    """No key generation on the wire passes a hard limit, and a reader held to them opens it all."""
    for generation, (records, count) in enumerate(per_key_usage(wire)):
        assert records <= limits.hard_records, f"generation {generation} sealed {records} records"
        assert count <= limits.hard_bytes, f"generation {generation} sealed {count} bytes"
    opener = Opener(KEY, limits=limits)
    opener.receive_data(wire)
    while opener.read():
        pass  # raises MalformedRecordError if the sealer passed a limit
    assert opener.records_opened == len(wire_records(wire))


def sealer(limits: KeyLimits, *, auto: bool = False) -> Sealer:
    return Sealer(KEY, record_size=RECORD, limits=limits, auto_key_update=auto)


def refuses_untouched(seal: Sealer, data: bytes, **kwargs: bool) -> None:
    """seal() raises LimitReachedError and seals nothing, takes nothing."""
    before = (seal.records_sealed, seal.bytes_sealed, seal.pending, seal.key_generation)
    with pytest.raises(LimitReachedError, match="update_key"):
        seal.seal(data, **kwargs)
    assert (seal.records_sealed, seal.bytes_sealed, seal.pending, seal.key_generation) == before


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
    for records in range(1, 8):
        for auto in (False, True):
            for update_first in (False, True):
                for final in (False, True):
                    case = f"{records} records, auto={auto}, update_key={update_first}, final={final}"
                    reference, batch = sealer(limits, auto=auto), sealer(limits, auto=auto)
                    if update_first:
                        reference.update_key()
                        batch.update_key()
                    expected = bytearray(reference.take_header())
                    try:
                        for index in range(records):
                            last = final and index == records - 1
                            expected += reference.seal(bytes(RECORD), final=last)
                    except LimitReachedError:
                        refuses_untouched(batch, bytes(records * RECORD), final=final)
                        continue
                    got = bytes(batch.seal(bytes(records * RECORD), final=final))
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


# -- a channel hands every option to its two directions -----------------------------------------


def connect(initiator: dict[str, object], responder: dict[str, object]) -> tuple[Channel, Channel]:
    """Two channels that ran their handshake; checking it is left to the caller."""
    first = Channel(KEY, role=Role.INITIATOR, record_size=RECORD, **initiator)  # type: ignore[arg-type]
    second = Channel(KEY, role=Role.RESPONDER, record_size=RECORD, **responder)  # type: ignore[arg-type]
    run_handshake(first, second)
    return first, second


def test_channel_keeps_its_max_record_size() -> None:
    """Kills Channel dropping ``max_record_size`` on the way to its opener: a peer could then make
    it buffer records of up to the default 1 MiB instead of the caller's bound."""
    small = Channel(KEY, role=Role.INITIATOR, max_record_size=64)
    run_handshake(small, Channel(KEY, role=Role.RESPONDER, record_size=65))
    with pytest.raises(RecordTooLargeError, match="65"):
        small.handshake_complete()
    with pytest.raises(StreamBrokenError):
        small.opener.read()
    fits = Channel(KEY, role=Role.INITIATOR, max_record_size=64)
    run_handshake(fits, Channel(KEY, role=Role.RESPONDER, record_size=64))
    assert fits.handshake_complete()


def test_channel_opener_keeps_its_limits() -> None:
    """Kills Channel dropping ``limits`` on the way to its opener: a peer that never updates its
    key must fail at this side's hard record limit."""
    strict = KeyLimits(update_after_records=3, hard_records=3)
    receiver, sender = connect({"limits": strict}, {})
    assert receiver.handshake_complete()
    assert sender.handshake_complete()
    for number in range(5):
        receiver.opener.receive_data(sender.sealer.seal(b"%d" % number, flush=True))
    assert sender.sealer.key_generation == 0
    assert receiver.opener.read() == b"012"
    with pytest.raises(MalformedRecordError, match="record 3"):
        receiver.opener.read()


def test_channel_sealer_keeps_its_limits() -> None:
    """Kills Channel dropping ``limits`` on the way to its sealer: keys must update on this side's
    schedule, not the default one."""
    often = KeyLimits(update_after_records=2, hard_records=4)
    sender, receiver = connect({"limits": often}, {"limits": often})
    assert sender.handshake_complete()
    assert receiver.handshake_complete()
    wire = bytearray(HEADER_SIZE)  # stands for a header: wire_records parses what follows it
    for number in range(6):
        sent = bytes(sender.sealer.seal(b"%d" % number, flush=True))
        wire += sent
        receiver.opener.receive_data(sent)
    assert [flags for flags, _ in wire_records(bytes(wire))] == [0, FLAG_KEY_UPDATE] * 3
    assert sender.sealer.key_generation == 3
    assert receiver.opener.read() == b"012345"


def test_channel_keeps_auto_key_update_off() -> None:
    """Kills Channel dropping ``auto_key_update``: with it off, reaching the hard limit must refuse
    (the caller decides when keys change), not update behind the caller's back."""
    strict = KeyLimits(update_after_records=3, hard_records=3)
    sender, receiver = connect({"limits": strict, "auto_key_update": False}, {"limits": strict})
    assert sender.handshake_complete()
    assert receiver.handshake_complete()
    wire = bytes(sender.sealer.seal(bytes(2 * RECORD)))
    refuses_untouched(sender.sealer, bytes(RECORD))
    sender.sealer.update_key()
    wire += bytes(sender.sealer.seal(bytes(RECORD))) + bytes(sender.sealer.close())
    assert sender.sealer.key_generation == 1
    receiver.opener.receive_data(wire)
    assert receiver.opener.read() == bytes(3 * RECORD)
    assert receiver.opener.read() == b""


# -- a header, then the end of input ------------------------------------------------------------

READS: dict[str, Callable[[Opener], object]] = {
    "read": lambda opener: opener.read(),
    "read(1)": lambda opener: opener.read(1),
    "readinto": lambda opener: opener.readinto(bytearray(8)),
    "read_view": lambda opener: opener.read_view(),
    "peek": lambda opener: opener.peek(),
}


def feed_zero_copy(opener: Opener, data: bytes) -> None:
    """Through get_buffer/buffer_updated, as many views as the opener offers (a header's fixed
    part first, then the rest once its length is known)."""
    while data:
        room = opener.get_buffer()
        assert room
        count = min(len(room), len(data))
        room[:count] = data[:count]
        opener.buffer_updated(count)
        data = data[count:]


@pytest.mark.parametrize("zero_copy", [False, True], ids=["copy", "zero-copy"])
@pytest.mark.parametrize("call", list(READS))
def test_header_then_eof_is_truncated(call: str, zero_copy: bool) -> None:
    """Kills inverting the end-of-input test for a stream with no record byte: a header followed
    by EOF, with no read before the EOF, must be truncation, not "need input" forever."""
    opener = Opener(KEY)
    header = Sealer(KEY).take_header()
    if zero_copy:
        feed_zero_copy(opener, header)
    else:
        opener.receive_data(header)
    opener.receive_eof()
    with pytest.raises(TruncatedStreamError, match="at a record boundary after 0 records"):
        READS[call](opener)
    with pytest.raises(StreamBrokenError):
        READS[call](opener)


def test_channel_header_then_eof_is_truncated() -> None:
    """The same through a channel: the handshake completes, then the input ends."""
    ours = Channel(KEY, role=Role.INITIATOR)
    run_handshake(ours, Channel(KEY, role=Role.RESPONDER))
    ours.opener.receive_eof()
    assert ours.handshake_complete()
    with pytest.raises(TruncatedStreamError, match="after 0 records"):
        ours.opener.read()
