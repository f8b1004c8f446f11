"""anyio adapter: a secure ``anyio.abc.ByteStream`` over any byte stream, on asyncio and trio.

Modelled on anyio's ``TLSStream`` and checked against it (tests/differential/test_anyio_stream.py)
and against trio's stream suite (tests/differential/test_trio_suite.py): :meth:`SecureStream.wrap`
runs the channel handshake over ``transport_stream`` (a public field); ``receive()`` never
returns empty bytes and raises ``EndOfStream`` only after an authenticated FINAL record; a
transport that ends without one raises :class:`AnyioTruncatedStreamError`, which is both
gcmstream's TruncatedStreamError and anyio's ``BrokenResourceError``. Two tasks receiving (or
sending) at once get ``BusyResourceError``; after ``aclose()`` every call raises
``ClosedResourceError``, and ``send`` after ``send_eof()`` raises :class:`AnyioStreamClosedError`
(gcmstream's StreamClosedError and anyio's ``ClosedResourceError``). A send that was cancelled
part way leaves the stream broken: later sends raise ``BrokenResourceError``, since the peer
may hold half a record. Every call is a checkpoint, as trio requires.

The stream ends cleanly only when the application says so: ``send_eof()``, or leaving
``async with stream:`` without an exception. ``aclose()``, an exception, a cancellation or a
lost connection never seal FINAL, so a failed transfer reads as a truncation at the peer. (A
deliberate difference from TLSStream, whose ``aclose()`` is a clean end.)

Bytes are copied once from the transport into the opener's ring (anyio streams return new
``bytes``). Every send gets fresh sealed memory (``Sealer(reuse_output=False)``) because a
transport may keep what it was given after ``send()`` returns (anyio's asyncio sockets do).
"""

from __future__ import annotations

import contextlib
import logging
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import (
    AnyByteStream,
    ByteReceiveStream,
    ByteSendStream,
    ByteStream,
    Listener,
    TaskGroup,
)
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint_if_cancelled

from ._adapter import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RECORD_TIMEOUT,
    PEER_GONE,
    RECEIVE_SIZE,
    UNKNOWN_PEER,
    blame_connection,
    check_can_take_input,
    handshake,
    remote_address,
    serve_listener,
)
from ._server import (
    ConnectionDeadlines,
    Deadline,
    connection_statistics,
    describe_handshake_failure,
)
from .admission import DEFAULT_ADMISSION, AdmissionPolicy, admission_policy
from .channel import DEFAULT_HANDSHAKE, HandshakeOptions
from .codec import Channel, Opener
from .config import Configuration
from .errors import StreamBrokenError, StreamClosedError, TruncatedStreamError
from .format import (
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    Buffer,
    KeyExchange,
    KeyLimits,
    Keys,
    Role,
    as_key_ring,
)
from .ring import DEFAULT_RING_SIZE, ring_capacity

__all__ = (
    "AnyioStreamBrokenError",
    "AnyioStreamClosedError",
    "AnyioTruncatedStreamError",
    "GcmStreamAttribute",
    "SecureListener",
    "SecureStream",
    "connect_tcp",
    "create_tcp_listener",
)


class AnyioStreamClosedError(StreamClosedError, anyio.ClosedResourceError):
    """Sending after ``send_eof()``, or any call after ``aclose()``: gcmstream's
    StreamClosedError in anyio's vocabulary (``ClosedResourceError``)."""


class AnyioTruncatedStreamError(TruncatedStreamError, anyio.BrokenResourceError):
    """The peer's stream ended without its FINAL record (it closed without ending the stream,
    or the connection was cut), or the connection ended during the handshake (a server that
    refused it hangs up): gcmstream's TruncatedStreamError, and a ``BrokenResourceError`` so
    that generic anyio code catches it. The transport's error, if any, is ``__cause__``."""


class AnyioStreamBrokenError(StreamBrokenError, anyio.BrokenResourceError):
    """Any receive after the stream failed: gcmstream's StreamBrokenError (``original`` is
    the first error), and a ``BrokenResourceError``, which a broken anyio stream keeps raising."""


class GcmStreamAttribute(anyio.TypedAttributeSet):
    """gcmstream's typed attributes, next to the transport's (``stream.extra(...)``)."""

    # each value is anyio's key object, not a figure: ":meta hide-value:" keeps it off the page

    #: the AEAD suite of this end's records, by name: ``"AES_128_GCM"`` or ``"AES_256_GCM"``
    #:
    #: :meta hide-value:
    suite: str = anyio.typed_attribute()
    #: the most plaintext bytes this end seals into one record (``record_size=`` of ``wrap``)
    #:
    #: :meta hide-value:
    record_size: int = anyio.typed_attribute()
    #: records this end has sealed so far (the FINAL record counts once it is sealed)
    #:
    #: :meta hide-value:
    records_sealed: int = anyio.typed_attribute()
    #: plaintext bytes this end has sealed so far
    #:
    #: :meta hide-value:
    bytes_sealed: int = anyio.typed_attribute()
    #: records of the peer opened so far: each authenticated (the FINAL record counts too)
    #:
    #: :meta hide-value:
    records_opened: int = anyio.typed_attribute()
    #: plaintext bytes of the peer's records opened so far, all authenticated
    #:
    #: :meta hide-value:
    bytes_opened: int = anyio.typed_attribute()
    #: the public ID of the key the peer proved in the handshake (from a KeyRing: which one)
    #:
    #: :meta hide-value:
    peer_key_id: bytes = anyio.typed_attribute()
    #: the identity the peer sent in the handshake (its ``local_id``), or None: proved when the
    #: key it proved is named in a KeyRing (``KeyRing.name(peer_key_id)``), else only a claim
    #:
    #: :meta hide-value:
    peer_id: bytes | None = anyio.typed_attribute()


@dataclass(eq=False)
class SecureStream(ByteStream):
    """An encrypted, authenticated duplex byte stream. Build it with :meth:`wrap`."""

    transport_stream: AnyByteStream
    channel: Channel
    _receive_guard: anyio.ResourceGuard = field(init=False, repr=False)
    _send_guard: anyio.ResourceGuard = field(init=False, repr=False)
    _send_broken: BaseException | None = field(init=False, default=None, repr=False)
    _receive_lost: BaseException | None = field(init=False, default=None, repr=False)
    _closed: bool = field(init=False, default=False, repr=False)
    record_timeout: float | None = field(default=DEFAULT_RECORD_TIMEOUT, repr=False)
    idle_timeout: float | None = field(default=DEFAULT_IDLE_TIMEOUT, repr=False)
    # the server core's deadlines (record, idle; the handshake's while wrap runs it): it
    # computes them, _receive_more arms the earliest around each read
    _deadlines: ConnectionDeadlines = field(init=False, repr=False)

    # an object stream of bytes (AnyByteStream includes them, as TLSStream.wrap takes them)
    # receives whole items, without a size, and is sent bytes, not a view of ours
    _sized_receive: bool = field(init=False, default=True, repr=False)
    _sends_views: bool = field(init=False, default=True, repr=False)

    def __post_init__(self) -> None:
        self._receive_guard = anyio.ResourceGuard("reading from")
        self._send_guard = anyio.ResourceGuard("writing to")
        self._deadlines = ConnectionDeadlines(
            record_timeout=self.record_timeout, idle_timeout=self.idle_timeout
        )
        self._sized_receive = isinstance(self.transport_stream, ByteReceiveStream)
        self._sends_views = isinstance(self.transport_stream, ByteSendStream)

    @classmethod
    async def wrap(
        cls,
        transport_stream: AnyByteStream,
        *,
        key: Keys,
        role: Role,
        context: Buffer = b"",
        record_size: int = DEFAULT_RECORD_SIZE,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        limits: KeyLimits | None = None,
        handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
        record_timeout: float | None = DEFAULT_RECORD_TIMEOUT,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
        ring_size: int = DEFAULT_RING_SIZE,
        key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
        local_id: str | bytes | None = None,
        peer_id: str | bytes | None = None,
        on_handshake_input: Callable[[Opener], object] | None = None,
    ) -> SecureStream:
        """Run the channel handshake (one round trip, both sides confirmed), sending while
        receiving (so it works over a transport that does not buffer). One side is
        Role.INITIATOR, the other Role.RESPONDER. A responder with another key or context
        hangs up at the initiator's header (TruncatedStreamError at the initiator); an
        initiator with another key gets KeyCommitmentError at the responder's header.
        TimeoutError after ``handshake_timeout`` seconds; on any failure the transport is
        closed (forcefully) before the error is raised. ``key`` may be a KeyRing;
        ``key_exchange``, ``local_id``, ``peer_id`` as for :class:`~gcmstream.Channel`. A
        record that has begun to arrive must finish within ``record_timeout`` seconds (None:
        no limit), or the transport is closed and the receive raises AnyioTruncatedStreamError
        caused by TimeoutError; so does a receive that waited ``idle_timeout`` seconds after the
        handshake with nothing arriving (None, the default: no limit; meant for servers, see
        SECURITY.md "Memory per connection"). ``ring_size`` is the receive ring's byte budget
        (as for :class:`~gcmstream.Channel`). ``transport_stream`` may be an anyio byte stream
        or an object stream of bytes (``StapledObjectStream`` of memory object streams), as
        for anyio's ``TLSStream.wrap``; an object stream's items arrive whole, so the
        handshake's bound on what an unconfirmed peer makes us hold counts items, not bytes.

        A responder that refuses this side's header hangs up: that (and any connection lost
        during the handshake) raises :class:`AnyioTruncatedStreamError`, the
        ``BrokenResourceError`` that anyio code expects of a broken transport.
        ``on_handshake_input`` is called with the channel's opener after each read of the
        handshake: a server's :class:`~gcmstream.admission.Admission` learns there what the
        peer sent (``Admission.observe``)."""
        channel = Channel(
            key,
            role=role,
            context=context,
            record_size=record_size,
            max_record_size=max_record_size,
            limits=limits,
            reuse_output=False,
            ring_size=ring_size,
            key_exchange=key_exchange,
            local_id=local_id,
            peer_id=peer_id,
        )
        deadlines = ConnectionDeadlines(
            handshake_timeout=handshake_timeout, record_timeout=record_timeout, idle_timeout=idle_timeout
        )
        return await cls._handshaken(transport_stream, channel, deadlines, on_handshake_input)

    @classmethod
    async def _handshaken(
        cls,
        transport_stream: AnyByteStream,
        channel: Channel,
        deadlines: ConnectionDeadlines,
        on_handshake_input: Callable[[Opener], object] | None,
    ) -> SecureStream:
        """``channel``'s handshake over ``transport_stream`` under ``deadlines``: the stream."""
        stream = cls(
            transport_stream,
            channel,
            record_timeout=deadlines.record_timeout,
            idle_timeout=deadlines.idle_timeout,
        )
        stream._deadlines = deadlines

        async def abort() -> None:
            await anyio.aclose_forcefully(transport_stream)

        try:
            await handshake(
                channel,
                stream._send_transport,
                stream._receive_more,
                abort=abort,
                on_handshake_input=on_handshake_input,
                deadlines=deadlines,
            )
        except TruncatedStreamError as exc:
            raise _anyio_truncation(exc, stream._receive_lost) from (exc.__cause__ or exc)
        return stream

    async def _send_transport(self, data: Buffer) -> None:
        if self._sends_views:
            await self.transport_stream.send(data)  # type: ignore[arg-type]  # any buffer works
        else:
            await self.transport_stream.send(bytes(data))  # an item the receiver may keep

    async def _receive_transport(self, size: int) -> bytes:
        if self._sized_receive:
            return await self.transport_stream.receive(size)  # type: ignore[call-arg]
        return await self.transport_stream.receive()

    async def _receive_more(self, resumed: bool = False) -> None:
        """Read once from the transport into the opener, before the core's next deadline.
        ``resumed``: the first read of a ``receive()`` call, after the application had data to
        read meanwhile: the peer's silence and a record part-way in count from now (as
        asyncio's resume_reading)."""
        opener = self.channel.opener
        check_can_take_input(opener)
        deadlines = self._deadlines
        if resumed:
            deadlines.resumed(anyio.current_time(), opener.receiving_record)
        # before confirmation, read no more than the handshake needs: an unconfirmed peer makes
        # us hold its header and Finished, nothing else
        size = opener.header_missing or RECEIVE_SIZE
        at = deadlines.read_timer()
        try:
            if at is None:  # no scope then: a cancel scope costs ~2 KB on trio while it waits
                data = await self._receive_transport(size)
            else:
                with anyio.fail_after(max(0.0, at - anyio.current_time())):
                    data = await self._receive_transport(size)
        except TimeoutError:
            expired = deadlines.handle_timer(max(anyio.current_time(), at or 0.0))
            if expired is None or expired is Deadline.HANDSHAKE:
                raise  # the handshake driver's (it closes the transport, says why)
            peer = remote_address(self.transport_stream) or UNKNOWN_PEER
            opener.receive_eof()
            deadlines.ended()
            self._receive_lost = deadlines.drop(expired, peer)
            await anyio.aclose_forcefully(self.transport_stream)
        except (anyio.EndOfStream, anyio.IncompleteRead):
            opener.receive_eof()
            deadlines.ended()
        except anyio.BrokenResourceError as exc:
            opener.receive_eof()
            deadlines.ended()
            self._receive_lost = exc
        else:
            opener.receive_data(data)
            deadlines.received(anyio.current_time(), opener.receiving_record)

    def _check_open(self) -> None:
        if self._closed:
            raise AnyioStreamClosedError("the stream was closed (aclose)")

    async def receive(self, max_bytes: int = 65536) -> bytes:
        max_bytes = operator.index(max_bytes)  # TypeError for 1.5, as a socket's
        if max_bytes < 1:  # b"" means the authenticated end here: never return it for this
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        with self._receive_guard:
            await checkpoint_if_cancelled()
            self._check_open()
            opener = self.channel.opener
            waited = False
            while True:
                try:
                    data = opener.read(max_bytes)
                except TruncatedStreamError as exc:
                    raise _anyio_truncation(exc, self._receive_lost) from (exc.__cause__ or exc)
                except StreamBrokenError as exc:
                    raise AnyioStreamBrokenError(exc.original) from exc.original
                if data is not None:
                    if not waited:  # a checkpoint in every call, without losing the data read
                        await cancel_shielded_checkpoint()
                    if not data:
                        raise anyio.EndOfStream
                    return data
                await self._receive_more(resumed=not waited)
                waited = True

    def _check_can_send(self) -> None:
        self._check_open()
        if self._send_broken is not None:
            raise anyio.BrokenResourceError("an earlier send was interrupted") from self._send_broken

    async def send(self, item: bytes) -> None:
        with self._send_guard:
            await checkpoint_if_cancelled()  # a send cancelled before it began breaks nothing
            self._check_can_send()
            if self.channel.sealer.closed:
                raise AnyioStreamClosedError("cannot send after send_eof()")
            output = self.channel.sealer.seal(item, flush=True)
            if output:
                await self._send_sealed(output)
            else:
                await cancel_shielded_checkpoint()

    async def _send_sealed(self, output: memoryview) -> None:
        try:
            await self._send_transport(output)
        except BaseException as exc:
            self._send_broken = exc  # the peer may have half a record: nothing sent later can be trusted
            raise

    async def send_eof(self) -> None:
        """Seal the FINAL record (the clean end of what we send) and half-close the transport
        when it supports that. Again later, it only checkpoints (trio's rule)."""
        with self._send_guard:
            await checkpoint_if_cancelled()
            self._check_can_send()
            if self.channel.sealer.closed:
                await cancel_shielded_checkpoint()
                return
            await self._send_sealed(self.channel.sealer.close())
            try:
                await self.transport_stream.send_eof()
            except NotImplementedError:
                pass  # FINAL already told the peer
            except OSError as exc:  # a socket whose peer is gone (anyio passes shutdown's error on)
                raise anyio.BrokenResourceError(f"could not half-close: {exc}") from exc

    async def aclose(self) -> None:
        """Close the transport. This does NOT seal FINAL: only ``send_eof()`` (or leaving
        ``async with stream:`` without an exception) ends the stream cleanly; a transfer that
        failed must look cut short (TruncatedStreamError) to the peer, never complete."""
        self._closed = True
        await self.transport_stream.aclose()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        """Leaving the block without an exception ends the stream (``send_eof``), then closes;
        with one (a cancellation too), it only closes: the peer sees a truncation.

        A peer that already left (it ended its stream and closed its socket: a client that got
        its answer) cannot take our FINAL: sending it or half-closing then fails with
        ``BrokenResourceError`` (``could not half-close`` on trio), which is not raised here,
        as trio's ``SSLStream.aclose`` suppresses it when its close_notify cannot be sent:
        FINAL and the half-close are all that call sends. An explicit ``send_eof()`` raises."""
        try:
            if exc_type is None and not self._closed:
                with contextlib.suppress(*PEER_GONE):
                    await self.send_eof()
        finally:
            await self.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        sealer, opener = self.channel.sealer, self.channel.opener

        def figure(name: str) -> Callable[[], Any]:
            return lambda: connection_statistics(sealer, opener)[name]

        return {
            **self.transport_stream.extra_attributes,
            **{getattr(GcmStreamAttribute, name): figure(name) for name in _FIGURES},
        }


def _anyio_truncation(
    exc: TruncatedStreamError, connection_error: BaseException | None
) -> AnyioTruncatedStreamError:
    """A truncation in anyio's vocabulary (also a BrokenResourceError), blamed on the
    transport's error if the connection was lost: the one conversion of receive and wrap."""
    blame_connection(exc, connection_error)
    return AnyioTruncatedStreamError(*exc.args)


_FIGURES = (
    "suite",
    "record_size",
    "records_sealed",
    "bytes_sealed",
    "records_opened",
    "bytes_opened",
    "peer_key_id",
    "peer_id",
)


async def connect_tcp(
    remote_host: str,
    remote_port: int,
    *,
    key: Keys,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    limits: KeyLimits | None = None,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    record_timeout: float | None = DEFAULT_RECORD_TIMEOUT,
    ring_size: int = DEFAULT_RING_SIZE,
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
) -> SecureStream:
    """``anyio.connect_tcp`` plus the handshake (as the channel's initiator); the connection
    is closed if the handshake fails. Options as for :meth:`SecureStream.wrap`."""
    transport = await anyio.connect_tcp(remote_host, remote_port)
    return await SecureStream.wrap(
        transport,
        key=key,
        role=Role.INITIATOR,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        record_timeout=record_timeout,
        ring_size=ring_size,
        key_exchange=key_exchange,
        local_id=local_id,
        peer_id=peer_id,
    )


@dataclass(eq=False)
class SecureListener(Listener[SecureStream]):
    """Wraps a listener so that ``serve()`` hands out handshaken SecureStreams (as responder).
    Clients that fail the handshake or do not complete it within ``handshake_timeout`` are
    dropped and passed to :meth:`handle_handshake_error` (as anyio's TLSListener does); which
    may wait for their handshake is ``admission``'s rule (:class:`~gcmstream.AdmissionPolicy`;
    ``max_pending_handshakes=N``, when given, stands for
    ``AdmissionPolicy.from_max_pending_handshakes(N)``); one the admission drops or refuses is
    closed without a log line of its own. The listener keeps serving.

    An exception that escapes ``handler`` ends that connection only (unlike anyio's own
    listeners, whose task group it would end): it is logged once with the peer and the
    connection is closed without FINAL, so the client reads a truncation; cancellations
    propagate. There is no ``accept()``: anyio's ``Listener`` API is ``serve()`` alone, and its
    TLSListener adds none; one that ran handshakes one at a time would let a client that sends
    nothing hold up every other for ``handshake_timeout``. Nor a ``listeners`` list (a
    MultiListener's): their ``accept()`` would hand out plaintext connections. ``listener``,
    the wrapped one, is public as TLSListener's."""

    listener: Listener[Any]
    key: Keys = field(repr=False)
    context: bytes = field(default=b"", repr=False)
    record_size: int = DEFAULT_RECORD_SIZE
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    limits: KeyLimits | None = None
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT
    record_timeout: float | None = DEFAULT_RECORD_TIMEOUT
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    ring_size: int = DEFAULT_RING_SIZE
    options: HandshakeOptions = DEFAULT_HANDSHAKE
    max_pending_handshakes: int | None = None
    admission: AdmissionPolicy = DEFAULT_ADMISSION

    # while handle_handshake_error runs: the peer and the log level the core chose, by transport
    _failures: dict[int, tuple[object, int]] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        given = None if self.admission is DEFAULT_ADMISSION else self.admission
        self.admission = admission_policy(given, self.max_pending_handshakes)  # checked here

    def _configuration(self) -> Configuration:
        """This listener's options as one Configuration (what the server core runs on)."""
        return Configuration(
            key=self.key,
            context=self.context,
            key_exchange=self.options.key_exchange,
            local_id=self.options.local_id,
            peer_id=self.options.peer_id,
            record_size=self.record_size,
            max_record_size=self.max_record_size,
            ring_size=self.ring_size,
            limits=self.limits,
            handshake_timeout=self.handshake_timeout,
            record_timeout=self.record_timeout,
            idle_timeout=self.idle_timeout,
            admission=self.admission,
        )

    async def handle_handshake_error(self, exc: Exception, stream: AnyByteStream) -> None:
        """Called when a client's handshake failed (``stream`` is its transport, closed
        already). Logs one line naming the peer (never a key), at debug level past the
        admission's quota under a flood. Override it to do more; cancellations are not passed
        here, they propagate, and neither are connections the admission evicted."""
        peer, level = self._failures.get(id(stream), (UNKNOWN_PEER, logging.WARNING))
        describe_handshake_failure(exc, peer, self.handshake_timeout, level)

    async def serve(
        self,
        handler: Callable[[SecureStream], Any],
        task_group: TaskGroup | None = None,
    ) -> None:
        async def failed(exc: Exception, transport: AnyByteStream, peer: object, level: int) -> None:
            self._failures[id(transport)] = (peer, level)
            try:
                await self.handle_handshake_error(exc, transport)
            finally:
                del self._failures[id(transport)]

        config = self._configuration()

        async def responder(
            transport: AnyByteStream, deadlines: ConnectionDeadlines, observe: Callable[[Opener], object]
        ) -> SecureStream:
            channel = config.channel(Role.RESPONDER, reuse_output=False)
            return await SecureStream._handshaken(transport, channel, deadlines, observe)

        await serve_listener(self.listener, config, responder, handler, failed, task_group)

    async def aclose(self) -> None:
        await self.listener.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self.listener.extra_attributes


async def create_tcp_listener(
    *,
    key: Keys,
    local_host: str | None = None,
    local_port: int = 0,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    limits: KeyLimits | None = None,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    record_timeout: float | None = DEFAULT_RECORD_TIMEOUT,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
    ring_size: int = DEFAULT_RING_SIZE,
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
    max_pending_handshakes: int | None = None,
    admission: AdmissionPolicy | None = None,
) -> SecureListener:
    """``anyio.create_tcp_listener`` whose ``serve()`` hands out SecureStreams. A client that
    sends nothing for ``idle_timeout`` seconds while its handler waits to receive is dropped
    (None, the default: never); ``admission`` and ``max_pending_handshakes`` as for
    :class:`SecureListener`; other options as for :meth:`SecureStream.wrap`."""
    ring_capacity(max_record_size, ring_size)  # a bad ring_size raises now, not per client
    policy = admission_policy(admission, max_pending_handshakes)  # a bad one raises now
    listener = await anyio.create_tcp_listener(local_host=local_host, local_port=local_port)
    return SecureListener(
        listener=listener,
        key=as_key_ring(key),  # once, not a ring (and its key IDs) per connection
        context=bytes(context),
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        record_timeout=record_timeout,
        idle_timeout=idle_timeout,
        ring_size=ring_size,
        options=HandshakeOptions(key_exchange=key_exchange, local_id=local_id, peer_id=peer_id),
        admission=policy,
    )
