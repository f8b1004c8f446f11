"""asyncio adapter: secure StreamReader/StreamWriter look-alikes over the sans-IO codec.

Two ways in:

* ``open_connection``/``start_server`` run a duplex :class:`~gcmstream.Channel` over a
  ``BufferedProtocol``: the event loop receives straight into the opener's ring
  (``get_buffer``/``buffer_updated``), so no byte is copied between the socket and the ring.
* ``wrap_streams`` (duplex), ``encrypting_writer`` and ``decrypting_reader`` (one-way) wrap
  asyncio streams the caller already has (a unix socket, a subprocess pipe); bytes are copied
  once from the inner StreamReader into the ring.

Either way records are opened in place, and reads copy out only what the caller asks for
(``iter_chunks`` hands out views into the ring and copies nothing).

Sending: each ``write`` seals complete records at once; the rest of a record is sealed at the
end of the current loop iteration (small writes in one iteration share a record) or by
``drain()``. The sealer's output memory is reused only when the transport took all of it
synchronously (``get_write_buffer_size() == 0``); otherwise the transport may still refer to
it, and the sealer is told to use fresh memory (``Sealer.detach_output``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from .channel import HandshakeOptions
from .codec import Channel, Opener, Sealer
from .errors import GcmStreamError, StreamClosedError, TruncatedStreamError
from .format import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_RECORD_SIZE,
    DEFAULT_RECORD_SIZE,
    Buffer,
    KeyExchange,
    KeyLimits,
    Keys,
    Role,
)
from .pending import DEFAULT_MAX_PENDING_HANDSHAKES, PendingHandshakes

__all__ = (
    "SecureStreamReader",
    "SecureStreamWriter",
    "decrypting_reader",
    "encrypting_writer",
    "open_connection",
    "start_server",
    "wrap_streams",
)

logger = logging.getLogger("gcmstream")

_DEFAULT_LIMIT = 2**16  # asyncio's StreamReader default line limit
_WRAPPED_READ_SIZE = 256 * 1024

ClientConnectedCallback = Callable[["SecureStreamReader", "SecureStreamWriter"], Awaitable[None] | None]


class _Source:
    """Where a SecureStreamReader's ciphertext comes from; ``wait()`` returns when the opener
    may have more to give."""

    connection_error: BaseException | None = None

    async def wait(self) -> None:
        raise NotImplementedError

    def consumed(self) -> None:
        """The reader consumed plaintext, so ring space may be free again."""


class SecureStreamReader:
    """Decrypting reader with the verbs of ``asyncio.StreamReader``.

    Plaintext is released only from authenticated records. An authenticated FINAL record is
    the end of the stream (``read`` returns b"", ``at_eof()`` is True); input that ends
    without one raises TruncatedStreamError (also an EOFError), never a quiet short read.
    """

    def __init__(self, opener: Opener, source: _Source, *, limit: int = _DEFAULT_LIMIT) -> None:
        self._opener = opener
        self._source = source
        self._limit = limit
        # plaintext taken from the ring but not returned yet (a multi-record read in progress,
        # a limit overrun, a cancelled read): every read returns it first
        self._pushback = bytearray()
        self._busy = False

    def __repr__(self) -> str:
        return f"<SecureStreamReader {self._opener!r}>"

    @property
    def opener(self) -> Opener:
        return self._opener

    def at_eof(self) -> bool:
        """True when the authenticated end was reached and everything was read."""
        return not self._pushback and self._opener.at_eof

    async def _next(self) -> memoryview:
        """The next authenticated plaintext of the current record (empty at the end)."""
        while True:
            try:
                view = self._opener.peek()
            except TruncatedStreamError as exc:
                self._blame_connection(exc)
                raise
            if view is not None:
                return view
            await self._wait()

    def _blame_connection(self, exc: TruncatedStreamError) -> None:
        """A truncation caused by a lost connection says so: the transport's error is its cause."""
        if exc.__cause__ is None and self._source.connection_error is not None:
            exc.__cause__ = self._source.connection_error

    async def _wait(self) -> None:
        if self._busy:
            raise RuntimeError("another coroutine is already waiting for this reader")
        self._busy = True
        try:
            await self._source.wait()
        finally:
            self._busy = False

    def _consume(self, count: int) -> None:
        self._opener.consume(count)
        self._source.consumed()

    def _take_pushback(self, n: int) -> bytes:
        count = len(self._pushback) if n < 0 else min(n, len(self._pushback))
        data = bytes(self._pushback[:count])
        del self._pushback[:count]
        return data

    async def _stage(self, limit: int) -> bool:
        """Move plaintext of the current record into the pushback buffer (up to ``limit``
        bytes, all of the record if < 0); False at the end. Data moved there is never lost to a
        cancelled read: the next read returns it first."""
        view = await self._next()
        if not view:
            return False
        count = len(view) if limit < 0 else min(limit, len(view))
        self._pushback += view[:count]
        self._consume(count)
        return True

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (at least one unless at the end); ``n < 0``: everything to the end."""
        if n == 0:
            return b""
        if n < 0:
            while await self._stage(-1):
                pass
            return self._take_pushback(-1)
        if self._pushback:
            return self._take_pushback(n)
        view = await self._next()
        count = min(n, len(view))
        data = bytes(view[:count])
        self._consume(count)
        return data

    async def readinto(self, buffer: Buffer) -> int:
        """Copy up to ``len(buffer)`` bytes into ``buffer``; 0 at the end."""
        target = memoryview(buffer).cast("B")
        if not target:
            return 0
        if self._pushback:
            data = self._take_pushback(len(target))
            target[: len(data)] = data
            return len(data)
        while True:  # whole records that fit are decrypted straight into ``target``
            try:
                count = self._opener.readinto(target)
            except TruncatedStreamError as exc:
                self._blame_connection(exc)
                raise
            if count is not None:
                self._source.consumed()
                return count
            await self._wait()

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; IncompleteReadError if the stream ends (cleanly) first.
        Cancelled part way, it loses nothing: what it had read is returned by the next read."""
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        if n == 0:
            return b""
        if not self._pushback:  # common case: the current record holds all of it, one copy
            view = await self._next()
            if len(view) >= n:
                data = bytes(view[:n])
                self._consume(n)
                return data
        while len(self._pushback) < n:
            if not await self._stage(n - len(self._pushback)):
                raise asyncio.IncompleteReadError(self._take_pushback(-1), n)
        return self._take_pushback(n)

    async def readuntil(self, separator: bytes = b"\n") -> bytes:
        """Bytes up to and including ``separator``, with asyncio's LimitOverrunError and
        IncompleteReadError semantics (the data stays readable after an overrun or a cancel)."""
        if not separator:
            raise ValueError("Separator should be at least one-byte string")
        searched = 0
        while True:
            found = self._pushback
            index = found.find(separator, searched)
            if index >= 0:
                end = index + len(separator)
                if index > self._limit:  # as asyncio: the separator may end past the limit
                    raise asyncio.LimitOverrunError(
                        "Separator is found, but chunk is longer than limit", index
                    )
                return self._take_pushback(end)
            if len(found) > self._limit:
                raise asyncio.LimitOverrunError(
                    "Separator is not found, and chunk exceed the limit", len(found)
                )
            searched = max(0, len(found) - len(separator) + 1)
            view = await self._next()
            if not view:
                raise asyncio.IncompleteReadError(self._take_pushback(-1), None)
            # take through the separator if it lies inside this record, so the rest stays in the ring
            inside = self._opener.find(separator)
            await self._stage(-1 if inside < 0 else inside + len(separator))

    async def readline(self) -> bytes:
        """A line ending in b"\\n", or the rest at the end; ValueError if over the limit."""
        try:
            return await self.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except asyncio.LimitOverrunError as exc:
            if self._pushback.startswith(b"\n", exc.consumed):
                del self._pushback[: exc.consumed + 1]
            else:
                self._pushback.clear()
            raise ValueError(exc.args[0]) from exc

    def __aiter__(self) -> SecureStreamReader:
        return self

    async def __anext__(self) -> bytes:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    async def iter_chunks(self) -> AsyncIterator[memoryview]:
        """Plaintext as views into the ring, one record (or its rest) at a time, no copy.
        Each view is valid only until the iterator is advanced: copy what you keep."""
        if self._pushback:
            yield memoryview(self._take_pushback(-1))
        while True:
            view = await self._next()
            if not view:
                return
            count = len(view)
            yield view
            self._consume(count)


class SecureStreamWriter:
    """Encrypting writer with the verbs of ``asyncio.StreamWriter``.

    ``write_eof()`` seals the FINAL record and half-closes; ``close()`` seals FINAL first if it
    was not sealed yet. After a failure use ``abort()``, which closes without FINAL, so the
    peer sees a truncated stream rather than a complete one.
    """

    def __init__(
        self,
        sealer: Sealer,
        transport: asyncio.WriteTransport,
        drain: Callable[[], Awaitable[None]],
        *,
        reader: SecureStreamReader | None = None,
        closed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._sealer = sealer
        self._transport = transport
        self._drain = drain
        self._reader = reader
        self._wait_closed = closed
        self._flush_scheduled = False
        self._closing = False

    def __repr__(self) -> str:
        return f"<SecureStreamWriter {self._sealer!r}>"

    @property
    def transport(self) -> asyncio.WriteTransport:
        return self._transport

    @property
    def sealer(self) -> Sealer:
        return self._sealer

    def _send(self, view: memoryview) -> None:
        if not view:
            return
        self._transport.write(view)
        if self._transport.get_write_buffer_size():  # the transport may still refer to it
            self._sealer.detach_output()

    def write(self, data: Buffer) -> None:
        """Seal ``data``; full records go to the transport now, the rest at the end of this
        loop iteration (or at ``drain()``)."""
        if self._closing:
            raise StreamClosedError("writer is closing")
        self._send(self._sealer.seal(data))
        if self._sealer.pending and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def writelines(self, data: Iterable[Buffer]) -> None:
        for item in data:
            self.write(item)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        if self._sealer.pending and not self._sealer.closed and not self._transport.is_closing():
            self._send(self._sealer.flush())

    def flush(self) -> None:
        """Seal pending plaintext now as a short record."""
        if self._sealer.pending:
            self._send(self._sealer.flush())

    async def drain(self) -> None:
        """Seal what is pending, then wait until the transport's buffer is below its limit."""
        if not self._sealer.closed:
            self.flush()
        await self._drain()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        """Seal the FINAL record (after any pending data), then half-close if the transport can."""
        self._send(self._sealer.close())
        if self._transport.can_write_eof():
            self._transport.write_eof()

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        """Seal FINAL if it was not sealed yet, then close the transport."""
        if self._closing:
            return
        self._closing = True
        if not self._sealer.closed and not self._transport.is_closing():
            try:
                self._send(self._sealer.close())
            except GcmStreamError:
                logger.debug("could not seal FINAL while closing", exc_info=True)
        self._transport.close()

    def abort(self) -> None:
        """Close at once without sealing FINAL, so the peer sees TruncatedStreamError: the way
        to end a transfer that failed (``close()`` would make it look complete)."""
        self._closing = True
        transport = self._transport
        abort = getattr(transport, "abort", None)
        if abort is not None:
            abort()
        else:
            transport.close()

    async def wait_closed(self) -> None:
        if self._wait_closed is not None:
            await self._wait_closed()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's keys, plus gcmstream's: ``gcmstream_suite``, ``gcmstream_record_size``,
        ``gcmstream_records_sealed``, ``gcmstream_bytes_sealed``, ``gcmstream_records_opened``,
        ``gcmstream_bytes_opened``."""
        opener = self._reader.opener if self._reader is not None else None
        ours: dict[str, Any] = {
            "gcmstream_suite": self._sealer.suite.name,
            "gcmstream_record_size": self._sealer.record_size,
            "gcmstream_records_sealed": self._sealer.records_sealed,
            "gcmstream_bytes_sealed": self._sealer.bytes_sealed,
        }
        if opener is not None:
            ours["gcmstream_records_opened"] = opener.records_opened
            ours["gcmstream_bytes_opened"] = opener.bytes_opened
        if name in ours:
            return ours[name]
        return self._transport.get_extra_info(name, default)


# -- the zero-copy protocol path ------------------------------------------------------------


class _ChannelProtocol(asyncio.BufferedProtocol, _Source):
    """Receives into the channel's ring and wakes the reader; flow control both ways."""

    def __init__(
        self,
        channel: Channel,
        loop: asyncio.AbstractEventLoop,
        limit: int = _DEFAULT_LIMIT,
        on_connected: Callable[[_ChannelProtocol], None] | None = None,
    ) -> None:
        self.channel = channel
        self._on_connected = on_connected
        self._scratch: memoryview | None = None
        self._into_scratch = False
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drain_waiters: list[asyncio.Future[None]] = []  # several tasks may drain at once
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        self._handshaking = True
        self._closed: asyncio.Future[None] = loop.create_future()
        self.reader = SecureStreamReader(channel.opener, self, limit=limit)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        transport.write(self.channel.initial_data())  # type: ignore[attr-defined]
        if self._on_connected is not None:
            self._on_connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self.channel.opener.get_buffer(sizehint)
        self._into_scratch = not view
        if view:
            return view
        # Only a failed opener refuses input while reading is on; its input is worthless now.
        # (Pausing here, inside the loop's allocation step, crashes uvloop: buffer_updated does.)
        self._scratch = self._scratch or memoryview(bytearray(4096))
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        opener = self.channel.opener
        if self._into_scratch:
            if not opener.failed:
                raise RuntimeError("gcmstream: received into scratch memory while the stream was healthy")
            if not self._read_paused and self.transport is not None:
                self._read_paused = True
                self.transport.pause_reading()
            return
        opener.buffer_updated(nbytes)
        if self._handshaking:
            self._send_handshake()
        if not opener.wants_data and not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()
        self._wake()

    def _send_handshake(self) -> None:
        """Send what the handshake produced (a responder's header and Finished, an initiator's
        Finished) as soon as the bytes that caused it arrived."""
        out = self.channel.data_to_send()
        if out and self.transport is not None:
            self.transport.write(out)
        if self.channel.sealer.ready:
            self._handshaking = False

    def eof_received(self) -> bool:
        self._eof = True
        self.channel.opener.receive_eof()
        self._wake()
        return True  # keep our sending half open: half-close

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection_error = exc
        if not self._eof:
            self._eof = True
            self.channel.opener.receive_eof()
        self._wake()
        self._wake_drains(exc)
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drains(None)

    def _wake_drains(self, exc: BaseException | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if waiter.done():
                continue
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        if self._eof:
            return  # the opener already knows; it will raise or end
        self.consumed()
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def consumed(self) -> None:
        if self._read_paused and self.channel.opener.wants_data and self.transport is not None:
            self._read_paused = False
            self.transport.resume_reading()

    async def drain(self) -> None:
        if self._closed.done():  # as asyncio's StreamWriter: a lost connection cannot drain
            raise ConnectionResetError("connection lost") from self.connection_error
        if self.transport is not None and self.transport.is_closing():
            await asyncio.sleep(0)
            if self._closed.done():
                raise ConnectionResetError("connection lost") from self.connection_error
        if not self._write_paused:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def handshake(self) -> None:
        while not self.channel.handshake_complete():
            await self.wait()

    def streams(self) -> tuple[SecureStreamReader, SecureStreamWriter]:
        assert self.transport is not None
        writer = SecureStreamWriter(
            self.channel.sealer, self.transport, self.drain, reader=self.reader, closed=self.wait_closed
        )
        return self.reader, writer


def _channel(
    key: Keys,
    role: Role,
    context: Buffer,
    record_size: int,
    max_record_size: int,
    limits: KeyLimits | None,
    options: HandshakeOptions,
) -> Channel:
    return Channel(
        key,
        role=role,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        key_exchange=options.key_exchange,
        local_id=options.local_id,
        peer_id=options.peer_id,
    )


async def open_connection(
    host: str | None = None,
    port: int | None = None,
    *,
    key: Keys,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    limits: KeyLimits | None = None,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
    **kwargs: Any,
) -> tuple[SecureStreamReader, SecureStreamWriter]:
    """Connect like ``asyncio.open_connection`` and run the channel handshake (one round trip).

    A server with another key or context hangs up at our header (TruncatedStreamError: the
    connection ended during the handshake). ``key`` may be a KeyRing (its primary key is used);
    ``key_exchange``, ``local_id``, ``peer_id`` as for :class:`~gcmstream.Channel`. ``kwargs``
    go to ``loop.create_connection``.
    """
    loop = asyncio.get_running_loop()
    options = HandshakeOptions(key_exchange, local_id, peer_id)
    channel = _channel(key, Role.INITIATOR, context, record_size, max_record_size, limits, options)
    _, protocol = await loop.create_connection(
        lambda: _ChannelProtocol(channel, loop, limit),
        host,  # type: ignore[arg-type]  # None is valid with sock=
        port,  # type: ignore[arg-type]
        **kwargs,
    )
    try:
        async with asyncio.timeout(handshake_timeout):
            await protocol.handshake()
    except BaseException:
        if protocol.transport is not None:
            protocol.transport.abort()
        raise
    return protocol.streams()


async def start_server(
    client_connected_cb: ClientConnectedCallback,
    host: str | None = None,
    port: int | None = None,
    *,
    key: Keys,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    limits: KeyLimits | None = None,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
    max_pending_handshakes: int = DEFAULT_MAX_PENDING_HANDSHAKES,
    **kwargs: Any,
) -> asyncio.Server:
    """Serve like ``asyncio.start_server``: ``client_connected_cb(reader, writer)`` runs for
    each client whose handshake completed (its Finished verified). A client with another key
    or context, one whose handshake fails, or one that does not complete it within
    ``handshake_timeout`` seconds is logged and disconnected. At most
    ``max_pending_handshakes`` connections wait for their handshake at once; a new one beyond
    that disconnects the oldest. ``key`` may be a KeyRing: clients may use any key in it."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()
    options = HandshakeOptions(key_exchange, local_id, peer_id)
    pending: PendingHandshakes[asyncio.BaseTransport] = PendingHandshakes(
        max_pending_handshakes,
        lambda transport: transport.abort(),  # type: ignore[attr-defined]
    )

    async def serve_one(protocol: _ChannelProtocol) -> None:
        transport = protocol.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        try:
            async with asyncio.timeout(handshake_timeout):
                await protocol.handshake()
        except (GcmStreamError, TimeoutError, OSError) as exc:
            reason = f"not complete within {handshake_timeout} s" if isinstance(exc, TimeoutError) else exc
            logger.warning("handshake with %s failed: %s", peer, reason)
            transport.abort()
            return
        finally:
            pending.done(transport)
        reader, writer = protocol.streams()
        try:
            result = client_connected_cb(reader, writer)
            if result is not None:
                await result
        except Exception:
            logger.exception("client_connected_cb failed for %s", peer)
            transport.abort()

    def start(protocol: _ChannelProtocol) -> None:
        assert protocol.transport is not None
        pending.add(protocol.transport)
        task = loop.create_task(serve_one(protocol))
        tasks.add(task)  # keep a reference until done
        task.add_done_callback(tasks.discard)

    def factory() -> _ChannelProtocol:
        channel = _channel(key, Role.RESPONDER, context, record_size, max_record_size, limits, options)
        return _ChannelProtocol(channel, loop, limit, on_connected=start)

    return await loop.create_server(factory, host, port, **kwargs)


# -- wrapping streams the caller already has --------------------------------------------------


class _StreamReaderSource(_Source):
    """Copies ciphertext from an asyncio.StreamReader into the opener."""

    def __init__(self, opener: Opener, inner: asyncio.StreamReader) -> None:
        self._opener = opener
        self._inner = inner

    async def wait(self) -> None:
        if not self._opener.wants_data:  # peek() said "need input": refusing it would spin forever
            raise RuntimeError("gcmstream bug: the opener needs input but cannot take any")
        try:
            data = await self._inner.read(_WRAPPED_READ_SIZE)
        except OSError as exc:
            self.connection_error = exc
            data = b""
        if data:
            self._opener.receive_data(data)
        else:
            self._opener.receive_eof()


def _transport_of(writer: asyncio.StreamWriter) -> asyncio.WriteTransport:
    return writer.transport  # write transports, uvloop's included


def encrypting_writer(
    writer: asyncio.StreamWriter,
    *,
    key: Keys,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    limits: KeyLimits | None = None,
) -> SecureStreamWriter:
    """One-way: encrypt everything written into ``writer`` (a pipe, a file-like transport).
    ``write_eof()`` or ``close()`` seals the FINAL record."""
    sealer = Sealer(key, context=context, record_size=record_size, limits=limits)
    return SecureStreamWriter(sealer, _transport_of(writer), writer.drain, closed=writer.wait_closed)


def decrypting_reader(
    reader: asyncio.StreamReader,
    *,
    key: Keys,
    context: Buffer = b"",
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    limits: KeyLimits | None = None,
    limit: int = _DEFAULT_LIMIT,
) -> SecureStreamReader:
    """One-way: decrypt what ``reader`` delivers (written by ``encrypting_writer`` or a Sealer)."""
    opener = Opener(key, context=context, max_record_size=max_record_size, limits=limits)
    return SecureStreamReader(opener, _StreamReaderSource(opener, reader), limit=limit)


async def wrap_streams(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    key: Keys,
    role: Role,
    context: Buffer = b"",
    record_size: int = DEFAULT_RECORD_SIZE,
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
    limits: KeyLimits | None = None,
    handshake_timeout: float | None = DEFAULT_HANDSHAKE_TIMEOUT,
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange = KeyExchange.MLKEM768_X25519,
    local_id: str | bytes | None = None,
    peer_id: str | bytes | None = None,
) -> tuple[SecureStreamReader, SecureStreamWriter]:
    """Duplex channel over existing asyncio streams. One side must use Role.INITIATOR and the
    other Role.RESPONDER. Runs the handshake before returning."""
    options = HandshakeOptions(key_exchange, local_id, peer_id)
    channel = _channel(key, role, context, record_size, max_record_size, limits, options)
    writer.write(channel.initial_data())
    source = _StreamReaderSource(channel.opener, reader)
    async with asyncio.timeout(handshake_timeout):
        await writer.drain()
        while not channel.handshake_complete():
            await source.wait()
            writer.write(channel.data_to_send())
        writer.write(channel.data_to_send())  # the initiator's Finished
        await writer.drain()
    secure_reader = SecureStreamReader(channel.opener, source, limit=limit)
    secure_writer = SecureStreamWriter(
        channel.sealer, _transport_of(writer), writer.drain, reader=secure_reader, closed=writer.wait_closed
    )
    return secure_reader, secure_writer
