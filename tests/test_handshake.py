"""The channel handshake (docs/FORMAT.md 5.2), sans-IO: forward secrecy, key confirmation before
anything is allocated, self-connections, identities, downgrades, key rings."""

from __future__ import annotations

import base64
import gc
import weakref
from collections.abc import Mapping
from typing import Any

import pytest

from gcmstream import (
    AuthenticationError,
    Channel,
    DowngradeError,
    HandshakeError,
    KeyExchange,
    KeyRing,
    NotReadyError,
    PeerIdentityError,
    ProtocolError,
    Role,
    SelfConnectionError,
    StreamBrokenError,
    TruncatedStreamError,
    UnknownKeyError,
    generate_key,
    key_id,
)
from gcmstream._fixed import fixed_channel as fixed_randomness_channel
from gcmstream.channel import _OWN_HELLOS, ChannelPhase, self_connections_allowed
from gcmstream.format import (
    DEFAULT_RECORD_SIZE,
    FINISHED_SIZE,
    MAX_HEADER_SIZE,
    SALT_SLICE,
    FieldType,
    make_header,
    parse_header,
)
from gcmstream.handshake import CHANNEL_FIELDS, InitiatorShares, channel_keys, handshake_sizes, respond
from gcmstream.testing import run_handshake

from .helpers import FIXED_EPHEMERAL, FIXED_SALTS, KEY, handshake_bytes


def first_record(initiator: Channel) -> bytes:
    return bytes(initiator.sealer.seal(b"the same plaintext", flush=True))


# -- forward secrecy ------------------------------------------------------------------------------


@pytest.mark.parametrize("exchange", list(KeyExchange)[1:], ids=lambda e: e.name)
def test_sessions_with_the_same_key_and_salts_derive_different_traffic_keys(exchange: KeyExchange) -> None:
    """Two sessions with the same key and forced salts: the ephemeral keys alone make their
    traffic keys differ, so the same plaintext seals differently."""
    records = []
    for _ in range(2):
        initiator = fixed_randomness_channel(
            KEY, role=Role.INITIATOR, key_exchange=exchange, salt=FIXED_SALTS[Role.INITIATOR]
        )
        responder = fixed_randomness_channel(
            KEY, role=Role.RESPONDER, key_exchange=exchange, salt=FIXED_SALTS[Role.RESPONDER]
        )
        run_handshake(initiator, responder)
        assert initiator.handshake_complete() and responder.handshake_complete()
        records.append(first_record(initiator))
    assert records[0] != records[1]


def test_a_recorded_session_does_not_open_with_the_key_alone() -> None:
    """Whoever learns the pre-shared key after the session, with every byte of it recorded, cannot
    read it: playing either end with the key (and even the recorded salt) gives other keys."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    from_initiator, from_responder = handshake_bytes(initiator, responder)
    from_initiator += first_record(initiator)
    from_responder += bytes(responder.sealer.seal(b"the reply", flush=True))
    # as the responder, fed the initiator's recorded bytes (same salt as the recorded answer)
    as_responder = fixed_randomness_channel(KEY, role=Role.RESPONDER, salt=from_responder[28:60])
    as_responder.initial_data()
    as_responder.opener.receive_data(from_initiator)
    with pytest.raises(HandshakeError, match="key confirmation"):
        as_responder.handshake_complete()
    # as the initiator, fed the responder's recorded bytes: its own ephemeral key is not the one
    # the recorded answer was made for
    as_initiator = fixed_randomness_channel(KEY, role=Role.INITIATOR, salt=from_initiator[28:60])
    as_initiator.initial_data()
    as_initiator.opener.receive_data(from_responder)
    with pytest.raises(HandshakeError, match="key confirmation"):
        as_initiator.handshake_complete()


def test_with_the_ephemeral_keys_the_recording_opens() -> None:
    """The contrast: what protects a recording is the ephemeral secret, not the salts (test-only
    injection of fixed ephemeral keys reproduces the session)."""
    initiator = fixed_randomness_channel(
        KEY,
        role=Role.INITIATOR,
        key_exchange=KeyExchange.X25519,
        salt=FIXED_SALTS[Role.INITIATOR],
        ephemeral=FIXED_EPHEMERAL[Role.INITIATOR],
    )
    responder = fixed_randomness_channel(
        KEY,
        role=Role.RESPONDER,
        key_exchange=KeyExchange.X25519,
        salt=FIXED_SALTS[Role.RESPONDER],
        ephemeral=FIXED_EPHEMERAL[Role.RESPONDER],
    )
    from_initiator = handshake_bytes(initiator, responder)[0] + first_record(initiator)
    again = fixed_randomness_channel(
        KEY,
        role=Role.RESPONDER,
        key_exchange=KeyExchange.X25519,
        salt=FIXED_SALTS[Role.RESPONDER],
        ephemeral=FIXED_EPHEMERAL[Role.RESPONDER],
    )
    again.initial_data()
    again.opener.receive_data(from_initiator)
    assert again.opener.read() == b"the same plaintext"


def ephemeral_dropped(channel: Channel) -> bool:
    """No ephemeral private key (initiator) nor derived handshake secret left in ``channel``."""
    return channel._handshake._shares is None and channel._handshake._derived is None


def test_ephemeral_private_keys_are_dropped_when_the_handshake_ends() -> None:
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    assert not ephemeral_dropped(initiator)
    run_handshake(initiator, responder)
    assert initiator.handshake_complete() and responder.handshake_complete()
    assert ephemeral_dropped(initiator) and ephemeral_dropped(responder)
    failed = Channel(KEY, role=Role.INITIATOR)
    failed.initial_data()
    liar = Channel(KEY, role=Role.RESPONDER)
    liar.opener.receive_data(Channel(KEY, role=Role.INITIATOR).initial_data())
    failed.opener.receive_data(liar.data_to_send())  # an answer to another initiator
    with pytest.raises(HandshakeError):
        failed.handshake_complete()
    assert ephemeral_dropped(failed)


@pytest.mark.parametrize("given", [50, "header"], ids=["part-of-the-header", "header-then-nothing"])
def test_an_eof_during_the_handshake_counts_the_bytes_received(given: int | str) -> None:
    """The truncation message says how far the handshake got: the bytes of the peer's header
    received, and after a whole header, those too (the Finished MAC is read after them)."""
    header = Channel(KEY, role=Role.INITIATOR).initial_data()
    count = len(header) if given == "header" else int(given)
    responder = Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(header[:count])
    responder.opener.receive_eof()
    with pytest.raises(TruncatedStreamError, match=rf"during the handshake \({count} bytes received"):
        responder.handshake_complete()


def _fails_by_eof(role: Role) -> Channel:
    """A channel whose handshake ends by EOF before Finished: an initiator after its header, a
    responder after answering a replayed header."""
    channel = Channel(KEY, role=role)
    if role is Role.INITIATOR:
        channel.initial_data()
    else:
        channel.opener.receive_data(Channel(KEY, role=Role.INITIATOR).initial_data())
        assert channel.data_to_send()  # answered: it holds derived secrets now
    assert not ephemeral_dropped(channel)
    channel.opener.receive_eof()
    with pytest.raises(TruncatedStreamError, match="during the handshake"):
        channel.handshake_complete()
    return channel


@pytest.mark.parametrize("role", [Role.INITIATOR, Role.RESPONDER], ids=lambda r: r.name)
def test_ephemeral_secrets_are_dropped_when_the_handshake_fails_before_finished(role: Role) -> None:
    """Review LOW-4: EOF (or any error) before Finished drops them too, not only Finished."""
    channel = _fails_by_eof(role)
    assert ephemeral_dropped(channel) and channel._handshake._hello == b""
    assert channel._handshake._hello_salt not in _OWN_HELLOS
    with pytest.raises(StreamBrokenError) as again:  # still failed for good, with the same error
        channel.handshake_complete()
    assert isinstance(again.value.original, TruncatedStreamError)
    assert again.value.original.__traceback__ is None


@pytest.mark.parametrize("role", [Role.INITIATOR, Role.RESPONDER], ids=lambda r: r.name)
def test_a_failed_channel_is_freed_without_the_cyclic_gc(role: Role) -> None:
    """Review LOW-4: the error the caller saw and the failed channel do not keep each other
    alive: the channel goes when its last reference goes, with the cyclic GC off."""
    gc.collect()
    gc.disable()
    try:
        channel = _fails_by_eof(role)
        alive = weakref.ref(channel)
        del channel
        assert alive() is None
    finally:
        gc.enable()


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_a_handshake_timeout_drops_the_ephemeral_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapters end the handshake on a timeout (or a cancellation) too."""
    import asyncio

    import gcmstream.config
    from gcmstream import aio

    made: list[Channel] = []

    def recording(*args: Any, **kwargs: Any) -> Channel:
        made.append(Channel(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(gcmstream.config, "Channel", recording)  # where every adapter's is built
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    port = server.sockets[0].getsockname()[1]
    async with server:
        with pytest.raises(TimeoutError):
            await aio.open_connection("127.0.0.1", port, key=KEY, handshake_timeout=0.3)
    assert len(made) == 1 and ephemeral_dropped(made[0]) and made[0]._handshake._hello == b""
    assert made[0]._handshake._hello_salt not in _OWN_HELLOS


# -- key confirmation before anything costs --------------------------------------------------------


def test_nothing_is_allocated_or_sealed_before_the_initiator_confirms() -> None:
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    responder.initial_data()
    responder.opener.receive_data(initiator.initial_data())
    answer = responder.data_to_send()
    assert len(answer) == handshake_sizes(KeyExchange.MLKEM768_X25519)[1]
    # the answer is out, but the responder is not done: no ring, no sealing, not complete
    assert not responder.handshake_complete()
    assert responder.opener._ring is None
    with pytest.raises(NotReadyError):
        responder.sealer.seal(b"too early")
    # what arrives before Finished waits outside (header_missing says how much is wanted); the
    # peer's header is held once, as header.raw, and the receive buffer is the Finished alone
    assert responder.opener.header_missing == FINISHED_SIZE
    hello_size = handshake_sizes(KeyExchange.MLKEM768_X25519)[0] - FINISHED_SIZE
    header = responder.opener.header
    assert header is not None and len(header.raw) == hello_size <= MAX_HEADER_SIZE
    assert len(responder._handshake._buf) == FINISHED_SIZE
    assert header.field_spans and all(type(v) is bytes for _, v in header.fields)  # sliced on demand
    initiator.opener.receive_data(answer)
    assert initiator.handshake_complete()  # the initiator may send after one round trip
    responder.opener.receive_data(initiator.data_to_send() + first_record(initiator))
    assert responder.handshake_complete()
    assert responder.opener.read() == b"the same plaintext"


def test_a_forged_finished_is_refused() -> None:
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    responder.initial_data()
    responder.opener.receive_data(initiator.initial_data())
    initiator.opener.receive_data(responder.data_to_send())
    finished = bytearray(initiator.data_to_send())
    finished[0] ^= 1
    responder.opener.receive_data(bytes(finished))
    with pytest.raises(HandshakeError, match="key confirmation"):
        responder.handshake_complete()


def test_handshake_sizes_match_what_is_sent() -> None:
    for exchange in (KeyExchange.X25519, KeyExchange.MLKEM768_X25519):
        for ids in ((None, None), ("alice", "bob")):
            initiator = Channel(KEY, role=Role.INITIATOR, key_exchange=exchange, local_id=ids[0])
            responder = Channel(KEY, role=Role.RESPONDER, key_exchange=exchange, local_id=ids[1])
            sent = handshake_bytes(initiator, responder)
            sizes = tuple(len(name) if name else 0 for name in ids)
            assert tuple(map(len, sent)) == handshake_sizes(exchange, sizes)  # type: ignore[arg-type]


# -- self-connections and identities ---------------------------------------------------------------


@pytest.mark.refuse_self_connections
def test_a_process_refuses_its_own_initiator_header() -> None:
    """The Selfie attack: this process's outgoing handshake routed into its own server."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    responder.initial_data()
    responder.opener.receive_data(initiator.initial_data())
    with pytest.raises(SelfConnectionError, match="this process"):
        responder.handshake_complete()
    assert responder.data_to_send() == b""  # no answer
    # within self_connections_allowed() (tests, demos) the same is accepted
    with self_connections_allowed():
        run_handshake(Channel(KEY, role=Role.INITIATOR), allowed := Channel(KEY, role=Role.RESPONDER))
        assert allowed.handshake_complete()


@pytest.mark.refuse_self_connections
def test_a_finished_or_abandoned_initiator_is_forgotten() -> None:
    initiator = Channel(KEY, role=Role.INITIATOR)
    hello = initiator.initial_data()
    del initiator
    gc.collect()
    responder = Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(hello)
    assert responder.data_to_send()  # answered: the header is no longer one of ours in flight


CLIENT, SERVER = ("127.0.0.1", 40000), ("127.0.0.1", 8443)


def _one_tcp_connection(initiator: Channel, responder: Channel) -> None:
    """What the adapters give two ends of one TCP connection (``Channel.ask_endpoints``)."""
    initiator.ask_endpoints(lambda: (CLIENT, SERVER))
    responder.ask_endpoints(lambda: (SERVER, CLIENT))


Addresses = tuple[object, object]


@pytest.mark.refuse_self_connections
@pytest.mark.parametrize(
    ("initiator_sees", "responder_sees"),
    [
        (None, (SERVER, CLIENT)),  # an adapter that cannot say (a memory stream)
        ((CLIENT, SERVER), None),
        ((CLIENT, ("127.0.0.1", 9000)), (SERVER, ("127.0.0.1", 50000))),  # a relay: two connections
        ((CLIENT, SERVER), (SERVER, ("127.0.0.1", 50000))),  # same server, another peer (a replay)
        (("/tmp/s", ""), ("", "/tmp/s")),  # a unix socket: no address tells the two ends apart
        ((None, None), (SERVER, CLIENT)),  # a socket closed, asked too late
    ],
)
def test_a_refusal_reaches_an_initiator_only_on_its_own_connection(
    initiator_sees: Addresses | None, responder_sees: Addresses | None
) -> None:
    """Review 6: the refusal of this process's responder is raised by this process's initiator
    only where its connection certainly is the refused one (``channel._refusal_reaches``): its
    header byte for byte, endpoints swapped. Anything else (unknown, a relay, a replay to the
    same server, a unix socket) is the truncation any server's hang-up gives."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    if initiator_sees is not None:
        initiator.ask_endpoints(lambda: initiator_sees)
    if responder_sees is not None:
        responder.ask_endpoints(lambda: responder_sees)
    run_handshake(initiator, responder)
    with pytest.raises(SelfConnectionError):
        responder.handshake_complete()  # the responder refuses whatever the addresses
    initiator.opener.receive_eof()
    with pytest.raises(TruncatedStreamError):
        initiator.handshake_complete()


@pytest.mark.refuse_self_connections
def test_a_refusal_of_another_header_with_the_initiators_salt_does_not_reach_it() -> None:
    """Review 6: a header under another key, carrying the salt of this process's initiator (any
    observer of its first packet has it), refused on what looks like the initiator's own
    connection, is not the initiator's header: it gets the truncation."""
    mallory = generate_key()
    initiator = Channel(KEY, role=Role.INITIATOR)
    responder = Channel(KeyRing({"mallory": mallory}), role=Role.RESPONDER)
    _one_tcp_connection(initiator, responder)
    salt = initiator.initial_data()[SALT_SLICE]
    forged, _ = make_header(
        mallory,
        Role.INITIATOR,
        65536,
        b"",
        salt,
        fields=InitiatorShares(KeyExchange.X25519).fields(),
        key_exchange=KeyExchange.X25519,
    )
    responder.opener.receive_data(forged)
    with pytest.raises(DowngradeError):
        responder.handshake_complete()
    initiator.opener.receive_eof()
    with pytest.raises(TruncatedStreamError) as ended:
        initiator.handshake_complete()
    assert type(ended.value) is TruncatedStreamError


@pytest.mark.refuse_self_connections
def test_an_initiator_whose_header_this_process_refused_raises_that_refusal() -> None:
    """Both ends in one process: the responder hangs up without a word, so the initiator
    raises the refusal the registry of this process's own headers passed it (with its fix),
    not "the connection ended during the handshake" (issue 24)."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    _one_tcp_connection(initiator, responder)
    run_handshake(initiator, responder)
    with pytest.raises(SelfConnectionError):
        responder.handshake_complete()
    initiator.opener.receive_eof()  # what the initiator sees next: the server hung up
    with pytest.raises(SelfConnectionError, match=r"in this process.*self_connections_allowed\(\)"):
        initiator.handshake_complete()
    # a named ring's refusal (K5) likewise, with self-connections allowed
    with self_connections_allowed():
        initiator = Channel(KEY, role=Role.INITIATOR)
        server = Channel(KeyRing({"alice": KEY}), role=Role.RESPONDER)
        _one_tcp_connection(initiator, server)
        run_handshake(initiator, server)
        initiator.opener.receive_eof()
        with pytest.raises(PeerIdentityError, match=r"in this process.*local_id"):
            initiator.handshake_complete()


def test_an_unanswered_initiator_of_a_named_ring_that_claims_no_name_is_told_the_likely_fix() -> None:
    """Across processes the client cannot know why its server hung up; but a named key (a
    pairwise one, K5) held without a local_id is the likely cause, and the truncation says so."""
    for local_id, hinted in ((None, True), ("alice", False)):
        client = Channel(KeyRing({"server": KEY}), role=Role.INITIATOR, local_id=local_id)
        client.initial_data()
        client.opener.receive_eof()
        with pytest.raises(TruncatedStreamError) as refused:
            client.handshake_complete()
        assert ("names its key 'server' but this end sends no local_id" in str(refused.value)) is hinted


def test_identities_are_sent_bound_and_checked() -> None:
    alice = Channel(KEY, role=Role.INITIATOR, local_id="alice", peer_id="bob")
    bob = Channel(KEY, role=Role.RESPONDER, local_id="bob", peer_id="alice")
    run_handshake(alice, bob)
    assert alice.handshake_complete() and bob.handshake_complete()
    assert (alice.peer_id, bob.peer_id) == (b"bob", b"alice")
    # a responder that expects bob refuses carol, and one without an identity
    for name in ("carol", None):
        server = Channel(KEY, role=Role.RESPONDER, peer_id="bob")
        server.opener.receive_data(Channel(KEY, role=Role.INITIATOR, local_id=name).initial_data())
        with pytest.raises(PeerIdentityError, match="expected b'bob'"):
            server.handshake_complete()
    # an initiator that expects bob refuses a responder that is carol
    client = Channel(KEY, role=Role.INITIATOR, peer_id="bob")
    run_handshake(client, Channel(KEY, role=Role.RESPONDER, local_id="carol"))
    with pytest.raises(PeerIdentityError):
        client.handshake_complete()


def test_two_processes_sharing_a_key_cannot_be_reflected_when_they_name_themselves() -> None:
    """A peer that claims this end's own identity is a reflection (Selfie across processes that
    share the key): refused even without peer_id."""
    server = Channel(KEY, role=Role.RESPONDER, local_id="node-1")
    server.opener.receive_data(Channel(KEY, role=Role.INITIATOR, local_id="node-1").initial_data())
    with pytest.raises(SelfConnectionError, match="own identity"):
        server.handshake_complete()


@pytest.mark.parametrize("bad", ["", "x" * 256])
def test_identity_length_is_checked(bad: str) -> None:
    with pytest.raises(ValueError, match="1 to 255"):
        Channel(KEY, role=Role.INITIATOR, local_id=bad)


# -- downgrades and key exchange choices -----------------------------------------------------------


def test_an_x25519_only_initiator_is_refused_where_the_hybrid_is_required() -> None:
    server = Channel(KEY, role=Role.RESPONDER)  # the default requires the hybrid
    server.opener.receive_data(
        Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.X25519).initial_data()
    )
    with pytest.raises(DowngradeError, match="X25519"):
        server.handshake_complete()
    # a responder that accepts X25519 answers a hybrid offer with the hybrid
    hybrid = Channel(KEY, role=Role.INITIATOR)
    lenient = Channel(KEY, role=Role.RESPONDER, key_exchange=KeyExchange.X25519)
    run_handshake(hybrid, lenient)
    assert hybrid.handshake_complete() and lenient.handshake_complete()
    assert (
        len(handshake_bytes(Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER))[1]) > 1000
    )


def test_an_initiator_refuses_a_weaker_answer() -> None:
    """A responder (holding the key) that answers a hybrid offer with X25519 alone."""
    x_only = Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.X25519)
    answerer = Channel(KEY, role=Role.RESPONDER, key_exchange=KeyExchange.X25519)
    answerer.opener.receive_data(x_only.initial_data())
    weaker_answer = answerer.data_to_send()
    hybrid = Channel(KEY, role=Role.INITIATOR)
    hybrid.initial_data()
    hybrid.opener.receive_data(weaker_answer)
    with pytest.raises(DowngradeError):
        hybrid.handshake_complete()


def test_key_exchange_none_is_not_a_channel() -> None:
    with pytest.raises(ValueError, match="key_exchange"):
        Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.NONE)


# -- key rings --------------------------------------------------------------------------------------


def test_a_server_with_a_key_ring_serves_clients_with_different_keys() -> None:
    old, new = generate_key(), generate_key(256)
    server_keys = KeyRing([new, old])
    for client_key in (old, new):
        client = Channel(client_key, role=Role.INITIATOR)
        server = Channel(server_keys, role=Role.RESPONDER)
        run_handshake(client, server)
        assert client.handshake_complete() and server.handshake_complete()
        server.opener.receive_data(first_record(client))
        assert server.opener.read() == b"the same plaintext"
        client.opener.receive_data(bytes(server.sealer.seal(b"answered under your key", flush=True)))
        assert client.opener.read() == b"answered under your key"
        assert server.sealer.suite == client.sealer.suite
    # a retired key is an unknown key ID
    retired = Channel(generate_key(), role=Role.INITIATOR)
    server = Channel(server_keys, role=Role.RESPONDER)
    server.opener.receive_data(retired.initial_data())
    with pytest.raises(UnknownKeyError, match=key_id(retired._handshake._key_ring.primary).hex()):
        server.handshake_complete()


def test_records_of_one_direction_do_not_open_in_the_other() -> None:
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    run_handshake(initiator, responder)
    initiator.handshake_complete()
    initiator.opener.receive_data(first_record(initiator))  # reflected after the handshake
    with pytest.raises(AuthenticationError):
        initiator.opener.read()


def test_an_initiator_with_a_key_ring_accepts_only_the_key_it_offered() -> None:
    """Review finding (high): an initiator holding KeyRing([current, old]) offers `current`; an
    attacker holding only `old` builds a responder's answer from the format under `old`. The
    initiator must refuse it: it would otherwise complete and send its data to the attacker."""
    current, old = generate_key(), generate_key()
    client = Channel(KeyRing([current, old]), role=Role.INITIATOR)
    hello = client.initial_data()
    offered = parse_header(hello, CHANNEL_FIELDS)  # public bytes: no key needed to parse them
    fields, shared = respond(offered)  # the attacker's half of the exchange
    answer, _ = make_header(old, Role.RESPONDER, 65536, b"", key_exchange=offered.key_exchange, fields=fields)
    keys = channel_keys(old, shared, hello, answer, b"")
    client.opener.receive_data(answer + keys.responder_finished)
    # the opener holds the offered key alone, so `old` is unknown to it (UnknownKeyError, not
    # the HandshakeError of the channel's own later check, which only a whole ring reaches)
    with pytest.raises(UnknownKeyError, match=key_id(old).hex()):
        client.handshake_complete()
    assert not client.sealer.ready


def test_a_named_key_ring_gives_the_identity_of_the_key_proved() -> None:
    alice, bob = generate_key(), generate_key()
    ring = KeyRing({"alice": alice, "bob": bob})
    assert (ring.name(key_id(alice)), ring.name(key_id(bob)), ring.name(key_id(KEY))) == (
        "alice",
        "bob",
        None,
    )
    assert (ring.identity(key_id(alice)), ring.identity(key_id(KEY))) == (b"alice", None)
    as_bytes = KeyRing({b"alice": alice})  # a name is given back as it was written
    assert (as_bytes.name(key_id(alice)), as_bytes.identity(key_id(alice))) == (b"alice", b"alice")
    assert ring.primary == alice
    assert repr(ring) == f"<KeyRing alice={key_id(alice).hex()[:8]}, bob={key_id(bob).hex()[:8]}>"
    server = Channel(ring, role=Role.RESPONDER)
    run_handshake(Channel(bob, role=Role.INITIATOR, local_id="bob"), server)
    assert server.handshake_complete() and server.peer_id == b"bob"
    liar = Channel(ring, role=Role.RESPONDER)
    liar.opener.receive_data(Channel(bob, role=Role.INITIATOR, local_id="alice").initial_data())
    with pytest.raises(PeerIdentityError, match="proved the key named b'bob' but sent identity b'alice'"):
        liar.handshake_complete()
    assert not liar.data_to_send()  # refused before answering
    # review 10b MEDIUM-1: a named key's holder must name itself; the name is not assumed
    silent = Channel(ring, role=Role.RESPONDER)
    silent.opener.receive_data(Channel(bob, role=Role.INITIATOR).initial_data())
    with pytest.raises(PeerIdentityError, match="proved the key named b'bob' but sent no identity"):
        silent.handshake_complete()
    assert not silent.data_to_send()
    with pytest.raises(ValueError, match="two names"):
        KeyRing({"alice": alice, "also alice": alice})
    with pytest.raises(ValueError, match="1 to 255"):
        KeyRing({"": alice})
    # several keys may share a name (a rotation)
    new_alice = generate_key()
    rotated = KeyRing({"alice": [new_alice, alice], "bob": [bob]})
    assert rotated.key_ids == (key_id(new_alice), key_id(alice), key_id(bob))
    assert rotated.name(key_id(alice)) == rotated.name(key_id(new_alice)) == "alice"


def test_fixed_randomness_is_not_reachable_from_the_public_constructor() -> None:
    """Review LOW-7: the test-only injection lives in gcmstream._fixed, and a FixedEphemeral's
    repr shows no key bytes."""
    import inspect

    from gcmstream.handshake import FixedEphemeral

    assert not [name for name in inspect.signature(Channel).parameters if name.startswith("_")]
    with pytest.raises(TypeError):
        Channel(KEY, role=Role.INITIATOR, _salt=bytes(32))  # type: ignore[call-arg]
    secret = bytes(range(100, 132))
    shown = repr(FixedEphemeral(secret, mlkem_seed=bytes(64), mlkem_encapsulation=(secret, secret)))
    assert secret.hex() not in shown and str(secret) not in shown and shown == "FixedEphemeral()"


def _answer(initiator: Channel, responder: Channel) -> None:
    """The initiator's header to the responder, its answer back (the initiator is left to check it)."""
    responder.opener.receive_data(initiator.initial_data())
    assert not responder.handshake_complete()
    initiator.opener.receive_data(responder.data_to_send())


def test_a_listener_refuses_a_peer_that_proved_the_key_named_after_itself() -> None:
    """Review 10b LOW-2: with a mesh ring that names each node's key after the node, A's
    listener refuses a client that proved A's key: the own-name check (K6) runs on the
    identity the key's name gave (K5), not only on the claim."""
    key_a, key_b = generate_key(), generate_key()
    mesh = KeyRing({"A": key_a, "B": key_b})
    for claim in ("A", None):
        listener = Channel(mesh, role=Role.RESPONDER, local_id="A")
        listener.opener.receive_data(Channel(key_a, role=Role.INITIATOR, local_id=claim).initial_data())
        error = SelfConnectionError if claim == "A" else PeerIdentityError
        with pytest.raises(error):
            listener.handshake_complete()
        assert not listener.data_to_send() and listener.peer_id is None
    listener = Channel(mesh, role=Role.RESPONDER, local_id="A")  # B, naming itself, is served
    run_handshake(Channel(key_b, role=Role.INITIATOR, local_id="B"), listener)
    assert listener.handshake_complete() and listener.peer_id == b"B"


def test_an_initiator_checks_the_responders_claim_against_the_name_of_its_key() -> None:
    """Review 10b LOW-3: names count on the initiator too: the responder answered under the
    key the initiator offered, and must claim that key's name; the initiator's peer_id is it."""
    key = generate_key()
    for claim in ("mallory", None):
        client = Channel(KeyRing({"server": key}), role=Role.INITIATOR)
        _answer(client, Channel(key, role=Role.RESPONDER, local_id=claim))
        with pytest.raises(PeerIdentityError, match="proved the key named b'server' but sent"):
            client.handshake_complete()
        assert client.peer_id is None and not client.sealer.ready
    client = Channel(KeyRing({"server": key}), role=Role.INITIATOR, peer_id="server")
    run_handshake(client, Channel(key, role=Role.RESPONDER, local_id="server"))
    assert client.handshake_complete() and client.peer_id == b"server"


def test_end_handshake_before_completion_leaves_the_channel_failed() -> None:
    """Review 10b LOW-7.2: end_handshake() on a pending channel fails it with a HandshakeError
    that says so, and every later call raises again; the peer's bytes are not then parsed as
    records (which gave a misleading RecordTooLargeError)."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(initiator.initial_data())
    assert not responder.handshake_complete()
    answer = responder.data_to_send()
    initiator.end_handshake()
    assert initiator.opener.failed and "failed" in repr(initiator.opener)
    initiator.opener.receive_data(answer)
    with pytest.raises(HandshakeError, match="ended before it completed"):
        initiator.handshake_complete()
    with pytest.raises(StreamBrokenError):
        initiator.handshake_complete()
    # ended after it completed: nothing changes
    done = Channel(KEY, role=Role.INITIATOR)
    run_handshake(done, Channel(KEY, role=Role.RESPONDER))
    done.end_handshake()
    assert done.handshake_complete() and not done.opener.failed


def _own_header_refused() -> bool:
    responder = Channel(KEY, role=Role.RESPONDER)
    # kept alive: an initiator dropped at once is forgotten (nothing waits for its answer)
    initiator = Channel(KEY, role=Role.INITIATOR)
    responder.opener.receive_data(initiator.initial_data())
    try:
        responder.handshake_complete()
    except SelfConnectionError:
        return True
    return False


@pytest.mark.refuse_self_connections
def test_interleaved_allowing_and_refusing_blocks_leave_self_connections_refused() -> None:
    """Review 10b LOW-5: a refusing block (gcmstream.testing's check) and an allowing block
    opened and closed interleaved, by two threads here (two tasks do the same), once left a
    count of -1, which allowed self-connections for ever. Each block now holds a token."""
    import threading

    from gcmstream.channel import _self_connections_refused

    steps = [threading.Event() for _ in range(4)]
    seen: dict[str, bool] = {}

    def refusing() -> None:
        with _self_connections_refused():
            steps[0].set()
            steps[1].wait(5)
            seen["both open"] = _own_header_refused()
        steps[2].set()

    def allowing() -> None:
        steps[0].wait(5)
        with self_connections_allowed():
            steps[1].set()
            steps[2].wait(5)
            seen["refusing block closed"] = _own_header_refused()
        steps[3].set()

    threads = [threading.Thread(target=refusing), threading.Thread(target=allowing)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert steps[3].is_set()
    assert seen == {"both open": True, "refusing block closed": False}
    assert _own_header_refused()  # both closed: refused again, for good
    with self_connections_allowed(), self_connections_allowed():
        assert not _own_header_refused()
    assert _own_header_refused()


# -- what the peer's header carries, forged by a holder of the key (mutation run 2026-12-04) -------

LOW_ORDER_X25519 = bytes(32)  # u = 0: every private key gives the all-zero shared secret
ML_KEM_CIPHERTEXT_SIZE = 1088


def forged_hello(exchange: KeyExchange, fields: list[tuple[int, bytes]]) -> bytes:
    """An initiator header with the fields given, authenticated under KEY (an insider's)."""
    header, _ = make_header(
        KEY, Role.INITIATOR, DEFAULT_RECORD_SIZE, b"", key_exchange=exchange, fields=fields
    )
    return header


def forged_answer(
    client: Channel,
    exchange: KeyExchange,
    replace: Mapping[FieldType, bytes] | None = None,
    extra: list[tuple[int, bytes]] | None = None,
) -> bytes:
    """A responder's header and Finished for ``client``'s offer, made from the format under KEY
    with the shares respond() gives, some replaced or added: only the checks on what the answer
    carries stand between it and a completed handshake."""
    hello = client.initial_data()
    fields, shared = respond(parse_header(hello, CHANNEL_FIELDS))
    substitutes = {int(kind): value for kind, value in (replace or {}).items()}
    fields = [(kind, substitutes.get(kind, value)) for kind, value in fields] + (extra or [])
    answer, _ = make_header(
        KEY, Role.RESPONDER, DEFAULT_RECORD_SIZE, b"", key_exchange=exchange, fields=fields
    )
    return answer + channel_keys(KEY, shared, hello, answer, b"").responder_finished


def test_a_forged_answer_with_nothing_wrong_completes() -> None:
    """The forgery helper's control: unchanged, its answer completes the handshake, so the
    refusals below are the checks' doing, not the helper's."""
    for exchange in (KeyExchange.X25519, KeyExchange.MLKEM768_X25519):
        client = Channel(KEY, role=Role.INITIATOR, key_exchange=exchange)
        client.opener.receive_data(forged_answer(client, exchange))
        assert client.handshake_complete()


@pytest.mark.parametrize("exchange", [KeyExchange.X25519, KeyExchange.MLKEM768_X25519], ids=lambda e: e.name)
def test_a_low_order_x25519_share_is_a_handshake_error_on_both_sides(exchange: KeyExchange) -> None:
    """K8: an all-zero X25519 result is HandshakeError, from the first feed on: not a bare
    ValueError out of receive_data(), not a channel that waits for more."""
    shares = InitiatorShares(exchange).fields()
    low = [(kind, LOW_ORDER_X25519 if kind == FieldType.X25519_SHARE else value) for kind, value in shares]
    server = Channel(KEY, role=Role.RESPONDER, key_exchange=exchange)
    server.opener.receive_data(forged_hello(exchange, low))
    with pytest.raises(HandshakeError, match="X25519 share is not a usable public key"):
        server.handshake_complete()
    assert not server.data_to_send()
    client = Channel(KEY, role=Role.INITIATOR, key_exchange=exchange)
    client.opener.receive_data(
        forged_answer(client, exchange, replace={FieldType.X25519_SHARE: LOW_ORDER_X25519})
    )
    with pytest.raises(HandshakeError, match="X25519 share is not a usable public key"):
        client.handshake_complete()
    assert not client.sealer.ready


def test_an_x25519_header_carrying_an_ml_kem_share_is_refused_either_way() -> None:
    """K8 "exactly the shares": an ML-KEM share in a header labelled X25519 is refused, from an
    initiator (at the responder) and from a responder (at the initiator)."""
    ml_kem_public = InitiatorShares(KeyExchange.MLKEM768_X25519).fields()[1]  # a well-formed key
    assert ml_kem_public[0] == FieldType.MLKEM768_SHARE
    server = Channel(KEY, role=Role.RESPONDER, key_exchange=KeyExchange.X25519)
    hello = forged_hello(KeyExchange.X25519, [*InitiatorShares(KeyExchange.X25519).fields(), ml_kem_public])
    server.opener.receive_data(hello)
    with pytest.raises(HandshakeError, match="initiator's key shares do not match its key exchange X25519"):
        server.handshake_complete()
    assert not server.data_to_send()
    client = Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.X25519)
    ciphertext = (FieldType.MLKEM768_SHARE, bytes(ML_KEM_CIPHERTEXT_SIZE))
    client.opener.receive_data(forged_answer(client, KeyExchange.X25519, extra=[ciphertext]))
    with pytest.raises(HandshakeError, match="responder's key shares do not match its key exchange X25519"):
        client.handshake_complete()
    assert not client.sealer.ready


def test_an_ml_kem_key_failing_the_modulus_check_is_a_handshake_error() -> None:
    """K8 "well formed": 1,184 bytes of 0xFF decode to coefficients of 4095, over q = 3329, so
    FIPS 203's modulus check fails; that is HandshakeError, not a bare ValueError."""
    x_share, _ = InitiatorShares(KeyExchange.MLKEM768_X25519).fields()
    bad_key = (FieldType.MLKEM768_SHARE, b"\xff" * 1184)
    server = Channel(KEY, role=Role.RESPONDER)
    server.opener.receive_data(forged_hello(KeyExchange.MLKEM768_X25519, [x_share, bad_key]))
    with pytest.raises(HandshakeError, match="ML-KEM-768 public key is malformed"):
        server.handshake_complete()
    assert not server.data_to_send()


@pytest.mark.parametrize("checker", [Role.RESPONDER, Role.INITIATOR], ids=lambda r: r.name)
@pytest.mark.parametrize(("size", "accepted"), [(255, True), (1, True), (0, False), (256, False)])
def test_the_identity_the_peer_sends_is_1_to_255_bytes(checker: Role, size: int, accepted: bool) -> None:
    """K3 on what arrives, not only at the constructor: the peer's identity field is checked at
    both ends, 1 and 255 bytes accepted, 0 and 256 refused."""
    identity = (FieldType.IDENTITY, b"p" * size)
    channel = Channel(KEY, role=checker, key_exchange=KeyExchange.X25519)
    if checker is Role.RESPONDER:
        channel.opener.receive_data(
            forged_hello(KeyExchange.X25519, [*InitiatorShares(KeyExchange.X25519).fields(), identity])
        )
    else:
        channel.opener.receive_data(forged_answer(channel, KeyExchange.X25519, extra=[identity]))
    if accepted:
        assert channel.handshake_complete() is (checker is Role.INITIATOR)  # a responder waits for Finished
        assert channel.peer_id == b"p" * size
    else:
        with pytest.raises(HandshakeError, match="identity must be 1 to 255 bytes"):
            channel.handshake_complete()
        assert channel.peer_id is None


def test_an_answer_labelled_hybrid_with_only_an_x25519_share_is_refused() -> None:
    """K2: the responder echoes the offer. An answer labelled MLKEM768_X25519 to an X25519 offer
    (its shares those of X25519, so the shares check alone would let it pass) is refused."""
    client = Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.X25519)
    client.opener.receive_data(forged_answer(client, KeyExchange.MLKEM768_X25519))
    with pytest.raises(HandshakeError, match="answered MLKEM768_X25519 to an offer of X25519"):
        client.handshake_complete()
    assert not client.sealer.ready


def test_channel_keys_never_show_their_secrets() -> None:
    """ChannelKeys' repr and str name no traffic secret and no Finished MAC, in any form."""
    hello = Channel(KEY, role=Role.INITIATOR, key_exchange=KeyExchange.X25519).initial_data()
    keys = channel_keys(KEY, bytes(range(32)), hello, hello, b"")
    shown = repr(keys) + str(keys) + f"{keys!r} {keys!s}"
    secrets = (
        keys.initiator_to_responder,
        keys.responder_to_initiator,
        keys.initiator_finished,
        keys.responder_finished,
    )
    assert len(set(secrets)) == 4
    for secret in secrets:
        for form in (
            secret.hex()[:8],
            secret.hex().upper()[:8],
            repr(secret)[2:10],
            base64.b64encode(secret).decode()[:8],
            base64.urlsafe_b64encode(secret).decode()[:8],
        ):
            assert form not in shown
    assert shown.startswith("<ChannelKeys")


def test_a_key_share_of_the_wrong_length_is_named_by_its_length() -> None:
    """K8 "well formed": each share's length is checked before it reaches cryptography (which
    would refuse it too, as an unusable key, without saying what was wrong with it)."""
    x_share, ml_kem_public = InitiatorShares(KeyExchange.MLKEM768_X25519).fields()
    short_x = (FieldType.X25519_SHARE, x_share[1][:31])
    short_key = (FieldType.MLKEM768_SHARE, ml_kem_public[1][:1183])
    for fields, found in (
        ([short_x, ml_kem_public], "X25519 share must be 32 bytes, found 31 bytes"),
        ([x_share, short_key], "ML-KEM-768 public key must be 1184 bytes, found 1183 bytes"),
    ):
        server = Channel(KEY, role=Role.RESPONDER)
        server.opener.receive_data(forged_hello(KeyExchange.MLKEM768_X25519, fields))
        with pytest.raises(HandshakeError, match=found):
            server.handshake_complete()
    for replace, found in (
        ({FieldType.X25519_SHARE: bytes(31)}, "X25519 share must be 32 bytes, found 31 bytes"),
        (
            {FieldType.MLKEM768_SHARE: bytes(1087)},
            "ML-KEM-768 ciphertext must be 1088 bytes, found 1087 bytes",
        ),
    ):
        client = Channel(KEY, role=Role.INITIATOR)
        client.opener.receive_data(forged_answer(client, KeyExchange.MLKEM768_X25519, replace=replace))
        with pytest.raises(HandshakeError, match=found):
            client.handshake_complete()
        assert not client.sealer.ready


def test_a_wrong_peer_identity_is_named_in_the_error() -> None:
    """PeerIdentityError says what the peer sent (an identity, or none) and what was expected."""
    for name, sent in (("carol", "identity b'carol'"), (None, "no identity")):
        server = Channel(KEY, role=Role.RESPONDER, peer_id="bob")
        server.opener.receive_data(Channel(KEY, role=Role.INITIATOR, local_id=name).initial_data())
        with pytest.raises(PeerIdentityError) as info:
            server.handshake_complete()
        assert str(info.value) == f"the peer sent {sent}, expected b'bob'"


def test_any_holder_of_a_shared_key_can_play_either_end_under_any_name() -> None:
    """SECURITY.md "Insiders" and the README's "Why not TLS?": with one shared key, a name is a
    claim, not a proof. A third holder of the client's and server's key answers the client as
    "server" and connects to the server as "client"; both handshakes complete and each end reads
    what the impostor sealed. Only a key per pair (a named KeyRing) binds a name to a key."""
    client = Channel(KEY, role=Role.INITIATOR, local_id="client", peer_id="server")
    impostor_as_server = Channel(KEY, role=Role.RESPONDER, local_id="server")
    run_handshake(client, impostor_as_server)
    server = Channel(KEY, role=Role.RESPONDER, local_id="server", peer_id="client")
    impostor_as_client = Channel(KEY, role=Role.INITIATOR, local_id="client")
    run_handshake(impostor_as_client, server)
    assert client.handshake_complete() and client.peer_id == b"server"
    assert server.handshake_complete() and server.peer_id == b"client"
    for sender, receiver in ((impostor_as_server, client), (impostor_as_client, server)):
        receiver.opener.receive_data(sender.sealer.seal(b"forged", final=True))
        assert receiver.opener.read() == b"forged"


def phase(channel: Channel) -> ChannelPhase:
    """``channel.phase`` read afresh (a call: mypy does not narrow a property across calls)."""
    return channel.phase


def test_a_channel_reports_its_phase() -> None:
    """Channel.phase, an enum like the Opener's: HEADER, FINISHED once the peer's header
    verified, OPEN once confirmed; FAILED as soon as an error is found or the handshake was
    ended before it completed, and never after OPEN."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    assert phase(initiator) is phase(responder) is ChannelPhase.HEADER
    responder.opener.receive_data(initiator.initial_data())
    assert phase(responder) is ChannelPhase.FINISHED and phase(initiator) is ChannelPhase.HEADER
    initiator.opener.receive_data(responder.data_to_send())
    assert phase(initiator) is ChannelPhase.OPEN and initiator.handshake_complete()
    responder.opener.receive_data(initiator.data_to_send())
    assert phase(responder) is ChannelPhase.OPEN and responder.handshake_complete()
    initiator.end_handshake()
    assert phase(initiator) is ChannelPhase.OPEN
    refused = Channel(KEY, role=Role.RESPONDER)
    refused.opener.receive_data(b"GET / HTTP/1.1\r\n")
    assert phase(refused) is ChannelPhase.FAILED  # found, not yet raised
    with pytest.raises(ProtocolError):
        refused.handshake_complete()
    assert phase(refused) is ChannelPhase.FAILED
    forged = Channel(KEY, role=Role.RESPONDER)
    forged.opener.receive_data(Channel(KEY, role=Role.INITIATOR).initial_data())
    forged.opener.receive_data(bytes(FINISHED_SIZE))
    assert phase(forged) is ChannelPhase.FAILED
    ended = Channel(KEY, role=Role.INITIATOR)
    ended.end_handshake()
    assert phase(ended) is ChannelPhase.FAILED


@pytest.mark.refuse_self_connections
def test_an_initiator_on_an_ipv4_mapped_address_is_told_its_own_refusal() -> None:
    """A client that dials ``::ffff:127.0.0.1`` from an IPv6 socket reaches a server listening
    on ``127.0.0.1``, which names the same connection in IPv4: both name one connection, so the
    refusal reaches the client (rev8 saw a truncation that blamed another key or context)."""
    initiator, responder = Channel(KEY, role=Role.INITIATOR), Channel(KEY, role=Role.RESPONDER)
    initiator.ask_endpoints(lambda: (("::ffff:127.0.0.1", 50000, 0, 0), ("::ffff:127.0.0.1", 8443, 0, 0)))
    responder.ask_endpoints(lambda: (("127.0.0.1", 8443), ("127.0.0.1", 50000)))
    run_handshake(initiator, responder)
    with pytest.raises(SelfConnectionError):
        responder.handshake_complete()
    initiator.opener.receive_eof()
    with pytest.raises(SelfConnectionError):
        initiator.handshake_complete()
