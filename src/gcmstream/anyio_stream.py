"""anyio adapter: a secure ``anyio.abc.ByteStream`` over any byte stream, on asyncio and trio.

Modelled on anyio's ``TLSStream``: :meth:`SecureStream.wrap` runs the channel handshake over
``transport_stream`` (a public field); ``receive()`` never returns empty bytes and raises
``EndOfStream`` only after an authenticated FINAL record; a transport that ends without one
raises :class:`~gcmstream.errors.TruncatedStreamError`. Two tasks receiving (or sending) at once
get ``BusyResourceError``. A send that was cancelled part way leaves the stream broken: later
sends raise ``BrokenResourceError``, since the peer may hold half a record. ``send_eof()`` is
the only clean end: ``aclose()`` without it reads as a truncation at the peer, on purpose.

Bytes are copied once from the transport into the opener's ring (anyio streams return new
``bytes``). Every send gets fresh sealed memory (``Sealer(reuse_output=False)``) because a
transport may keep what it was given after ``send()`` returns (anyio's asyncio sockets do).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import AnyByteStream, ByteStream, Listener, TaskGroup

from .channel import DEFAULT_HANDSHAKE, HandshakeOptions
from .codec import Channel
from .errors import GcmStreamError, TruncatedStreamError
from .format import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    Buffer,
    KeyExchange,
    KeyLimits,
    KeyRing,
    Keys,
    Role,
)
from .pending import DEFAULT_MAX_PENDING_HANDSHAKES, PendingHandshakes

__all__ = (
    "GcmStreamAttribute",
    "SecureListener",
    "SecureStream",
    "connect_tcp",
    "create_tcp_listener",
)

logger = logging.getLogger("gcmstream")

_RECEIVE_SIZE = 256 * 1024


class GcmStreamAttribute(anyio.TypedAttributeSet):
    """gcmstream's typed attributes, next to the transport's (``stream.extra(...)``)."""

    suite: str = anyio.typed_attribute()
    record_size: int = anyio.typed_attribute()
    records_sealed: int = anyio.typed_attribute()
    bytes_sealed: int = anyio.typed_attribute()
    records_opened: int = anyio.typed_attribute()
    bytes_opened: int = anyio.typed_attribute()


@dataclass(eq=False)
class SecureStream(ByteStream):
    """An encrypted, authenticated duplex byte stream. Build it with :meth:`wrap`."""

    transport_stream: AnyByteStream
    channel: Channel
    _receive_guard: anyio.ResourceGuard = field(init=False, repr=False)
    _send_guard: anyio.ResourceGuard = field(init=False, repr=False)
    _send_broken: BaseException | None = field(init=False, default=None, repr=False)
    _receive_lost: BaseException | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._receive_guard = anyio.ResourceGuard("reading from")
        self._send_guard = anyio.ResourceGuard("writing to")

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
        key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
        local_id: str | bytes | None = None,
        peer_id: str | bytes | None = None,
    ) -> SecureStream:
        """Run the channel handshake (one round trip, both sides confirmed). One side is
        Role.INITIATOR, the other Role.RESPONDER. A responder with another key or context
        hangs up at the initiator's header (TruncatedStreamError at the initiator)."""
        channel = Channel(
            key,
            role=role,
            context=context,
            record_size=record_size,
            max_record_size=max_record_size,
            limits=limits,
            reuse_output=False,
            key_exchange=key_exchange,
            local_id=local_id,
            peer_id=peer_id,
        )
        stream = cls(transport_stream, channel)
        await stream._send_handshake(channel.initial_data())
        while not channel.handshake_complete():
            await stream._receive_more()
            await stream._send_handshake(channel.data_to_send())
        await stream._send_handshake(channel.data_to_send())  # the initiator's Finished
        return stream

    async def _send_handshake(self, data: bytes) -> None:
        if data:
            await self.transport_stream.send(data)

    async def _receive_more(self) -> None:
        opener = self.channel.opener
        if not opener.wants_data:  # read() said "need input": refusing it would spin forever
            raise RuntimeError("gcmstream bug: the opener needs input but cannot take any")
        try:
            # before confirmation, read no more than the handshake needs: an unconfirmed peer
            # makes us hold its header and Finished, nothing else
            size = opener.header_missing or _RECEIVE_SIZE
            data = await self.transport_stream.receive(size)  # type: ignore[call-arg]
        except (anyio.EndOfStream, anyio.IncompleteRead):
            opener.receive_eof()
        except anyio.BrokenResourceError as exc:
            opener.receive_eof()
            self._receive_lost = exc
        else:
            opener.receive_data(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if max_bytes < 1:  # b"" means the authenticated end here: never return it for this
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        with self._receive_guard:
            await anyio.lowlevel.checkpoint_if_cancelled()
            opener = self.channel.opener
            while True:
                try:
                    data = opener.read(max_bytes)
                except TruncatedStreamError as exc:
                    if exc.__cause__ is None and self._receive_lost is not None:
                        exc.__cause__ = self._receive_lost
                    raise
                if data is not None:
                    if not data:
                        raise anyio.EndOfStream
                    return data
                await self._receive_more()

    async def send(self, item: bytes) -> None:
        with self._send_guard:
            if self._send_broken is not None:
                raise anyio.BrokenResourceError("an earlier send was interrupted") from self._send_broken
            output = self.channel.sealer.seal(item, flush=True)
            await self._send_sealed(output)

    async def _send_sealed(self, output: memoryview) -> None:
        if not output:
            return
        try:
            await self.transport_stream.send(output)  # type: ignore[arg-type]  # any buffer works
        except BaseException as exc:
            self._send_broken = exc  # the peer may have half a record: nothing sent later can be trusted
            raise

    async def send_eof(self) -> None:
        """Seal the FINAL record and half-close the transport when it supports that."""
        with self._send_guard:
            if self._send_broken is not None:
                raise anyio.BrokenResourceError("an earlier send was interrupted") from self._send_broken
            await self._send_sealed(self.channel.sealer.close())
            with contextlib.suppress(NotImplementedError):  # FINAL already told the peer
                await self.transport_stream.send_eof()

    async def aclose(self) -> None:
        """Close the transport. This does NOT seal FINAL: only ``send_eof()`` ends the stream
        cleanly. ``async with stream:`` closes on errors too, and a transfer that failed must
        look cut short (TruncatedStreamError) to the peer, never complete."""
        await self.transport_stream.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        sealer, opener = self.channel.sealer, self.channel.opener
        return {
            **self.transport_stream.extra_attributes,
            GcmStreamAttribute.suite: lambda: sealer.suite.name,
            GcmStreamAttribute.record_size: lambda: sealer.record_size,
            GcmStreamAttribute.records_sealed: lambda: sealer.records_sealed,
            GcmStreamAttribute.bytes_sealed: lambda: sealer.bytes_sealed,
            GcmStreamAttribute.records_opened: lambda: opener.records_opened,
            GcmStreamAttribute.bytes_opened: lambda: opener.bytes_opened,
        }


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
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
) -> SecureStream:
    """``anyio.connect_tcp`` plus the handshake (as the channel's initiator)."""
    transport = await anyio.connect_tcp(remote_host, remote_port)
    try:
        with anyio.fail_after(handshake_timeout):
            return await SecureStream.wrap(
                transport,
                key=key,
                role=Role.INITIATOR,
                context=context,
                record_size=record_size,
                max_record_size=max_record_size,
                limits=limits,
                key_exchange=key_exchange,
                local_id=local_id,
                peer_id=peer_id,
            )
    except BaseException:
        await anyio.aclose_forcefully(transport)
        raise


@dataclass(eq=False)
class _Pending:
    """One handshake in progress on a listener: cancelling its scope drops it."""

    scope: anyio.CancelScope

    def drop(self) -> None:
        self.scope.cancel()


@dataclass(eq=False)
class SecureListener(Listener[SecureStream]):
    """Wraps a listener so that ``serve()`` hands out handshaken SecureStreams (as responder).
    Clients that fail the handshake or do not complete it within ``handshake_timeout`` are
    logged and dropped; at most ``max_pending_handshakes`` wait at once (a new one beyond that
    drops the oldest); the listener keeps serving."""

    listener: Listener[Any]
    key: Keys = field(repr=False)
    context: bytes = field(default=b"", repr=False)
    record_size: int = DEFAULT_RECORD_SIZE
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    limits: KeyLimits | None = None
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    options: HandshakeOptions = DEFAULT_HANDSHAKE
    max_pending_handshakes: int = DEFAULT_MAX_PENDING_HANDSHAKES

    async def serve(
        self,
        handler: Callable[[SecureStream], Any],
        task_group: TaskGroup | None = None,
    ) -> None:
        # dropping the oldest closes its transport; its handshake then fails and is logged
        pending: PendingHandshakes[_Pending] = PendingHandshakes(self.max_pending_handshakes, _Pending.drop)

        async def handle(transport: AnyByteStream) -> None:
            entry = _Pending(anyio.CancelScope())
            pending.add(entry)
            try:
                with entry.scope, anyio.fail_after(self.handshake_timeout):
                    stream = await SecureStream.wrap(
                        transport,
                        key=self.key,
                        role=Role.RESPONDER,
                        context=self.context,
                        record_size=self.record_size,
                        max_record_size=self.max_record_size,
                        limits=self.limits,
                        key_exchange=self.options.key_exchange,
                        local_id=self.options.local_id,
                        peer_id=self.options.peer_id,
                    )
            except (
                GcmStreamError,
                TimeoutError,
                OSError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ) as exc:
                reason = (
                    f"not complete within {self.handshake_timeout} s"
                    if isinstance(exc, TimeoutError)
                    else exc
                )
                logger.warning("handshake failed: %s", reason)
                await anyio.aclose_forcefully(transport)
                return
            finally:
                pending.done(entry)
            if entry.scope.cancel_called:
                logger.warning("handshake dropped: too many pending")
                await anyio.aclose_forcefully(transport)
                return
            await handler(stream)

        await self.listener.serve(handle, task_group)

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
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
    max_pending_handshakes: int = DEFAULT_MAX_PENDING_HANDSHAKES,
) -> SecureListener:
    """``anyio.create_tcp_listener`` whose ``serve()`` hands out SecureStreams."""
    listener = await anyio.create_tcp_listener(local_host=local_host, local_port=local_port)
    return SecureListener(
        listener,
        key if isinstance(key, KeyRing) else bytes(key),
        bytes(context),
        record_size,
        max_record_size,
        limits,
        handshake_timeout,
        HandshakeOptions(key_exchange, local_id, peer_id),
        max_pending_handshakes,
    )
