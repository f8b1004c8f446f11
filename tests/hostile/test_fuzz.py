"""Property-based fuzzing of the Opener (hypothesis), and allocation checks with tracemalloc.

Arbitrary bytes and arbitrary mutations of valid streams, fed in arbitrary pieces and read in
every style: only gcmstream's ProtocolErrors come out, reading always settles, released
plaintext is always a prefix of the true plaintext ending at a record boundary, and memory stays
bounded. The coverage-guided counterpart is fuzz/fuzz_opener.py (atheris).

Runs are derandomized so CI is deterministic; raise HOSTILE_FUZZ_EXAMPLES for a longer run.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcmstream import (
    KeyCommitmentError,
    Opener,
    ProtocolError,
    RecordTooLargeError,
    Role,
    Sealer,
    StreamBrokenError,
)
from gcmstream.format import HARD_MAX_RECORD_SIZE, HEADER_SIZE, RECORD_HEADER, RECORD_HEADER_SIZE
from gcmstream.header import HeaderSpec
from gcmstream.ring import DEFAULT_RING_SIZE

from ..helpers import KEY, fixed_channel, handshake_bytes

T = TypeVar("T")
KEY_256 = bytes(range(32, 64))
CONTEXT = b"hostile fuzz"
EXAMPLES = int(os.environ.get("HOSTILE_FUZZ_EXAMPLES", "1500"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class Valid:
    name: str
    wire: bytes
    plaintext: bytes
    boundaries: frozenset[int]  # cumulative plaintext lengths at record ends (and 0)
    key: bytes
    channel: bool  # the reader is the deterministic RESPONDER of tests/helpers.py, else one-way

    def opener(self) -> Opener:
        if not self.channel:
            return Opener(self.key, context=CONTEXT)
        channel = fixed_channel(self.key, Role.RESPONDER, context=CONTEXT, record_size=40)
        channel.initial_data()
        return channel.opener


def _record_ends(body: bytes | bytearray) -> frozenset[int]:
    """Plaintext offsets at which records end, read from the record headers."""
    ends, total, pos = {0}, 0, 0
    while pos < len(body):
        _, length = RECORD_HEADER.unpack_from(body, pos)
        total += length - 16
        ends.add(total)
        pos += RECORD_HEADER_SIZE + length
    return frozenset(ends)


def _valid_streams() -> list[Valid]:
    out = []
    for key, record_size, sizes in (
        (KEY, 40, [100, 3, 0, 77]),
        (KEY_256, 1000, [2500, 10]),
        (KEY, 16, [16, 16, 5]),
    ):
        sealer = Sealer(
            key,
            context=CONTEXT,
            record_size=record_size,
            header_spec=HeaderSpec(salt=bytes([record_size % 256]) * 32),
        )
        wire = bytearray(sealer.take_header())
        plain = bytearray()
        for i, n in enumerate(sizes):
            data = bytes((i * 31 + j) % 251 for j in range(n))
            plain += data
            wire += sealer.seal(data)
            if i == 1:
                sealer.update_key()
            wire += sealer.flush()
        wire += sealer.close()
        out.append(
            Valid(
                f"one-way-{record_size}",
                bytes(wire),
                bytes(plain),
                _record_ends(wire[HEADER_SIZE:]),
                key,
                False,
            )
        )
    initiator = fixed_channel(KEY, Role.INITIATOR, context=CONTEXT, record_size=40)
    responder = fixed_channel(KEY, Role.RESPONDER, context=CONTEXT, record_size=40)
    handshake = handshake_bytes(initiator, responder)[0]
    wire = bytearray(handshake)
    message = bytes(range(200))
    initiator.sealer.update_key()
    wire += initiator.sealer.seal(message[:90])
    wire += initiator.sealer.flush()
    wire += initiator.sealer.seal(message[90:], final=True)
    out.append(Valid("channel", bytes(wire), message, _record_ends(wire[len(handshake) :]), KEY, True))
    return out


VALID = _valid_streams()


def feed(opener: Opener, data: bytes, chunks: list[int], style: int) -> tuple[bytes, ProtocolError | None]:
    """Feed ``data`` in pieces of the given sizes (cycled), read after each, then EOF.

    ``style % 4`` picks the read call; ``style >= 4`` feeds through the zero-copy path
    (get_buffer/buffer_updated, as the asyncio protocol does) instead of receive_data."""
    released = bytearray()
    buffer = bytearray(9 if style < 4 else 5000)  # large: whole records decrypted straight in
    ended = False
    zero_copy = style >= 4
    style %= 4

    def drain() -> None:
        nonlocal ended
        for _ in range(len(data) + 16):  # bounded: every turn releases a byte or stops
            if style == 0:
                got = opener.read()
            elif style == 1:
                got = opener.read(13)
            elif style == 2:
                n = opener.readinto(buffer)
                got = None if n is None else bytes(buffer[:n])
            else:
                view = opener.read_view()
                got = None if view is None else bytes(view)
            if got is None:
                return
            if not got:
                ended = True
                return
            released.extend(got)
        raise AssertionError("reading did not settle")

    def put(piece: bytes) -> None:
        done = 0
        for _ in range(len(piece) + 16):  # bounded: every turn commits a byte, or raises
            if done == len(piece):
                return
            view = opener.get_buffer()
            if not view:
                drain()  # frees ring space, or raises the error that stopped the input
                view = opener.get_buffer()
                assert view, "the ring refuses input although the opener is healthy and drained"
            count = min(len(view), len(piece) - done)
            view[:count] = piece[done : done + count]
            feeding(opener.buffer_updated, count)
            done += count
        raise AssertionError("feeding did not settle")

    try:
        pos, index = 0, 0
        while pos < len(data):
            size = chunks[index % len(chunks)] if chunks else len(data)
            if zero_copy:
                put(data[pos : pos + size])
            else:
                feeding(opener.receive_data, data[pos : pos + size])
            pos, index = pos + size, index + 1
            drain()
        feeding(lambda _: opener.receive_eof(), None)
        drain()
        assert ended, "EOF given, but the opener neither ended nor failed"
        assert opener.at_eof
    except ProtocolError as exc:
        with pytest.raises(StreamBrokenError):
            opener.read()
        return bytes(released), exc
    return bytes(released), None


def feeding(call: Callable[[T], None], argument: T) -> None:
    """Feeding never raises a ProtocolError (the codec's promise): errors wait for a read."""
    try:
        call(argument)
    except ProtocolError as exc:
        raise AssertionError(f"feeding raised {exc!r}") from exc


chunk_lists = st.lists(st.integers(min_value=1, max_value=300), max_size=8)
styles = st.integers(min_value=0, max_value=7)


@FUZZ
@given(data=st.binary(max_size=2048), chunks=chunk_lists, style=styles, channel=st.booleans())
def test_arbitrary_bytes(data: bytes, chunks: list[int], style: int, channel: bool) -> None:
    opener = VALID[-1].opener() if channel else Opener(KEY, context=CONTEXT)
    released, error = feed(opener, data, chunks, style)
    assert error is not None  # nobody can forge a stream without the key
    assert released == b""


@FUZZ
@given(
    header=st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE),
    body=st.binary(max_size=512),
    chunks=chunk_lists,
    style=styles,
)
def test_arbitrary_bytes_behind_a_valid_magic(
    header: bytes, body: bytes, chunks: list[int], style: int
) -> None:
    data = b"GCMS\x01\x01\x00\x00" + header[8:] + body
    released, error = feed(Opener(KEY, context=CONTEXT), data, chunks, style)
    assert error is not None
    assert released == b""


@st.composite
def mutated(draw: st.DrawFn) -> tuple[Valid, bytes]:
    valid = draw(st.sampled_from(VALID))
    data = bytearray(valid.wire)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(
            st.sampled_from(("flip", "set", "delete", "insert", "duplicate", "move", "truncate", "append"))
        )
        n = len(data)
        a = draw(st.integers(min_value=0, max_value=n))
        b = draw(st.integers(min_value=a, max_value=min(n, a + 64)))
        if op == "flip" and a < n:
            data[a] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif op == "set" and a < n:
            data[a] = draw(st.integers(min_value=0, max_value=255))
        elif op == "delete":
            del data[a:b]
        elif op == "insert":
            data[a:a] = draw(st.binary(min_size=1, max_size=40))
        elif op == "duplicate":
            data[b:b] = data[a:b]
        elif op == "move":
            piece = bytes(data[a:b])
            del data[a:b]
            at = draw(st.integers(min_value=0, max_value=len(data)))
            data[at:at] = piece
        elif op == "truncate":
            del data[a:]
        elif op == "append":
            data += draw(st.binary(min_size=1, max_size=100))
    return valid, bytes(data)


@FUZZ
@given(case=mutated(), chunks=chunk_lists, style=styles)
def test_mutated_valid_streams(case: tuple[Valid, bytes], chunks: list[int], style: int) -> None:
    valid, data = case
    released, error = feed(valid.opener(), data, chunks, style)
    assert valid.plaintext.startswith(released), "released plaintext is not the true prefix"
    if error is None:
        assert released == valid.plaintext
    else:
        assert len(released) in valid.boundaries, "released part of a record"


@pytest.mark.parametrize("valid", VALID, ids=[v.name for v in VALID])
def test_valid_streams_in_every_piece_size(valid: Valid) -> None:
    for size in range(1, 80):
        for style in range(8):
            released, error = feed(valid.opener(), valid.wire, [size], style)
            assert error is None
            assert released == valid.plaintext


# -- memory ------------------------------------------------------------------------------------


def _peak_during(action: object) -> int:
    assert callable(action)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        action()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_huge_record_length_rejected_before_buffering() -> None:
    sealer = Sealer(KEY, context=CONTEXT, record_size=1024 * 1024)
    opener = Opener(KEY, context=CONTEXT)
    opener.receive_data(sealer.take_header())
    assert opener.read() is None
    opener.receive_data(sealer.seal(b"first", flush=True))  # the 4 MiB ring is allocated here, legitimately
    assert opener.read() == b"first"
    bogus = RECORD_HEADER.pack(0, 0xFFFFFFFF) + bytes(64 * 1024)

    def attack() -> None:
        opener.receive_data(bogus)
        with pytest.raises(RecordTooLargeError) as info:
            opener.read()
        assert info.value.size == 0xFFFFFFFF

    assert _peak_during(attack) < 16 * 1024


@pytest.mark.parametrize("announced", [1024 * 1024 + 1, HARD_MAX_RECORD_SIZE])
def test_oversized_announced_record_size_allocates_no_ring(announced: int) -> None:
    header = Sealer(KEY, context=CONTEXT, record_size=announced).take_header()  # correctly committed
    opener = Opener(KEY, context=CONTEXT)

    def attack() -> None:
        opener.receive_data(header + RECORD_HEADER.pack(0, announced + 16))
        with pytest.raises(RecordTooLargeError):
            opener.read()

    assert _peak_during(attack) < 16 * 1024


def test_uncommitted_header_allocates_no_ring() -> None:
    """Even a reader that accepts 16 MiB records allocates nothing for a header it cannot verify."""
    header = bytearray(Sealer(KEY, context=CONTEXT, record_size=HARD_MAX_RECORD_SIZE).take_header())
    header[-1] ^= 1
    opener = Opener(KEY, context=CONTEXT, max_record_size=HARD_MAX_RECORD_SIZE)

    def attack() -> None:
        opener.receive_data(bytes(header) + RECORD_HEADER.pack(0, HARD_MAX_RECORD_SIZE))
        with pytest.raises(KeyCommitmentError):
            opener.read()

    assert _peak_during(attack) < 16 * 1024


@settings(max_examples=min(EXAMPLES, 60), deadline=None, derandomize=True)
@given(case=mutated(), chunks=chunk_lists)
def test_memory_stays_bounded(case: tuple[Valid, bytes], chunks: list[int]) -> None:
    """Whatever the damage, opening costs the ring (its byte budget) plus a constant, not the input."""
    valid, data = case
    data = data + bytes(200 * 1024)  # and a long tail of garbage

    def run() -> None:
        feed(valid.opener(), data, chunks or [4096], 0)

    assert _peak_during(run) < DEFAULT_RING_SIZE + 48 * 1024
