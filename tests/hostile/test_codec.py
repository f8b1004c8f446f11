"""Tamper and truncation matrix on the sans-IO codec, and the replay of tests/vectors/invalid/.

Every case feeds a damaged stream to a fresh reader and checks two things: the error is the one
the format documents for that damage (gcmstream.errors), and the plaintext released before it is
exactly the plaintext of the records that authenticated before the damage (compared by
released-prefix hash, as age's CCTV corpus does). Streams: a one-way stream of several records
with a key update in the middle, and both directions of a duplex Channel.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gcmstream import (
    AuthenticationError,
    DowngradeError,
    GcmStreamError,
    HandshakeError,
    KeyCommitmentError,
    MalformedHeaderError,
    MalformedRecordError,
    Opener,
    PeerIdentityError,
    ProtocolError,
    RecordTooLargeError,
    Role,
    RoleMismatchError,
    Sealer,
    StreamBrokenError,
    TrailingDataError,
    TruncatedStreamError,
    UnknownFieldError,
    UnknownKeyError,
    UnsupportedFormatError,
)
from gcmstream.format import (
    DEFAULT_MAX_RECORD_SIZE,
    FLAG_FINAL,
    FLAG_KEY_UPDATE,
    HARD_MAX_RECORD_SIZE,
    HEADER_SIZE,
    MAX_FIELDS_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TAG_SIZE,
)
from gcmstream.header import HeaderSpec

from ..helpers import CONTEXT, KEY, fixed_channel, forge, handshake_bytes, vector_channel

VECTORS = Path(__file__).parent.parent / "vectors" / "invalid"

RECORD_SIZE = 24
SALT = b"\x11" * 32
OTHER_SALT = b"\x22" * 32
RESPONDER_SALT = b"\x33" * 32
INITIATOR_SALT = b"\x44" * 32

MakeOpener = Callable[[], Opener]


# -- streams under test ------------------------------------------------------------------------


@dataclass
class Stream:
    """A valid stream cut into its parts, and how to build a fresh reader for it."""

    name: str
    header: bytes
    records: list[bytes]
    plaintexts: list[bytes]
    make_opener: MakeOpener
    role: Role  # the role byte in ``header``

    @property
    def wire(self) -> bytes:
        return self.header + b"".join(self.records)

    def plain(self, count: int | None = None) -> bytes:
        return b"".join(self.plaintexts if count is None else self.plaintexts[:count])

    def record_starts(self) -> list[int]:
        starts, pos = [], len(self.header)
        for record in self.records:
            starts.append(pos)
            pos += len(record)
        return starts


def split_records(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        _, length = RECORD_HEADER.unpack_from(data, pos)
        out.append(data[pos : pos + RECORD_HEADER_SIZE + length])
        pos += RECORD_HEADER_SIZE + length
    assert pos == len(data)
    return out


def write_records(sealer: Sealer) -> tuple[bytes, list[bytes]]:
    """Seal five records of distinct sizes with a key update in the middle; return the wire
    bytes after the header and each record's plaintext."""
    plaintexts = [bytes(range(i * 40, i * 40 + n)) for i, n in enumerate((24, 24, 9, 24, 5))]
    out = bytearray()
    out += sealer.seal(plaintexts[0])
    sealer.update_key()
    out += sealer.seal(plaintexts[1])
    out += sealer.seal(plaintexts[2])
    out += sealer.flush()
    out += sealer.seal(plaintexts[3])
    out += sealer.seal(plaintexts[4], final=True)
    return bytes(out), plaintexts


def one_way_stream() -> Stream:
    sealer = Sealer(KEY, context=CONTEXT, record_size=RECORD_SIZE, header_spec=HeaderSpec(salt=SALT))
    sealer.take_header()
    body, plaintexts = write_records(sealer)
    records = split_records(body)
    assert [r[0] for r in records] == [0, FLAG_KEY_UPDATE, 0, 0, FLAG_FINAL]
    return Stream(
        "one-way",
        sealer.header,
        records,
        plaintexts,
        lambda: Opener(KEY, context=CONTEXT),
        Role.ONE_WAY,
    )


def channel_stream(sender_role: Role) -> Stream:
    """What one side of a channel sends (its handshake bytes, then records), and a factory for
    the other side, which repeats the same deterministic handshake (tests/helpers.py)."""
    receiver_role = sender_role.peer
    options = {"context": CONTEXT, "record_size": RECORD_SIZE}
    sender = fixed_channel(KEY, sender_role, **options)
    receiver = fixed_channel(KEY, receiver_role, **options)
    initiator, responder = (sender, receiver) if sender_role is Role.INITIATOR else (receiver, sender)
    sent = handshake_bytes(initiator, responder)
    handshake = sent[0] if sender_role is Role.INITIATOR else sent[1]
    body, plaintexts = write_records(sender.sealer)

    def make_opener() -> Opener:
        fresh = fixed_channel(KEY, receiver_role, **options)
        fresh.initial_data()  # (its answers go nowhere; the opener's hooks keep it alive)
        return fresh.opener

    return Stream(
        f"channel-{sender_role.name.lower()}",
        handshake,
        split_records(body),
        plaintexts,
        make_opener,
        sender_role,
    )


STREAMS = [one_way_stream(), channel_stream(Role.INITIATOR), channel_stream(Role.RESPONDER)]
STREAM_IDS = [s.name for s in STREAMS]


# -- reading -----------------------------------------------------------------------------------

# "ring-readinto-big" feeds mutable copies, so every record is opened from the ring (its own
# hot path), the others feed bytes, which whole records are opened from where they lie.
STYLES = ("read", "read7", "readinto", "peek", "readinto-big", "ring-readinto-big")
FILL = 0xEE  # no plaintext in these tests contains this byte
FILLED = bytes([FILL]) * 4096
UNTOUCHED = bytes([FILL, 0])  # what the caller's buffer may hold where nothing was released


def run(
    make_opener: MakeOpener, data: bytes, chunk: int = 0, style: str = "read"
) -> tuple[bytes, ProtocolError | None]:
    """Feed ``data`` in ``chunk``-byte pieces (all at once if 0), reading all that is ready after
    each piece, then EOF. Return the released plaintext and the protocol error, if any."""
    opener = make_opener()
    released = bytearray()
    buffer = bytearray(11)
    big = bytearray(FILLED)

    def step() -> bytes | None:
        if style == "read":
            return opener.read()
        if style == "read7":
            return opener.read(7)
        if style == "readinto":
            n = opener.readinto(buffer)
            return None if n is None else bytes(buffer[:n])
        if style.endswith("readinto-big"):  # whole records are decrypted straight into this buffer
            if big != FILLED:
                big[:] = FILLED
            try:
                n = opener.readinto(big)
            except ProtocolError:
                leaked = big.translate(None, UNTOUCHED)
                assert not leaked, "unauthenticated plaintext left in the caller's buffer"
                raise
            assert not big[n or 0 :].translate(None, UNTOUCHED), "bytes written past the count returned"
            return None if n is None else bytes(big[:n])
        view = opener.peek()
        if view is None:
            return None
        got = bytes(view[:13])
        opener.consume(len(got))
        return got

    def drain() -> bool:
        while True:
            got = step()
            if got is None:
                return False
            if not got:
                return True
            released.extend(got)

    error: ProtocolError | None = None
    try:
        size = chunk or max(len(data), 1)
        for start in range(0, len(data), size):
            piece = data[start : start + size]
            opener.receive_data(bytearray(piece) if style.startswith("ring") else piece)
            drain()
        opener.receive_eof()
        assert drain(), "EOF given, but the opener still wants input"
    except ProtocolError as exc:
        error = exc
    if error is not None:  # failed for good: every later call says so, and releases nothing
        with pytest.raises(StreamBrokenError) as broken:
            opener.read()
        assert broken.value.original is error
        with pytest.raises(StreamBrokenError):
            opener.peek()
    return bytes(released), error


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(
    stream: Stream,
    data: bytes,
    error: type[ProtocolError],
    authenticated: int,
    *,
    record_number: int | None = None,
    chunks: tuple[int, ...] = (0, 1, 7),
    may_release_final: bool = False,
) -> None:
    """``data`` must fail with ``error`` after releasing exactly the first ``authenticated``
    records, whatever the chunking and the reading style. With ``may_release_final`` (faults
    after an authenticated FINAL), a reader fed in pieces may also release the FINAL record."""
    for index, chunk in enumerate(chunks):
        style = STYLES[(index + len(data)) % len(STYLES)]
        released, exc = run(stream.make_opener, data, chunk, style)
        assert isinstance(exc, error), f"chunk {chunk}, {style}: expected {error.__name__}, got {exc!r}"
        if record_number is not None:
            assert isinstance(exc, AuthenticationError)
            assert exc.record_number == record_number
        allowed = {sha(stream.plain(authenticated))}
        if may_release_final and chunk:
            allowed.add(sha(stream.plain()))
        assert sha(released) in allowed, (
            f"chunk {chunk}, {style}: released {len(released)} bytes, "
            f"expected the {len(stream.plain(authenticated))}-byte authenticated prefix"
        )


# -- the matrix --------------------------------------------------------------------------------


def expected_for_flip(
    stream: Stream, offset: int, flipped: int
) -> tuple[type[ProtocolError], int, int | None]:
    """(error, records authenticated before it, record number for AuthenticationError)."""
    header = stream.header  # a channel's: its header, then its Finished
    hello_size = 62 + int.from_bytes(header[60:62], "big") + 32
    if hello_size <= offset < len(header):
        return HandshakeError, 0, None  # Finished does not confirm the keys
    if offset < len(header):  # offsets of docs/FORMAT.md 4.1
        role, exchange = header[5], header[7]
        if offset < 5:  # magic, version
            return UnsupportedFormatError, 0, None
        if offset == 5:
            if flipped > 2 or (flipped == 0) != (exchange == 0):
                return UnsupportedFormatError, 0, None
            return RoleMismatchError, 0, None  # another defined role than the sender's
        if offset == 6:  # suite: the other defined suite does not match the key
            return (UnsupportedFormatError if flipped > 2 or not flipped else KeyCommitmentError), 0, None
        if offset == 7:  # key exchange
            if flipped > 2 or (role == 0) != (flipped == 0):
                return UnsupportedFormatError, 0, None
            return KeyCommitmentError, 0, None
        if offset < 12:
            raw = bytearray(header[8:12])
            raw[offset - 8] = flipped
            size = int.from_bytes(raw, "big")
            if not 1 <= size <= HARD_MAX_RECORD_SIZE:
                return UnsupportedFormatError, 0, None
            if size > DEFAULT_MAX_RECORD_SIZE:
                return RecordTooLargeError, 0, None
        elif offset < 28:
            return UnknownKeyError, 0, None
        elif 60 <= offset < 62:
            raw = bytearray(header[60:62])
            raw[offset - 60] = flipped
            fields_length = int.from_bytes(raw, "big")
            if fields_length > MAX_FIELDS_SIZE:
                return UnsupportedFormatError, 0, None
            if 62 + fields_length + 32 > len(stream.wire):
                return TruncatedStreamError, 0, None
        return KeyCommitmentError, 0, None
    starts = stream.record_starts()
    number = max(i for i, s in enumerate(starts) if s <= offset)
    rel = offset - starts[number]
    if 1 <= rel < RECORD_HEADER_SIZE:
        raw = bytearray(stream.records[number][1:RECORD_HEADER_SIZE])
        raw[rel - 1] = flipped
        length = int.from_bytes(raw, "big")
        if length > RECORD_SIZE + TAG_SIZE:
            return RecordTooLargeError, number, None
        if length < TAG_SIZE:
            return MalformedRecordError, number, None
        if starts[number] + RECORD_HEADER_SIZE + length > len(stream.wire):
            return TruncatedStreamError, number, None
    return AuthenticationError, number, number


# `make test` flips every byte's bits (marked slow); `make check` the edges (the first and last
# byte of the header and of the stream, every record's first and last byte) and a sample of the
# other bytes, seeded by the stream's name so that a failure repeats.
FLIPS = [pytest.param(False, id="sampled-bytes"), pytest.param(True, id="every-byte", marks=pytest.mark.slow)]
SAMPLED_BYTES = 64


def flip_offsets(stream: Stream, every: bool) -> list[int]:
    offsets = range(len(stream.wire))
    if every:
        return list(offsets)
    starts = stream.record_starts()
    ends = [start + len(record) - 1 for start, record in zip(starts, stream.records, strict=True)]
    edges = {0, len(stream.header) - 1, len(stream.wire) - 1, *starts, *ends}
    rest = [offset for offset in offsets if offset not in edges]
    return sorted(edges | set(random.Random(stream.name).sample(rest, min(SAMPLED_BYTES, len(rest)))))


@pytest.mark.parametrize("every", FLIPS)
@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
def test_every_bit_flip(stream: Stream, every: bool) -> None:
    """Flip each of the 8 bits of every byte: header, record headers, ciphertext, tags."""
    wire = stream.wire
    offsets = flip_offsets(stream, every)
    cases = 0
    for offset, bit in itertools.product(offsets, range(8)):
        data = bytearray(wire)
        data[offset] ^= 1 << bit
        error, authenticated, number = expected_for_flip(stream, offset, data[offset])
        # all at once, and in pieces whose size varies with the position; byte by byte (the
        # slow way) for one bit of each byte. In the handshake bytes (a channel's are ~170) the
        # other bits only all at once: the checks there do not depend on how bytes arrive.
        if bit == offset % 8:
            chunks: tuple[int, ...] = (0, 1, 2 + offset % 13)
        else:
            chunks = (0,) if offset < len(stream.header) else (0, 2 + offset % 13)
        check(stream, bytes(data), error, authenticated, record_number=number, chunks=chunks)
        cases += 1
    assert cases == 8 * len(offsets)


@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
def test_truncation_at_every_offset(stream: Stream) -> None:
    wire = stream.wire
    ends = [s + len(r) for s, r in zip(stream.record_starts(), stream.records, strict=True)]
    for cut in range(len(wire)):
        whole = sum(1 for end in ends if end <= cut)
        check(stream, wire[:cut], TruncatedStreamError, whole, chunks=(0, 1 + cut % 11))
    released, exc = run(stream.make_opener, wire, 3)
    assert exc is None
    assert released == stream.plain()


@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
def test_dropped_records(stream: Stream) -> None:
    r = stream.records
    last = len(r) - 1
    for i in range(last):
        check(stream, stream.header + b"".join(r[:i] + r[i + 1 :]), AuthenticationError, i, record_number=i)
    check(stream, stream.header + b"".join(r[:last]), TruncatedStreamError, last)
    check(stream, stream.header + b"".join(r[1:3]), AuthenticationError, 0, record_number=0)


@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
def test_duplicated_records(stream: Stream) -> None:
    r = stream.records
    last = len(r) - 1
    for i in range(last):
        data = stream.header + b"".join([*r[: i + 1], r[i], *r[i + 1 :]])
        check(stream, data, AuthenticationError, i + 1, record_number=i + 1)
    data = stream.header + b"".join([*r, r[last]])
    check(stream, data, TrailingDataError, last, may_release_final=True)
    # the whole stream twice
    check(stream, stream.wire + b"".join(r), TrailingDataError, last, may_release_final=True)


@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
def test_every_reordering(stream: Stream) -> None:
    """All 120 orders of the five records: the first misplaced record fails to authenticate."""
    r = stream.records
    for order in itertools.permutations(range(len(r))):
        if list(order) == sorted(order):
            continue
        first = next(k for k, i in enumerate(order) if k != i)
        data = stream.header + b"".join(r[i] for i in order)
        check(stream, data, AuthenticationError, first, record_number=first, chunks=(0, 5))


@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
def test_spliced_from_another_stream(stream: Stream) -> None:
    """Records of another stream under the same key and context (another salt)."""
    if stream.role is Role.ONE_WAY:
        other = Sealer(KEY, context=CONTEXT, record_size=RECORD_SIZE, header_spec=HeaderSpec(salt=OTHER_SALT))
        other_header = other.take_header()
        other_records = split_records(write_records(other)[0])
    else:
        sender = fixed_channel(KEY, stream.role, context=CONTEXT, record_size=RECORD_SIZE, salt=OTHER_SALT)
        peer = fixed_channel(KEY, stream.role.peer, context=CONTEXT, record_size=RECORD_SIZE)
        pair = (sender, peer) if stream.role is Role.INITIATOR else (peer, sender)
        other_header = handshake_bytes(*pair)[0 if stream.role is Role.INITIATOR else 1]
        other_records = split_records(write_records(sender.sealer)[0])
    r = stream.records
    assert len(other_records) == len(r)
    for i in range(len(r)):
        data = stream.header + b"".join([*r[:i], other_records[i], *r[i + 1 :]])
        check(stream, data, AuthenticationError, i, record_number=i)
    # the other stream's header with our records, our header with its records
    check(stream, other_header + b"".join(r), AuthenticationError, 0, record_number=0)
    check(stream, stream.header + b"".join(other_records), AuthenticationError, 0, record_number=0)


@pytest.mark.parametrize("stream", STREAMS, ids=STREAM_IDS)
@pytest.mark.parametrize(
    "trailer",
    [
        b"\x00",
        b"\x01\x02\x03\x04",
        b"\x00\x00\x00\x00\x15" + bytes(21),  # looks like a record
        RECORD_HEADER.pack(0, 0xFFFFFFFF),
        bytes(100),
        bytes(range(256)) * 300,  # 75 KiB: more than the ring holds
    ],
    ids=["1", "4", "fake-record", "huge-length", "100-zeros", "75KiB"],
)
def test_trailing_bytes(stream: Stream, trailer: bytes) -> None:
    check(stream, stream.wire + trailer, TrailingDataError, len(stream.records) - 1, may_release_final=True)


def test_trailing_valid_records_longer_than_the_ring() -> None:
    """After FINAL, 200 KiB of correctly framed records from another stream."""
    stream = STREAMS[0]
    other = Sealer(KEY, context=CONTEXT, record_size=RECORD_SIZE, header_spec=HeaderSpec(salt=OTHER_SALT))
    other.take_header()
    trailer = bytes(other.seal(bytes(200 * 1024)))
    check(stream, stream.wire + trailer, TrailingDataError, 4, may_release_final=True)


# -- records that authenticate but break the rules ---------------------------------------------


def forged_stream(records: list[tuple[int, bytes]]) -> tuple[Stream, bytes]:
    data, plaintexts = forge(records)
    stream = Stream("forged", data[:HEADER_SIZE], [], plaintexts, STREAMS[0].make_opener, Role.ONE_WAY)
    return stream, data


@pytest.mark.parametrize(
    ("records", "error", "authenticated", "final_first"),
    [
        # FINAL in the middle, then more correctly sealed records
        (
            [(0, b"a" * 24), (FLAG_FINAL, b"b" * 3), (0, b"c" * 24), (FLAG_FINAL, b"")],
            TrailingDataError,
            1,
            True,
        ),
        # FINAL first
        ([(FLAG_FINAL, b"only"), (FLAG_FINAL, b"again")], TrailingDataError, 0, True),
        # two FINALs at the end
        ([(0, b"x" * 24), (FLAG_FINAL, b"y"), (FLAG_FINAL, b"z")], TrailingDataError, 1, True),
        # the stream ends right after a key update (and after two in a row)
        ([(0, b"x" * 24), (FLAG_KEY_UPDATE, b"y" * 24)], TruncatedStreamError, 2, False),
        ([(FLAG_KEY_UPDATE, b""), (FLAG_KEY_UPDATE, b"")], TruncatedStreamError, 2, False),
        ([(FLAG_FINAL | FLAG_KEY_UPDATE, b"both")], MalformedRecordError, 0, False),
        ([(0, b"x"), (0x04, b"y"), (FLAG_FINAL, b"")], MalformedRecordError, 1, False),
        ([(0, b"x"), (0xFF, b"y"), (FLAG_FINAL, b"")], MalformedRecordError, 1, False),
        ([(0, b"x" * 24), (FLAG_FINAL, b"y" * 25)], RecordTooLargeError, 1, False),
    ],
    ids=[
        "final-in-middle",
        "final-first",
        "two-finals",
        "ends-after-key-update",
        "ends-after-two-key-updates",
        "final-and-key-update",
        "unknown-flag",
        "all-flags",
        "sealed-over-record-size",
    ],
)
def test_authenticated_records_breaking_rules(
    records: list[tuple[int, bytes]], error: type[ProtocolError], authenticated: int, final_first: bool
) -> None:
    stream, data = forged_stream(records)
    # a reader fed in pieces may release the FINAL record before it sees what follows
    if final_first:
        stream.plaintexts = stream.plaintexts[: authenticated + 1]
    check(stream, data, error, authenticated, chunks=(0, 1, 9), may_release_final=final_first)


def test_empty_and_key_update_only_streams_are_valid() -> None:
    for records in ([(FLAG_FINAL, b"")], [(FLAG_KEY_UPDATE, b""), (0, b""), (FLAG_FINAL, b"")]):
        stream, data = forged_stream(records)
        for chunk in (0, 1):
            released, exc = run(stream.make_opener, data, chunk)
            assert exc is None
            assert released == b""


# -- the vector files --------------------------------------------------------------------------

VECTOR_FILES = sorted(VECTORS.glob("*.json"))
ERRORS: dict[str, type[GcmStreamError]] = {
    cls.__name__: cls
    for cls in (
        AuthenticationError,
        DowngradeError,
        HandshakeError,
        KeyCommitmentError,
        MalformedHeaderError,
        MalformedRecordError,
        PeerIdentityError,
        RecordTooLargeError,
        RoleMismatchError,
        TrailingDataError,
        TruncatedStreamError,
        UnknownFieldError,
        UnknownKeyError,
        UnsupportedFormatError,
    )
}


def vector_opener(case: dict[str, object]) -> MakeOpener:
    key = bytes.fromhex(str(case["key"]))
    context = bytes.fromhex(str(case["context"]))

    def make() -> Opener:
        if case["mode"] != "one-way":
            return vector_channel(case).opener  # (its hooks keep the channel alive)
        limit = case.get("max_record_size")
        return Opener(key, context=context, max_record_size=int(str(limit or DEFAULT_MAX_RECORD_SIZE)))

    return make


def test_vector_directory_is_complete() -> None:
    assert len(VECTOR_FILES) >= 128
    names = {json.loads(p.read_text())["expect"] for p in VECTOR_FILES}
    assert names == set(ERRORS)
    assert all(issubclass(error, ProtocolError) for error in ERRORS.values())  # none is a usage error
    stems = {p.stem for p in VECTOR_FILES}  # the cases cut from valid.json's stream are here too
    assert {"valid_stream_trailing_byte", "hand_sealed_old_key_after_key_update"} <= stems
    # the initiator's side of a channel, as data too (FORMAT.md 5.2: H10 with the offered key,
    # K1, K2, K8, K9, a reflected header, a cut answer)
    modes = {json.loads(p.read_text())["mode"] for p in VECTOR_FILES}
    assert modes == {"one-way", "channel", "channel-initiator"}
    assert {
        f"channel_initiator_{name}"
        for name in (
            "answer_under_another_key_of_its_ring",
            "downgrade",
            "hybrid_label_without_mlkem",
            "hybrid_label_without_mlkem_to_x25519_offer",
            "mlkem_ciphertext_too_short",
            "low_order_x25519_share",
            "flipped_finished",
            "reflected",
            "answer_cut",
        )
    } <= stems


@pytest.mark.parametrize("path", VECTOR_FILES, ids=[p.stem for p in VECTOR_FILES])
def test_invalid_vector(path: Path) -> None:
    case = json.loads(path.read_text())
    data = bytes.fromhex(case["input"])
    plaintext = bytes.fromhex(case["plaintext"])
    assert len(data) == case["input_length"]
    assert sha(plaintext) == case["plaintext_sha256"]
    error = ERRORS[case["expect"]]
    make = vector_opener(case)
    for chunk, style in (
        (0, "read"),
        (1, "peek"),
        (5, "readinto"),
        (64, "read7"),
        (0, "readinto-big"),
        (7, "readinto-big"),
        (0, "ring-readinto-big"),
        (7, "ring-readinto-big"),
    ):
        released, exc = run(make, data, chunk, style)
        assert type(exc) is error, f"chunk {chunk}: {exc!r}"
        assert plaintext.startswith(released)
        if chunk == 0 or error is not TrailingDataError:
            assert len(released) == case["released_length"]
            assert sha(released) == case["released_sha256"]
        else:  # pieces: the FINAL record may be released before the trailing bytes arrive
            assert sha(released[: case["released_length"]]) == case["released_sha256"]


def test_vector_generator_is_in_sync() -> None:
    script = VECTORS / "generate.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
