"""The Channel: a Sealer and an Opener keyed for the two directions of one connection, the
options it hands to each, and its properties under any split and any single-byte change.

The handshake itself (forward secrecy, key confirmation, identities) is tests/test_handshake.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gcmstream.channel
import gcmstream.format
import gcmstream.header
import gcmstream.opener
from gcmstream import (
    AuthenticationError,
    Channel,
    HandshakeError,
    KeyCommitmentError,
    KeyExchange,
    KeyLimits,
    KeyRing,
    MalformedRecordError,
    NotReadyError,
    ProtocolError,
    RecordTooLargeError,
    Role,
    RoleMismatchError,
    StreamBrokenError,
    StreamClosedError,
    TruncatedStreamError,
)
from gcmstream.channel import DEFAULT_HANDSHAKE, HandshakeOptions
from gcmstream.format import (
    FINISHED_SIZE,
    FLAG_KEY_UPDATE,
    HEADER_SIZE,
    MAGIC,
    parse_header_start,
)
from gcmstream.testing import run_handshake

from .helpers import (
    KEY,
    PROPERTY_SETTINGS,
    CompareSpy,
    fixed_channel,
    handshake_bytes,
    open_chunks,
    refuses_untouched,
    run,
    seal_stream,
    split,
    wire_records,
)

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


@pytest.mark.parametrize("role", [Role.INITIATOR, Role.RESPONDER])
def test_a_channel_refuses_a_bad_context_when_it_is_made(role: Role) -> None:
    """Both ends check the context at the constructor (a responder makes its header only when
    the peer's arrives: a bad context must not wait for a connection to be found)."""
    with pytest.raises(TypeError, match="context must be bytes-like, not str"):
        Channel(KEY, role=role, context="app")  # type: ignore[arg-type]
    too_long = bytes(gcmstream.format.MAX_CONTEXT_SIZE + 1)
    with pytest.raises(ValueError, match=f"context of {len(too_long)} bytes exceeds"):
        Channel(KEY, role=role, context=too_long)


def test_channel_wrong_context_fails_the_handshake() -> None:
    initiator = Channel(KEY, role=Role.INITIATOR, context=b"a")
    responder = Channel(KEY, role=Role.RESPONDER, context=b"b")
    responder.opener.receive_data(initiator.initial_data())
    with pytest.raises(KeyCommitmentError):
        responder.handshake_complete()
    assert responder.data_to_send() == b""  # it does not answer


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


def test_initial_data_is_the_initiators_header_once_and_nothing_for_a_responder() -> None:
    """initial_data(): the initiator's header, once; a responder's is empty (it answers through
    data_to_send), even when the initiator's header arrived first; a second call raises."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    header = initiator.initial_data()
    assert header.startswith(MAGIC) and len(header) > HEADER_SIZE
    with pytest.raises(StreamClosedError, match="already taken"):
        initiator.initial_data()
    assert initiator.data_to_send() == b""  # not given a second time by the other name
    responder.opener.receive_data(header)
    assert not responder.handshake_complete()
    assert responder.initial_data() == b""  # its answer waits in data_to_send
    with pytest.raises(StreamClosedError, match="already taken"):
        responder.initial_data()
    initiator.opener.receive_data(responder.data_to_send())
    assert initiator.handshake_complete()
    responder.opener.receive_data(initiator.data_to_send())
    assert responder.handshake_complete()
    fresh = Channel(KEY, role=Role.RESPONDER)
    assert fresh.initial_data() == b""
    with pytest.raises(StreamClosedError, match="already taken"):
        fresh.initial_data()


def test_the_default_key_exchange_is_the_hybrid() -> None:
    """A Channel, and the handshake options the adapters carry (a listener built without
    options uses DEFAULT_HANDSHAKE), default to ML-KEM-768 + X25519: never X25519 alone."""
    assert HandshakeOptions().key_exchange is KeyExchange.MLKEM768_X25519
    assert DEFAULT_HANDSHAKE.key_exchange is KeyExchange.MLKEM768_X25519
    assert Channel(KEY, role=Role.INITIATOR).key_exchange is KeyExchange.MLKEM768_X25519
    assert Channel(KEY, role=Role.RESPONDER).key_exchange is KeyExchange.MLKEM768_X25519


@pytest.mark.parametrize("reuse", [True, False, None], ids=["True", "False", "default"])
def test_channel_hands_reuse_output_to_its_sealer(reuse: bool | None) -> None:
    """reuse_output=False: each seal returns fresh memory, the last one's view stays valid;
    True (the default): the sealer's one buffer, the last view released at the next call."""
    initiator, _ = handshake() if reuse is None else handshake(reuse_output=reuse)
    reuse = reuse is not False
    first = initiator.sealer.seal(b"first record", flush=True)
    kept = bytes(first)
    second = initiator.sealer.seal(b"other record", flush=True)
    if reuse:
        with pytest.raises(ValueError, match="released"):
            bytes(first)
    else:
        assert bytes(first) == kept and first.obj is not second.obj


def test_finished_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """K9: each end compares the Finished it received with the one it derived through
    hmac.compare_digest; a forged one is refused by that comparison."""
    spy = CompareSpy()
    monkeypatch.setattr(gcmstream.channel, "hmac", spy)
    handshake()
    assert len(spy.calls) == 2  # one Finished each way
    assert all(len(got) == FINISHED_SIZE and got == expected for got, expected in spy.calls)
    spy.calls.clear()
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(initiator.initial_data())
    answer = bytearray(responder.data_to_send())
    answer[-1] ^= 1  # the responder's Finished, one bit changed
    initiator.opener.receive_data(bytes(answer))
    with pytest.raises(HandshakeError, match="key confirmation failed"):
        initiator.handshake_complete()
    assert len(spy.calls) == 1 and spy.calls[0][0] != spy.calls[0][1]


RECORD = 4  # record size of every sealer here: limits are reached within a few records


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


def test_channel_header_then_eof_is_truncated() -> None:
    """The same through a channel: the handshake completes, then the input ends."""
    ours = Channel(KEY, role=Role.INITIATOR)
    run_handshake(ours, Channel(KEY, role=Role.RESPONDER))
    ours.opener.receive_eof()
    assert ours.handshake_complete()
    with pytest.raises(TruncatedStreamError, match="after 0 records"):
        ours.opener.read()


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

    from .helpers import handshake_bytes

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


def test_a_channel_with_the_same_context_at_both_ends_completes() -> None:
    """The context reaches the opener too: the peer's header commitment is checked under it."""
    initiator, responder = handshake(context=b"app v1")
    responder.opener.receive_data(bytes(initiator.sealer.seal(b"in context", flush=True)))
    assert responder.opener.read() == b"in context"


def test_channel_hands_ring_size_to_its_opener() -> None:
    assert Channel(KEY, role=Role.INITIATOR, ring_size=300_000).opener.ring_size == 300_000


@pytest.mark.parametrize("name", ["local_id", "peer_id"])
def test_a_bad_identity_names_its_parameter(name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be 1 to 255 bytes, got 0$"):
        Channel(KEY, role=Role.INITIATOR, **{name: ""})  # type: ignore[arg-type]


@pytest.mark.parametrize("exchange", [KeyExchange.X25519, KeyExchange.MLKEM768_X25519])
def test_a_handshake_under_a_key_ring_derives_no_key_id(
    exchange: KeyExchange, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key's ID is derived once, with its KeyRing (a server's Configuration holds one): a
    handshake between two ends given rings derives none (issue 24: four HKDFs a connection,
    about 40 us each, were a third of an X25519 handshake's CPU), and its headers name the
    same key IDs as before."""
    initiator_ring, responder_ring = KeyRing([KEY]), KeyRing([bytes(16), KEY])
    derived: list[int] = []  # (lengths: a key is never shown, also in a failure)
    real = gcmstream.format.key_id

    def counting(key: bytes) -> bytes:
        derived.append(len(key))
        return real(key)

    monkeypatch.setattr(gcmstream.format, "key_id", counting)
    monkeypatch.setattr(gcmstream.channel, "key_id", counting, raising=False)
    initiator = Channel(initiator_ring, role=Role.INITIATOR, key_exchange=exchange)
    responder = Channel(responder_ring, role=Role.RESPONDER, key_exchange=exchange)
    hello, answer = handshake_bytes(initiator, responder)
    assert initiator.handshake_complete() and responder.handshake_complete()
    assert not derived
    assert parse_header_start(hello).key_id == parse_header_start(answer).key_id == real(KEY)


def test_a_handshake_parses_each_header_start_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each end checks the fixed part of the peer's header once, as it arrives (H1..H11), and
    the whole header's parse reuses it (it was parsed twice: issue 24's handshake CPU)."""
    parsed: list[int] = []
    real = gcmstream.format.parse_header_start

    def counting(raw: bytes, max_fields_size: int = gcmstream.format.MAX_FIELDS_SIZE) -> object:
        parsed.append(len(raw))
        return real(raw, max_fields_size)

    monkeypatch.setattr(gcmstream.format, "parse_header_start", counting)
    monkeypatch.setattr(gcmstream.header, "parse_header_start", counting)
    handshake()
    assert len(parsed) == 2  # one header each way


def test_a_responder_told_the_peers_input_ended_does_not_answer_its_header() -> None:
    """``ask_before_answering`` (a server's kernel check, _adapter.answer_only_a_connected_peer):
    asked once, after the header verified and before the responder half; told the input ended,
    the responder computes and sends nothing and the handshake ends truncated. Told it did
    not, it answers as always. An initiator is never asked."""
    asked: list[bool] = []

    def ended(answer: bool) -> Callable[[], bool]:
        def input_ended() -> bool:
            asked.append(answer)
            return answer

        return input_ended

    initiator = Channel(KEY, role=Role.INITIATOR)
    responder = Channel(KEY, role=Role.RESPONDER)
    responder.ask_before_answering(ended(True))
    responder.opener.receive_data(initiator.data_to_send())
    assert asked == [True] and responder.data_to_send() == b""
    with pytest.raises(TruncatedStreamError, match="could never send its Finished"):
        responder.handshake_complete()

    initiator = Channel(KEY, role=Role.INITIATOR)
    initiator.ask_before_answering(ended(True))  # (ignored: an initiator answers nothing)
    responder = Channel(KEY, role=Role.RESPONDER)
    responder.ask_before_answering(ended(False))
    responder.opener.receive_data(initiator.data_to_send())
    initiator.opener.receive_data(responder.data_to_send())
    responder.opener.receive_data(initiator.data_to_send())
    assert initiator.handshake_complete() and responder.handshake_complete()
    assert asked == [True, False]


def test_an_initiators_refusal_of_an_answer_is_never_passed_to_another_initiator() -> None:
    """Only a responder passes its refusal to this process's own initiator whose header it
    refused (``refused_here``): an answer an initiator refuses that carries the salt of another
    initiator's header (a hostile responder copies it off the wire) leaves that other initiator
    raising its own truncation, not a planted "refused in this process". Mutation run of
    2026-12-05 (mop5): on_header's registry look-up made for an initiator too."""
    other = Channel(KEY, role=Role.INITIATOR)
    copied_salt = other.initial_data()[28 : 28 + 32]  # the salt's place in every header
    with gcmstream.self_connections_allowed():
        client = Channel(KEY, role=Role.INITIATOR, peer_id="server")
        hostile = fixed_channel(KEY, Role.RESPONDER, salt=copied_salt, local_id="mallory")
        run_handshake(client, hostile)
    with pytest.raises(HandshakeError, match="expected b'server'"):
        client.handshake_complete()
    other.opener.receive_eof()
    with pytest.raises(TruncatedStreamError):
        other.handshake_complete()


def test_an_unanswered_named_initiator_is_told_where_its_input_ended_and_the_likely_fix() -> None:
    """The truncation of an initiator whose ring names its key and that sends no local_id:
    where the input ended (the header reader's words) and then the whole hint (mop5: the
    hint replaced the truncation, or its words changed)."""
    client = Channel(KeyRing({"server": KEY}), role=Role.INITIATOR)
    client.initial_data()
    client.opener.receive_eof()
    with pytest.raises(TruncatedStreamError) as refused:
        client.handshake_complete()
    assert str(refused.value).startswith(  # header.py's words for 0 bytes of an answer
        "the connection ended during the handshake before the server answered (0 bytes "
        "received): the server holds another key or context, or it refused the connection "
        "under load (too many pending handshakes, or too many from this address): try again "
        "later; "
    )
    assert str(refused.value).endswith(
        "; this end's key ring names its key 'server' but this end sends no local_id: a server "
        "whose ring names this key refuses a peer that does not send that name (the server's "
        "name for this end) as its local_id"
    )
