"""The record layer (``gcmstream.records``) called directly: its paths' contracts where the
Sealer and the Opener above it would hide a change (a fast path that silently stops being
taken, a refusal that loses what it names). Written for the mutation run of 2026-12-04
(docs/mutation-2026-12-04.md): each test names the behaviour a surviving mutant changed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from gcmstream import AuthenticationError, KeyLimits, LimitReachedError, MalformedRecordError, Sealer
from gcmstream.format import FLAG_FINAL, FLAG_KEY_UPDATE, RECORD_HEADER_SIZE, TAG_SIZE, Suite, TrafficKeys
from gcmstream.records import KeyChain, RecordLayer, records_per_generation

from .helpers import KEY, wire_records

SECRET = bytes(range(32))


def twin_layers(record_size: int = 16, limits: KeyLimits | None = None) -> tuple[RecordLayer, RecordLayer]:
    """A sealing and an opening layer of one direction (the same secret)."""
    limits = limits or KeyLimits()
    keys = TrafficKeys(SECRET, Suite.AES_128_GCM)
    return RecordLayer(keys, limits, record_size), RecordLayer(keys, limits, record_size)


def plaintext(size: int) -> bytes:
    return hashlib.shake_256(b"record layer").digest(size)


def seal(layer: RecordLayer, sizes: list[int], flags: list[int] | None = None) -> tuple[bytes, bytes]:
    """(the wire records, the plaintext they carry) of ``sizes``, sealed with ``flags``."""
    data = plaintext(sum(sizes))
    out = bytearray(sum(sizes) + len(sizes) * (RECORD_HEADER_SIZE + TAG_SIZE))
    end, _ = layer.seal_run(memoryview(out), 0, memoryview(data), 0, sizes, flags, False)
    assert end == len(out)
    return bytes(out), data


def test_a_lone_plain_record_opens_as_bytes_up_to_the_byte_limit_and_no_further() -> None:
    """``open_plain_bytes`` opens (not None) every plain record ``open_record`` would, the one
    reaching ``hard_bytes`` exactly included, with its header as associated data, and refuses
    (None, nothing moved) the one that would pass it, and one whose tag fails."""
    sealer, opener = twin_layers(16, KeyLimits(update_after_bytes=32, hard_bytes=32))
    wire, data = seal(sealer, [16, 16, 16])
    view = memoryview(wire)
    length = 16 + TAG_SIZE
    step = RECORD_HEADER_SIZE + length
    flipped = bytearray(wire[:step])
    flipped[-1] ^= 1  # a failed tag: None (open_record reports it), not InvalidTag
    assert opener.open_plain_bytes(0, length, memoryview(flipped), 0) is None
    assert (opener.seq, opener.key_bytes) == (0, 0)
    assert opener.open_plain_bytes(0, length, view, 0) == data[:16]
    assert opener.open_plain_bytes(0, length, view, step) == data[16:32]  # reaches 32 exactly
    assert (opener.seq, opener.key_bytes) == (2, 32)
    assert opener.open_plain_bytes(0, length, view, 2 * step) is None
    assert (opener.seq, opener.key_bytes) == (2, 32)


def test_a_run_opens_records_that_end_exactly_at_its_stop_and_fill_its_target() -> None:
    """``open_run`` opens every whole record up to ``stop`` into a target of exactly their
    size: the last one ends at ``stop``, fills the target and reaches the byte limit, and the
    run opens it (records of the largest size, 16, included)."""
    sealer, opener = twin_layers(16, KeyLimits(update_after_bytes=48, hard_bytes=48))
    wire, data = seal(sealer, [16, 16, 16])
    target = bytearray(48)
    assert opener.open_run(memoryview(wire), 0, len(wire), memoryview(target), 0, 10) == (len(wire), 48, 3)
    assert target == data
    assert (opener.seq, opener.key_bytes) == (3, 48)


@pytest.mark.parametrize(
    ("limits", "which"),
    [
        (KeyLimits(update_after_records=2, hard_records=2), "record"),
        (KeyLimits(update_after_bytes=32, hard_bytes=32), "byte"),
    ],
)
def test_a_peer_past_a_hard_limit_is_refused_with_the_records_number(limits: KeyLimits, which: str) -> None:
    """The third record under one key passes the record limit of 2 (or the byte limit of 32):
    refused before decrypting, the error naming record 2 and the limit."""
    sealer, opener = twin_layers(16, limits)
    wire, _ = seal(sealer, [16, 16, 16])
    view = memoryview(wire)
    out = bytearray(16)
    step = RECORD_HEADER_SIZE + 16 + TAG_SIZE
    for number in range(2):
        header, body = view[number * step : number * step + 5], view[number * step + 5 : (number + 1) * step]
        opener.open_record(0, 16, header, body, memoryview(out), False)
    header, body = view[2 * step : 2 * step + 5], view[2 * step + 5 :]
    message = f"^record 2: the peer passed the per-key {which} limit$"
    with pytest.raises(MalformedRecordError, match=message) as caught:
        opener.open_record(0, 16, header, body, memoryview(out), False)
    assert caught.value.record_number == 2
    assert opener.seq == 2


def test_no_record_is_planned_at_a_position_at_the_hard_record_limit() -> None:
    """A layer whose last slot under a key went to a FINAL record is at ``hard_records``:
    planning any further record there, even one that would carry KEY_UPDATE, is refused
    (its nonce would be the one past the limit)."""
    layer, _ = twin_layers(16, KeyLimits(update_after_records=2, hard_records=2))
    flags = layer.plan_flags([16, 16], final=True, update_requested=False, auto_update=True)
    assert flags == [0, FLAG_FINAL]
    seal(layer, [16, 16], flags)
    assert layer.seq == 2
    for update_requested in (False, True):
        with pytest.raises(LimitReachedError):
            layer.plan_flags([1], final=False, update_requested=update_requested, auto_update=True)


@pytest.mark.parametrize(
    ("record_size", "limits"),
    [
        (16, KeyLimits(update_after_records=1)),  # every record carries KEY_UPDATE
        (1000, KeyLimits(update_after_bytes=2500)),  # ceil(2500 / 1000) = 3
        (16, KeyLimits(update_after_bytes=100, hard_bytes=100)),  # floor(100 / 16) = 6
        (16, KeyLimits(update_after_bytes=40, hard_bytes=40)),  # floor(40 / 16) = 2, not 2.5
        (10, KeyLimits(update_after_records=4, hard_records=4)),
    ],
)
def test_records_per_generation_counts_what_the_sealer_does(record_size: int, limits: KeyLimits) -> None:
    """The count the file layout field promises (FORMAT.md 4.3) is the count of full records
    the Sealer puts under each key: KEY_UPDATE on every N-th record."""
    sealer = Sealer(KEY, record_size=record_size, limits=limits)
    found = wire_records(bytes(sealer.seal(bytes(13 * record_size), final=True)))
    updates = [index for index, (flags, _) in enumerate(found) if flags & FLAG_KEY_UPDATE]
    per_generation = updates[0] + 1
    assert updates == list(range(per_generation - 1, len(found) - 1, per_generation))
    count = records_per_generation(record_size, limits)
    assert type(count) is int
    assert count == per_generation


def generations(first: TrafficKeys, count: int) -> Iterator[TrafficKeys]:
    keys = first
    for _ in range(count):
        yield keys
        keys = keys.next()


def test_a_key_chain_reads_any_generation_within_one_checkpoint_of_derivations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KeyChain's promise: after walking far, a read of an earlier generation starts from the
    nearest checkpoint below it, so it costs at most ``CHECKPOINT`` derivations."""
    first = TrafficKeys(SECRET, Suite.AES_128_GCM)
    expected = {keys.generation: keys.secret for keys in generations(first, 3001)}
    derivations = 0
    real_next = TrafficKeys.next

    def counting_next(self: TrafficKeys) -> TrafficKeys:
        nonlocal derivations
        derivations += 1
        return real_next(self)

    monkeypatch.setattr(TrafficKeys, "next", counting_next)
    chain = KeyChain(first)
    assert chain(3000).secret == expected[3000]
    for generation in (2100, 1500, 1030, 2999, 7):
        derivations = 0
        assert chain(generation).secret == expected[generation]
        assert derivations <= KeyChain.CHECKPOINT, generation


def open_one(layer: RecordLayer, wire: bytes, size: int, out: bytearray) -> bool:
    """``open_record`` of the one record ``wire`` (its flags read from its header)."""
    view = memoryview(wire)
    header, body = view[:RECORD_HEADER_SIZE], view[RECORD_HEADER_SIZE:]
    return layer.open_record(header[0], size, header, body, memoryview(out), False)


def test_a_record_that_fails_its_tag_leaves_zeros_not_its_plaintext() -> None:
    """The tag fails (one ciphertext bit flipped): AuthenticationError naming the record, the
    output wiped (AES-GCM decrypts into it before the tag is checked), the position kept."""
    sealer, opener = twin_layers()
    wire, data = seal(sealer, [16])
    flipped = bytearray(wire)
    flipped[RECORD_HEADER_SIZE] ^= 1
    out = bytearray(b"\xaa" * 16)
    with pytest.raises(AuthenticationError) as caught:
        open_one(opener, bytes(flipped), 16, out)
    assert caught.value.record_number == 0
    assert out == bytes(16)
    assert opener.seq == 0
    assert not open_one(opener, wire, 16, out)  # the genuine record still opens in its place
    assert out == data


@pytest.mark.parametrize("flags", [0x04, FLAG_FINAL | FLAG_KEY_UPDATE])
def test_an_authentic_record_with_broken_flags_is_refused_and_wiped(flags: int) -> None:
    """A record that authenticates but carries an unknown flag, or FINAL and KEY_UPDATE
    together (R3), is refused with its plaintext wiped: nothing of it is released."""
    sealer, opener = twin_layers()
    wire, _ = seal(sealer, [16], [flags])
    out = bytearray(16)
    with pytest.raises(MalformedRecordError, match="record 0 has"):
        open_one(opener, wire, 16, out)
    assert out == bytes(16)


def test_a_run_stops_at_a_record_that_fails_and_wipes_its_output() -> None:
    """``open_run`` opens the good records before a tampered one, wipes what it decrypted of
    that one and leaves it to ``open_record``, which reports it."""
    sealer, opener = twin_layers()
    wire, data = seal(sealer, [16, 16])
    flipped = bytearray(wire)
    flipped[-1] ^= 1
    target = bytearray(b"\xaa" * 32)
    step = RECORD_HEADER_SIZE + 16 + TAG_SIZE
    assert opener.open_run(memoryview(flipped), 0, len(flipped), memoryview(target), 0, 10) == (step, 16, 1)
    assert target == data[:16] + bytes(16)


@pytest.mark.parametrize("change", ["header", "body"])
def test_a_record_at_a_known_place_opens_only_as_that_place_requires(change: str) -> None:
    """``KeyChain.open_at``: a record opens at its place; with its stored header relabelled
    (FINAL set) or its ciphertext altered it fails as AuthenticationError naming the record,
    with the output wiped."""
    sealer, _ = twin_layers()
    wire, data = seal(sealer, [16, 16])
    second = bytearray(wire[RECORD_HEADER_SIZE + 16 + TAG_SIZE :])
    chain = KeyChain(TrafficKeys(SECRET, Suite.AES_128_GCM))
    out = bytearray(16)
    chain.open_at(0, 1, 0, memoryview(second), memoryview(out), 1)
    assert out == data[16:]
    if change == "header":
        second[0] = FLAG_FINAL
    else:
        second[-1] ^= 1
    out[:] = b"\xaa" * 16
    with pytest.raises(AuthenticationError) as caught:
        chain.open_at(0, 1, 0, memoryview(second), memoryview(out), 1)
    assert caught.value.record_number == 1
    assert out == bytes(16)


def test_only_key_update_moves_to_the_next_key_final_counts_one_record() -> None:
    """A FINAL record moves the position by one under the same key; a KEY_UPDATE record is
    the old key's last, and the records after it count from 0 under the next generation."""
    sealer, opener = twin_layers()
    wire, data = seal(sealer, [16, 16], [FLAG_KEY_UPDATE, FLAG_FINAL])
    assert (sealer.keys.generation, sealer.seq, sealer.records) == (1, 1, 2)
    step = RECORD_HEADER_SIZE + 16 + TAG_SIZE
    out = bytearray(16)
    assert not open_one(opener, wire[:step], 16, out)
    assert (opener.keys.generation, opener.seq, opener.records) == (1, 0, 1)
    assert open_one(opener, wire[step:], 16, out)  # FINAL
    assert out == data[16:]
    assert (opener.keys.generation, opener.seq, opener.records, opener.total_bytes) == (1, 1, 2, 32)
