"""Channel: both directions of one connection, a Sealer for what we send and an Opener for what
we receive, keyed by a one-round-trip handshake (docs/FORMAT.md 5.2). Sans-IO.

Messages, each side's bytes in order::

    initiator -> responder   initiator header (its ephemeral shares)   Finished_I   records...
    responder -> initiator   responder header (its shares)   Finished_R            records...

The responder answers only once the initiator's header verified; the initiator may seal
records as soon as Finished_R verified (one round trip), and sends Finished_I before them. The
responder's handshake completes, and its sealer and receive ring come into being, only once
Finished_I verified: until then a connection holds its header buffer and nothing else.
"""

from __future__ import annotations

import contextlib
import enum
import hmac
import ipaddress
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .errors import (
    DowngradeError,
    HandshakeError,
    PeerIdentityError,
    ProtocolError,
    SelfConnectionError,
    StreamBrokenError,
    StreamClosedError,
    TruncatedStreamError,
)
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    FINISHED_SIZE,
    SALT_SLICE,
    Buffer,
    FieldType,
    KeyExchange,
    KeyLimits,
    KeyRing,
    Keys,
    Role,
    StreamHeader,
    Suite,
    as_key_ring,
    check_identity,
    make_header,
)
from .handshake import (
    CHANNEL_FIELDS,
    MAX_IDENTITY_SIZE,
    ChannelKeys,
    FixedEphemeral,
    InitiatorShares,
    channel_keys,
    respond,
)
from .header import HeaderReader
from .opener import Opener
from .ring import DEFAULT_RING_SIZE
from .sealer import Sealer

__all__ = (
    "DEFAULT_HANDSHAKE",
    "Channel",
    "ChannelPhase",
    "HandshakeOptions",
    "check_key_exchange",
    "self_connections_allowed",
)

# Salts of the initiator headers this process made whose handshake has not ended: a responder
# that receives one is talking to itself (the Selfie attack). Weak, so abandoned channels leave.
_OWN_HELLOS: weakref.WeakValueDictionary[bytes, _Handshake] = weakref.WeakValueDictionary()

Endpoints = Callable[[], tuple[object, object]]
"""What an adapter gives a channel (``Channel.ask_endpoints``): called with no argument, the
connection's (local address, peer address) as its socket names them (None where unknown)."""


def _tcp_address(address: object) -> tuple[str, int] | None:
    """An IP socket's (host, port); None for anything else (a unix socket's path, unknown). An
    IPv4-mapped IPv6 host is its IPv4 address, as the other end of the same connection may
    name it (a client dialing ``::ffff:127.0.0.1`` reaches a server on ``127.0.0.1``)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        if isinstance(host, str) and isinstance(port, int) and not isinstance(port, bool):
            with contextlib.suppress(ValueError):
                mapped = ipaddress.ip_address(host.partition("%")[0])
                if isinstance(mapped, ipaddress.IPv6Address) and mapped.ipv4_mapped is not None:
                    host = str(mapped.ipv4_mapped)
            return host, port
    return None


def _one_connection(initiator: Endpoints | None, responder: Endpoints | None) -> bool:
    """True only if the two ends are certainly the two ends of one TCP connection: each end's
    local address is the other's peer address. Anything unknown (an adapter that could not
    say, a unix socket, an address gone with its socket) is False."""
    if initiator is None or responder is None:
        return False
    mine = [_tcp_address(address) for address in initiator()]
    theirs = [_tcp_address(address) for address in responder()]
    if None in mine or None in theirs:
        return False
    return mine[0] == theirs[1] and mine[1] == theirs[0]


def _refusal_reaches(own: _Handshake, header: StreamHeader, responder: Endpoints | None) -> bool:
    """The one rule of which initiator of this process a responder's refusal reaches
    (``_Handshake.refused_here``): only the one whose connection it certainly is. Its header
    byte for byte (not merely its salt, which anyone who saw its first packet can copy under
    another key), and the responder's connection is the initiator's own, endpoints swapped (a
    header replayed to this process's server by whoever the initiator dialled is the same
    bytes on another connection). Otherwise the initiator sees the truncation it would see
    from any server: the refusal is not its to know."""
    return bool(own._hello) and own._hello == header.raw and _one_connection(own._endpoints, responder)


# One token per open block (review 10b LOW-5): sets cannot go negative or be corrupted by blocks
# of two tasks or threads that open and close interleaved, as a shared counter was; add and
# discard of one set are atomic under the GIL. Process-wide, not a context variable: asyncio
# copies the context into a server's callbacks, so a server started inside a block kept the
# allowance after it ended. Read at the check: allowed while an allowing block is open and no
# refusing one is.
_ALLOWING_BLOCKS: set[object] = set()
_REFUSING_BLOCKS: set[object] = set()


def _self_connections_are_allowed() -> bool:
    return bool(_ALLOWING_BLOCKS) and not _REFUSING_BLOCKS


@contextlib.contextmanager
def _block(blocks: set[object]) -> Iterator[None]:
    token = object()
    blocks.add(token)
    try:
        yield
    finally:
        blocks.discard(token)


@contextlib.contextmanager
def self_connections_allowed() -> Iterator[None]:
    """While this block runs, responders in this process accept initiator headers made by this
    same process, whichever task or thread runs them; once it ends they refuse them again,
    servers started inside it included. For tests and demos that run both ends of a channel in
    one process; elsewhere such a connection is the Selfie attack and is refused
    (SelfConnectionError). Blocks may nest and interleave across tasks and threads."""
    with _block(_ALLOWING_BLOCKS):
        yield


def _self_connections_refused() -> contextlib.AbstractContextManager[None]:
    """The opposite, for gcmstream.testing's check: refused inside, whatever blocks are open."""
    return _block(_REFUSING_BLOCKS)


@dataclass(frozen=True)
class HandshakeOptions:
    """The handshake keywords of a Channel, carried together by the adapters."""

    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519
    local_id: str | bytes | None = None
    peer_id: str | bytes | None = None


DEFAULT_HANDSHAKE = HandshakeOptions()


def check_key_exchange(key_exchange: KeyExchange) -> KeyExchange:
    """What a channel offers (initiator) or accepts at least (responder): one of the two."""
    if key_exchange not in (KeyExchange.X25519, KeyExchange.MLKEM768_X25519):
        raise ValueError("a channel's key_exchange is KeyExchange.MLKEM768_X25519 or KeyExchange.X25519")
    return KeyExchange(key_exchange)


def _identity(value: str | bytes | None, name: str) -> bytes | None:
    return None if value is None else check_identity(value, name)


class ChannelPhase(enum.Enum):
    """Where a Channel's handshake is (``Channel.phase``), each entered once, in order, or
    FAILED from any before OPEN. After OPEN, the records' state is the opener's ``phase``."""

    HEADER = "header"  # the peer's header is awaited (an initiator's own is queued first)
    FINISHED = "finished"  # the peer's header verified, the keys derived; its Finished awaited
    OPEN = "open"  # confirmed: our sealer is keyed, records flow both ways
    FAILED = "failed"  # an error was found, or the handshake was ended before it completed


_HEADER, _FINISHED, _OPEN, _FAILED = ChannelPhase

ENDED_BEFORE_ANSWER = (
    "the connection ended during the handshake: the peer ended its input after its header, "
    "so it could never send its Finished (not answered)"
)
"""Why a responder that ``Channel.ask_before_answering`` told the peer's input ended failed."""


class _Handshake(HeaderReader):
    """A channel's header reader (``gcmstream.header``): it reads the peer's header and Finished
    for the channel's opener, runs this end's half of the key exchange when the header
    verified (``on_header``), confirms the Finished and keys the sealer (``on_finished``). It
    holds no reference to its Channel nor to the Opener: no cycle to break when it ends."""

    finished_size = FINISHED_SIZE

    __slots__ = (
        "__weakref__",
        "_derived",
        "_endpoints",
        "_ephemeral",
        "_exchange",
        "_hello",
        "_hello_salt",
        "_input_ended",
        "_key_ring",
        "_local_id",
        "_outbox",
        "_peer_expected",
        "_record_size",
        "_refusal_here",
        "_salt",
        "_sealer",
        "_shares",
        "_side",
        "_suite",
        "peer_id",
        "phase",
    )

    def __init__(
        self,
        keys: KeyRing,
        side: Role,
        *,
        context: Buffer,
        record_size: int,
        key_exchange: KeyExchange,
        identities: tuple[bytes | None, bytes | None],
        sealer: Sealer,
        outbox: bytearray,
        salt: bytes | None,
        ephemeral: FixedEphemeral | None,
    ) -> None:
        super().__init__(
            # An initiator offered one key (its header names the primary): the responder must
            # answer under that key, never under another key of the ring (review finding: any
            # ring member could otherwise impersonate the server). A responder takes the ring.
            keys.primary_only() if side is Role.INITIATOR else keys,
            context=context,
            role=side.peer,
            known_fields=CHANNEL_FIELDS,
        )
        self._key_ring = keys
        self._side = side
        self._record_size = record_size
        self._exchange = key_exchange
        self._local_id, self._peer_expected = identities
        self._sealer = sealer
        self._outbox = outbox
        self._salt = salt
        self._ephemeral = ephemeral
        self._suite = sealer.suite
        self._shares: InitiatorShares | None = None
        self._derived: ChannelKeys | None = None
        self._hello = b""  # an initiator's header, until the transcript no longer needs it
        self._hello_salt = b""
        self._input_ended: Callable[[], bool] | None = None  # a server's (ask_before_answering)
        self._endpoints: Endpoints | None = None  # the adapter's (ask_endpoints)
        # an initiator's header that a responder of this process refused: that refusal, as this
        # end raises it once its input ends (``refused_here``)
        self._refusal_here: HandshakeError | None = None
        # the peer's identity once its header verified: the name of the key it proved (a
        # responder's named KeyRing), else what it sent (a claim)
        self.peer_id: bytes | None = None
        self.phase = _HEADER
        if side is Role.INITIATOR:
            self._shares = InitiatorShares(key_exchange, ephemeral)
            self._hello, _ = make_header(
                keys.primary,
                Role.INITIATOR,
                record_size,
                self._context,
                salt,
                key_exchange=key_exchange,
                fields=self._shares.fields() + self._identity_field(),
                ident=keys.primary_id,
            )
            self._hello_salt = self._hello[SALT_SLICE]
            _OWN_HELLOS[self._hello_salt] = self
            outbox += self._hello

    def _identity_field(self) -> list[tuple[int, bytes]]:
        return [(FieldType.IDENTITY, self._local_id)] if self._local_id is not None else []

    def end(self) -> None:
        """Drop the ephemeral private keys, derived secrets and own header, and forget this end
        as a pending initiator; FAILED unless it completed."""
        self._shares = None
        self._derived = None
        self._ephemeral = None
        self._hello = b""
        if self._hello_salt:
            _OWN_HELLOS.pop(self._hello_salt, None)
        if self.phase is not _OPEN:
            self.phase = _FAILED

    def _check_identity(self, header: StreamHeader) -> None:
        sent = header.field(FieldType.IDENTITY)
        if sent is not None and not 1 <= len(sent) <= MAX_IDENTITY_SIZE:
            raise HandshakeError(f"the peer's identity must be 1 to {MAX_IDENTITY_SIZE} bytes")
        if (
            self._side is Role.RESPONDER
            and header.salt in _OWN_HELLOS
            and not _self_connections_are_allowed()
        ):
            raise SelfConnectionError(
                "this initiator header was made by this process: a connection to itself (the "
                "Selfie attack; both ends in one process are allowed inside "
                "gcmstream.self_connections_allowed(), for tests and demos)"
            )
        # K5: a named key is a name its holder must claim, on either side. Taking the name for
        # a missing claim (as before review 10b) let a host's own connection, reflected into its
        # listener, pass as the peer the shared key is named after (the pairwise Selfie).
        proved = self._key_ring.identity(header.key_id)
        if proved is not None and sent != proved:
            claim = "no identity" if sent is None else f"identity {sent!r}"
            raise PeerIdentityError(
                f"the peer proved the key named {proved!r} but sent {claim}: "
                "the holder of a named key must send that name as its local_id"
            )
        # K6, on the identity K5 established: never our own (a connection to itself)
        if sent is not None and sent == self._local_id:
            raise SelfConnectionError("the peer claims this end's own identity: a connection to itself?")
        if self._peer_expected is not None and sent != self._peer_expected:
            found = "no identity" if sent is None else f"identity {sent!r}"
            raise PeerIdentityError(f"the peer sent {found}, expected {self._peer_expected!r}")
        self.peer_id = sent

    def refused_here(self, refusal: HandshakeError) -> None:
        """A responder of this same process refused this initiator's header on this very
        connection (``_refusal_reaches``): its server hangs up without a word, so this end
        raises the refusal itself once its input ends (the registry ``_OWN_HELLOS`` is how the
        responder finds it), not a bare truncation."""
        told = f"the server is in this process and refused this connection's header: {refusal}"
        self._refusal_here = type(refusal)(told)

    def ended(self) -> ProtocolError:
        if self._refusal_here is not None:
            return self._refusal_here
        return super().ended()

    def truncation(self) -> str:
        said = super().truncation()
        named = self._key_ring.name(self._key_ring.primary_id)
        if self._side is Role.INITIATOR and named is not None and self._local_id is None:
            # a named ring holds pairwise keys (K5): the server's ring likely names this key
            # too, and refuses a client that does not claim that name
            said += (
                f"; this end's key ring names its key {named!r} but this end sends no local_id: "
                "a server whose ring names this key refuses a peer that does not send that name "
                "(the server's name for this end) as its local_id"
            )
        return said

    def on_header(self, key: bytes, header: StreamHeader, secret: bytes) -> None:
        """The peer's header verified: check it (a responder that refuses a header this process
        made tells its initiator: ``refused_here``), then run our half of the exchange (a
        responder answers with its header and Finished); the peer's Finished comes next."""
        initiator = self._side is Role.INITIATOR
        try:
            self._check_header(header)
        except HandshakeError as refusal:
            own = None if initiator else _OWN_HELLOS.get(header.salt)
            if own is not None and _refusal_reaches(own, header, self._endpoints):
                own.refused_here(refusal)
            raise
        self._suite = header.suite
        if not initiator:
            if self._input_ended is not None and self._input_ended():
                raise TruncatedStreamError(ENDED_BEFORE_ANSWER)  # its Finished can never come
            fields, shared = respond(header, self._ephemeral)
            answer, _ = make_header(  # not kept: once queued, the outbox holds it until sent
                key,
                Role.RESPONDER,
                self._record_size,
                self._context,
                self._salt,
                key_exchange=header.key_exchange,
                fields=fields + self._identity_field(),
                ident=header.key_id,  # the ID that found ``key`` in our ring (its header verified)
            )
            self._derived = channel_keys(key, shared, header.raw, answer, self._context)
            self._outbox += answer
            self._outbox += self._derived.responder_finished
        else:
            if self._shares is None:  # unreachable: an initiator's shares live until Finished
                raise HandshakeError("the handshake already ended")
            shared = self._shares.shared_secret(header)
            self._derived = channel_keys(key, shared, self._hello, header.raw, self._context)
            self._hello = b""
        self.phase = _FINISHED

    def _check_header(self, header: StreamHeader) -> None:
        """The verified header's answer key, key exchange and identity."""
        initiator = self._side is Role.INITIATOR
        if initiator and header.key_id != self._key_ring.primary_id:
            raise HandshakeError("the responder answered under another key than the one offered")
        if header.key_exchange < self._exchange:
            raise DowngradeError(
                f"the peer used key exchange {header.key_exchange.name}, "
                f"this end requires {self._exchange.name}"
            )
        if initiator and header.key_exchange != self._exchange:
            offered = self._exchange.name
            raise HandshakeError(
                f"the responder answered {header.key_exchange.name} to an offer of {offered}"
            )
        self._check_identity(header)

    def on_finished(self, finished: bytes) -> bytes:
        """The peer's Finished arrived: confirm it, key our sealer, return the receive secret.
        The ephemeral keys are dropped here, whatever the outcome."""
        derived = self._derived
        try:
            if derived is None:  # unreachable: on_header ran first
                raise HandshakeError("Finished before the handshake header")
            initiator = self._side is Role.INITIATOR
            expected = derived.responder_finished if initiator else derived.initiator_finished
            if not hmac.compare_digest(finished, expected):
                raise HandshakeError("key confirmation failed: the peer did not derive the same keys")
            if initiator:
                self._outbox += derived.initiator_finished
                send, receive = derived.initiator_to_responder, derived.responder_to_initiator
            else:
                send, receive = derived.responder_to_initiator, derived.initiator_to_responder
            self._sealer.install_secret(send, self._suite)
            self.phase = _OPEN
            return receive
        finally:  # (an error raised here reaches the opener, which keeps it)
            self.end()


class Channel:
    """Both directions of one connection: a Sealer for what we send, an Opener for what we
    receive, keyed by an ephemeral key exchange (hybrid ML-KEM-768 + X25519 by default) mixed
    with the pre-shared key, both headers and the context, and confirmed both ways.

    Drive it by sending ``data_to_send()`` (first the initiator's header; nothing for a
    responder until the initiator's header arrived) while feeding the peer's bytes to
    ``opener``, and again after each feed, until ``handshake_complete()``; ``initial_data()``
    takes the first part alone. Sending while reading (as ``_adapter.handshake`` does) also
    completes over a transport that does not buffer. ``key`` may be a KeyRing: the initiator
    uses its primary key, the responder the key the initiator's header names.

    ``key_exchange`` is what an initiator offers and the least a responder accepts.
    ``local_id`` names this end (sent in its header, bound into the keys); ``peer_id`` is the
    identity the peer must have (PeerIdentityError otherwise). A peer that claims our own
    ``local_id``, or an initiator header this process made, is SelfConnectionError. With a
    KeyRing that names its keys, on either side, a key's name is the identity of the peer this
    end shares it with: a peer that proves a named key must claim that name (its ``local_id``),
    else PeerIdentityError, and that name is its ``peer_id`` after the handshake. A key shared
    by two parties authenticates "one of the two", so the claim is what tells a reflected
    connection from the other party (docs/FORMAT.md 5.2, K5).
    """

    # Fixed randomness for known-answer vectors: set only by the test-only factory
    # gcmstream._fixed.fixed_channel, never through the public constructor.
    _salt: bytes | None = None
    _ephemeral: FixedEphemeral | None = None

    def __init__(
        self,
        key: Keys,
        *,
        role: Role,
        context: Buffer = b"",
        record_size: int = DEFAULT_RECORD_SIZE,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        limits: KeyLimits | None = None,
        auto_key_update: bool = True,
        reuse_output: bool = True,
        ring_size: int = DEFAULT_RING_SIZE,
        key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
        local_id: str | bytes | None = None,
        peer_id: str | bytes | None = None,
    ) -> None:
        if role not in (Role.INITIATOR, Role.RESPONDER):
            raise ValueError("a channel role is Role.INITIATOR or Role.RESPONDER")
        self.role = role
        self.key_exchange = check_key_exchange(key_exchange)
        keys = as_key_ring(key)
        identities = (_identity(local_id, "local_id"), _identity(peer_id, "peer_id"))
        self.sealer = Sealer.unkeyed(
            Suite.for_key(keys.primary),
            record_size=record_size,
            limits=limits,
            auto_key_update=auto_key_update,
            reuse_output=reuse_output,
        )
        self._outbox = bytearray()
        self._initial_taken = False
        self._handshake = _Handshake(
            keys,
            role,
            context=context,
            record_size=record_size,
            key_exchange=self.key_exchange,
            identities=identities,
            sealer=self.sealer,
            outbox=self._outbox,
            salt=self._salt,
            ephemeral=self._ephemeral,
        )
        self.opener = Opener(
            max_record_size=max_record_size, limits=limits, ring_size=ring_size, header_reader=self._handshake
        )

    def __repr__(self) -> str:
        return f"<Channel {self.role.name} {self.key_exchange.name} ready={self.sealer.ready}>"

    @property
    def phase(self) -> ChannelPhase:
        """Where the handshake is (read-only): FAILED as soon as an error was found, even one
        the next call will raise. Once OPEN, the records' state is ``opener.phase``."""
        phase = self._handshake.phase
        if phase is not _OPEN and self.opener.failed:
            return _FAILED
        return phase

    @property
    def peer_id(self) -> bytes | None:
        """The peer's identity once its header verified: the name of the key it proved (a
        responder's named KeyRing), else what it sent (a claim); None before, or if none."""
        return self._handshake.peer_id

    def ask_before_answering(self, input_ended: Callable[[], bool]) -> None:
        """A responder calls ``input_ended`` once, when the peer's header verified and before
        it computes its answer (the responder half of the key exchange): if it says the
        peer's input ended, no answer is computed and the handshake fails with
        TruncatedStreamError (``ENDED_BEFORE_ANSWER``). A genuine initiator never ends its input
        before its Finished, which needs the answer. Servers set it (the kernel's word on the
        socket: ``gcmstream._adapter.answer_only_a_connected_peer``); the channel itself cannot
        see the input end before the header's bytes are read."""
        if self.role is Role.RESPONDER:
            self._handshake._input_ended = input_ended

    def ask_endpoints(self, endpoints: Endpoints) -> None:
        """The adapter's way to this connection's addresses: ``endpoints()`` returns (local
        address, peer address) as the socket names them, None where it cannot say; asked only
        when a responder of this process refuses an initiator header of this process. That
        refusal reaches the initiator (raised by it instead of a truncation) only if both
        ends were given this and their addresses show one TCP connection seen from its two
        ends, and the header is the initiator's own byte for byte (``_refusal_reaches``). Every
        adapter sets it on TCP; without it (a unix socket, a memory stream) the initiator
        sees the truncation."""
        self._handshake._endpoints = endpoints

    def initial_data(self) -> bytes:
        """What to send as soon as the connection exists: the initiator's header; nothing for a
        responder, which answers the initiator's header (``data_to_send``). Once only."""
        if self._initial_taken:
            raise StreamClosedError("the initial data was already taken")
        self._initial_taken = True
        return self.data_to_send() if self.role is Role.INITIATOR else b""

    def data_to_send(self) -> bytes:
        """Handshake bytes waiting to be sent (the initiator's header if ``initial_data()`` did
        not take it, a responder's header and Finished, an initiator's Finished); empty when
        there are none. Call it at the start and after each feed of the opener."""
        self._initial_taken = True  # the first part is taken once, by either name
        out = bytes(self._outbox)
        self._outbox.clear()
        return out

    def handshake_complete(self) -> bool:
        """True once the peer's header and Finished verified (our sealer is keyed); raises the
        handshake's error if it failed, and TruncatedStreamError if the input ended before
        (the handshake then ends: ``end_handshake``)."""
        try:
            verified = self.opener.header_verified()
        except (ProtocolError, StreamBrokenError):  # not a ConcurrencyError: another call is running
            self.end_handshake()
            raise
        return verified and self._handshake.phase is _OPEN

    def end_handshake(self) -> None:
        """Drop the handshake's ephemeral private keys, derived secrets and own header, and
        forget this end as a pending initiator: done when the handshake ends, whatever its
        outcome (confirmed, refused, EOF; the adapters call it on a timeout or a cancellation
        too). Called before the handshake completed, it fails the channel: HandshakeError
        ("ended before it completed") from then on, whatever the peer sends; and the failed
        opener keeps its error without traceback (``Opener.abandon_header``): the error raised
        to the caller, whose traceback holds these frames, and this channel do not keep each
        other alive, so a failed connection is freed when its last reference goes, without
        the cyclic GC."""
        handshake = self._handshake
        handshake.end()
        if handshake.phase is not _OPEN:
            # ended from outside before it completed (a timeout, a cancellation, the caller):
            # the opener fails with that, not with what the peer's next bytes would look like
            self.opener.abandon_header(HandshakeError("the handshake was ended before it completed"))
