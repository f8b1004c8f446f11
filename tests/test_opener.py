"""The Opener's phases, its one error slot, and opening records where they lie.

``bytes`` (and read-only views) are held by reference and whole records in them are opened in
place; mutable input is copied; a record split across inputs is copied into the ring. These
tests pin what a caller can observe of that: memory, values, errors, and that nothing
unauthenticated ever lands in the caller's buffer.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest

from gcmstream import (
    AuthenticationError,
    GcmStreamError,
    KeyLimits,
    MalformedRecordError,
    Opener,
    OutOfRangeError,
    Sealer,
    StreamBrokenError,
    TrailingDataError,
    TruncatedStreamError,
    UnsupportedBufferError,
)
from gcmstream.codec import Phase
from gcmstream.format import (
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
)

from .hostile.test_codec import CONTEXT, forge
from .test_codec import KEY, records, seal_stream, tampered, wants_data
from .test_codec_limits import feed_zero_copy

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


@pytest.mark.parametrize("tail", [0, 1000], ids=["empty-final", "short-final"])
def test_whole_records_in_bytes_open_without_a_ring(tail: int) -> None:
    """10 MiB of whole records fed as bytes and read into the caller's buffer: nothing is
    copied into a ring (which would be 256 KiB here), so the reader allocates almost nothing.
    A short FINAL record (it carries flags, so the run loop leaves it to the general step) is
    decrypted straight into the buffer too (kills that step being given no target)."""
    plaintext = random.Random(1).randbytes(10 * 1024 * 1024 + tail)
    wire = seal_stream([plaintext], record_size=64 * 1024)
    out = bytearray(len(plaintext) + 1)
    tracemalloc.start()
    try:
        opener = Opener(KEY)
        opener.receive_data(wire)
        opener.receive_eof()
        got = opener.readinto(out)
        assert opener.readinto(memoryview(out)[len(plaintext) :]) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == len(plaintext)
    assert out[:got] == plaintext
    assert peak < 32 * 1024, f"reading whole records from bytes allocated {peak} bytes"


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
    with pytest.raises(TruncatedStreamError, match="inside a record after 1 record, without"):
        opener.read()


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
