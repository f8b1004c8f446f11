"""The sans-IO codec: Sealer, Opener and Channel.

Parser tests feed each input three ways (h11's rule): all at once, byte by byte (the opener must
answer "need more" and never "end" before the last byte) and with trailing data (which must
raise TrailingDataError and never come out as plaintext). Each way is run with copying input
(``receive_data``) and with zero-copy input (``get_buffer``/``buffer_updated``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from cryptography.exceptions import InvalidTag

from gcmstream import (
    AuthenticationError,
    BufferFullError,
    Channel,
    GcmStreamError,
    HandshakeError,
    KeyCommitmentError,
    KeyLimits,
    LimitReachedError,
    MalformedRecordError,
    NotReadyError,
    Opener,
    ProtocolError,
    RecordTooLargeError,
    Role,
    RoleMismatchError,
    Sealer,
    StreamBrokenError,
    StreamClosedError,
    TrailingDataError,
    TruncatedStreamError,
    UsageError,
)
from gcmstream.format import (
    FINISHED_SIZE,
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HEADER_FIXED_SIZE,
    HEADER_SIZE,
    MAGIC,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
)
from gcmstream.testing import run_handshake

from .helpers import handshake_bytes

KEY = bytes(range(16))
KEY256 = bytes(range(32))
JUNK = b"\x00trailing junk"

FEEDS = ["copy", "zero-copy"]
WAYS = ["all", "bytewise", "trailing"]


# -- helpers ---------------------------------------------------------------------------------


def seal_stream(
    writes: list[bytes],
    *,
    record_size: int = 7,
    key: bytes = KEY,
    context: bytes = b"",
    flush_after: bool = False,
    limits: KeyLimits | None = None,
) -> bytes:
    sealer = Sealer(key, context=context, record_size=record_size, limits=limits)
    out = bytearray()
    for data in writes:
        out += sealer.seal(data)
        if flush_after:
            out += sealer.flush()
    out += sealer.close()
    return bytes(out)


def records(wire: bytes) -> Iterator[tuple[int, int, int]]:
    """(start, flags, wire length) of each record of a valid stream."""
    pos = HEADER_SIZE
    while pos < len(wire):
        flags, length = RECORD_HEADER.unpack_from(wire, pos)
        yield pos, flags, RECORD_HEADER_SIZE + length
        pos += RECORD_HEADER_SIZE + length


def drain(opener: Opener, out: bytearray) -> bool:
    """Read everything that is ready into ``out``; True if the authenticated end was reached."""
    while True:
        got = opener.read()
        if got is None:
            return False
        if not got:
            return True
        out += got


def feed(opener: Opener, chunk: bytes, how: str, out: bytearray) -> None:
    """Give ``chunk`` to the opener, reading whenever it has no room (as an adapter would)."""
    if how == "copy":
        opener.receive_data(chunk)
        return
    pos = 0
    while pos < len(chunk):
        room = opener.get_buffer()
        if not room:
            before = len(out)
            drain(opener, out)
            room = opener.get_buffer()
            if not room:
                if len(out) == before:  # no room and nothing to read: only a failed opener
                    opener.read()  # raises the error that stops input
                    raise AssertionError("deadlock: opener offers no room and has nothing to read")
                continue
        count = min(len(room), len(chunk) - pos)
        room[:count] = chunk[pos : pos + count]
        opener.buffer_updated(count)
        pos += count


@dataclass
class Outcome:
    plaintext: bytes
    error: GcmStreamError | None
    ended_at: int | None  # index of the chunk after which the end was first reported


def chunks_for(data: bytes, way: str) -> list[bytes]:
    if way == "all":
        return [data]
    if way == "bytewise":
        return [data[i : i + 1] for i in range(len(data))]
    if way == "trailing":
        return [data + JUNK]
    raise AssertionError(way)


def run(
    data: bytes, way: str, how: str, make: Callable[[], Opener] = lambda: Opener(KEY), eof: bool = True
) -> Outcome:
    opener = make()
    out = bytearray()
    ended_at: int | None = None
    chunks = chunks_for(data, way)
    try:
        for index, chunk in enumerate(chunks):
            feed(opener, chunk, how, out)
            if drain(opener, out) and ended_at is None:
                ended_at = index
        if eof:
            opener.receive_eof()
        if drain(opener, out) and ended_at is None:
            ended_at = len(chunks)
    except GcmStreamError as exc:
        error: GcmStreamError | None = exc
    else:
        return Outcome(bytes(out), None, ended_at)
    assert isinstance(error, ProtocolError), f"{type(error).__name__} is not a protocol error"
    # After the error, everything raises StreamBrokenError (or, once, the error itself).
    with pytest.raises(GcmStreamError):
        opener.read()
    with pytest.raises(StreamBrokenError) as broken:
        opener.read()
    assert broken.value.original is error
    assert broken.value.__cause__ is error
    return Outcome(bytes(out), error, ended_at)


def check_valid(
    data: bytes, plaintext: bytes, way: str, how: str, make: Callable[[], Opener] = lambda: Opener(KEY)
) -> None:
    outcome = run(data, way, how, make)
    if way == "trailing":
        assert isinstance(outcome.error, TrailingDataError)
        assert plaintext.startswith(outcome.plaintext)
        assert JUNK not in outcome.plaintext
        return
    assert outcome.error is None
    assert outcome.plaintext == plaintext
    # The end is reported after the last byte and not before.
    last = len(chunks_for(data, way)) - 1
    assert outcome.ended_at in (last, last + 1)


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


# -- reading API semantics -------------------------------------------------------------------


def opened(writes: list[bytes], record_size: int = 7) -> Opener:
    opener = Opener(KEY)
    opener.receive_data(seal_stream(writes, record_size=record_size))
    return opener


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


def test_sealer_output_view_dies_at_the_next_call() -> None:
    sealer = Sealer(KEY, record_size=4, _salt=bytes(32))
    first = sealer.seal(b"abcd")
    kept = bytes(first)
    sealer.seal(b"efgh")
    with pytest.raises(ValueError, match="released"):
        bytes(first)
    # A detached output stays valid and is never written again.
    sealer = Sealer(KEY, record_size=4, _salt=bytes(32))
    out = sealer.seal(b"abcd")
    sealer.detach_output()
    assert len(sealer.seal(b"")) == 0  # nothing to seal: an empty view, also right after a detach
    sealer.seal(b"efgh")
    assert bytes(out) == kept


def wants_data(opener: Opener) -> bool:
    return opener.wants_data  # a call, so that mypy does not narrow the property across calls


def test_receive_data_while_backlog_waits_is_buffer_full() -> None:
    plaintext = random.Random(3).randbytes(300_000)
    wire = seal_stream([plaintext], record_size=16384)
    opener = Opener(KEY, ring_size=64 * 1024)
    opener.receive_data(wire[:200_000])  # more than the 64 KiB ring
    assert not wants_data(opener)
    with pytest.raises(BufferFullError) as info:
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


# -- failures are final ------------------------------------------------------------------------


def tampered(wire: bytes, offset: int, mask: int = 1) -> bytes:
    out = bytearray(wire)
    out[offset] ^= mask
    return bytes(out)


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
        sealer = Sealer(KEY, record_size=5, _salt=bytes(32))
        wire = bytes(sealer.seal(source)) + bytes(sealer.close())
        check_valid(wire, data.tobytes(), "all", "copy")


def test_pending_plaintext_survives_its_buffer_growing() -> None:
    """The pending-record buffer starts small and grows toward a record as plaintext waits in it;
    what waits is carried over (kills the carry-over being dropped)."""
    plaintext = random.Random(8).randbytes(9000)
    sealer = Sealer(KEY, record_size=16384)
    wire = bytearray(sealer.seal(plaintext[:3000]))
    wire += sealer.seal(plaintext[3000:6000])  # 6000 bytes wait: past the first 4096-byte buffer
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


# -- channel -----------------------------------------------------------------------------------


def handshake(**kwargs: object) -> tuple[Channel, Channel]:
    initiator = Channel(KEY, role=Role.INITIATOR, **kwargs)  # type: ignore[arg-type]
    responder = Channel(KEY, role=Role.RESPONDER, **kwargs)  # type: ignore[arg-type]
    assert not initiator.handshake_complete()
    run_handshake(initiator, responder)
    assert initiator.handshake_complete()
    assert responder.handshake_complete()
    return initiator, responder


def test_channel_both_directions() -> None:
    initiator, responder = handshake(record_size=10, context=b"app")
    responder.opener.receive_data(initiator.sealer.seal(b"ping from the initiator", flush=True))
    assert responder.opener.read() == b"ping from the initiator"
    initiator.opener.receive_data(responder.sealer.seal(b"pong from the responder", flush=True))
    assert initiator.opener.read() == b"pong from the responder"
    responder.opener.receive_data(initiator.sealer.close())
    initiator.opener.receive_data(responder.sealer.close())
    assert responder.opener.read() == b""
    assert initiator.opener.read() == b""


def test_channel_directions_use_different_keys() -> None:
    initiator, _responder = handshake(record_size=10)
    sent = bytes(initiator.sealer.seal(b"0123456789"))
    # Fed back to the initiator's own opener (reflection after the handshake): it cannot open.
    initiator.opener.receive_data(sent)
    with pytest.raises(AuthenticationError):
        initiator.opener.read()


def test_channel_replay_to_a_fresh_responder_fails() -> None:
    initiator = Channel(KEY, role=Role.INITIATOR, record_size=10)
    responder = Channel(KEY, role=Role.RESPONDER, record_size=10)
    handshake = handshake_bytes(initiator, responder)[0]
    sealed = bytes(initiator.sealer.seal(b"transfer 100 coins", flush=True))
    responder.opener.receive_data(sealed)
    assert responder.opener.read() == b"transfer 100 coins"
    fresh = Channel(KEY, role=Role.RESPONDER, record_size=10)
    fresh.initial_data()
    fresh.opener.receive_data(handshake + sealed)
    assert fresh.data_to_send()  # the header is genuine, so it answers with fresh keys...
    with pytest.raises(HandshakeError, match="key confirmation"):
        fresh.handshake_complete()  # ...which the recorded Finished does not confirm


def test_channel_reflection_fails() -> None:
    channel = Channel(KEY, role=Role.INITIATOR)
    channel.opener.receive_data(channel.initial_data())
    with pytest.raises(RoleMismatchError, match="reflected"):
        channel.handshake_complete()
    with pytest.raises(StreamBrokenError):
        channel.opener.read()


@pytest.mark.parametrize("role", [Role.INITIATOR, Role.RESPONDER])
def test_one_way_stream_fed_to_a_channel_fails(role: Role) -> None:
    channel = Channel(KEY, role=role)
    channel.opener.receive_data(seal_stream([b"one way"]))
    with pytest.raises(RoleMismatchError, match="ONE_WAY"):
        channel.opener.read()


def test_channel_stream_fed_to_a_one_way_opener_fails() -> None:
    channel = Channel(KEY, role=Role.INITIATOR)
    outcome = run(channel.initial_data(), "all", "copy", eof=False)
    assert isinstance(outcome.error, RoleMismatchError)


def test_channel_not_ready_before_the_peer_header() -> None:
    channel = Channel(KEY, role=Role.INITIATOR)
    sealer = channel.sealer
    calls: list[Callable[[], object]] = [lambda: sealer.seal(b"x"), sealer.flush, sealer.close]
    for call in calls:
        with pytest.raises(NotReadyError) as info:
            call()
        assert isinstance(info.value, RuntimeError)
    assert not channel.handshake_complete()
    # Nothing changed: the channel works once the handshake is done.
    peer = Channel(KEY, role=Role.RESPONDER)
    run_handshake(channel, peer)
    peer.opener.receive_data(channel.sealer.seal(b"x", final=True))
    assert peer.opener.read() == b"x"


def test_channel_closed_direction() -> None:
    initiator, responder = handshake()
    responder.opener.receive_data(initiator.sealer.close())
    with pytest.raises(StreamClosedError):
        initiator.sealer.seal(b"late")
    with pytest.raises(StreamClosedError):
        initiator.initial_data()  # the initial data was already taken
    assert responder.opener.read() == b""
    # The other direction is still open.
    initiator.opener.receive_data(responder.sealer.seal(b"still here", final=True))
    assert initiator.opener.read() == b"still here"


def test_channel_role_must_be_a_channel_role() -> None:
    with pytest.raises(ValueError, match=r"INITIATOR or Role\.RESPONDER"):
        Channel(KEY, role=Role.ONE_WAY)


def test_channel_wrong_context_fails_the_handshake() -> None:
    initiator = Channel(KEY, role=Role.INITIATOR, context=b"a")
    responder = Channel(KEY, role=Role.RESPONDER, context=b"b")
    responder.opener.receive_data(initiator.initial_data())
    with pytest.raises(KeyCommitmentError):
        responder.handshake_complete()
    assert responder.data_to_send() == b""  # it does not answer


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


def test_channel_data_to_send_gives_each_message_once_then_nothing() -> None:
    """What the adapters send while they read the peer's part of the handshake: the initiator's
    header first, the responder's header and Finished once that arrived, the initiator's
    Finished once those arrived (version 2's three messages, issue 10)."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    assert responder.data_to_send() == b""  # a responder speaks only once the initiator has
    header = initiator.data_to_send()
    assert header.startswith(MAGIC) and len(header) > HEADER_SIZE  # carries its key shares
    assert initiator.data_to_send() == b""
    responder.opener.receive_data(header)
    initiator.opener.receive_data(responder.data_to_send())
    assert initiator.handshake_complete() and not responder.handshake_complete()
    finished = initiator.data_to_send()
    assert len(finished) == FINISHED_SIZE
    responder.opener.receive_data(finished)
    assert responder.handshake_complete()
    assert responder.data_to_send() == b"" and initiator.data_to_send() == b""
    with pytest.raises(StreamClosedError):
        initiator.initial_data()  # taken once, by either name


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
