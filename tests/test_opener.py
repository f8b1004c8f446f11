"""The Opener's phases, its one error slot, and opening records where they lie.

``bytes`` (and read-only views) are held by reference and whole records in them are opened in
place; mutable input is copied; a record split across inputs is copied into the ring. These
tests pin what a caller can observe of that: memory, values, errors, and that nothing
unauthenticated ever lands in the caller's buffer.
"""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Callable

import pytest
from cryptography.exceptions import InvalidTag
from hypothesis import given
from hypothesis import strategies as st

from gcmstream import (
    AuthenticationError,
    BufferFullError,
    ConcurrencyError,
    GcmStreamError,
    KeyLimits,
    MalformedRecordError,
    Opener,
    OutOfRangeError,
    ProtocolError,
    RecordTooLargeError,
    Sealer,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
    UnsupportedBufferError,
    UsageError,
)
from gcmstream.codec import Phase
from gcmstream.format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HARD_MAX_RECORD_SIZE,
    HEADER_FIXED_SIZE,
    HEADER_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
)
from gcmstream.header import HeaderReader
from gcmstream.opener import _ABSORB_BYTES, _CALL_RECORDS
from gcmstream.ring import VIEW_SLOTS

from .helpers import (
    CONTEXT,
    FEEDS,
    KEY,
    PROPERTY_SETTINGS,
    WAYS,
    check_valid,
    drain,
    feed,
    feed_zero_copy,
    forge,
    open_chunks,
    opened,
    read_all,
    record_offset,
    records,
    run,
    seal_stream,
    sealed_streams,
    split,
    tampered,
    wants_data,
)

# Two ways in: ``bytes`` are held by reference (whole records open straight from them), a
# ``bytearray`` is copied into the ring (records open in place there); each has its own run loop.
INPUTS = ["held", "ring"]


def give(opener: Opener, wire: bytes, how: str) -> None:
    opener.receive_data(wire if how == "held" else bytearray(wire))


def phase(opener: Opener) -> Phase:
    return opener.phase  # a call, so that mypy does not narrow the property across calls


def read_all_into(opener: Opener, size: int) -> bytes:
    out = bytearray(size + 1)
    view = memoryview(out)
    got = 0
    while True:
        n = opener.readinto(view[got:])
        if n is None:
            raise AssertionError("need input, but all input was given")
        if n == 0:
            return bytes(out[:got])
        got += n


def test_phases_in_order() -> None:
    wire = seal_stream([b"abc", b"defg"], record_size=4)
    opener = Opener(KEY)
    assert phase(opener) is Phase.HEADER
    opener.receive_data(wire[: HEADER_SIZE - 1])
    assert phase(opener) is Phase.HEADER
    opener.receive_data(wire[HEADER_SIZE - 1 : HEADER_SIZE])
    assert phase(opener) is Phase.RECORDS
    opener.receive_data(wire[HEADER_SIZE:])
    assert opener.read(4) == b"abcd"
    assert phase(opener) is Phase.RECORDS
    assert opener.read() == b"efg"  # the FINAL record
    assert phase(opener) is Phase.FINAL
    assert opener.read() == b""
    assert opener.at_eof


def test_failed_phase_only_once_the_error_reached_the_caller() -> None:
    sealer = Sealer(KEY, record_size=4)
    good = bytes(sealer.seal(b"abcdefgh"))
    opener = Opener(KEY, max_record_size=4)
    opener.receive_data(bytearray(good + bytes([0, 0, 0, 0, 1])))  # a length of 1: below the tag
    assert opener.failed  # found while feeding: waits behind the two good records
    assert phase(opener) is Phase.RECORDS
    assert opener.read() == b"abcdefgh"
    with pytest.raises(MalformedRecordError) as first:
        opener.read()
    assert phase(opener) is Phase.FAILED
    with pytest.raises(StreamBrokenError) as again:
        opener.readinto(bytearray(8))
    assert again.value.original is first.value


@pytest.mark.parametrize(
    "tail", [0, 1, 1000, 64 * 1024 - 1], ids=["empty-final", "one-byte-final", "short-final", "long-final"]
)
def test_whole_records_in_bytes_open_without_a_ring(tail: int) -> None:
    """10 MiB of whole records fed as bytes and read into the caller's buffer: nothing is
    copied into a ring (which would be 256 KiB here), so the reader allocates almost nothing.
    A short FINAL record (it carries flags, so the run loop leaves it to the general step) is
    decrypted straight into the buffer too (kills that step being given no target), also when
    it is large and ends the input (a record ending exactly there is whole)."""
    plaintext = random.Random(1).randbytes(10 * 1024 * 1024 + tail)
    wire = seal_stream([plaintext], record_size=64 * 1024)
    out = bytearray(len(plaintext))  # the FINAL record's plaintext fills it exactly
    tracemalloc.start()
    try:
        opener = Opener(KEY)
        opener.receive_data(wire)
        opener.receive_eof()
        got = opener.readinto(out)
        assert opener.readinto(bytearray(1)) == 0
        assert opener.at_eof
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == len(plaintext)
    assert out == plaintext
    assert peak < 32 * 1024, f"reading whole records from bytes allocated {peak} bytes"
    assert opener._ring is None  # not even the 4 KiB a ring starts with


def test_a_mutable_input_is_copied_before_receive_data_returns() -> None:
    plaintext = random.Random(2).randbytes(300_000)
    wire = bytearray(seal_stream([plaintext], record_size=16384))
    opener = Opener(KEY)
    opener.receive_data(wire)  # more than the ring: the rest is copied aside too
    wire[:] = bytes(len(wire))  # the caller reuses its buffer
    opener.receive_eof()
    assert read_all_into(opener, len(plaintext)) == plaintext


def test_a_read_only_view_is_held_like_bytes() -> None:
    plaintext = random.Random(3).randbytes(200_000)
    wire = seal_stream([plaintext], record_size=16384)
    opener = Opener(KEY)
    assert opener.receive_some(memoryview(wire).toreadonly()) == len(wire)
    assert not opener.wants_data  # held until read
    opener.receive_eof()
    assert read_all_into(opener, len(plaintext)) == plaintext


def test_receive_some_takes_what_fits() -> None:
    plaintext = random.Random(4).randbytes(300_000)
    wire = seal_stream([plaintext], record_size=16384)
    opener = Opener(KEY)
    assert opener.receive_some(wire) == len(wire)  # bytes: held whole
    assert opener.receive_some(b"more") == 0  # held input waits for ring space: read first
    out = bytearray()
    pos = 0
    copy = bytearray(wire)
    opener = Opener(KEY)
    while True:  # mutable input: copied as far as the ring takes it
        taken = opener.receive_some(memoryview(copy)[pos:]) if pos < len(copy) else 0
        assert 0 <= taken <= len(copy) - pos
        pos += taken
        if pos == len(copy):
            opener.receive_eof()
        data = opener.read()
        if data == b"":
            break
        if data is None:
            assert taken or pos == len(copy), "neither took input nor gave plaintext"
            continue
        out += data
    assert out == plaintext


@pytest.mark.parametrize("chunk", [1, 7, 100, 4096, 65_536, 65_541, 200_000])
@pytest.mark.parametrize("record_size", [1, 1000, 16384, 65536])
def test_records_split_across_bytes_inputs(chunk: int, record_size: int) -> None:
    plaintext = random.Random(record_size ^ chunk).randbytes(150_000 if record_size > 1 else 3000)
    wire = seal_stream([plaintext], record_size=record_size)
    opener = Opener(KEY)
    out = bytearray()
    buf = bytearray(record_size + 10)
    for pos in range(0, len(wire), chunk):
        opener.receive_data(wire[pos : pos + chunk])
        if pos + chunk >= len(wire):
            opener.receive_eof()
        while True:  # alternate the two read styles, so views and direct opens mix
            n = opener.readinto(buf) if len(out) % 2 else opener.read_view()
            if n is None or (not isinstance(n, int) and not n) or n == 0:
                break
            out += buf[:n] if isinstance(n, int) else n
    assert bytes(out) == plaintext
    assert opener.at_eof


@pytest.mark.parametrize("how", INPUTS)
@pytest.mark.parametrize("index", [0, 1, 5])
def test_a_tampered_record_leaves_nothing_in_the_callers_buffer(index: int, how: str) -> None:
    """The record after the good ones fails; the caller's buffer holds the good plaintext and
    zeros where the failed record was decrypted, never its unauthenticated plaintext. (The ring
    input kills the ring run's wipe turned into ``out[:] = None`` or its ``break`` into ``return``.)"""
    plaintext = bytes(range(256)) * 40
    wire = seal_stream([plaintext], record_size=1024)
    start, _, _ = list(records(wire))[index]
    bad = tampered(wire, start + RECORD_HEADER_SIZE + 7)
    opener = Opener(KEY)
    give(opener, bad, how)
    out = bytearray(b"\xaa" * (len(plaintext) + 1))
    if index:  # the good prefix first, then the error on the next call
        assert opener.readinto(out) == index * 1024
    with pytest.raises(AuthenticationError) as info:
        opener.readinto(memoryview(out)[index * 1024 :])
    assert info.value.record_number == index
    assert out[: index * 1024] == plaintext[: index * 1024]
    failed = out[index * 1024 : (index + 1) * 1024]
    assert failed == bytes(1024) or failed == b"\xaa" * 1024
    assert plaintext[index * 1024 : index * 1024 + 16] not in out[index * 1024 :]


# Each run loop turns the per-key limits into budgets when it starts: reading one record first
# makes it start at a non-zero position (kills ``hard - seq`` -> ``hard + seq`` and the like).
LIMIT_CASES = [
    pytest.param(how, first, id=f"{how}-{'after-one' if first else 'fresh'}")
    for how in INPUTS
    for first in (0, 10)
]


@pytest.mark.parametrize(("how", "first"), LIMIT_CASES)
def test_record_limit_is_enforced_on_the_direct_path(how: str, first: int) -> None:
    sealer = Sealer(KEY, record_size=10)  # a writer that ignores the reader's tighter limits
    wire = bytes(sealer.seal(bytes(30), flush=True))
    opener = Opener(KEY, limits=KeyLimits(update_after_records=1, hard_records=2))
    give(opener, wire, how)
    if first:
        assert opener.readinto(bytearray(first)) == first
    out = bytearray(100)
    assert opener.readinto(out) == 20 - first  # two records, then the one past the reader's limit
    with pytest.raises(MalformedRecordError, match=r"record 2.*record limit"):
        opener.readinto(out)


@pytest.mark.parametrize("limit", ["record", "byte"])
@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_limits_hold_for_records_read_one_at_a_time(given: Callable[[bytes], bytes], limit: str) -> None:
    """read() of a lone whole record takes a shortcut (the record decrypted into new bytes):
    it counts what it opened and refuses a record past the reader's limits as the other paths
    do."""
    sealer = Sealer(KEY, record_size=10)  # a writer that ignores the reader's tighter limits
    wire = bytes(sealer.seal(bytes(30), flush=True))
    if limit == "record":
        limits = KeyLimits(update_after_records=1, hard_records=2)
    else:
        limits = KeyLimits(update_after_bytes=20, hard_bytes=25)
    opener = Opener(KEY, limits=limits)
    opener.receive_data(wire[:HEADER_SIZE])
    pieces = [wire[start : start + length] for start, _, length in records(wire)]
    for number, piece in enumerate(pieces[:2], 1):
        opener.receive_data(given(piece))
        assert opener.read() == bytes(10)
        assert (opener.records_opened, opener.bytes_opened) == (number, 10 * number)
    opener.receive_data(given(pieces[2]))
    with pytest.raises(MalformedRecordError, match=rf"record 2.*{limit} limit"):
        opener.read()


@pytest.mark.parametrize(("how", "first"), LIMIT_CASES)
def test_byte_limit_is_enforced_on_the_direct_path(how: str, first: int) -> None:
    sealer = Sealer(KEY, record_size=10)
    wire = bytes(sealer.seal(bytes(30), flush=True))
    opener = Opener(KEY, limits=KeyLimits(update_after_bytes=20, hard_bytes=25))
    give(opener, wire, how)
    if first:
        assert opener.readinto(bytearray(first)) == first
    out = bytearray(100)
    assert opener.readinto(out) == 20 - first
    with pytest.raises(MalformedRecordError, match=r"record 2.*byte limit"):
        opener.readinto(out)


@pytest.mark.parametrize("direct", [True, False])
def test_final_with_bytes_after_it_in_the_held_input_is_withheld(direct: bool) -> None:
    wire = seal_stream([b"x" * 50], record_size=20)
    opener = Opener(KEY)
    opener.receive_data(wire + b"!")
    out = bytearray(b"\xaa" * 100)
    if direct:
        assert opener.readinto(out) == 40  # the two full records
        with pytest.raises(TrailingDataError):
            opener.readinto(memoryview(out)[40:])
        assert out[40:50] != b"x" * 10
    else:
        assert opener.read() == b"x" * 40
        with pytest.raises(TrailingDataError):
            opener.read_view()


def test_truncation_in_the_held_input_is_reported_with_its_place() -> None:
    wire = seal_stream([b"y" * 30], record_size=10)
    opener = Opener(KEY)
    opener.receive_data(wire[:-3])
    opener.receive_eof()
    assert opener.read() == b"y" * 30  # three full records; the empty FINAL one is cut
    with pytest.raises(TruncatedStreamError, match="inside a record after 3 records"):
        opener.read()


def test_truncation_message_counts_one_record_in_the_singular() -> None:
    wire = seal_stream([b"y" * 10], record_size=10)
    opener = Opener(KEY)
    opener.receive_data(wire[:-3])
    opener.receive_eof()
    assert opener.read() == b"y" * 10
    with pytest.raises(TruncatedStreamError) as cut:
        opener.read()
    assert str(cut.value) == (
        "input ended inside a record after 1 record, without a FINAL record: "
        "the sender closed without ending the stream, or the connection was cut"
    )


def test_ring_size_is_a_byte_budget_of_at_least_one_record_and_a_header() -> None:
    plaintext = random.Random(5).randbytes(100_000)
    wire = bytes(seal_stream([plaintext], record_size=4096))
    for ring_size in (1, 4096 + 26, 3 * 4096, 1 << 20):  # 1: one record and a header at least
        opener = Opener(KEY, ring_size=ring_size)
        out = bytearray()
        pos = 0
        while True:  # mutable pieces are copied, so every record goes through the ring
            taken = opener.receive_some(bytearray(wire[pos : pos + 1000])) if pos < len(wire) else 0
            pos += taken
            if pos == len(wire):
                opener.receive_eof()
            chunk = opener.read()
            if chunk == b"":
                break
            out += chunk or b""
        assert out == plaintext, ring_size
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="ring_size must be a positive number of bytes"):
            Opener(KEY, ring_size=bad)  # type: ignore[arg-type]


def test_tag_size_is_what_the_direct_path_subtracts() -> None:
    """An empty non-FINAL record (flush of nothing after a key update) in the held input."""
    sealer = Sealer(KEY, record_size=8)
    wire = bytearray(sealer.seal(b"ab", flush=True))
    sealer.update_key()
    wire += sealer.flush()  # an empty KEY_UPDATE record
    wire += sealer.seal(b"cd", final=True)
    sizes = [length - RECORD_HEADER_SIZE - TAG_SIZE for _, _, length in records(bytes(wire))]
    assert sizes == [2, 0, 2]
    opener = Opener(KEY)
    opener.receive_data(bytes(wire))
    assert read_all_into(opener, 4) == b"abcd"


def test_readinto_refuses_a_read_only_buffer_before_opening_anything() -> None:
    """Review finding: a read-only target made a valid stream read as tampered later."""
    plaintext = b"abc" * 100
    wire = bytes(seal_stream([plaintext], record_size=64))
    opener = Opener(KEY)
    opener.receive_data(wire)
    opener.receive_eof()
    for target in (bytes(512), memoryview(bytearray(512)).toreadonly()):
        with pytest.raises(UnsupportedBufferError, match="read-only"):
            opener.readinto(target)
    assert read_all_into(opener, len(plaintext)) == plaintext  # nothing was consumed


def test_readinto_accepts_any_one_byte_format() -> None:
    """Review finding: a writable 'c'-format view lost records silently."""
    plaintext = bytes(range(256)) * 4
    wire = bytes(seal_stream([plaintext], record_size=100))
    for fmt in ("c", "b", "B"):
        opener = Opener(KEY)
        opener.receive_data(wire)
        opener.receive_eof()
        buffer = bytearray(150)  # one whole record fits, then a part of the next
        view = memoryview(buffer).cast(fmt)
        out = bytearray()
        while n := opener.readinto(view):  # type: ignore[arg-type]
            out += buffer[:n]
        assert bytes(out) == plaintext, fmt
    with pytest.raises(UnsupportedBufferError, match="not contiguous"):
        Opener(KEY).readinto(memoryview(bytearray(20))[::2])


MIXED = [b"a" * 10, b"b" * 3, b"c" * 7, b"d"]  # flushed one by one: records of 10, 3, 7, 1 bytes


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut-inside-a-record"])
@pytest.mark.parametrize("size", [4, 64])
@pytest.mark.parametrize("how", INPUTS)
def test_readinto_writes_only_what_it_returns(how: str, size: int, cut: bool) -> None:
    """On a valid stream ``readinto`` leaves the caller's buffer past the count it returns as it
    was: no record is decrypted there unless it authenticates and is returned. Records of
    different sizes (so a header read from the wrong place gives the wrong length), a buffer
    smaller than a record, and a record that has only partly arrived. Kills the run loops reading
    a record header at offset 0 instead of at the record, inverting the "fits the buffer" test, and
    going on past the last complete record in the ring."""
    wire = seal_stream(MIXED, record_size=10, flush_after=True)
    if cut:  # the "c" record has arrived up to half its body
        start, _, length = list(records(wire))[2]
        wire = wire[: start + length // 2]
    opener = Opener(KEY)
    give(opener, wire, how)
    out = bytearray()
    buffer = bytearray(size)
    while True:
        buffer[:] = b"\xaa" * size
        got = opener.readinto(buffer)
        if not got:
            break
        assert buffer[got:] == b"\xaa" * (size - got), f"written past the {got} bytes returned"
        out += buffer[:got]
    assert got == (None if cut else 0)
    assert bytes(out) == b"".join(MIXED[:2] if cut else MIXED)


@pytest.mark.parametrize("update", [False, True], ids=["after-plain", "after-key-update"])
@pytest.mark.parametrize("first", [10, 100], ids=["run-starts-at-it", "run-meets-it"])
def test_a_bad_length_after_a_good_record_in_held_input(first: int, update: bool) -> None:
    """Only the first length field of held input is checked as it arrives; the run loop must stop
    at a later one out of range, wherever the run starts, and return the good plaintext before it
    (kills a start value of the run's cached associated-data length that matches a length of 1,
    the range test inverted, and ``break`` -> ``return`` there, which loses the plaintext). A
    KEY_UPDATE record is opened outside the run loop, so the bad record is the first one a run
    loop sees."""
    sealer = Sealer(KEY, record_size=10)
    if update:
        sealer.update_key()
    good = bytes(sealer.seal(b"x" * 10, flush=True))  # the header and one record
    opener = Opener(KEY)
    opener.receive_data(good + RECORD_HEADER.pack(0, 1) + b"!")
    out = bytearray(first)
    assert opener.readinto(out) == 10
    assert out[:10] == b"x" * 10
    with pytest.raises(MalformedRecordError, match="shorter than the 16-byte tag"):
        opener.readinto(bytearray(100))
    with pytest.raises(StreamBrokenError):
        opener.readinto(bytearray(100))


def test_repr_names_the_state_and_never_the_key() -> None:
    opener = Opener(KEY)
    assert repr(opener).endswith(" open>")
    opener.receive_data(seal_stream([b"abc"], record_size=4))
    assert repr(opener).endswith(" open>")
    assert opener.read() == b"abc"
    assert opener.read() == b""
    assert repr(opener).endswith(" eof>")
    broken = Opener(KEY)
    broken.receive_data(tampered(seal_stream([b"abc"], record_size=4), HEADER_SIZE + RECORD_HEADER_SIZE))
    with pytest.raises(AuthenticationError):
        broken.read()
    assert repr(broken).endswith(" failed>")
    for text in (repr(opener), repr(broken)):
        assert KEY.hex() not in text and repr(KEY)[2:-1] not in text


def test_header_verified_only_once_the_header_is_whole() -> None:
    wire = seal_stream([b"abc"])
    opener = Opener(KEY)
    assert opener.header_verified() is False
    opener.receive_data(wire[: HEADER_SIZE - 1])
    assert opener.header_verified() is False
    opener.receive_data(wire[HEADER_SIZE - 1 : HEADER_SIZE])
    assert opener.header_verified() is True


def test_consume_reports_what_is_available() -> None:
    """Kills the message's count turned into ``end + pos`` (the message would then name a wrong
    count once part of the record was consumed)."""
    opener = Opener(KEY)
    opener.receive_data(bytearray(seal_stream([b"abcdefg"])))
    view = opener.peek()
    assert view is not None and bytes(view) == b"abcdefg"
    opener.consume(3)
    with pytest.raises(OutOfRangeError, match="cannot consume 5 bytes: 4 available"):
        opener.consume(5)
    assert opener.read() == b"defg"


@pytest.mark.parametrize("gathered", [False, True], ids=["raised", "waiting"])
def test_consume_after_an_error_is_a_usage_error(gathered: bool) -> None:
    """Whether the error was raised or waits behind a returned prefix, there is nothing left to
    consume, and saying so is an error from the tree (kills the read position reset to None)."""
    wire = seal_stream([b"abcdefghijklmn"], record_size=7)
    start, _, _ = list(records(wire))[1]
    opener = Opener(KEY)
    opener.receive_data(tampered(wire, start + RECORD_HEADER_SIZE))
    if gathered:
        assert opener.read() == b"abcdefg"
    else:
        assert opener.read(7) == b"abcdefg"
        with pytest.raises(AuthenticationError):
            opener.read()
    with pytest.raises(GcmStreamError):
        opener.consume(1)


def test_buffer_updated_with_nothing_after_the_end_changes_nothing() -> None:
    """Kills buffer_updated(0) reaching the opener's commit: after FINAL that would record
    "data follows the FINAL record" for no data at all."""
    opener = Opener(KEY)
    opener.receive_data(seal_stream([b"abc"]))
    assert opener.read() == b"abc"
    assert opener.read() == b""
    opener.get_buffer()
    opener.buffer_updated(0)
    assert not opener.failed
    assert opener.read() == b""
    assert opener.at_eof


def test_zero_copy_input_after_held_bytes_keeps_stream_order() -> None:
    """Held input comes first: get_buffer() copies it into the ring before it offers space for
    what follows it (kills get_buffer's ``held is not None`` inverted)."""
    plaintext = random.Random(6).randbytes(5000)
    wire = seal_stream([plaintext], record_size=1000)
    cut = HEADER_SIZE + 1500  # inside the second record
    opener = Opener(KEY)
    opener.receive_data(wire[:cut])  # the record bytes are held by reference
    feed_zero_copy(opener, wire[cut:])
    opener.receive_eof()
    assert read_all_into(opener, len(plaintext)) == plaintext


def test_receive_some_copies_held_input_aside_to_take_more() -> None:
    """A partial record held by reference is copied into the ring when more input arrives, so
    receive_some takes the new input at once instead of asking for a read (kills both inversions
    of the test in front of that copy)."""
    plaintext = random.Random(7).randbytes(3000)
    wire = seal_stream([plaintext], record_size=1000)
    cut = HEADER_SIZE + 500  # inside the first record
    opener = Opener(KEY)
    assert opener.receive_some(wire[:cut]) == cut
    assert opener.receive_some(wire[cut:]) == len(wire) - cut
    opener.receive_eof()
    assert read_all_into(opener, len(plaintext)) == plaintext


def test_bytes_receive_some_left_outside_refuse_a_final_record_before_them() -> None:
    """receive_some copies mutable input as far as the ring takes it. When the ring ends
    exactly with the FINAL record, the bytes left outside still follow it in the stream: the
    FINAL record is refused (TrailingDataError) and its plaintext never released, as it is
    when the bytes after it are in the ring (FORMAT.md 8.2)."""
    plaintext = random.Random(8).randbytes(300)
    wire = seal_stream([plaintext], record_size=64)
    opener = Opener(KEY, ring_size=len(wire) - HEADER_SIZE)  # the records, exactly
    assert opener.receive_some(bytearray(wire + b"after the end")) == len(wire)
    out = bytearray()
    with pytest.raises(TrailingDataError):
        for _ in range(10):  # bounded: five records
            data = opener.read()
            assert data, "the FINAL record was released with bytes after it"
            out += data
    assert bytes(out) == plaintext[: len(out)]
    assert len(out) < len(plaintext)


def test_every_feeding_call_after_receive_eof_says_so() -> None:
    """After receive_eof, each call that gives input raises StreamClosedError naming why."""
    opener = Opener(KEY)
    opener.receive_data(seal_stream([b"abc"])[:10])
    opener.get_buffer()
    opener.receive_eof()
    with pytest.raises(StreamClosedError, match=r"^input already ended \(receive_eof was called\)$"):
        opener.buffer_updated(0)
    for feed_call in (opener.receive_data, opener.receive_some):
        with pytest.raises(StreamClosedError, match=r"^input already ended \(receive_eof was called\)$"):
            feed_call(b"more")


@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_one_read_opens_at_most_call_records_records(given: Callable[[bytes], bytes]) -> None:
    """A read of tiny records stops after _CALL_RECORDS of them (the loop's fairness: a flood
    of one-byte records must not hold a read call for 64 KiB of them), from held input and
    from the ring alike; the next read goes on where it stopped."""
    sealer = Sealer(KEY, record_size=1)
    wire = bytes(sealer.take_header()) + b"".join(bytes(sealer.seal(b"x", flush=True)) for _ in range(600))
    wire += bytes(sealer.close())
    opener = Opener(KEY)
    opener.receive_data(given(wire))
    buffer = bytearray(4096)
    assert opener.readinto(buffer) == _CALL_RECORDS
    assert opener.readinto(buffer) == _CALL_RECORDS
    assert opener.readinto(buffer) == 600 - 2 * _CALL_RECORDS


def test_find_searches_only_the_current_records_unread_plaintext() -> None:
    """Opener.find (under StreamReader.readuntil): the index of ``sub`` relative to what peek()
    returns, -1 outside it: not in consumed bytes, not in the record's tag after it."""
    wire = seal_stream([b"hello, world", b"second"], record_size=12)
    tag = wire[HEADER_SIZE + RECORD_HEADER_SIZE + 12 : HEADER_SIZE + RECORD_HEADER_SIZE + 12 + TAG_SIZE]
    opener = Opener(KEY)
    assert opener.find(b"o") == -1  # nothing peeked yet
    opener.receive_data(wire)
    assert opener.find(b"o") == -1
    view = opener.peek()
    assert view is not None and bytes(view) == b"hello, world"
    assert opener.find(b"hello") == 0
    assert opener.find(b"o") == 4  # the first one
    assert opener.find(b"world") == 7
    assert opener.find(b"zz") == -1
    assert opener.find(tag) == -1  # right after the plaintext, in the ring: not part of it
    opener.consume(3)
    assert opener.find(b"o") == 1
    assert opener.find(b"h") == -1  # consumed
    opener.consume(9)
    assert opener.find(b"o") == -1
    assert opener.read() == b"second"


def test_records_of_different_sizes_at_one_ring_position() -> None:
    """Each record arrives alone and is read at once, so the ring restarts at 0 for every one:
    records of several lengths land at one position. Kills the ring run's view cache reusing an
    entry whose position matches but whose length does not."""
    wire = seal_stream(MIXED, record_size=10, flush_after=True)
    opener = Opener(KEY)
    opener.receive_data(wire[:HEADER_SIZE])
    out = bytearray()
    buffer = bytearray(64)
    for start, _, length in records(wire):
        opener.receive_data(bytearray(wire[start : start + length]))
        got = opener.readinto(buffer)
        assert got is not None
        out += buffer[:got]
    assert bytes(out) == b"".join(MIXED)
    assert opener.at_eof


def test_wants_data_again_once_held_input_is_read() -> None:
    """Held input stops input (an adapter then pauses its transport) until it is read; a read
    that takes the last held record must say so at once, even when it filled the buffer exactly
    and so looked no further (kills the run loop marking consumed input with "" instead of None:
    the transport would never be resumed)."""
    sealer = Sealer(KEY, record_size=10)
    wire = sealer.take_header() + bytes(sealer.seal(bytes(30), flush=True))  # no FINAL yet
    opener = Opener(KEY)
    opener.receive_data(wire)
    assert not wants_data(opener)
    assert opener.readinto(bytearray(30)) == 30
    assert wants_data(opener)
    opener.receive_data(bytes(sealer.close()))
    assert opener.read() == b""


def test_wants_data_stops_while_many_complete_records_wait() -> None:
    """A flood of tiny records through the ring stops input once 256 complete records wait
    (the adapter pauses its transport: uvloop otherwise committed tens of thousands of them in
    one loop callback, benchmarks/ part 7), though the ring has room; reading some resumes it."""
    sealer = Sealer(KEY, record_size=1 << 20)
    wire = bytearray(sealer.take_header())
    for _ in range(3000):
        wire += sealer.seal(b"x", flush=True)
    opener = Opener(KEY, max_record_size=1 << 20)
    fed = 0
    while wants_data(opener) and fed < len(wire):
        view = opener.get_buffer()
        count = min(len(view), len(wire) - fed)
        view[:count] = wire[fed : fed + count]
        opener.buffer_updated(count)
        fed += count
    assert fed < len(wire), "input never stopped"
    assert opener.get_buffer(), "the ring still has room: the stop is the count's"
    opener.buffer_updated(0)
    got = b""
    while not wants_data(opener):
        more = opener.read(65536)
        assert more
        got += more
    assert 1 <= len(got) < 3000  # some read, not all: the stop was the count's


def test_an_empty_record_is_not_the_end_of_the_stream() -> None:
    """A readinto that meets only an empty KEY_UPDATE record must not return 0 (the end): kills
    the end test ``FINAL and no record and nothing unread`` losing its FINAL condition, which
    would let a reader stop early at any empty record, a truncation nobody reports."""
    sealer = Sealer(KEY, record_size=8)
    wire = bytearray(sealer.seal(b"ab", flush=True))
    sealer.update_key()
    wire += sealer.flush()  # an empty KEY_UPDATE record
    wire += sealer.seal(b"cd", final=True)
    opener = Opener(KEY)
    opener.receive_data(bytes(wire))
    buffer = bytearray(2)
    assert opener.readinto(buffer) == 2
    assert opener.readinto(buffer) == 2
    assert buffer == b"cd"
    assert opener.readinto(buffer) == 0
    assert opener.at_eof


@pytest.mark.parametrize(
    ("forged", "error", "message"),
    [
        (
            [(0, b"x"), (0x04, b"y"), (FLAG_FINAL, b"")],
            MalformedRecordError,
            "record 1 has unknown flags 0x04",
        ),
        ([(0, b"x"), (FLAG_FINAL | FLAG_KEY_UPDATE, b"y")], MalformedRecordError, "record 1 has both FINAL"),
        (
            [(0, b"x"), (FLAG_FINAL, b"y"), (FLAG_FINAL, b"z")],
            TrailingDataError,
            r"FINAL record \(record 1\)",
        ),
    ],
    ids=["unknown-flag", "final-and-key-update", "final-then-more"],
)
def test_a_record_breaking_the_flag_rules_is_named(
    forged: list[tuple[int, bytes]], error: type[Exception], message: str
) -> None:
    """Records that authenticate but break a flag rule: the error names the record and the flags
    found (kills the messages losing them: message-only mutants that lose the value)."""
    wire, _ = forge(forged)
    opener = Opener(KEY, context=CONTEXT)
    opener.receive_data(wire)
    assert opener.read() == b"x"
    with pytest.raises(error, match=message):
        opener.read()


KEY256 = bytes(range(32))


STREAMS: dict[str, tuple[list[bytes], int, bool]] = {
    # name: (writes, record size, flush after each write)
    "empty": ([], 7, False),
    "one-byte": ([b"x"], 7, False),
    "one-short-record": ([b"hello"], 7, False),
    "exact-record": ([b"1234567"], 7, False),
    "two-exact-records": ([b"12345678901234"], 7, False),
    "multi-record-short-final": ([b"the quick brown fox jumps over the lazy dog"], 7, False),
    "many-writes": ([b"ab", b"", b"cdefghij", b"k" * 20, b"lmn"], 7, False),
    "flushed": ([b"ab", b"cdefghij", b"k" * 20, b"", b"lmn"], 7, True),
    "record-size-1": ([b"abcdef"], 1, False),
    "large-records": ([bytes(range(256)) * 9], 1000, False),
}


@pytest.fixture(params=sorted(STREAMS))
def stream(request: pytest.FixtureRequest) -> tuple[bytes, bytes]:
    writes, record_size, flush_after = STREAMS[request.param]
    return seal_stream(writes, record_size=record_size, flush_after=flush_after), b"".join(writes)


# -- round trips, three ways, two feeds ------------------------------------------------------


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize("way", WAYS)
def test_round_trip(stream: tuple[bytes, bytes], way: str, how: str) -> None:
    wire, plaintext = stream
    check_valid(wire, plaintext, way, how)


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize("way", WAYS)
def test_round_trip_aes256_with_context(way: str, how: str) -> None:
    plaintext = b"records under a 256-bit key, bound to a context" * 3
    wire = seal_stream([plaintext], key=KEY256, context=b"ctx", record_size=50)
    check_valid(wire, plaintext, way, how, lambda: Opener(KEY256, context=b"ctx"))


@pytest.mark.parametrize("how", FEEDS)
def test_bytewise_single_record_needs_every_byte(how: str) -> None:
    wire = seal_stream([b"hello"], record_size=100)  # one FINAL record
    opener = Opener(KEY)
    out = bytearray()
    for i in range(len(wire) - 1):
        feed(opener, wire[i : i + 1], how, out)
        assert opener.read() is None
        assert opener.peek() is None
        assert opener.read_view() is None
        assert opener.readinto(bytearray(10)) is None
        assert not opener.at_eof
    feed(opener, wire[-1:], how, out)
    assert opener.read() == b"hello"
    assert opener.read() == b""
    assert opener.at_eof


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize("seed", range(5))
def test_round_trip_through_many_ring_fills(how: str, seed: int) -> None:
    rng = random.Random(seed)
    plaintext = rng.randbytes(rng.randint(200_000, 400_000))
    record_size = rng.choice([1000, 4096, 16384, 65536])
    wire = seal_stream([plaintext], record_size=record_size)
    opener = Opener(KEY)
    out = bytearray()
    pos = 0
    while pos < len(wire):
        size = rng.choice([1, 5, 100, 4096, 65536, 300_000])
        feed(opener, wire[pos : pos + size], how, out)
        pos += size
        if rng.random() < 0.5:
            drain(opener, out)
    opener.receive_eof()
    assert drain(opener, out)
    assert out == plaintext


def test_trailing_data_after_the_final_record_is_never_plaintext() -> None:
    wire = seal_stream([b"abc"], record_size=100)
    opener = Opener(KEY)
    opener.receive_data(wire + b"def")
    with pytest.raises(TrailingDataError):
        opener.read()
    # The final record itself was withheld too: its end is not authenticated as the end.
    with pytest.raises(StreamBrokenError):
        opener.read()


def test_trailing_data_arriving_after_the_end_was_read() -> None:
    wire = seal_stream([b"abc"], record_size=100)
    opener = Opener(KEY)
    opener.receive_data(wire)
    assert opener.read() == b"abc"
    assert opener.read() == b""
    opener.receive_data(b"x")
    with pytest.raises(TrailingDataError):
        opener.read()


def test_nothing_fed_means_need_input() -> None:
    opener = Opener(KEY)
    assert opener.read(0) == b""  # nothing asked for: nothing, and no need to say "need input"
    assert opener.read() is None
    assert opener.read(5) is None
    assert opener.readinto(bytearray(5)) is None
    assert opener.read_view() is None
    assert opener.peek() is None
    assert opener.wants_data
    assert not opener.at_eof
    assert opener.header is None


def test_end_of_stream_is_empty_everywhere() -> None:
    opener = opened([])
    assert opener.read() == b""
    assert opener.read(5) == b""
    assert opener.readinto(bytearray(5)) == 0
    view = opener.read_view()
    assert view is not None
    assert len(view) == 0
    peeked = opener.peek()
    assert peeked is not None
    assert len(peeked) == 0
    assert opener.at_eof
    assert opener.records_opened == 1  # the empty FINAL record


def test_read_crosses_records_and_respects_max_bytes() -> None:
    opener = opened([b"abcdefghijklmnopqrstuvwxyz"], record_size=7)
    assert opener.read(3) == b"abc"
    assert opener.read(10) == b"defghijklm"
    assert opener.read() == b"nopqrstuvwxyz"
    assert opener.read() == b""
    # across three records: the count of bytes gathered must grow by what each record gave
    opener = opened([b"abcdefghijklmnopqrstuvwxyz"], record_size=7)
    assert opener.read(1) == b"a"
    assert opener.read(20) == b"bcdefghijklmnopqrstu"


def test_readinto_fills_across_records() -> None:
    opener = opened([b"abcdefghijklmnopqrstuvwxyz"], record_size=7)
    buf = bytearray(10)
    assert opener.readinto(buf) == 10
    assert buf == b"abcdefghij"
    assert opener.readinto(memoryview(buf)[:4]) == 4
    assert buf[:4] == b"klmn"
    big = bytearray(100)
    assert opener.readinto(big) == 12
    assert big[:12] == b"opqrstuvwxyz"
    assert opener.readinto(big) == 0


def test_readinto_accepts_non_byte_views() -> None:
    import array

    opener = opened([b"abcdefgh"], record_size=7)
    target = array.array("H", [0, 0])
    assert opener.readinto(memoryview(target)) == 4
    assert target.tobytes() == b"abcd"
    # a byte view of two dimensions counts its bytes, not its rows (kills the 1-D shortcut's
    # ``ndim == 1`` turned into ``!= 1`` or ``== 2``)
    grid = bytearray(4)
    assert opener.readinto(memoryview(grid).cast("B", (2, 2))) == 4
    assert grid == b"efgh"


def test_read_view_is_within_one_record() -> None:
    opener = opened([b"abcdefghij"], record_size=7)
    first = opener.read_view()
    assert first is not None
    assert bytes(first) == b"abcdefg"
    second = opener.read_view(2)
    assert second is not None
    assert bytes(second) == b"hi"
    third = opener.read_view(100)
    assert third is not None
    assert bytes(third) == b"j"
    end = opener.read_view()
    assert end is not None
    assert len(end) == 0


def test_peek_and_consume() -> None:
    opener = opened([b"abcdefghij"], record_size=7)
    view = opener.peek()
    assert view is not None
    assert bytes(view) == b"abcdefg"
    again = opener.peek()  # peeking does not consume
    assert again is not None
    assert bytes(again) == b"abcdefg"
    opener.consume(3)
    view = opener.peek()
    assert view is not None
    assert bytes(view) == b"defg"
    with pytest.raises(ValueError, match="cannot consume 5 bytes"):
        opener.consume(5)
    with pytest.raises(ValueError, match="cannot consume"):
        opener.consume(-1)
    opener.consume(4)
    view = opener.peek()
    assert view is not None
    assert bytes(view) == b"hij"
    opener.consume(3)
    view = opener.peek()
    assert view is not None
    assert len(view) == 0
    assert opener.at_eof


@pytest.mark.parametrize(
    "next_call",
    [
        pytest.param(lambda o: o.read(), id="read"),
        pytest.param(lambda o: o.peek(), id="peek"),
        pytest.param(lambda o: o.read_view(), id="read_view"),
        pytest.param(lambda o: o.readinto(bytearray(1)), id="readinto"),
        pytest.param(lambda o: o.consume(0), id="consume"),
    ],
)
@pytest.mark.parametrize("source", ["peek", "read_view"])
def test_views_die_at_the_next_read_side_call(source: str, next_call: Callable[[Opener], object]) -> None:
    opener = opened([b"abcdefghijklmn"], record_size=7)
    view = opener.peek() if source == "peek" else opener.read_view(3)
    assert view is not None
    assert bytes(view[:1]) == b"a"
    next_call(opener)
    with pytest.raises(ValueError, match="released"):
        bytes(view)


def test_read_after_readinto_stopped_inside_held_input() -> None:
    """readinto leaves held input at a record boundary past its start; read() then looks at
    the record there, not at the first one held: a FINAL record ends the stream (read() gives
    its plaintext, then b""), and a record header cut short waits for more input."""
    sealer = Sealer(KEY, record_size=7)
    wire = bytes(sealer.seal(b"abcdefg")) + bytes(sealer.seal(b"hijklmn", final=True))
    (_, flags, length), (_, final_flags, final_length) = records(wire)
    assert (flags, final_flags, length) == (0, FLAG_FINAL, final_length)  # alike but the flag
    opener = Opener(KEY)
    opener.receive_data(wire)
    assert opener.readinto(bytearray(7)) == 7
    assert opener.read() == b"hijklmn"
    assert opener.read() == b""

    opener = Opener(KEY)
    opener.receive_data(wire[: HEADER_SIZE + length + 3])  # the first record, 3 bytes of the next
    assert opener.readinto(bytearray(7)) == 7
    assert opener.read() is None


@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_read_of_a_lone_record_keeps_max_bytes_and_an_empty_record_is_not_the_end(
    given: Callable[[bytes], bytes],
) -> None:
    """The one-record read shortcut is taken only when it may: read(3) and read(1) of a lone
    7-byte record return 3 bytes and 1, and a lone empty plain record returns nothing yet
    (None), never b"" (the end), which would let a reader stop at any empty record."""
    wire, _ = forge([(0, b"abcdefg"), (0, b"ABCDEFG"), (0, b""), (FLAG_FINAL, b"hi")])
    (first, _, _), (second, _, _), (empty, _, _), (last, _, _) = records(wire)
    opener = Opener(KEY, context=CONTEXT)
    opener.receive_data(wire[:first])
    opener.receive_data(given(wire[first:second]))
    assert opener.read(3) == b"abc"
    assert opener.read() == b"defg"
    opener.receive_data(given(wire[second:empty]))
    assert opener.read(1) == b"A"
    assert opener.read() == b"BCDEFG"
    opener.receive_data(given(wire[empty:last]))
    assert opener.read() is None
    opener.receive_data(given(wire[last:]))
    assert opener.read() == b"hi"
    assert opener.read() == b""


def test_read_returns_a_record_in_the_ring_and_the_held_one_after_it() -> None:
    """read() returns all that is ready across records: a whole record copied into the ring
    and the next one held by reference, both, not the first alone."""
    wire = seal_stream([b"abcdefg", b"hijklmn", b"opqrstu"], record_size=7)
    (first, _, first_length), (second, _, second_length), *_ = records(wire)
    opener = Opener(KEY)
    opener.receive_data(wire[:first])
    opener.receive_data(bytearray(wire[first:second]))  # copied: mutable
    opener.receive_data(wire[second : second + second_length])  # held: bytes
    assert opener.read() == b"abcdefghijklmn"


@pytest.mark.parametrize("source", ["peek", "read_view"])
@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_a_view_dies_at_a_read_of_the_next_lone_record(source: str, given: Callable[[bytes], bytes]) -> None:
    """A view of a record read to its end dies at the next read too when that read takes the
    one-record shortcut (a lone whole record decrypted straight into new bytes)."""
    wire = seal_stream([b"abcdefg", b"hijklmn", b"opqrstu"], record_size=7)
    (first, flags, first_length), (second, second_flags, second_length), *_ = records(wire)
    assert flags == second_flags == 0
    opener = Opener(KEY)
    opener.receive_data(wire[:second])
    view = opener.peek() if source == "peek" else opener.read_view()
    assert view is not None and bytes(view) == b"abcdefg"
    if source == "peek":
        opener.consume(len(view))
    opener.receive_data(given(wire[second : second + second_length]))
    assert opener.read() == b"hijklmn"
    with pytest.raises(ValueError, match="released"):
        bytes(view)


@pytest.mark.parametrize(
    "feed",
    [
        pytest.param(lambda o: o.get_buffer(), id="get_buffer"),
        pytest.param(lambda o: o.receive_data(b""), id="receive_data"),
        pytest.param(lambda o: o.receive_eof(), id="receive_eof"),
    ],
)
@pytest.mark.parametrize("source", ["peek", "read_view"])
def test_feeding_leaves_views_intact(source: str, feed: Callable[[Opener], object]) -> None:
    """Feeding only writes free ring space, so a reader may hold a view across an await while
    the transport delivers more (iter_chunks in a proxy does exactly that)."""
    opener = opened([b"abcdefghijklmn"], record_size=7)
    view = opener.peek() if source == "peek" else opener.read_view(3)
    assert view is not None
    expected = bytes(view)
    feed(opener)
    assert bytes(view) == expected


def test_receive_data_while_backlog_waits_is_buffer_full() -> None:
    plaintext = random.Random(3).randbytes(300_000)
    wire = seal_stream([plaintext], record_size=16384)
    opener = Opener(KEY, ring_size=64 * 1024)
    opener.receive_data(wire[:200_000])  # more than the 64 KiB ring
    assert not wants_data(opener)
    refused = r"^earlier input still waits for ring space: read first$"  # says what to do
    with pytest.raises(BufferFullError, match=refused) as info:
        opener.receive_data(wire[200_000:])
    assert isinstance(info.value, UsageError)
    assert len(opener.get_buffer()) == 0  # no room either way
    out = bytearray()
    drain(opener, out)  # reading takes in the backlog as room frees up
    assert wants_data(opener)
    opener.receive_data(wire[200_000:])  # the refused call changed nothing: retry works
    opener.receive_eof()
    assert drain(opener, out)
    assert out == plaintext


def test_backlog_from_a_mutable_buffer_is_copied() -> None:
    wire = bytearray(seal_stream([bytes(100_000)], record_size=16384))
    opener = Opener(KEY)
    opener.receive_data(wire)
    wire[:] = bytes(len(wire))  # the caller reuses its buffer
    out = bytearray()
    assert drain(opener, out)
    assert out == bytes(100_000)


def test_feeding_after_eof_is_refused() -> None:
    opener = Opener(KEY)
    opener.receive_eof()
    with pytest.raises(StreamClosedError):
        opener.receive_data(b"x")
    with pytest.raises(StreamClosedError):
        opener.buffer_updated(1)
    assert not opener.wants_data


def test_buffer_updated_beyond_the_view_is_refused() -> None:
    opener = Opener(KEY)
    room = opener.get_buffer()
    assert len(room) == HEADER_FIXED_SIZE  # the fixed part first: it says how long the rest is
    with pytest.raises(ValueError, match="exceeds"):
        opener.buffer_updated(HEADER_FIXED_SIZE + 1)


# -- truncation --------------------------------------------------------------------------------


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize("way", ["all", "bytewise"])
def test_truncation_at_every_position(way: str, how: str) -> None:
    plaintext = b"the quick brown fox jumps over the lazy dog"
    wire = seal_stream([plaintext], record_size=10)
    boundaries = {HEADER_SIZE} | {start + length for start, _, length in records(wire)}
    cuts = range(len(wire)) if way == "all" else [*sorted(boundaries - {len(wire)}), 0, 1, 50, 90]
    for cut in cuts:
        outcome = run(wire[:cut], way, how)
        assert isinstance(outcome.error, TruncatedStreamError), cut
        assert isinstance(outcome.error, EOFError)
        assert plaintext.startswith(outcome.plaintext)
        if cut in boundaries:
            assert "at a record boundary" in str(outcome.error) or cut <= HEADER_SIZE


def test_truncation_messages() -> None:
    wire = seal_stream([b"x" * 30], record_size=10)
    for cut, words in [
        (0, "before the stream header"),
        (10, f"10 of {HEADER_FIXED_SIZE}"),
        (HEADER_FIXED_SIZE + 1, f"{HEADER_FIXED_SIZE + 1} of {HEADER_SIZE}"),
        (HEADER_SIZE + 3, "inside a record"),
    ]:
        outcome = run(wire[:cut], "all", "copy")
        assert isinstance(outcome.error, TruncatedStreamError)
        assert words in str(outcome.error)


def test_without_eof_a_cut_stream_is_just_waiting() -> None:
    wire = seal_stream([b"x" * 30], record_size=10)
    outcome = run(wire[: len(wire) - 1], "all", "copy", eof=False)
    assert outcome.error is None
    assert outcome.ended_at is None
    assert outcome.plaintext == b"x" * 30  # every full record before the FINAL one


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("part", ["flags", "body", "tag"])
def test_tampering_is_an_authentication_error(way: str, how: str, part: str) -> None:
    plaintext = bytes(range(50))
    wire = seal_stream([plaintext], record_size=10)
    for number, (start, _, length) in enumerate(records(wire)):
        offset = {"flags": start, "body": start + RECORD_HEADER_SIZE, "tag": start + length - 1}[part]
        mask = 0x80 if part == "flags" else 1  # an unknown flag bit: only the tag catches it
        outcome = run(tampered(wire, offset, mask), way, how)
        error = outcome.error
        assert isinstance(error, AuthenticationError), (number, error)
        assert error.record_number == number
        assert f"record {number}" in str(error)
        assert isinstance(error.__cause__, InvalidTag)
        assert outcome.plaintext == plaintext[: 10 * number]


def test_reordered_and_dropped_records_fail() -> None:
    wire = seal_stream([bytes(range(40))], record_size=10)
    recs = [wire[s : s + n] for s, _, n in records(wire)]
    header = wire[:HEADER_SIZE]
    for bad in (
        header + recs[1] + recs[0] + b"".join(recs[2:]),
        header + b"".join(recs[1:]),
        header + recs[0] + b"".join(recs[2:]),
        header + recs[0] + recs[0] + b"".join(recs[1:]),
    ):
        outcome = run(bad, "all", "copy")
        assert isinstance(outcome.error, AuthenticationError)


def test_multi_record_read_returns_prefix_then_the_original_error() -> None:
    plaintext = bytes(range(40))
    wire = seal_stream([plaintext], record_size=10)
    start = list(records(wire))[2][0]
    opener = Opener(KEY)
    opener.receive_data(tampered(wire, start + RECORD_HEADER_SIZE))
    assert opener.read() == plaintext[:20]  # the authenticated prefix
    with pytest.raises(AuthenticationError) as info:
        opener.read()  # the original error type, raised once
    assert info.value.record_number == 2
    assert isinstance(info.value.__cause__, InvalidTag)
    for call in (opener.read, opener.peek, opener.read_view, lambda: opener.readinto(bytearray(5))):
        with pytest.raises(StreamBrokenError) as broken:
            call()
        assert broken.value.original is info.value
        assert broken.value.__cause__ is info.value
        assert "record 2" in str(broken.value)


def test_readinto_returns_prefix_then_the_original_error() -> None:
    plaintext = bytes(range(40))
    wire = seal_stream([plaintext], record_size=10)
    start = list(records(wire))[1][0]
    opener = Opener(KEY)
    opener.receive_data(tampered(wire, start + RECORD_HEADER_SIZE))
    buf = bytearray(100)
    assert opener.readinto(buf) == 10
    assert buf[:10] == plaintext[:10]
    with pytest.raises(AuthenticationError):
        opener.readinto(buf)
    with pytest.raises(StreamBrokenError):
        opener.readinto(buf)


def test_tampered_plaintext_never_stays_in_the_ring() -> None:
    wire = seal_stream([b"secret!!" * 4], record_size=100)
    start = next(records(wire))[0]
    opener = Opener(KEY)
    opener.receive_data(tampered(wire, start + RECORD_HEADER_SIZE + 3))
    with pytest.raises(AuthenticationError):
        opener.read()
    ring = opener._ring
    assert ring is not None
    assert b"secret" not in ring.buf
    assert b"s\x65cret" not in ring.buf


def test_header_errors_are_final() -> None:
    wire = seal_stream([b"abc"])
    opener = Opener(bytes(16))
    opener.receive_data(wire)
    with pytest.raises(GcmStreamError) as first:
        opener.read()
    with pytest.raises(StreamBrokenError) as broken:
        opener.peek()
    assert broken.value.original is first.value


def test_reader_record_size_limit() -> None:
    wire = seal_stream([b"abc"], record_size=5000)
    outcome = run(wire, "all", "copy", lambda: Opener(KEY, max_record_size=4999))
    assert isinstance(outcome.error, RecordTooLargeError)
    assert "5000" in str(outcome.error)
    assert "4999" in str(outcome.error)
    check_valid(wire, b"abc", "all", "copy", lambda: Opener(KEY, max_record_size=5000))


@pytest.mark.parametrize("how", FEEDS)
@pytest.mark.parametrize(
    ("length", "error"), [(100, RecordTooLargeError), (TAG_SIZE - 1, MalformedRecordError)]
)
def test_bad_length_field_fails_before_the_record(how: str, length: int, error: type[Exception]) -> None:
    wire = seal_stream([bytes(30)], record_size=10)
    start = list(records(wire))[1][0]
    bad = bytearray(wire)
    RECORD_HEADER.pack_into(bad, start, 0, length)
    outcome = run(bytes(bad[: start + RECORD_HEADER_SIZE]), "all", how, eof=False)  # no body needed
    assert isinstance(outcome.error, error)
    assert outcome.plaintext == bytes(10)


def test_reader_enforces_the_hard_record_limit() -> None:
    wire = seal_stream([bytes(100)], record_size=10)  # default limits: no key update
    outcome = run(
        wire, "all", "copy", lambda: Opener(KEY, limits=KeyLimits(update_after_records=3, hard_records=3))
    )
    assert isinstance(outcome.error, MalformedRecordError)
    assert "record 3" in str(outcome.error)
    assert outcome.plaintext == bytes(30)


def test_reader_enforces_the_hard_byte_limit() -> None:
    wire = seal_stream([bytes(100)], record_size=10)
    outcome = run(
        wire, "all", "copy", lambda: Opener(KEY, limits=KeyLimits(update_after_bytes=25, hard_bytes=25))
    )
    assert isinstance(outcome.error, MalformedRecordError)
    assert outcome.plaintext == bytes(20)


@pytest.mark.parametrize("how", FEEDS)
def test_feeding_a_failed_opener_releases_nothing(how: str) -> None:
    wire = seal_stream([bytes(range(40))], record_size=10)
    start, _, length = list(records(wire))[1]
    end = start + length
    opener = Opener(KEY)
    opener.receive_data(tampered(wire, start + RECORD_HEADER_SIZE)[:end])
    assert opener.read() == bytes(range(10))
    with pytest.raises(AuthenticationError):
        opener.read()
    # More input (even the genuine rest of the stream) is dropped: the opener stays failed.
    assert len(opener.get_buffer()) == 0
    assert not opener.wants_data
    if how == "copy":
        opener.receive_data(wire[end:])
    else:
        opener.buffer_updated(0)
    opener.receive_eof()
    for call in (opener.read, opener.peek, opener.read_view):
        with pytest.raises(StreamBrokenError):
            call()


def test_a_failed_opener_discards_further_input() -> None:
    """A length error waits for the next read, but the opener already reports itself failed and
    takes whatever else arrives without complaint, so an I/O loop can run to its end."""
    sealer = Sealer(KEY, record_size=16)
    opener = Opener(KEY, max_record_size=16)
    opener.receive_data(sealer.take_header() + RECORD_HEADER.pack(0, 10**6))
    assert opener.failed
    assert "failed" in repr(opener)
    for _ in range(3):
        opener.receive_data(b"more junk" * 1000)  # no BufferFullError
    with pytest.raises(RecordTooLargeError):
        opener.read()


def test_a_stale_get_buffer_view_cannot_be_committed() -> None:
    sealer = Sealer(KEY, record_size=16)
    opener = Opener(KEY, max_record_size=16)
    opener.receive_data(sealer.take_header() + bytes(sealer.seal(b"one", flush=True)))
    stale = opener.get_buffer()
    assert opener.read() == b"one"  # the ring empties and restarts at 0
    assert opener.read() is None
    record = bytes(sealer.seal(b"two", flush=True))
    stale[: len(record)] = record
    with pytest.raises(ValueError, match="offered"):
        opener.buffer_updated(len(record))


# -- a header, then the end of input ------------------------------------------------------------

READS: dict[str, Callable[[Opener], object]] = {
    "read": lambda opener: opener.read(),
    "read(1)": lambda opener: opener.read(1),
    "readinto": lambda opener: opener.readinto(bytearray(8)),
    "read_view": lambda opener: opener.read_view(),
    "peek": lambda opener: opener.peek(),
}


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


@PROPERTY_SETTINGS
@given(stream=sealed_streams(), cuts=st.lists(st.integers(0, 1 << 16), max_size=30), zero_copy=st.booleans())
def test_any_split_round_trips(stream: tuple[bytes, bytes, int], cuts: list[int], zero_copy: bool) -> None:
    wire, plaintext, _ = stream
    out = bytearray()
    assert open_chunks(Opener(KEY), split(wire, cuts), zero_copy, out)
    assert out == plaintext


@PROPERTY_SETTINGS
@given(
    stream=sealed_streams(),
    position=st.integers(0, 1 << 16),
    delta=st.integers(1, 255),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=5),
    zero_copy=st.booleans(),
)
def test_any_single_byte_change_is_a_documented_error(
    stream: tuple[bytes, bytes, int], position: int, delta: int, cuts: list[int], zero_copy: bool
) -> None:
    wire, plaintext, _ = stream
    bad = bytearray(wire)
    bad[position % len(bad)] ^= delta
    opener = Opener(KEY)
    released = bytearray()
    error: GcmStreamError | None = None
    try:
        open_chunks(opener, split(bytes(bad), cuts), zero_copy, released)
    except GcmStreamError as exc:
        error = exc
    assert error is not None, "a changed stream was accepted"
    assert isinstance(error, ProtocolError), f"{type(error).__name__} is not a documented peer error"
    assert type(error).__module__ == "gcmstream.errors"
    # Whatever came out before the error is plaintext that was really sealed, in order.
    assert plaintext.startswith(released)
    # And the opener stays failed.
    with pytest.raises(GcmStreamError) as again:
        opener.read()
    assert again.value is error or (
        isinstance(again.value, StreamBrokenError) and again.value.original is error
    )
    with pytest.raises(StreamBrokenError) as broken:
        opener.read()
    assert broken.value.original is error


# -- the record number on every record error ---------------------------------------------------


def first_error(opener: Opener, wire: bytes | bytearray) -> GcmStreamError:
    opener.receive_data(wire)
    opener.receive_eof()
    with pytest.raises(GcmStreamError) as info:
        while opener.read():
            pass
    return info.value


@pytest.mark.parametrize(
    ("records_", "error", "number"),
    [
        ([(0, b"a"), (0x40, b"b"), (FLAG_FINAL, b"")], MalformedRecordError, 1),
        ([(FLAG_FINAL | FLAG_KEY_UPDATE, b"a")], MalformedRecordError, 0),
        ([(0, b"a"), (0, b"b"), (FLAG_FINAL, b"c"), (FLAG_FINAL, b"")], TrailingDataError, 2),
    ],
    ids=["unknown-flag", "final-and-key-update", "record-after-final"],
)
def test_record_errors_carry_the_record_number(
    records_: list[tuple[int, bytes]], error: type[MalformedRecordError | TrailingDataError], number: int
) -> None:
    wire, _ = forge(records_)
    found = first_error(Opener(KEY, context=CONTEXT), wire)
    assert isinstance(found, error)
    assert found.record_number == number
    assert f"record {number}" in str(found)


def test_bytes_after_final_name_the_final_record() -> None:
    """Bytes that are not a record after an authenticated FINAL: the FINAL record's number."""
    wire = seal_stream([b"abcdefghij"], record_size=4)  # records 0, 1 and the FINAL record 2
    found = first_error(Opener(KEY), wire + b"\x00junk")
    assert isinstance(found, TrailingDataError)
    assert found.record_number == 2


def test_the_per_key_limit_names_the_record_that_passed_it() -> None:
    limits = KeyLimits(update_after_records=2, hard_records=2)
    wire = seal_stream([b"abc"], record_size=1)  # three records under one key
    found = first_error(Opener(KEY, limits=limits), wire)
    assert isinstance(found, MalformedRecordError)
    assert found.record_number == 2


@pytest.mark.parametrize("how", ["at-a-boundary", "buffered"])
def test_a_length_below_the_tag_names_the_record_at_the_boundary(how: str) -> None:
    wire = bytearray(seal_stream([b"abcdefgh"], record_size=4))  # records 0, 1 (FINAL) of 4 bytes
    second = HEADER_SIZE + RECORD_HEADER_SIZE + 4 + TAG_SIZE
    RECORD_HEADER.pack_into(wire, second, FLAG_FINAL, TAG_SIZE - 1)
    opener = Opener(KEY)
    if how == "at-a-boundary":
        first_record = bytes(wire[:second])
        opener.receive_data(first_record)
        assert opener.read() == b"abcd"
        found = first_error(opener, bytes(wire[second:]))
        assert isinstance(found, MalformedRecordError)
        assert found.record_number == 1
    else:  # found while buffering in the ring: named too (it was None before)
        found = first_error(opener, wire)
        assert isinstance(found, MalformedRecordError)
        assert found.record_number == 1


def _give(opener: Opener, piece: bytes, how: str, out: bytearray) -> None:
    """Feed ``piece`` through one of the Opener's feeding calls, reading when it takes no more."""
    if how == "bytes":  # held by reference
        opener.receive_data(piece)
    elif how == "bytearray":  # copied
        opener.receive_data(bytearray(piece))
    elif how == "receive_some":
        for _ in range(len(piece) + 2):  # bounded: each pass takes bytes or reads records
            piece = piece[opener.receive_some(piece) :]
            if not piece:
                return
            drain(opener, out)
        raise AssertionError("receive_some took nothing")
    else:  # get_buffer/buffer_updated
        feed(opener, piece, "zero-copy", out)


@pytest.mark.parametrize("how", ["bytes", "bytearray", "receive_some", "get_buffer"])
@pytest.mark.parametrize("read_between", [True, False], ids=["read-between", "read-after"])
def test_a_length_below_the_tag_names_its_record_however_the_input_is_split(
    how: str, read_between: bool
) -> None:
    """One rule (records.check_record_length) for the ring, held input and a file's walk: the
    same stream, whose record 2 announces a length below the tag, split at every offset and fed
    through each feeding call, is refused with the same error naming record 2 each time (the
    ring's refusal named none: found while buffering, it carried record_number None)."""
    wire = bytearray(seal_stream([b"abcdefghijkl"], record_size=4))  # records 0-2, FINAL 3
    third = [start for start, _, _ in records(bytes(wire))][2]
    RECORD_HEADER.pack_into(wire, third, 0, TAG_SIZE - 1)
    data = bytes(wire)
    seen = set()
    for cut in range(len(data) + 1):
        opener, out = Opener(KEY), bytearray()
        with pytest.raises(GcmStreamError) as info:
            _give(opener, data[:cut], how, out)
            if read_between:
                drain(opener, out)
            _give(opener, data[cut:], how, out)
            opener.receive_eof()
            drain(opener, out)
        error = info.value
        seen.add((type(error), getattr(error, "record_number", "none"), str(error)))
        assert bytes(out) == b"abcdefgh"[: len(out)]  # records 0 and 1 at most, never past 2
    assert seen == {(MalformedRecordError, 2, "record 2 has length 15, shorter than the 16-byte tag")}


def test_ring_growth_moves_the_record_being_read() -> None:
    """ring.py "Memory that follows use": a small ring that grows while the reader is inside a
    record moves that record to 0; the reader's position moves with it (kills the Opener not
    shifting ``_pt_pos``/``_pt_end`` when ``head`` moves)."""
    plaintext = random.Random(9).randbytes(20 * 1000)
    wire = seal_stream([plaintext], record_size=1000)
    opener = Opener(KEY)
    first = HEADER_SIZE + 2 * (1000 + 21)  # the header and two records: they fit in 4 KiB
    feed_zero_copy(opener, wire[:first])
    got = opener.read(1010)  # all of the first record, 10 bytes of the second (in the ring)
    assert got is not None and len(got) == 1010
    feed_zero_copy(opener, wire[first:])  # fills the ring: it grows, the second record moves
    opener.receive_eof()
    assert got + read_all_into(opener, len(plaintext) - len(got)) == plaintext


@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_one_read_call_of_bytes_is_bounded_too(given: Callable[[bytes], bytes]) -> None:
    """``read()`` keeps the same bound as ``readinto``: the record its first view came from and
    at most _CALL_RECORDS more (its loop counts the records it opens itself)."""
    sealer = Sealer(KEY, record_size=1)
    wire = bytes(sealer.take_header()) + b"".join(bytes(sealer.seal(b"x", flush=True)) for _ in range(600))
    wire += bytes(sealer.close())
    opener = Opener(KEY)
    opener.receive_data(given(wire))
    first = opener.read(4096)
    second = opener.read(4096)
    assert first is not None and second is not None
    assert len(first) == len(second) == _CALL_RECORDS + 1
    assert opener.read(4096) == b"x" * (600 - 2 * (_CALL_RECORDS + 1))


def test_a_read_that_fills_its_buffer_takes_the_split_record_into_the_ring_at_once() -> None:
    """64 KiB records in 256 KiB ``bytes`` pieces, read into a buffer of exactly three records:
    the read that fills it also copies the start of the record split at the piece's end into
    the ring, so the opener wants the next piece at once (it held the start, ``wants_data``
    False, until one more read found it: one further call per piece, benchmarks/README.md
    issue 23). The stream still opens whole, in order, and nothing waits once it is read."""
    record = 64 * 1024
    plaintext = random.Random(23).randbytes(10 * record + 100)
    wire = seal_stream([plaintext], record_size=record)
    pieces = [wire[i : i + 256 * 1024] for i in range(0, len(wire), 256 * 1024)]
    opener = Opener(KEY)
    out = bytearray(3 * record)
    opener.receive_data(pieces[0])
    assert opener.readinto(out) == len(out)  # three whole records, straight into ``out``
    assert out == plaintext[: len(out)]
    assert opener.wants_data  # the fourth record's start is in the ring, not held
    assert opener.receiving_record
    got = bytearray(out)
    for piece in pieces[1:]:
        assert opener.wants_data
        opener.receive_data(piece)
        while n := opener.readinto(out):
            got += out[:n]
    opener.receive_eof()
    assert opener.readinto(out) == 0
    assert got == plaintext
    assert opener.at_eof and not opener.receiving_record


# -- found by the mutation run over opener.py on the merged code (docs/mutation-2026-12-04-mop.md)

BUSY_CALLS: dict[str, Callable[[Opener], object]] = {
    "get_buffer": lambda opener: opener.get_buffer(),
    "buffer_updated": lambda opener: opener.buffer_updated(0),
    "receive_data": lambda opener: opener.receive_data(b"x"),
    "receive_some": lambda opener: opener.receive_some(b"x"),
    "receive_eof": lambda opener: opener.receive_eof(),
    "header_verified": lambda opener: opener.header_verified(),
    "read": lambda opener: opener.read(),
    "readinto": lambda opener: opener.readinto(bytearray(8)),
    "read_view": lambda opener: opener.read_view(),
    "peek": lambda opener: opener.peek(),
    "consume": lambda opener: opener.consume(0),
}


@pytest.mark.parametrize("call", list(BUSY_CALLS))
def test_every_call_on_an_opener_in_use_by_another_thread_is_refused(call: str) -> None:
    """Each public call refuses while another thread's call holds the opener (the threaded
    test in tests/test_threads.py reaches readinto only), changes nothing, and leaves exactly
    one turn behind: a second caller is still refused afterwards."""
    opener = Opener(KEY)
    busy = pytest.raises(ConcurrencyError, match=r"^this Opener is in use by another thread: ")
    with opener._turn, busy:  # another thread's call is under way
        BUSY_CALLS[call](opener)
    assert opener.untouched and phase(opener) is Phase.HEADER
    with opener._turn, busy:  # still one token: the refused call gave none back
        BUSY_CALLS[call](opener)
    assert read_all(opener, seal_stream([b"after"])) == b"after"


def test_an_opener_is_keyed_by_exactly_one_thing_and_says_so_in_its_own_name() -> None:
    """The Opener names itself (its header reader has the same rule, in its own words)."""
    exactly_one = r"^an Opener takes exactly one of key, identities or passphrase$"
    with pytest.raises(TypeError, match=exactly_one):
        Opener()
    with pytest.raises(TypeError, match=exactly_one):
        Opener(KEY, passphrase="and a passphrase")


@pytest.mark.parametrize("size", [0, HARD_MAX_RECORD_SIZE + 1, 1.5])
def test_a_bad_max_record_size_is_refused_when_the_opener_is_made(size: int) -> None:
    """At construction, not at the first header (which would then be read under no bound)."""
    refused = rf"^max_record_size must be an int from 1 to {HARD_MAX_RECORD_SIZE}, got "
    with pytest.raises(ValueError, match=refused):
        Opener(KEY, max_record_size=size)


def read_ready(opener: Opener, reader: str, out: bytearray) -> None:
    """Read what is ready into ``out`` with ``readinto`` (a 64 KiB buffer) or ``read``."""
    if reader == "readinto":
        buffer = bytearray(64 * 1024)
        while count := opener.readinto(buffer):
            out += buffer[:count]
    else:
        while data := opener.read():
            out += data


@pytest.mark.parametrize("reader", ["readinto", "read"])
def test_the_ring_keeps_its_memory_while_the_rest_of_the_stream_is_held(reader: str) -> None:
    """1 KiB records in 8 KiB bytes pieces: each piece's last record is split, copied into the
    ring, completed by the next piece and opened there while that piece is held. The ring is
    emptied once per piece and keeps its memory for the next split record (``more_held``)
    rather than releasing and allocating it again each time (ring.py)."""
    plaintext = bytes(range(256)) * 320
    wire = seal_stream([plaintext], record_size=1024)
    opener = Opener(KEY)
    opener.receive_data(wire[:HEADER_SIZE])
    out = bytearray()
    memory = None
    for start in range(HEADER_SIZE, len(wire), 8 * 1024):
        opener.receive_data(wire[start : start + 8 * 1024])
        read_ready(opener, reader, out)
        ring = opener._ring
        assert ring is not None
        if opener.at_eof:
            break
        memory = memory or ring.buf
        assert ring.buf is memory, "the ring released its memory and took it again"
    assert opener.at_eof and out == plaintext


def test_header_verified_raises_once_the_opener_is_broken() -> None:
    """Like every read-side call: after an error among the records (the header did verify),
    and after the header's own error, header_verified() raises StreamBrokenError."""
    wire = seal_stream([b"abc"])
    opener = Opener(KEY)
    opener.receive_data(tampered(wire, len(wire) - 1))
    assert opener.header_verified() is True
    with pytest.raises(AuthenticationError) as first:
        opener.read()
    with pytest.raises(StreamBrokenError) as broken:
        opener.header_verified()
    assert broken.value.original is first.value
    opener = Opener(bytes(16))
    opener.receive_data(wire)
    with pytest.raises(ProtocolError) as refused:
        opener.header_verified()
    with pytest.raises(StreamBrokenError) as broken:
        opener.header_verified()
    assert broken.value.original is refused.value


@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_a_failed_opener_takes_all_it_is_given_and_keeps_none(given: Callable[[bytes], bytes]) -> None:
    """Input after an error is dropped whole: receive_some says all of it was taken (an I/O
    loop is not told to read first), and none of it is held or counted as a record arriving."""
    sealer = Sealer(KEY, record_size=16)
    opener = Opener(KEY, max_record_size=16)
    opener.receive_data(sealer.take_header() + RECORD_HEADER.pack(0, 10**6))
    assert opener.failed
    assert not opener.receiving_record  # the held bytes that held the bad length are dropped
    more = RECORD_HEADER.pack(0, 20) * 1000  # as if records followed, of a valid length
    for _ in range(2):
        assert opener.receive_some(given(more)) == len(more)
        assert not opener.receiving_record
        opener.receive_data(given(more))
        assert not opener.receiving_record
    with pytest.raises(RecordTooLargeError):
        opener.read()


@pytest.mark.parametrize("given", [bytes, bytearray], ids=["held", "ring"])
def test_after_a_lone_record_is_read_the_opener_wants_data_and_holds_nothing(
    given: Callable[[bytes], bytes],
) -> None:
    """The one-record read shortcut leaves the opener as the general path does: nothing held,
    no record arriving, ready for input (an adapter pauses its transport while wants_data is
    False)."""
    wire = seal_stream([b"ping", b"pong"], flush_after=True)
    (first, _, _), (second, _, _), (last, _, _) = records(wire)
    opener = Opener(KEY)
    opener.receive_data(wire[:first])
    for start, end, message in ((first, second, b"ping"), (second, last, b"pong")):
        opener.receive_data(given(wire[start:end]))
        assert opener.read() == message
        assert opener.wants_data and not opener.receiving_record
        assert opener.read() is None
    opener.receive_data(given(wire[last:]))
    assert opener.read() == b""


@pytest.mark.parametrize("gathered", [False, True], ids=["raised", "waiting"])
def test_after_an_error_at_the_read_position_no_record_is_arriving(gathered: bool) -> None:
    """The input after a record that failed is dropped, held or in the ring: nothing is
    arriving any more (a record timeout measures receiving_record), whether the error was
    raised at once or waits behind plaintext this call returned."""
    wire = seal_stream([b"abcdefg" * 3], record_size=7)
    (first, _, _), (second, _, _), *_ = records(wire)
    opener = Opener(KEY)
    opener.receive_data(wire[:first])
    opener.receive_data(tampered(wire, second + RECORD_HEADER_SIZE)[first if gathered else second :])
    if gathered:
        assert opener.read() == b"abcdefg"
    else:
        with pytest.raises(AuthenticationError):
            opener.read()
    assert not opener.receiving_record


@pytest.mark.parametrize("tail", [b"", b"!"], ids=["its-header-alone", "and-a-byte"])
def test_a_bad_length_later_in_held_input_names_its_record(tail: bytes) -> None:
    """A length out of range found where the held input is opened in place (after a record
    the run opened) is refused there, with its record's number, also when the held input ends
    with the five bytes of its header."""
    sealer = Sealer(KEY, record_size=10)
    good = bytes(sealer.seal(b"x" * 10, flush=True))  # the header and record 0
    opener = Opener(KEY)
    opener.receive_data(good + RECORD_HEADER.pack(0, 1) + tail)
    out = bytearray(100)
    assert opener.readinto(out) == 10
    with pytest.raises(MalformedRecordError, match="shorter than the 16-byte tag") as bad:
        opener.readinto(out)
    assert bad.value.record_number == 1


def test_held_small_records_are_copied_into_the_ring_a_few_kib_at_a_time() -> None:
    """A held piece of tiny records goes into the ring ``_ABSORB_BYTES`` at a time, not at once
    (each record is committed one by one: copying a large piece of them in one step held the
    event loop for tens of ms, benchmarks/ part 7)."""
    wire = seal_stream([b"x" * 2000], record_size=1)  # 2,000 one-byte records: 44 KB
    opener = Opener(KEY)
    opener.receive_data(wire)
    assert opener.read(1) == b"x"
    ring = opener._ring
    assert ring is not None
    assert 0 < ring.stored <= _ABSORB_BYTES
    assert read_all(opener, b"") == b"x" * 1999


@pytest.mark.parametrize("header_bytes", [1, 4])
def test_a_read_that_fills_its_buffer_takes_a_split_record_header_into_the_ring(header_bytes: int) -> None:
    """As above when the piece ends inside the next record's 5-byte header: those bytes cannot
    be stored where the record will lie (its length is not known yet), and still go into the
    ring in the read that fills its buffer, so the opener wants the next piece at once and
    asks for the rest of that header."""
    record = 1000
    plaintext = random.Random(24).randbytes(5 * record)
    wire = seal_stream([plaintext], record_size=record)
    cut = [start for start, _, _ in records(wire)][3] + header_bytes
    opener = Opener(KEY)
    out = bytearray(3 * record)
    opener.receive_data(wire[:cut])
    assert opener.readinto(out) == len(out)  # three whole records, straight into ``out``
    assert out == plaintext[: len(out)]
    assert opener.wants_data and opener.receiving_record
    assert opener.record_missing == RECORD_HEADER_SIZE - header_bytes
    opener.receive_data(wire[cut:])
    opener.receive_eof()
    got = bytearray(out)
    while n := opener.readinto(out):
        got += out[:n]
    assert got == plaintext
    assert opener.at_eof


def test_bytes_after_the_end_are_refused_with_the_final_records_number_and_take_no_memory() -> None:
    """Bytes given after the FINAL record was read are the TrailingDataError the next read
    raises, with the FINAL record's number; they are dropped as they come, so an opener that
    read its stream from held input makes no ring for them (not its 4 KiB start either)."""
    wire = seal_stream([b"hello", b"world"], record_size=5)
    final_number = len(list(records(wire))) - 1
    opener = Opener(KEY)
    opener.receive_data(wire)
    out = bytearray(100)
    assert opener.readinto(out) == 10
    assert out[:10] == b"helloworld"
    assert opener.readinto(out) == 0
    assert opener.at_eof and opener._ring is None
    opener.receive_data(b"trailing bytes")
    assert opener._ring is None
    with pytest.raises(TrailingDataError) as trailing:
        opener.readinto(out)
    assert trailing.value.record_number == final_number


def test_a_read_that_fills_its_buffer_takes_a_split_empty_record_into_the_ring() -> None:
    """The split record's start is taken by the read that fills its buffer for the smallest
    record too: an empty one (its length the tag's 16 bytes, in range), split inside its tag."""
    wire, _ = forge([(0, b"a" * 24)] * 3 + [(0, b""), (FLAG_FINAL, b"end")])
    cut = [start for start, _, _ in records(wire)][3] + RECORD_HEADER_SIZE + TAG_SIZE // 2
    opener = Opener(KEY, context=CONTEXT)
    out = bytearray(3 * 24)
    opener.receive_data(wire[:cut])
    assert opener.readinto(out) == len(out)
    assert out == b"a" * 72
    assert opener.wants_data and opener.record_missing == TAG_SIZE // 2
    opener.receive_data(wire[cut:])
    opener.receive_eof()
    assert opener.read() == b"end"
    assert opener.read() == b""


def test_one_read_opens_at_most_call_records_records_across_the_ring_and_held_input() -> None:
    """The bound of a read call holds where the ring's run ends it exactly: _CALL_RECORDS tiny
    records copied into the ring, more of them held by reference after them. The read that
    opens the ring's ones opens none of the held ones (it would open twice as many); the next
    read goes on there."""
    sealer = Sealer(KEY, record_size=1)
    ring_part = bytes(sealer.take_header()) + b"".join(
        bytes(sealer.seal(b"x", flush=True)) for _ in range(_CALL_RECORDS)
    )
    held_part = b"".join(bytes(sealer.seal(b"y", flush=True)) for _ in range(100)) + bytes(sealer.close())
    opener = Opener(KEY)
    opener.receive_data(bytearray(ring_part))  # copied into the ring
    opener.receive_data(held_part)  # held by reference after it
    buffer = bytearray(4096)
    assert opener.readinto(buffer) == _CALL_RECORDS
    assert buffer[:_CALL_RECORDS] == b"x" * _CALL_RECORDS
    assert opener.readinto(buffer) == 100
    assert buffer[:100] == b"y" * 100


def test_a_read_after_the_ring_emptied_takes_the_split_record_into_it() -> None:
    """Whole records held after the ring was emptied (it exists, holding nothing) open in the
    held run, and the read that fills its buffer takes the start of the record split at the
    held input's end into the ring, as when there is no ring yet."""
    record = 1000
    plaintext = random.Random(25).randbytes(6 * record)
    wire = seal_stream([plaintext], record_size=record)
    starts = [start for start, _, _ in records(wire)]
    opener = Opener(KEY)
    opener.receive_data(bytearray(wire[: starts[1]]))  # the header and record 0, into the ring
    assert opener.read() == plaintext[:record]
    cut = starts[4] + 100
    opener.receive_data(wire[starts[1] : cut])  # records 1-3 whole, record 4 split
    out = bytearray(3 * record)
    assert opener.readinto(out) == len(out)
    assert out == plaintext[record : 4 * record]
    assert opener.wants_data
    opener.receive_data(wire[cut:])
    opener.receive_eof()
    got = bytearray()
    while n := opener.readinto(out):
        got += out[:n]
    assert got == plaintext[4 * record :]


def test_bytes_that_find_the_ring_full_mid_record_are_held_by_reference() -> None:
    """``bytes`` given while the ring is full in the middle of a record (the rest of that record
    cannot go in yet) are held as they are, not copied: 1 MB given then allocates next to
    nothing, and is read whole once reads free the ring."""
    plaintext = random.Random(26).randbytes(1_000_000)
    wire = seal_stream([plaintext], record_size=1000)
    opener = Opener(KEY, ring_size=1)  # the smallest ring: one record and a header
    taken = opener.receive_some(bytearray(wire))  # fills it: record 0 and the header of record 1
    assert 0 < opener.record_missing < RECORD_HEADER_SIZE + 1000 + TAG_SIZE  # inside a record
    rest = wire[taken:]
    tracemalloc.start()
    try:
        opener.receive_data(rest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # measured: 528 bytes (this test's tracemalloc peak, CPython 3.11); a copy is 1 MB
    assert peak < 4 * 1024, f"holding 1 MB of bytes allocated {peak} bytes"
    assert not opener.wants_data  # held: reading frees the ring first
    opener.receive_eof()
    out = bytearray()
    assert drain(opener, out)
    assert out == plaintext


def test_bytes_of_a_split_records_rest_go_into_the_ring_as_they_are_given() -> None:
    """``bytes`` that continue a record begun in the ring are copied into the ring at once, not
    held: given less than the rest, the opener holds nothing, wants more and says how much of
    the record is still missing; given the rest, the record opens."""
    record = 1000
    plaintext = random.Random(27).randbytes(3 * record)
    wire = seal_stream([plaintext], record_size=record)
    starts = [start for start, _, _ in records(wire)]
    middle = starts[1] + 300
    opener = Opener(KEY)
    opener.receive_data(bytearray(wire[:middle]))  # record 0 and the start of record 1
    assert opener.read() == plaintext[:record]
    missing = opener.record_missing
    assert missing == starts[2] - middle
    opener.receive_data(wire[middle : middle + 10])
    assert opener.wants_data
    assert opener.record_missing == missing - 10
    opener.receive_data(wire[middle + 10 :])
    opener.receive_eof()
    out = bytearray()
    assert drain(opener, out)
    assert out == plaintext[record:]


@pytest.mark.parametrize("cut", [0, HEADER_FIXED_SIZE - 1, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 3])
def test_a_truncation_says_whether_it_ended_inside_the_stream_header(cut: int) -> None:
    """TruncatedStreamError.in_header: True when the input ended before the stream header was
    whole (the CLI then says "ends inside its stream header"), False once records began."""
    wire = seal_stream([b"some records"], record_size=4)
    opener = Opener(KEY)
    opener.receive_data(wire[:cut])
    opener.receive_eof()
    with pytest.raises(TruncatedStreamError) as truncated:
        opener.read()
    assert truncated.value.in_header is (cut < HEADER_SIZE)


def test_bytes_written_into_get_buffer_after_the_end_name_the_final_record() -> None:
    """The zero-copy way in after the FINAL record was read: bytes written into ``get_buffer``
    and committed with ``buffer_updated`` are the TrailingDataError the next read raises, with
    the FINAL record's number."""
    wire = seal_stream([b"hello", b"world"], record_size=5)
    final_number = len(list(records(wire))) - 1
    opener = Opener(KEY)
    opener.receive_data(bytearray(wire))
    out = bytearray()
    assert drain(opener, out)
    assert out == b"helloworld"
    buffer = opener.get_buffer()
    assert len(buffer) >= 3
    buffer[:3] = b"abc"
    opener.buffer_updated(3)
    with pytest.raises(TrailingDataError) as trailing:
        opener.read()
    assert trailing.value.record_number == final_number


def test_buffer_updated_with_no_buffer_given_for_records_is_out_of_range() -> None:
    """``buffer_updated`` once the header verified, before any ``get_buffer`` offered ring
    space: refused as the misuse it is (OutOfRangeError, a UsageError), and the opener reads
    on."""
    wire = seal_stream([b"hello"], record_size=5)
    opener = Opener(KEY)
    opener.receive_data(bytearray(wire[:HEADER_SIZE]))
    assert opener.header_verified()
    with pytest.raises(OutOfRangeError, match=r"^commit of 5 bytes exceeds the view that was offered$"):
        opener.buffer_updated(5)
    opener.receive_data(wire[HEADER_SIZE:])
    out = bytearray()
    assert drain(opener, out)
    assert out == b"hello"


@pytest.mark.parametrize("how", INPUTS)
def test_final_length_is_the_final_records_plaintext_size_once_it_authenticated(how: str) -> None:
    """``final_length``: -1 until the FINAL record authenticated, then its plaintext bytes (the
    last ones released, which a caller that finds bytes after them withholds)."""
    wire = seal_stream([b"x" * 12], record_size=5)  # records of 5, 5, then 2 bytes, FINAL
    opener = Opener(KEY)
    assert opener.final_length == -1
    give(opener, wire, how)
    assert opener.read(10) == b"x" * 10
    assert opener.final_length == -1
    assert opener.read() == b"xx"
    assert opener.final_length == 2


@pytest.mark.parametrize(
    "make",
    [
        lambda reader: Opener(KEY, header_reader=reader),
        lambda reader: Opener(identities=[], header_reader=reader),
        lambda reader: Opener(passphrase="a passphrase", header_reader=reader),
        lambda reader: Opener(context=b"ctx", header_reader=reader),
    ],
    ids=["key", "identities", "passphrase", "context"],
)
def test_an_opener_given_a_header_reader_refuses_anything_that_keys_it_beside(
    make: Callable[[HeaderReader], Opener],
) -> None:
    """The header reader holds the keys and the context: each of them given beside it, alone,
    is refused in the Opener's own words (not silently ignored)."""
    with pytest.raises(TypeError, match=r"^a header_reader holds the keys and the context: pass them to it$"):
        make(HeaderReader(KEY))


@pytest.mark.parametrize("how", INPUTS)
def test_readinto_goes_on_past_the_rest_of_the_current_record(how: str) -> None:
    """A record larger than the first buffer is opened into the ring; the next ``readinto``
    copies its rest and goes on to the records after it in the same call (a short count
    would make a caller that reads once per wake-up lag a record behind)."""
    wire = seal_stream(MIXED, record_size=10, flush_after=True)  # records of 10, 3, 7, 1 bytes
    opener = Opener(KEY)
    give(opener, wire, how)
    assert opener.readinto(bytearray(4)) == 4
    buffer = bytearray(64)
    assert opener.readinto(buffer) == 6 + 3 + 7 + 1
    assert buffer[:17] == b"".join(MIXED)[4:]


def test_read_view_of_zero_bytes_is_empty_and_consumes_nothing() -> None:
    """``read_view(0)`` asks for nothing: an empty view, the record's plaintext still there
    for the next read (not the whole record, as a "< 0" would give)."""
    opener = opened([b"abcdefg"])
    view = opener.read_view(0)
    assert view is not None and len(view) == 0
    assert opener.read() == b"abcdefg"


def test_find_of_nothing_outside_a_records_plaintext_is_not_found() -> None:
    """``find`` looks only inside the plaintext ``peek`` returned: once that is consumed,
    even the empty string is not found (-1), as before anything was peeked."""
    opener = opened([b"abcdefg", b"hij"])
    view = opener.peek()
    assert view is not None and bytes(view) == b"abcdefg"
    assert opener.find(b"") == 0
    opener.consume(7)
    assert opener.find(b"") == -1
    assert opener.read() == b"hij"


@pytest.mark.parametrize("how", INPUTS)
def test_readinto_of_records_that_need_a_step_each_is_bounded(how: str) -> None:
    """Records the run loops do not open (each carries KEY_UPDATE) are opened one step at a
    time: one ``readinto`` still opens at most _CALL_RECORDS of them, the next goes on there."""
    count = _CALL_RECORDS + 100
    wire, _ = forge([(FLAG_KEY_UPDATE, b"k")] * count + [(FLAG_FINAL, b"")])
    opener = Opener(KEY, context=CONTEXT)
    give(opener, wire, how)
    buffer = bytearray(4096)
    assert opener.readinto(buffer) == _CALL_RECORDS
    assert opener.readinto(buffer) == 100
    assert opener.readinto(buffer) == 0


def test_closing_a_record_read_in_the_ring_keeps_its_memory_while_more_is_held() -> None:
    """``read`` opens a record completed in the ring as the current record and closes it at the
    next step; when that empties the ring while bytes are held, the ring keeps its memory
    (``more_held``) for the next split record instead of shrinking and growing again once per
    input piece. A 64 KiB burst first grows the ring; then small records come in 250-byte
    pieces, each ending inside a record."""
    sealer = Sealer(KEY, record_size=16384)
    burst = bytes(sealer.take_header()) + bytes(sealer.seal(b"B" * 65536, flush=True))
    small = b"".join(bytes(sealer.seal(b"s" * 100, flush=True)) for _ in range(200)) + bytes(sealer.close())
    opener = Opener(KEY)
    opener.receive_data(bytearray(burst))
    out = bytearray(opener.read() or b"")
    ring = opener._ring
    assert ring is not None
    memory = ring.buf
    for start in range(0, len(small), 250):
        opener.receive_data(small[start : start + 250])
        while data := opener.read():
            out += data
        assert ring.buf is memory or opener.at_eof, "the ring released its memory and took it again"
    assert opener.at_eof and out == b"B" * 65536 + b"s" * 100 * 200


def test_record_numbers_count_from_zero_as_the_errors_docstring_says() -> None:
    """A new user read "record 0 failed" as "no record": the rule (record numbers count from 0,
    in messages and ``record_number``; armor lines from 1) is stated where the messages are
    documented, the errors module's docstring, and held here: the first record after the
    header is record 0, the third record 2."""
    import gcmstream.errors

    rules = " ".join((gcmstream.errors.__doc__ or "").split())
    assert "Record numbers count from 0, in messages" in rules
    assert "(``ArmorError.line``) count from 1" in rules
    wire = seal_stream([b"a" * 21], record_size=7)  # records 0, 1, 2, then FINAL
    for index in (0, 2):
        broken = bytearray(wire)
        broken[record_offset(index, 7) + RECORD_HEADER_SIZE] ^= 1
        opener = Opener(KEY)
        opener.receive_data(bytes(broken))
        released = b""
        with pytest.raises(AuthenticationError) as failed:
            for _ in range(10):
                released += opener.read(100) or b""
        assert failed.value.record_number == index
        assert str(failed.value).startswith(f"record {index} failed authentication")
        assert released == b"a" * 7 * index  # the records before it, numbered 0 to index - 1


def test_a_record_where_the_view_cache_holds_another_of_its_length_opens_from_its_own_bytes() -> None:
    """The ring's view cache has one slot per ``position % VIEW_SLOTS``, checked on position and
    length. A record of ciphertext length 40 at position 71 fills slot 9; the ring (fixed:
    ring_size is its limit and where it starts, so it keeps its memory and the cache) empties
    and starts again at 0, and the next input puts a record of length 40 at position 40, slot
    9 too: it opens from its own views, not the cached ones of position 71 (a cache that
    compared the cached length with the position took them: the valid record failed its tag)."""
    writes = [b"a" * 50, b"b" * 24, b"c" * 19, b"d" * 24]
    wire = seal_stream(writes, record_size=50, flush_after=True)
    starts = [start - HEADER_SIZE for start, _, _ in records(wire)]
    lengths = [wire_length - RECORD_HEADER_SIZE for _, _, wire_length in records(wire)]
    assert starts[:4] == [0, 71, 116, 156] and lengths[:4] == [66, 40, 35, 40]
    assert 71 % VIEW_SLOTS == 40 % VIEW_SLOTS
    cut = HEADER_SIZE + starts[2]
    opener = Opener(KEY, ring_size=1024)
    opener.receive_data(bytearray(wire[:cut]))  # copied: the records lie in the ring from 0
    assert opener.read() == writes[0] + writes[1]
    assert opener.read() is None  # the ring is empty: it starts again at 0
    opener.receive_data(bytearray(wire[cut:]))
    assert opener.read() == writes[2] + writes[3]
    assert opener.read() == b""


def test_peek_that_finds_the_end_has_closed_the_final_record_and_the_ring_let_its_memory_go() -> None:
    """``peek()`` that returns the end (empty) has closed the empty FINAL record: the ring,
    empty then, let its memory go at once (ring.py, "memory that follows use": a message's
    4 KiB), not at a later call that a reader done with the stream may never make (a peek
    that stopped at the FINAL record kept it, 21 bytes, and the ring's 4,096)."""
    opener = Opener(KEY)
    opener.receive_data(bytearray(seal_stream([b"hello"], record_size=64, flush_after=True)))
    view = opener.peek()
    assert view is not None and bytes(view) == b"hello"
    opener.consume(5)
    view = opener.peek()
    assert view is not None and len(view) == 0 and opener.at_eof
    ring = opener._ring
    assert ring is not None and ring.stored == 0 and ring.capacity == 0


def test_consume_before_anything_was_peeked_has_nothing_to_consume() -> None:
    """A new opener's read position is an empty current record: ``consume(0)`` is a no-op and
    more is OutOfRangeError (0 available), as after a record was read (a position of None made
    both TypeError, outside the error tree)."""
    opener = Opener(KEY)
    opener.consume(0)
    with pytest.raises(OutOfRangeError, match="cannot consume 1 bytes: 0 available"):
        opener.consume(1)
    assert opener.find(b"") == -1
    opener.receive_data(seal_stream([b"abc"]))
    assert opener.read() == b"abc"


def test_a_bad_length_found_while_a_record_is_read_from_the_ring_names_the_next_record() -> None:
    """``_Input._head_number`` while record 0 is being read from the ring (opened, counted, its
    plaintext part read): a bad length after it, copied into the ring, is record 1's, not 0 or
    2 or 3 (mutation run of 2026-12-05, mop5: the correction for the current record dropped,
    doubled, or added)."""
    wire = seal_stream([b"abcdefghijklmnopqrstu"], record_size=7)
    record = RECORD_HEADER_SIZE + 7 + TAG_SIZE
    opener = Opener(KEY)
    opener.receive_data(bytearray(wire[: HEADER_SIZE + record]))  # (a copy: into the ring)
    assert opener.read(3) == b"abc"
    bad = bytearray(wire[HEADER_SIZE + record : HEADER_SIZE + record + RECORD_HEADER_SIZE])
    bad[1:5] = (TAG_SIZE - 13).to_bytes(4, "big")
    opener.receive_data(bad)
    assert opener.read() == b"defg"
    with pytest.raises(MalformedRecordError, match="record 1 has length 3") as refused:
        opener.read()
    assert refused.value.record_number == 1
