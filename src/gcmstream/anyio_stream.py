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

Over anyio's own TCP socket streams the records are received straight into the
opener's ring once the handshake is over (trio: ``recv_into`` on the socket beneath; asyncio: a
protocol of ours in place of anyio's, see ``_TransportFeed``); any other byte stream goes through
its ``receive()``, whose new ``bytes`` are held by reference, records split between them copied
into the ring. Every send gets fresh sealed memory (``Sealer(reuse_output=False)``) because a
transport may keep what it was given after ``send()`` returns (anyio's asyncio sockets do).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import operator
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar

import anyio
from anyio.abc import (
    AnyByteStream,
    ByteReceiveStream,
    ByteSendStream,
    ByteStream,
    Listener,
    SocketAttribute,
    TaskGroup,
)
from anyio.lowlevel import cancel_shielded_checkpoint, checkpoint, checkpoint_if_cancelled

from ._adapter import (
    PEER_GONE,
    UNKNOWN_PEER,
    answer_only_a_connected_peer,
    anyio_asyncio_protocol,
    blame_connection,
    check_can_take_input,
    handshake,
    raw_socket,
    receive_size,
    remote_address,
    serve_listener,
    tell_endpoints,
)
from ._server import ConnectionDeadlines, Deadline, connection_statistics, describe_handshake_failure
from .admission import AdmissionPolicy
from .codec import Channel, Opener, Phase
from .config import DEFAULT_IDLE_TIMEOUT, DEFAULT_RECORD_TIMEOUT, UNSET, Configuration, Unset, configure
from .errors import StreamBrokenError, StreamClosedError, TruncatedStreamError
from .format import Buffer, KeyExchange, KeyLimits, Keys, Role

__all__ = (
    "AnyioStreamBrokenError",
    "AnyioStreamClosedError",
    "AnyioTruncatedStreamError",
    "GcmStreamAttribute",
    "SecureListener",
    "SecureStream",
    "connect_tcp",
    "connect_unix",
    "create_tcp_listener",
    "create_unix_listener",
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
    """An encrypted, authenticated duplex byte stream. Build it with :meth:`wrap`.

    Its end is explicit: ``send_eof()`` (or leaving ``async with`` without an exception) seals
    FINAL; a transport that closes without it raises AnyioTruncatedStreamError (a
    BrokenResourceError), as a standard-compatible TLSStream does at a close without
    close_notify. Deliberately there is no ``standard_compatible=False``: a cut stream never
    reads as ended (tests/differential/test_anyio_suites.py pins it)."""

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
    # a TCP socket of anyio's: records are received straight into the ring (None: receive())
    # (looked for when the records begin: a connection still in its handshake holds none, part
    # of what an unconfirmed peer makes a server hold, tests/test_pending.py)
    _feed: _DirectFeed | None = field(init=False, default=None, repr=False)
    _feed_sought: bool = field(init=False, default=False, repr=False)

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
        role: Role,
        config: Configuration | None = None,
        key: Keys | Unset = UNSET,
        context: Buffer | Unset = UNSET,
        record_size: int | Unset = UNSET,
        max_record_size: int | Unset = UNSET,
        limits: KeyLimits | Unset | None = UNSET,
        handshake_timeout: float | Unset | None = UNSET,
        record_timeout: float | Unset | None = UNSET,
        idle_timeout: float | Unset | None = UNSET,
        ring_size: int | Unset = UNSET,
        key_exchange: KeyExchange | Unset = UNSET,
        local_id: str | bytes | Unset | None = UNSET,
        peer_id: str | bytes | Unset | None = UNSET,
        on_handshake_input: Callable[[Opener], object] | None = None,
        cancel_scope: anyio.CancelScope | None = None,
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
        peer sent (``Admission.observe``). ``cancel_scope``: a scope, not yet entered, for the
        handshake to run in, its deadline set to the handshake's: a server's pending entry,
        which its admission cancels to evict the connection (the handshake then raises
        TimeoutError); one scope per pending handshake, not two (``gcmstream listen``'s,
        tests/test_pending.py).

        The options are a :class:`~gcmstream.Configuration` (``config=``) or its keywords
        (each not given takes its default), not both; a stream uses every option but
        ``admission`` (a listener's)."""
        config = configure(
            config,
            key=key,
            context=context,
            record_size=record_size,
            max_record_size=max_record_size,
            limits=limits,
            handshake_timeout=handshake_timeout,
            record_timeout=record_timeout,
            idle_timeout=idle_timeout,
            ring_size=ring_size,
            key_exchange=key_exchange,
            local_id=local_id,
            peer_id=peer_id,
        )
        channel = config.channel(role, reuse_output=False)
        deadlines = ConnectionDeadlines(
            handshake_timeout=config.handshake_timeout,
            record_timeout=config.record_timeout,
            idle_timeout=config.idle_timeout,
        )
        return await cls._handshaken(transport_stream, channel, deadlines, on_handshake_input, cancel_scope)

    @classmethod
    async def _handshaken(
        cls,
        transport_stream: AnyByteStream,
        channel: Channel,
        deadlines: ConnectionDeadlines,
        on_handshake_input: Callable[[Opener], object] | None,
        scope: anyio.CancelScope | None = None,
    ) -> SecureStream:
        """``channel``'s handshake over ``transport_stream`` under ``deadlines`` (in ``scope``,
        a server's: ``_adapter.handshake``): the stream."""
        stream = cls(
            transport_stream,
            channel,
            record_timeout=deadlines.record_timeout,
            idle_timeout=deadlines.idle_timeout,
        )
        stream._deadlines = deadlines
        tell_endpoints(channel, raw_socket(transport_stream))  # client and server
        if channel.role is Role.RESPONDER:  # a peer that hung up after its header: no answer
            answer_only_a_connected_peer(channel, raw_socket(transport_stream))
        try:
            await handshake(
                channel,
                stream._send_transport,
                stream._receive_more,
                # (a partial, not a closure: smaller, for as long as a peer keeps it pending)
                abort=functools.partial(anyio.aclose_forcefully, transport_stream),
                on_handshake_input=on_handshake_input,
                deadlines=deadlines,
                scope=scope,
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

    def _receive_more(self) -> Awaitable[bool]:
        """The handshake driver's read: one read into the opener (``_fill``'s own awaitable:
        no frame of this one is held while a pending peer is silent)."""
        return self._fill()

    async def _fill(self, resumed: bool = False) -> bool:
        """Wait for more input (or its end) and give it to the opener, before the core's next
        deadline. True when it waited (a checkpoint); False when a socket read found bytes at
        once (the caller checkpoints). ``resumed``: the first read of a ``receive()`` call,
        after the application had data to read meanwhile: the peer's silence and a record
        part-way in count from now (as asyncio's resume_reading)."""
        opener = self.channel.opener
        check_can_take_input(opener)
        deadlines = self._deadlines
        if resumed:
            deadlines.resumed(anyio.current_time(), opener.receiving_record)
        direct = self._direct(opener)
        at = deadlines.read_timer()
        waited = False
        try:
            if direct is not None and direct.read_now(opener):
                deadlines.received(anyio.current_time(), opener.receiving_record)
                return False  # bytes were waiting in the socket: no wait, the caller checkpoints
            waited = True
            data = await self._wait_for_input(opener, direct, at)
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
            if data:
                opener.receive_data(data)
            deadlines.received(anyio.current_time(), opener.receiving_record)
        return waited

    def _wait_for_input(
        self, opener: Opener, direct: _DirectFeed | None, at: float | None
    ) -> Awaitable[bytes]:
        """One wait for input, until ``at`` (None: no limit): from the socket into the ring, or
        the handshake's bytes (no more than it needs) and then records on their boundaries."""
        wait = direct.wait(opener) if direct is not None else self._receive_transport(receive_size(opener))
        if at is None:  # no scope then (~2 KB on trio while it waits), nor a frame of this one
            return wait
        return _wait_until(wait, at)

    def _direct(self, opener: Opener) -> _DirectFeed | None:
        """The feed that reads the socket into the ring once the records begin, and into the
        header's buffer during the handshake where the feed holds nothing but the socket (trio:
        exactly the bytes the handshake still needs, as ``receive_size``; an unconfirmed peer
        then makes the server hold no ``bytes`` per read and no await chain of ``receive()``,
        tests/test_pending.py). Elsewhere the handshake reads through
        ``receive()``, and asyncio's feed, which takes the transport's protocol, is made only
        when the records begin."""
        phase = opener.phase
        if phase is not Phase.RECORDS and phase is not Phase.HEADER:
            return None
        if not self._feed_sought:
            feed = _direct_feed(self.transport_stream, handshake=phase is Phase.HEADER)
            if feed is None and phase is Phase.HEADER:
                return None  # sought again when the records begin
            self._feed_sought, self._feed = True, feed
        feed = self._feed
        if feed is None or (phase is Phase.HEADER and not feed.reads_handshake):
            return None
        return feed if feed.ready() else None

    def _check_open(self) -> None:
        if self._closed:
            raise AnyioStreamClosedError("the stream was closed (aclose)")

    async def receive(self, max_bytes: int = 65536) -> bytes:
        max_bytes = operator.index(max_bytes)  # TypeError for 1.5, as a socket's
        if max_bytes < 1:  # b"" means the authenticated end here: never return it for this
            # anyio's own message (its streams' tests match it), with the value
            raise ValueError(f"max_bytes must be a positive integer, got {max_bytes}")
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
                waited = await self._fill(resumed=not waited) or waited

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
        if self._feed is not None:
            self._feed.closing()
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
    return AnyioTruncatedStreamError(*exc.args, in_header=exc.in_header)


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
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    record_timeout: float | Unset | None = UNSET,
    idle_timeout: float | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
) -> SecureStream:
    """``anyio.connect_tcp`` plus the handshake (as the channel's initiator); the connection
    is closed if the handshake fails. Options as for :meth:`SecureStream.wrap`."""
    config = configure(
        config,
        key=key,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        record_timeout=record_timeout,
        idle_timeout=idle_timeout,
        ring_size=ring_size,
        key_exchange=key_exchange,
        local_id=local_id,
        peer_id=peer_id,
    )
    transport = await anyio.connect_tcp(remote_host, remote_port)
    return await SecureStream.wrap(transport, role=Role.INITIATOR, config=config)


async def connect_unix(
    path: str | os.PathLike[str],
    *,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    record_timeout: float | Unset | None = UNSET,
    idle_timeout: float | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
) -> SecureStream:
    """``anyio.connect_unix`` plus the handshake, as :func:`connect_tcp`; options as for
    :meth:`SecureStream.wrap`."""
    config = configure(
        config,
        key=key,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        record_timeout=record_timeout,
        idle_timeout=idle_timeout,
        ring_size=ring_size,
        key_exchange=key_exchange,
        local_id=local_id,
        peer_id=peer_id,
    )
    transport = await anyio.connect_unix(path)
    return await SecureStream.wrap(transport, role=Role.INITIATOR, config=config)


@dataclass(eq=False, init=False)
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
    the wrapped one, is public as TLSListener's.

    The options are one :class:`~gcmstream.Configuration`, ``config``: given as ``config=``,
    or built from its keywords (each not given takes its default), not both."""

    listener: Listener[Any]
    config: Configuration

    # while handle_handshake_error runs: the peer and the log level the core chose, by transport
    _failures: dict[int, tuple[object, int]] = field(repr=False)

    def __init__(
        self,
        listener: Listener[Any],
        *,
        config: Configuration | None = None,
        key: Keys | Unset = UNSET,
        context: Buffer | Unset = UNSET,
        record_size: int | Unset = UNSET,
        max_record_size: int | Unset = UNSET,
        limits: KeyLimits | Unset | None = UNSET,
        handshake_timeout: float | Unset | None = UNSET,
        record_timeout: float | Unset | None = UNSET,
        idle_timeout: float | Unset | None = UNSET,
        ring_size: int | Unset = UNSET,
        key_exchange: KeyExchange | Unset = UNSET,
        local_id: str | bytes | Unset | None = UNSET,
        peer_id: str | bytes | Unset | None = UNSET,
        max_pending_handshakes: int | Unset | None = UNSET,
        admission: AdmissionPolicy | Unset | None = UNSET,
    ) -> None:
        config = configure(
            config,
            key=key,
            context=context,
            record_size=record_size,
            max_record_size=max_record_size,
            limits=limits,
            handshake_timeout=handshake_timeout,
            record_timeout=record_timeout,
            idle_timeout=idle_timeout,
            ring_size=ring_size,
            key_exchange=key_exchange,
            local_id=local_id,
            peer_id=peer_id,
            max_pending_handshakes=max_pending_handshakes,
            admission=admission,
        )
        self.listener = listener
        self.config = config
        self._failures = {}

    async def handle_handshake_error(self, exc: Exception, stream: AnyByteStream) -> None:
        """Called when a client's handshake failed (``stream`` is its transport, closed
        already). Logs one line naming the peer (never a key) and the error's message, not the
        error itself (TLSListener's record keeps it as exc_info, and with it the connection), at
        the level the server core chose: debug for a peer that did not prove the key once one
        was said in the last 10 s (the rest are counted in one warning per 10 s, as every
        server does: ``_server.FailureReport``). Override it to do more;
        cancellations are not passed here, they propagate, and neither are connections the
        admission evicted."""
        peer, level = self._failures.get(id(stream), (UNKNOWN_PEER, logging.WARNING))
        describe_handshake_failure(exc, peer, self.config.handshake_timeout, level)

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

        config = self.config

        async def responder(
            transport: AnyByteStream,
            deadlines: ConnectionDeadlines,
            observe: Callable[[Opener], object],
            scope: anyio.CancelScope,
        ) -> SecureStream:
            channel = config.channel(Role.RESPONDER, reuse_output=False)
            return await SecureStream._handshaken(transport, channel, deadlines, observe, scope)

        truncation = AnyioTruncatedStreamError  # (what a hang-up raises on anyio)
        await serve_listener(
            self.listener, config, responder, handler, failed, task_group, truncation=truncation
        )

    async def aclose(self) -> None:
        await self.listener.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self.listener.extra_attributes


async def create_tcp_listener(
    *,
    local_host: str | None = None,
    local_port: int = 0,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    record_timeout: float | Unset | None = UNSET,
    idle_timeout: float | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    max_pending_handshakes: int | Unset | None = UNSET,
    admission: AdmissionPolicy | Unset | None = UNSET,
) -> SecureListener:
    """``anyio.create_tcp_listener`` whose ``serve()`` hands out SecureStreams. A client that
    sends nothing for ``idle_timeout`` seconds while its handler waits to receive is dropped
    (None, the default: never); ``admission`` and ``max_pending_handshakes`` as for
    :class:`SecureListener`; other options as for :meth:`SecureStream.wrap`: a
    :class:`~gcmstream.Configuration` (``config=``) or its keywords, not both."""
    config = configure(
        config,
        key=key,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        record_timeout=record_timeout,
        idle_timeout=idle_timeout,
        ring_size=ring_size,
        key_exchange=key_exchange,
        local_id=local_id,
        peer_id=peer_id,
        max_pending_handshakes=max_pending_handshakes,
        admission=admission,
    )
    listener = await anyio.create_tcp_listener(local_host=local_host, local_port=local_port)
    return SecureListener(listener, config=config)


async def create_unix_listener(
    path: str | os.PathLike[str],
    *,
    mode: int | None = None,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    record_timeout: float | Unset | None = UNSET,
    idle_timeout: float | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    max_pending_handshakes: int | Unset | None = UNSET,
    admission: AdmissionPolicy | Unset | None = UNSET,
) -> SecureListener:
    """``anyio.create_unix_listener`` whose ``serve()`` hands out SecureStreams, as
    :func:`create_tcp_listener` (options as there). ``mode`` is the socket file's permissions,
    as anyio's: None (the default) leaves what the process's umask gives, as asyncio's
    ``start_unix_server`` does; choose who may connect there or with the directory's
    permissions. As anyio's, a stale socket file at ``path`` is replaced."""
    config = configure(
        config,
        key=key,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        record_timeout=record_timeout,
        idle_timeout=idle_timeout,
        ring_size=ring_size,
        key_exchange=key_exchange,
        local_id=local_id,
        peer_id=peer_id,
        max_pending_handshakes=max_pending_handshakes,
        admission=admission,
    )
    listener = await anyio.create_unix_listener(path, mode=mode)
    return SecureListener(listener, config=config)


# -- receiving straight into the ring ---------------------------------------------------------
#
# anyio's receive() returns new bytes for every read, which the opener then holds or copies:
# two allocations and a copy per read that the asyncio protocol path does not pay. For anyio's
# own TCP streams the records are received into the opener's ring instead; any other byte
# stream (TLS, memory, a wrapper of the application's) goes through receive(). The handshake
# always goes through receive(), whose size limit and admission counts it is built on.


async def _wait_until(wait: Awaitable[bytes], at: float) -> bytes:
    with anyio.fail_after(max(0.0, at - anyio.current_time())):
        return await wait


class _DirectFeed:
    """Receives a transport's bytes into the opener's ring, for one SecureStream."""

    __slots__ = ()

    # True when it may also read the handshake (into the header's buffer, before the records)
    reads_handshake: ClassVar[bool] = False

    def ready(self) -> bool:
        """True when the next input may come from here (nothing is held before it)."""
        return True

    def read_now(self, opener: Opener) -> bool:
        """Take bytes that are waiting without waiting; True if it took some (or the end)."""
        return False

    async def wait(self, opener: Opener) -> bytes:
        """Wait for input and put it into the ring (returns ``b""``); the end raises anyio's
        ``EndOfStream``, a lost connection ``BrokenResourceError``, a closed one
        ``ClosedResourceError``, as ``receive()`` does."""
        raise NotImplementedError

    def closing(self) -> None:
        """The stream is being closed by its owner: a wait in progress ends now."""


def _writable(opener: Opener) -> memoryview:
    view = opener.get_buffer()
    if not view:  # an empty view read by recv_into would look like the end of the stream
        opener.buffer_updated(0)
        raise RuntimeError("gcmstream bug: the opener needs input but offers no space")
    return view


class _SocketFeed(_DirectFeed):
    """trio: anyio's SocketStream reads its trio socket and keeps nothing of its own, so reading
    the socket beneath it (``SocketAttribute.raw_socket``, non-blocking) with ``recv_into``
    loses and reorders nothing. A wait is ``wait_readable``, before any byte is taken: a
    cancellation there loses nothing; anyio's ``aclose`` (trio's ``notify_closing``) ends it
    with ``ClosedResourceError``."""

    __slots__ = ("_sock",)

    reads_handshake = True  # it holds the socket only: a pending handshake reads through it too

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def read_now(self, opener: Opener) -> bool:
        view = _writable(opener)
        try:
            count = self._sock.recv_into(view)
        except BlockingIOError:
            opener.buffer_updated(0)
            return False
        except OSError as exc:
            opener.buffer_updated(0)
            if self._sock.fileno() < 0:  # closed (EBADF): what anyio's receive() raises then
                raise anyio.ClosedResourceError from None
            raise anyio.BrokenResourceError from exc
        opener.buffer_updated(count)
        if not count:
            raise anyio.EndOfStream
        return True

    async def wait(self, opener: Opener) -> bytes:
        while True:  # readable without bytes: a spurious wake-up; each pass waits again
            await anyio.wait_readable(self._sock)
            if self.read_now(opener):
                return b""


class _TransportFeed(_DirectFeed, asyncio.BufferedProtocol):
    """asyncio: anyio's SocketStream is an asyncio transport whose protocol copies each read into
    a queue of ``bytes``; the loop also refuses a reader of ours on the transport's socket
    (``add_reader``: "File descriptor is used by transport"). So this protocol takes the
    transport's place (``set_protocol``, the public way to switch protocols) once anyio's queue
    is empty: the loop then receives into the ring (``get_buffer``/``buffer_updated``, as the
    asyncio protocol path does), in order, with nothing left behind in anyio's queue. Reading
    pauses when the ring is full. anyio's protocol keeps the writing side: flow control and the
    connection's loss are passed on to it, so ``send()`` works as before."""

    def __init__(self, transport: asyncio.Transport, inner: asyncio.Protocol) -> None:
        self._transport = transport
        self._inner = inner  # anyio's StreamProtocol
        self._opener: Opener | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._scratch: memoryview | None = None
        self._into_scratch = False
        self._eof = False
        self._lost = False
        self._lost_error: BaseException | None = None
        self._closing = False

    def ready(self) -> bool:
        if self._opener is not None:
            return True
        inner: Any = self._inner
        # what anyio already read (or its end) comes first, through its receive()
        return not (
            inner.read_queue or inner.is_at_eof or inner.exception is not None or self._transport.is_closing()
        )

    async def wait(self, opener: Opener) -> bytes:
        transport = self._transport
        if self._opener is None:
            self._opener = opener
            transport.set_protocol(self)
        if not self._lost and not self._eof:
            if not transport.is_reading() and not transport.is_closing():
                transport.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        else:
            await checkpoint()  # every receive() is a checkpoint, the last one too
        if self._closing:
            raise anyio.ClosedResourceError
        if self._lost and self._lost_error is not None:
            raise anyio.BrokenResourceError from self._lost_error
        if self._eof or self._lost:
            raise anyio.EndOfStream
        return b""

    def closing(self) -> None:
        self._closing = True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # asyncio.BufferedProtocol

    def get_buffer(self, sizehint: int) -> memoryview:
        opener = self._opener
        view = opener.get_buffer() if opener is not None else memoryview(b"")
        self._into_scratch = not view
        if view:
            return view
        # only a failed opener refuses input while reading is on: what it is sent now is worthless
        self._scratch = self._scratch or memoryview(bytearray(4096))
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        opener = self._opener
        if opener is None or self._into_scratch:
            self._transport.pause_reading()
            return
        opener.buffer_updated(nbytes)
        if not opener.wants_data:
            self._transport.pause_reading()  # the ring is full: the reader frees space
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # keep our sending side open, as anyio's protocol does

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._lost_error = exc
        self._inner.connection_lost(exc)  # anyio's send() learns it there
        self._wake()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def _direct_feed(transport: AnyByteStream, *, handshake: bool = False) -> _DirectFeed | None:
    """The feed that receives ``transport``'s bytes into the ring: for anyio's own TCP socket
    streams (and trio's UNIX ones, the same class), recognised by their exact class, so that a
    wrapper (TLS above all), whose raw socket carries other bytes than it returns, keeps
    ``receive()``; None for the rest (uvloop's transports too: not ``asyncio.Transport``).
    ``handshake``: asked while the handshake reads, when only a feed that ``reads_handshake``
    is made (asyncio's is made once the records begin)."""
    kind = type(transport)
    if kind.__module__ == "anyio._backends._trio" and kind.__name__ in ("SocketStream", "UNIXSocketStream"):
        sock = transport.extra(SocketAttribute.raw_socket, None)
        if isinstance(sock, socket.socket):
            return _SocketFeed(sock)
    inner = None if handshake else anyio_asyncio_protocol(transport)
    if inner is not None:  # (anyio's private fields: if a later anyio changes them, receive())
        asyncio_transport = getattr(transport, "_transport", None)
        if isinstance(asyncio_transport, asyncio.Transport):
            return _TransportFeed(asyncio_transport, inner)
    return None
