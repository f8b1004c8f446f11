"""Properties of the codec under any split of the input and any single-byte change."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcmstream import GcmStreamError, KeyLimits, Opener, ProtocolError, Sealer, StreamBrokenError

KEY = bytes(range(16))
SALT = bytes(range(32))

# derandomize: the same examples on every run, so that the suite is deterministic.
PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` cut at the given offsets (taken modulo its length, in any order)."""
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def open_chunks(opener: Opener, chunks: list[bytes], zero_copy: bool, out: bytearray) -> bool:
    """Feed the chunks (reading as needed), then EOF; plaintext goes to ``out`` as it is
    released. True if the authenticated end was reached; errors propagate."""

    def drain() -> bool:
        while (got := opener.read()) is not None:
            if not got:
                return True
            out.extend(got)
        return False

    for chunk in chunks:
        if not zero_copy:
            opener.receive_data(chunk)
        else:
            pos = 0
            while pos < len(chunk):
                room = opener.get_buffer()
                if not room:
                    before = len(out)
                    drain()
                    if len(out) == before and not opener.get_buffer():
                        opener.read()  # a failed opener raises here
                        raise AssertionError("deadlock: no room and nothing to read")
                    continue
                count = min(len(room), len(chunk) - pos)
                room[:count] = chunk[pos : pos + count]
                opener.buffer_updated(count)
                pos += count
        drain()
    opener.receive_eof()
    return drain()


@st.composite
def sealed_streams(draw: st.DrawFn) -> tuple[bytes, bytes, int]:
    """(wire, plaintext, record size): random writes with random flushes and key updates."""
    record_size = draw(st.integers(1, 64))
    writes = draw(
        st.lists(st.tuples(st.binary(max_size=200), st.sampled_from(["", "flush", "update"])), max_size=8)
    )
    limits = draw(st.sampled_from([None, KeyLimits(update_after_records=3, hard_records=4)]))
    sealer = Sealer(KEY, record_size=record_size, _salt=SALT, limits=limits)
    wire = bytearray()
    for data, then in writes:
        wire += sealer.seal(data)
        if then == "update":
            sealer.update_key()
        if then:
            wire += sealer.flush()
    wire += sealer.close()
    return bytes(wire), b"".join(data for data, _ in writes), record_size


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


@PROPERTY_SETTINGS
@given(
    messages=st.lists(st.tuples(st.booleans(), st.binary(max_size=100)), max_size=10),
    record_size=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=10),
    change=st.one_of(st.none(), st.tuples(st.integers(0, 1 << 16), st.integers(1, 255))),
)
def test_channel_round_trips_and_refuses_any_change(
    messages: list[tuple[bool, bytes]], record_size: int, cuts: list[int], change: tuple[int, int] | None
) -> None:
    """Messages both ways through a channel; the initiator's bytes, split anyhow, possibly changed."""
    from gcmstream import Role

    from .helpers import fixed_channel, handshake_bytes

    # the initiator's bytes are made against one deterministic responder and read by another
    initiator = fixed_channel(KEY, Role.INITIATOR, record_size=record_size)
    partner = fixed_channel(KEY, Role.RESPONDER, record_size=record_size)
    to_responder = bytearray(handshake_bytes(initiator, partner)[0])
    responder = fixed_channel(KEY, Role.RESPONDER, record_size=record_size)
    responder.initial_data()
    for from_initiator, data in messages:
        if from_initiator:
            to_responder += initiator.sealer.seal(data, flush=True)
    to_responder += initiator.sealer.close()
    sent = b"".join(data for from_initiator, data in messages if from_initiator)
    if change is not None:
        position, delta = change
        to_responder[position % len(to_responder)] ^= delta

    out = bytearray()
    try:
        ended = open_chunks(responder.opener, split(bytes(to_responder), cuts), True, out)
    except ProtocolError:
        assert change is not None, "an unchanged channel stream failed"
        assert sent.startswith(out)
        return
    assert change is None, "a changed channel stream was accepted"
    assert ended
    assert out == sent

    # The other direction, keyed by the same handshake, once the responder confirmed it.
    assert responder.handshake_complete()
    to_initiator = bytearray()
    for from_initiator, data in messages:
        if not from_initiator:
            to_initiator += responder.sealer.seal(data, flush=True)
    to_initiator += responder.sealer.close()
    out.clear()
    assert open_chunks(initiator.opener, split(bytes(to_initiator), cuts), False, out)
    assert out == b"".join(data for from_initiator, data in messages if not from_initiator)
