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
import contextlib
import os
import socket
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Final

from ._adapter import (
    PEER_GONE,
    UNKNOWN_PEER,
    Fairness,
    admit,
    answer_only_a_connected_peer,
    blame_connection,
    check_can_take_input,
    handshake,
    logger,
    receive_size,
    run_handler,
    tell_endpoints,
)
from ._server import (
    AnyOpener,
    AnySealer,
    ConnectionDeadlines,
    ServerCore,
    connection_statistics,
    describe_handshake_failure,
)
from .admission import AdmissionPolicy
from .codec import Channel, Opener, Phase, Sealer
from .config import UNSET, Configuration, Unset, configure
from .errors import ConcurrencyError, GcmStreamError, StreamClosedError, TruncatedStreamError
from .format import Buffer, KeyExchange, KeyLimits, Keys, Role
from .tinkstream import TinkKeyset, TinkOpener, TinkSealer, TinkStreamingKey, refuse_beside_tink

__all__ = (
    "SecureStreamReader",
    "SecureStreamWriter",
    "decrypting_reader",
    "encrypting_writer",
    "open_connection",
    "open_unix_connection",
    "start_server",
    "start_unix_server",
    "wrap_streams",
)

_DEFAULT_LIMIT = 2**16  # asyncio's StreamReader default line limit

ClientConnectedCallback = Callable[["SecureStreamReader", "SecureStreamWriter"], Awaitable[None] | None]


def _check_limit(limit: int) -> None:
    if limit <= 0:  # as asyncio.StreamReader, with its message
        raise ValueError("Limit cannot be <= 0")


def _abort(transport: asyncio.BaseTransport) -> None:
    """Close at once, dropping what is buffered (a pipe transport may have no abort)."""
    abort = getattr(transport, "abort", None)
    if abort is not None:
        abort()
    else:
        transport.close()


class _Source:
    """Where a SecureStreamReader's ciphertext comes from; ``wait()`` returns when the opener
    may have more to give."""

    connection_error: BaseException | None = None

    async def wait(self) -> None:
        raise NotImplementedError

    def consumed(self) -> None:
        """The reader consumed plaintext, so ring space may be free again."""


class SecureStreamReader:
    """Decrypting reader with the verbs and the semantics of ``asyncio.StreamReader``.

    Plaintext is released only from authenticated records. An authenticated FINAL record is
    the end of the stream (``read`` returns b"", ``at_eof()`` is True); input that ends
    without one raises TruncatedStreamError (also an EOFError), never a quiet short read.

    Every record that arrived whole counts as buffered, as the bytes fed to a StreamReader do:
    ``read(n)``, ``readuntil``'s limit and ``at_eof()`` see the same data asyncio's would if it
    were fed each record's plaintext as it arrived (tests/differential/test_aio.py compares
    them). Deliberate differences: an error in a record raises (after the authenticated bytes
    before it were returned), and ``at_eof()`` is True only at an authenticated end. A lost
    connection (a reset) is likewise TruncatedStreamError, caused by the transport's error,
    after the plaintext of the records that authenticated before it (asyncio's reader raises
    the transport's error at once); closing our own writer is no end of what the peer sent
    (asyncio's reader is then at EOF). Flow control is the ring (``ring_size``), not asyncio's
    pause at twice the limit, so records that arrived past twice the limit count as buffered,
    as bytes fed to a StreamReader do (tests/differential/test_cpython_streams.py pins each).
    """

    def __init__(self, opener: AnyOpener, source: _Source, *, limit: int = _DEFAULT_LIMIT) -> None:
        _check_limit(limit)
        self._opener = opener
        self._source = source
        self._limit = limit
        # plaintext taken from the ring but not returned yet (a multi-record read in progress,
        # a limit overrun, a cancelled read): every read returns it first
        self._pushback = bytearray()
        self._busy = False
        # an error met after this reader had plaintext to return: the next call raises it
        self._deferred: BaseException | None = None
        self._chunk_lent = False  # iter_chunks handed out a view that is still in use
        self._fairness = Fairness()  # yields now and then under a flood of tiny records

    def __repr__(self) -> str:
        return f"<SecureStreamReader {self._opener!r}>"

    @property
    def opener(self) -> AnyOpener:
        """The Opener (a TinkOpener for ``decrypting_reader(..., tink=)``)."""
        return self._opener

    def at_eof(self) -> bool:
        """True when everything before the authenticated end was read: as asyncio's, once the
        buffer is empty and the end is in (a FINAL record that arrived counts, opened or not).
        Never raises: an error found in the records that arrived is raised by the next read."""
        if self._pushback or self._deferred is not None or self._chunk_lent:
            return False
        if self._opener.at_eof:
            return True
        try:
            view = self._opener.peek()
        except GcmStreamError as exc:
            self._defer(exc)
            return False
        return view is not None and not view

    def _defer(self, exc: GcmStreamError) -> None:
        if isinstance(exc, TruncatedStreamError):
            blame_connection(exc, self._source.connection_error)
        self._deferred = exc

    def _check(self) -> None:
        """Raise the deferred error once; after a fatal error every call raises again."""
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc
        if self._opener.broken:
            self._opener.peek()  # raises StreamBrokenError

    def _peek(self) -> memoryview | None:
        """The current record's plaintext without waiting: None if input is needed, empty at
        the authenticated end."""
        try:
            return self._opener.peek()
        except TruncatedStreamError as exc:
            blame_connection(exc, self._source.connection_error)
            raise

    async def _next(self) -> memoryview:
        """The next authenticated plaintext of the current record (empty at the end)."""
        while True:
            view = self._peek()
            if view is not None:
                if self._fairness.owed(self._opener):
                    await asyncio.sleep(0)  # let other connections run, then look again
                    continue
                return view
            await self._wait()

    async def _wait(self) -> None:
        if self._busy:
            # asyncio.StreamReader raises a plain RuntimeError here; ConcurrencyError is one too
            raise ConcurrencyError("another coroutine is already waiting for this reader")
        self._busy = True
        try:
            await self._source.wait()
        finally:
            self._busy = False
        self._fairness.waited(self._opener)

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
        """Up to ``n`` bytes of what has arrived, waiting only while nothing has (at least one
        byte unless at the end); ``n < 0``: everything to the end."""
        self._check()
        if n == 0:
            return b""
        if n < 0:
            while await self._stage(-1):
                pass
            return self._take_pushback(-1)
        if not self._pushback:
            await self._next()
        data = self._take_pushback(n)
        try:
            more = self._opener.read(n - len(data)) if len(data) < n else None
        except GcmStreamError as exc:
            if not data:
                if isinstance(exc, TruncatedStreamError):
                    blame_connection(exc, self._source.connection_error)
                raise
            self._defer(exc)  # return the authenticated bytes first, raise on the next call
            return data
        if more:
            self._source.consumed()
            data = data + more if data else more
        return data

    async def readinto(self, buffer: Buffer) -> int:
        """Copy up to ``len(buffer)`` bytes into ``buffer``; 0 at the end."""
        self._check()
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
                blame_connection(exc, self._source.connection_error)
                raise
            if count is not None:
                self._source.consumed()
                if self._fairness.owed(self._opener):
                    await asyncio.sleep(0)  # let other connections run
                return count
            await self._wait()

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; IncompleteReadError if the stream ends (cleanly) first.
        Cancelled part way, it loses nothing: what it had read is returned by the next read."""
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        self._check()
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
        IncompleteReadError semantics (the data stays readable after an overrun or a cancel).

        As asyncio: the limit counts the bytes before the separator, so a separator that ends
        past the limit is fine; a search that found none overruns once the bytes that cannot
        begin a separator (all but its last ``len(separator) - 1``) exceed the limit, judged
        over everything that has arrived, and ``consumed`` is that count."""
        seplen = len(separator)
        if not seplen:
            raise ValueError("Separator should be at least one-byte string")
        self._check()
        offset = 0  # no separator begins in pushback[:offset]
        while True:
            index = self._pushback.find(separator, offset)
            if index >= 0:
                if index > self._limit:
                    raise asyncio.LimitOverrunError(
                        "Separator is found, but chunk is longer than limit", index
                    )
                return self._take_pushback(index + seplen)
            offset = max(0, len(self._pushback) + 1 - seplen)
            view = self._peek()
            if view and self._fairness.owed(self._opener):
                await asyncio.sleep(0)  # let other connections run
                continue
            if view:  # more has arrived: take it, only through the separator if it lies inside
                inside = self._opener.find(separator)
                count = len(view) if inside < 0 else inside + seplen
                self._pushback += view[:count]
                self._consume(count)
                continue
            if offset > self._limit:
                raise asyncio.LimitOverrunError("Separator is not found, and chunk exceed the limit", offset)
            if view is not None:  # the authenticated end
                raise asyncio.IncompleteReadError(self._take_pushback(-1), None)
            await self._wait()

    async def readline(self) -> bytes:
        """A line ending in b"\\n", or the rest at the end; ValueError if over the limit (the
        line is then dropped, or everything that has arrived if no line end has)."""
        try:
            return await self.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except asyncio.LimitOverrunError as exc:
            if self._pushback.startswith(b"\n", exc.consumed):
                del self._pushback[: exc.consumed + 1]
            else:
                self._pushback.clear()  # readuntil took everything that has arrived
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
        self._check()
        if self._pushback:
            yield memoryview(self._take_pushback(-1))
        while True:
            view = await self._next()
            if not view:
                return
            count = len(view)
            self._chunk_lent = True
            try:
                yield view
            finally:
                self._chunk_lent = False
            self._consume(count)


class SecureStreamWriter:
    """Encrypting writer with the verbs of ``asyncio.StreamWriter``.

    The stream ends cleanly only when the application says so: ``write_eof()`` seals the FINAL
    record and half-closes, and so does leaving ``async with writer:`` without an exception.
    ``close()``, ``abort()``, an exception, a cancellation or a lost connection never seal
    FINAL, so the usual ``try: ... finally: writer.close()`` after a failed transfer makes the
    peer raise TruncatedStreamError instead of taking the cut stream for a complete one.
    (A deliberate difference from asyncio, where closing is an end: the docs say so and
    tests/test_aio.py pins it.) A writer dropped without ``close()`` warns (ResourceWarning)
    and closes its transport, as asyncio's StreamWriter does.
    """

    def __init__(
        self,
        sealer: AnySealer,
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
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop (encrypting_writer is not async)
            self._loop = None

    def __repr__(self) -> str:
        return f"<SecureStreamWriter {self._sealer!r}>"

    def __del__(self, warn: Callable[..., None] = warnings.warn) -> None:
        """Dropped without ``close()``: warn and close the transport, as asyncio's StreamWriter
        does (its ``__del__``); the peer sees no FINAL, so a truncation. ``warn`` is bound now:
        at interpreter exit the module's globals may already be gone."""
        transport = getattr(self, "_transport", None)  # None: the constructor failed
        if transport is None or self._closing or transport.is_closing():
            return
        if self._loop is not None and self._loop.is_closed():
            warn("loop is closed", ResourceWarning)
            return
        try:
            self.close()
        except (RuntimeError, OSError):  # a writer made outside a loop, whose loop has closed
            warn("loop is closed", ResourceWarning)
            return
        warn(f"unclosed {self!r}", ResourceWarning)

    @property
    def transport(self) -> asyncio.WriteTransport:
        return self._transport

    @property
    def sealer(self) -> AnySealer:
        """The Sealer (a TinkSealer for ``encrypting_writer(..., tink=)``)."""
        return self._sealer

    def _send(self, view: memoryview) -> None:
        if not view:
            return
        try:
            self._transport.write(view)
        except RuntimeError as exc:
            # uvloop refuses a write to a transport its peer reset ("the handler is closed");
            # asyncio's drops it and its drain() raises this, as a lost connection is reported
            if not self._transport.is_closing():
                raise
            raise ConnectionResetError("connection lost") from exc
        if self._transport.get_write_buffer_size():  # the transport may still refer to it
            self._sealer.detach_output()

    def write(self, data: Buffer) -> None:
        """Seal ``data``; full records go to the transport now, the rest at the end of this
        loop iteration (or at ``drain()``). After ``close()`` it raises StreamClosedError
        (deliberately: asyncio's writer drops such data without a word); after ``write_eof()``
        it raises StreamClosedError, a RuntimeError as asyncio's."""
        if self._closing:
            raise StreamClosedError("writer is closing")
        self._send(self._sealer.seal(data))
        if self._sealer.pending and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def writelines(self, data: Iterable[Buffer]) -> None:
        for item in data:
            self.write(item)

    async def __aenter__(self) -> SecureStreamWriter:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """Without an exception: end the stream (``write_eof``, ``drain``), then close. With
        one (a cancellation too): close without ending it, so the peer sees a truncation. A
        peer that already left (it ended its stream and closed its socket) cannot take the end:
        that is not raised here (``PEER_GONE`` in _adapter.py says why)."""
        if exc_type is not None:
            self.close()
            with contextlib.suppress(Exception):  # the block's own exception is the one to see
                await self.wait_closed()
            return
        with contextlib.suppress(*PEER_GONE):
            try:
                if not self.is_closing():
                    self.write_eof()
                    await self.drain()
            finally:
                self.close()
            await self.wait_closed()

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
        """Seal the FINAL record (after any pending data), then half-close if the transport can.
        The one clean end of the stream; again later, it does nothing (as asyncio's)."""
        if self._sealer.closed:
            return
        self._send(self._sealer.close())
        if self._transport.can_write_eof():
            self._transport.write_eof()

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        """Close the transport after what was written (pending plaintext goes out as a
        record). This does NOT seal FINAL: unless ``write_eof()`` ended the stream, the peer
        raises TruncatedStreamError. A failed transfer closed in a ``finally`` never looks
        complete."""
        if self._closing:
            return
        self._closing = True
        if self._sealer.pending and not self._sealer.closed and not self._transport.is_closing():
            try:
                self._send(self._sealer.flush())
            except GcmStreamError:
                logger.debug("could not seal the pending record while closing", exc_info=True)
        self._transport.close()

    def abort(self) -> None:
        """Close at once, dropping what is not sent yet; no FINAL either."""
        self._closing = True
        _abort(self._transport)

    async def wait_closed(self) -> None:
        if self._wait_closed is not None:
            await self._wait_closed()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's keys, plus gcmstream's: ``gcmstream_suite``, ``gcmstream_record_size``,
        ``gcmstream_records_sealed``, ``gcmstream_bytes_sealed``, ``gcmstream_records_opened``,
        ``gcmstream_bytes_opened``, ``gcmstream_peer_key_id`` (the public ID of the key the
        peer proved: with a KeyRing, which of its keys), ``gcmstream_peer_id`` (the identity
        the peer sent, bytes or None: proved when its key is named in a KeyRing, else a claim;
        ``KeyRing.name(peer_key_id)`` gives the name as the ring was written)."""
        if name.startswith("gcmstream_"):
            opener = self._reader.opener if self._reader is not None else None
            figures = connection_statistics(self._sealer, opener)
            key = name.removeprefix("gcmstream_")
            if key in figures:
                return figures[key]
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
        deadlines: ConnectionDeadlines | None = None,
    ) -> None:
        self.channel = channel
        # the server core's deadlines (handshake, record, idle): it computes them, this arms
        # one loop timer at the earliest (_arm) and tells it what happened
        self.deadlines = deadlines if deadlines is not None else ConnectionDeadlines()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._on_connected = on_connected
        # a server's admission, told what arrived as soon as it was read (here, not a loop
        # pass later in the handshake's task: under a flood each pass admits ~100 newcomers)
        self.on_handshake_input: Callable[[Opener], object] | None = None
        self.handshake_task: asyncio.Task[None] | None = None  # a server's, cancelled on eviction
        self._scratch: memoryview | None = None
        self._into_scratch = False
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drain_waiters: list[asyncio.Future[None]] = []  # several tasks may drain at once
        self._write_paused = False
        self._read_paused = False
        self._eof = False
        self._closed: asyncio.Future[None] = loop.create_future()
        self._limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport
        tell_endpoints(self.channel, transport.get_extra_info("socket"))  # client and server
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
                raise RuntimeError("gcmstream bug: received into scratch memory while the stream was healthy")
            if not self._read_paused and self.transport is not None:
                self._read_paused = True
                self.transport.pause_reading()
            return
        opener.buffer_updated(nbytes)
        if self.on_handshake_input is not None:
            self.on_handshake_input(opener)
            if opener.phase is not Phase.HEADER:  # its Finished verified, or it failed
                self.on_handshake_input = None
        deadlines = self.deadlines
        if not opener.wants_data and not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()
            deadlines.paused()  # a record we stopped receiving is our reader's delay
        else:
            deadlines.received(self._loop.time(), opener.receiving_record)
            self._arm()
        self._wake()

    def _arm(self) -> None:
        """One loop timer at the core's next deadline (aioquic's rule). A deadline that moved
        later leaves the armed timer in place: it fires, finds nothing due and arms again, so
        a busy connection re-arms once per deadline, not once per read."""
        at = self.deadlines.read_timer()
        if at is None or (self._timer is not None and self._timer_at <= at):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._handle_timer)

    def _handle_timer(self) -> None:
        self._timer = None
        # (a loop may run a timer up to its clock resolution early: aioquic's max too)
        expired = self.deadlines.handle_timer(max(self._timer_at, self._loop.time()))
        if expired is None:
            self._arm()
            return
        if self.transport is None or self.transport.is_closing():
            return
        # the reader raises TruncatedStreamError caused by this; a handshake, TimeoutError
        self.connection_error = self.deadlines.drop(expired, self.transport.get_extra_info("peername"))
        _abort(self.transport)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def eof_received(self) -> bool:
        self.deadlines.ended()
        self._stop_timer()
        self._eof = True
        self.channel.opener.receive_eof()
        self._wake()
        return True  # keep our sending half open: half-close

    def connection_lost(self, exc: Exception | None) -> None:
        self.deadlines.ended()
        self._stop_timer()
        if not isinstance(self.connection_error, TimeoutError):  # (a timer's cause stays)
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
            # a record part-way in and the peer's silence count from here
            self.deadlines.resumed(self._loop.time(), self.channel.opener.receiving_record)
            self._arm()

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

    def connected_transport(self) -> asyncio.Transport:
        """The transport; only called once the loop ran connection_made (it calls it before it
        hands the protocol to anything here), so None is a failed invariant, also under -O."""
        if self.transport is None:
            raise RuntimeError("gcmstream bug: a connection's protocol used before connection_made")
        return self.transport

    async def handshake(self) -> None:
        """The channel handshake, before the deadlines' handshake deadline; the transport is
        aborted if it fails. Once it completed, the idle deadline runs (servers)."""
        transport = self.connected_transport()

        async def send(data: bytes) -> None:
            transport.write(data)

        async def abort() -> None:
            transport.abort()

        await handshake(self.channel, send, self.wait, abort=abort, deadlines=self.deadlines)
        self._arm()

    def streams(self) -> tuple[SecureStreamReader, SecureStreamWriter]:
        """The streams, made once the handshake completed: the reader and this protocol hold
        each other (a cycle), so a connection whose handshake failed, which never gets them,
        is freed without the cyclic GC once its transport lets go of it (review 10b LOW-4)."""
        reader = SecureStreamReader(self.channel.opener, self, limit=self._limit)
        writer = SecureStreamWriter(
            self.channel.sealer,
            self.connected_transport(),
            self.drain,
            reader=reader,
            closed=self.wait_closed,
        )
        return reader, writer


async def open_connection(
    host: str | None = None,
    port: int | None = None,
    *,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    record_timeout: float | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    **kwargs: Any,
) -> tuple[SecureStreamReader, SecureStreamWriter]:
    """Connect like ``asyncio.open_connection`` and run the channel handshake (one round trip).

    A server with another key or context hangs up at our header (TruncatedStreamError: the
    connection ended during the handshake); a server in this same process that refused it,
    its refusal (SelfConnectionError, PeerIdentityError, DowngradeError). The options are a
    :class:`~gcmstream.Configuration` (``config=``) or its keywords (``key=`` and the rest:
    each not given takes its default); not both. ``key`` may be a KeyRing (its primary key is
    used); a client uses the channel options, ``handshake_timeout`` and ``record_timeout``.
    ``limit`` is the reader's line limit, as asyncio's. ``kwargs`` go to
    ``loop.create_connection`` (``ssl``, ``family``, ``sock``,
    ...): a misspelt option reaches it and raises TypeError there.
    """
    config = configure(
        config,
        key=key,
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
    loop = asyncio.get_running_loop()
    return await _connect(
        config,
        limit,
        lambda factory: loop.create_connection(
            factory,
            host,  # type: ignore[arg-type]  # None is valid with sock=
            port,  # type: ignore[arg-type]
            **kwargs,
        ),
    )


async def open_unix_connection(
    path: str | os.PathLike[str] | None = None,
    *,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    record_timeout: float | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    **kwargs: Any,
) -> tuple[SecureStreamReader, SecureStreamWriter]:
    """:func:`open_connection` over a unix socket, as ``asyncio.open_unix_connection``:
    options as there; ``kwargs`` go to ``loop.create_unix_connection``."""
    config = configure(
        config,
        key=key,
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
    loop = asyncio.get_running_loop()
    where = None if path is None else os.fspath(path)  # (None with sock=)
    return await _connect(
        config, limit, lambda factory: loop.create_unix_connection(factory, where, **kwargs)
    )


_Connect = Callable[
    [Callable[[], "_ChannelProtocol"]], Awaitable[tuple[asyncio.BaseTransport, "_ChannelProtocol"]]
]


async def _connect(
    config: Configuration, limit: int, create: _Connect
) -> tuple[SecureStreamReader, SecureStreamWriter]:
    """The client of open_connection and open_unix_connection: ``create`` opens the transport
    with a protocol from the factory it is given; the handshake runs on it."""
    _check_limit(limit)
    loop = asyncio.get_running_loop()
    channel = config.channel(Role.INITIATOR)
    deadlines = ConnectionDeadlines(
        handshake_timeout=config.handshake_timeout, record_timeout=config.record_timeout
    )
    _, protocol = await create(lambda: _ChannelProtocol(channel, loop, limit, deadlines=deadlines))
    await protocol.handshake()
    return protocol.streams()


def _server_core(loop: asyncio.AbstractEventLoop, config: Configuration) -> ServerCore[asyncio.Transport]:
    """A server's core (its admission fitted to the descriptor limit if the policy is the
    default). An evicted transport is aborted at the end of the loop pass, after this pass's
    reads: one whose Finished is among them is kept (``Admission.finished``)."""

    def abort_if_evicted(transport: asyncio.Transport) -> None:
        if core.admission.evicted(transport):
            transport.abort()
            task = transport.get_protocol().handshake_task  # type: ignore[attr-defined]
            if task is not None:
                task.cancel()  # it computes no answer for a connection it no longer has

    core: ServerCore[asyncio.Transport] = ServerCore(
        config, lambda transport: loop.call_soon(abort_if_evicted, transport)
    )
    return core


async def _admitted_handshake(
    protocol: _ChannelProtocol, core: ServerCore[asyncio.Transport], peer: object
) -> bool:
    """The handshake of a connection the core admitted: True if it completed and was not
    evicted (an evicted one's transport is aborted: no handler runs on it). A failure is
    logged with ``peer`` (asked before: uvloop's closed transport raises ValueError for its
    peer name) at the level the core says, an evicted one not at all."""
    transport = protocol.connected_transport()
    try:
        await protocol.handshake()
    except Exception as exc:  # the transport is aborted already; cancellations propagate
        level = core.handshake_failed(transport, exc)
        if level is not None:
            describe_handshake_failure(exc, peer, core.config.handshake_timeout, level)
        return False
    except BaseException:  # cancelled (an evicted one too)
        core.handshake_cancelled(transport)
        raise
    return core.handshake_completed(transport)


async def start_server(
    client_connected_cb: ClientConnectedCallback,
    host: str | None = None,
    port: int | None = None,
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
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    max_pending_handshakes: int | Unset | None = UNSET,
    admission: AdmissionPolicy | Unset | None = UNSET,
    **kwargs: Any,
) -> asyncio.Server:
    """Serve like ``asyncio.start_server``: ``client_connected_cb(reader, writer)`` runs for
    each client whose handshake completed (its Finished verified). A client with another key
    or context, one whose handshake fails, or one that does not complete it within
    ``handshake_timeout`` seconds is logged and disconnected. Which connections may wait for
    their handshake is ``admission``'s rule (:class:`~gcmstream.AdmissionPolicy`, default
    :data:`~gcmstream.admission.DEFAULT_ADMISSION`); ``max_pending_handshakes=N`` is shorthand
    for ``AdmissionPolicy.from_max_pending_handshakes(N)``. ``key`` may be a KeyRing: clients
    may use any key in it. A record that has begun to arrive must finish within
    ``record_timeout`` seconds (None: no limit), or the connection is dropped and logged, and
    its reader raises TruncatedStreamError caused by TimeoutError: a peer trickling bytes
    cannot hold its ring.
    A client that sends nothing for ``idle_timeout`` seconds after its handshake is dropped the
    same way (None, the default: never; see SECURITY.md "Memory per connection" for why).
    ``ring_size`` is the receive ring's byte budget per connection (as for
    :class:`~gcmstream.Channel`). Unlike asyncio's, a bad ``limit`` raises ValueError here,
    not at each connection. An exception that escapes ``client_connected_cb`` ends its
    connection only: it is logged once with the peer and passed to the loop's exception
    handler ("Unhandled exception in client_connected_cb", as ``asyncio.start_server`` does),
    and the connection is aborted without FINAL, so the client reads a truncation. Unlike
    asyncio's, a handler that returns without closing its writer does not leave the connection
    open: the writer, dropped, warns ResourceWarning and closes it without FINAL
    (tests/differential/test_aio_conventions.py pins both differences).

    The options are a :class:`~gcmstream.Configuration` (``config=``) or its keywords, not
    both; a server uses every one. ``kwargs`` go to ``loop.create_server`` (``backlog``,
    ``family``, ``ssl``, ``reuse_port``, ...). Unlike asyncio's, ``backlog`` defaults to
    :data:`DEFAULT_BACKLOG` (4,096, as anyio's listener gets on Linux; asyncio's is 100), and on
    asyncio's own event loop the server accepts :data:`ACCEPTS_PER_PASS` connections a loop
    pass, leaving the rest in the kernel's queue, where asyncio accepts up to ``backlog``: a
    keyless flood admitted that fast got its handshakes admitted faster than they were
    answered, and clients evicted (SECURITY.md, "Denial of service"). On uvloop the 4,096 is
    only the kernel's queue, deliberately (its own default is 100; 1,000 queued connections were
    accepted one a loop pass there, whatever the backlog). A server made with ``start_serving=False``
    keeps asyncio's way entirely: it is not paced (its ``start_serving()`` listens again with
    the backlog it was made with), and as asyncio accepts up to ``backlog`` a pass there, its
    default backlog stays asyncio's 100 (:data:`ASYNCIO_BACKLOG`) unless ``backlog=`` is given.
    tests/test_aio.py pins each."""
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
    loop = asyncio.get_running_loop()
    return await _serve(
        client_connected_cb,
        config,
        limit,
        kwargs,
        lambda factory, options: loop.create_server(factory, host, port, **options),
    )


async def start_unix_server(
    client_connected_cb: ClientConnectedCallback,
    path: str | os.PathLike[str] | None = None,
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
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    max_pending_handshakes: int | Unset | None = UNSET,
    admission: AdmissionPolicy | Unset | None = UNSET,
    **kwargs: Any,
) -> asyncio.Server:
    """:func:`start_server` on a unix socket, as ``asyncio.start_unix_server``: options and
    handler as there; ``kwargs`` go to ``loop.create_unix_server``. The socket file is
    asyncio's: it gets the permissions the process's umask leaves (choose who may connect
    with the directory's permissions, or chmod the path), and a stale socket file at ``path``
    is replaced."""
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
    loop = asyncio.get_running_loop()
    return await _serve(
        client_connected_cb,
        config,
        limit,
        kwargs,
        lambda factory, options: loop.create_unix_server(factory, path, **options),
    )


async def _serve(
    client_connected_cb: ClientConnectedCallback,
    config: Configuration,
    limit: int,
    options: dict[str, Any],
    create: Callable[[Callable[[], _ChannelProtocol], dict[str, Any]], Awaitable[asyncio.Server]],
) -> asyncio.Server:
    """The server of start_server and start_unix_server: ``create`` opens the listening
    socket with the protocol factory and the loop's ``options`` it is given."""
    _check_limit(limit)
    loop = asyncio.get_running_loop()
    queue, options = _paced(loop, options)
    tasks: set[asyncio.Task[None]] = set()
    core = _server_core(loop, config)

    async def serve_one(protocol: _ChannelProtocol, peer: object) -> None:
        transport = protocol.connected_transport()
        if not await _admitted_handshake(protocol, core, peer):
            return
        reader, writer = protocol.streams()

        def report(exc: Exception) -> None:  # as asyncio.start_server's own (asyncio/streams.py)
            message = "Unhandled exception in client_connected_cb"
            loop.call_exception_handler({"message": message, "exception": exc, "transport": transport})

        async def abort() -> None:
            transport.abort()

        await run_handler(
            lambda: client_connected_cb(reader, writer),
            peer,
            abort=abort,
            what="client_connected_cb",
            report=report,
            failed=core.handler_failed,
        )

    def start(protocol: _ChannelProtocol) -> None:
        transport = protocol.connected_transport()
        # the peer's address now, while it is connected: later a reset one has none (None, or
        # ValueError on uvloop's closed transport); uvloop may have none even now
        address = transport.get_extra_info("peername")
        peer = UNKNOWN_PEER if address is None else address
        sock = transport.get_extra_info("socket")
        if not admit(core, transport, address, sock):
            transport.abort()  # refused (its source is at its cap): no task, no handshake
            return
        protocol.on_handshake_input = lambda opener: core.observe(transport, opener)
        # a peer that hung up after its header gets no answer (before any byte is read)
        answer_only_a_connected_peer(protocol.channel, sock)
        task = protocol.handshake_task = loop.create_task(serve_one(protocol, peer))
        tasks.add(task)  # keep a reference until done
        task.add_done_callback(tasks.discard)

    def factory() -> _ChannelProtocol:
        channel = config.channel(Role.RESPONDER)
        return _ChannelProtocol(channel, loop, limit, on_connected=start, deadlines=core.deadlines())

    server = await create(factory, options)
    if queue is not None:
        _set_listen_queue(server, queue)
    return server


# The kernel's queue of connections waiting to be accepted, unless ``backlog=`` says otherwise:
# anyio's listener asks for 65,535 and Linux clips it to net.core.somaxconn (4,096 by default);
# asyncio asks for 100, which a flood overflows (a client's dropped SYN is sent again 1 s later).
DEFAULT_BACKLOG: Final = 4096

# How many connections asyncio's selector loop accepts each time the listening socket is ready.
# It accepts up to ``backlog`` there (CPython's selector_events._accept_connection) and admits
# each at once: under a keyless flood it admitted up to 100 a loop pass, faster than it computed
# their answers, and the admission evicted clients mid-handshake (docs/review-2026-12-04-
# admission.md, stop 33). A few a pass, the rest waiting first in, first out in the kernel's
# queue, as anyio's listener does by accepting one per await.
ACCEPTS_PER_PASS: Final = 4


# asyncio's own default backlog (loop.create_server's), kept where the server is not paced
ASYNCIO_BACKLOG: Final = 100


def _paced(loop: asyncio.AbstractEventLoop, options: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """The loop's ``options`` for a server that accepts :data:`ACCEPTS_PER_PASS` a pass, and
    the listen queue to set once it serves (None: ``options`` already ask for it). Only
    asyncio's own selector loop accepts ``backlog`` a pass. uvloop and others get
    :data:`DEFAULT_BACKLOG` as their queue and are left alone (uvloop's accepts do not follow
    the backlog: 1,000 queued connections were taken at most one a loop pass, so it is only the
    kernel's queue there). A server
    made with ``start_serving=False`` on asyncio's loop is not paced (asyncio's
    ``start_serving()`` and ``serve_forever()`` listen again with the backlog it was made with,
    so the small number would be its queue; hooking them takes asyncio's private API): its
    backlog, which asyncio also accepts a pass, stays asyncio's :data:`ASYNCIO_BACKLOG` unless
    ``backlog=`` is given (the review of stop 33: 4,096 there took 1,000 in one pass)."""
    backlog = options.get("backlog", DEFAULT_BACKLOG)
    if isinstance(backlog, bool) or not isinstance(backlog, int):
        raise TypeError(f"backlog must be an int, got {type(backlog).__name__}")
    if not isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop):
        return None, {**options, "backlog": backlog}
    if not options.get("start_serving", True):
        return None, {**options, "backlog": options.get("backlog", ASYNCIO_BACKLOG)}
    return backlog, {**options, "backlog": ACCEPTS_PER_PASS}


def _set_listen_queue(server: asyncio.Server, backlog: int) -> None:
    """Listen again on ``server``'s sockets with a queue of ``backlog`` (a descriptor of the same
    socket: asyncio's own object refuses ``listen``); the loop goes on accepting a few a pass."""
    for listening in server.sockets:
        with socket.socket(fileno=os.dup(listening.fileno())) as same:
            same.listen(backlog)


# -- wrapping streams the caller already has --------------------------------------------------


class _StreamReaderSource(_Source):
    """Copies ciphertext from an asyncio.StreamReader into the opener."""

    def __init__(self, opener: AnyOpener, inner: asyncio.StreamReader) -> None:
        self._opener = opener
        self._inner = inner

    async def wait(self) -> None:
        check_can_take_input(self._opener)
        try:
            data = await self._inner.read(receive_size(self._opener))
        except OSError as exc:
            self.connection_error = exc
            data = b""
        if data:
            self._opener.receive_data(data)
        else:
            self._opener.receive_eof()


def encrypting_writer(
    writer: asyncio.StreamWriter,
    *,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    tink: TinkKeyset | TinkStreamingKey | None = None,
) -> SecureStreamWriter:
    """One-way: encrypt everything written into ``writer`` (a pipe, a file-like transport).
    ``write_eof()`` seals the FINAL record (``close()`` does not). Options: a
    :class:`~gcmstream.Configuration` or its keywords; a writer uses ``key`` (a KeyRing's
    primary), ``context``, ``record_size`` and ``limits``.

    ``tink``: write Tink's AES-GCM-HKDF streaming format instead (docs/TINK.md), sealed with
    the keyset's primary key, ``context`` as Tink's associated data; ``write_eof()`` seals the
    last segment. Tink's segments are full but the last, so ``drain()`` sends only the full
    ones. Nothing else may be given with it."""
    if tink is not None:
        given = {"config": config, "key": key, "record_size": record_size, "limits": limits}
        refuse_beside_tink(
            [name for name, value in given.items() if value is not None and value is not UNSET]
        )
        sealer: AnySealer = TinkSealer(tink, b"" if isinstance(context, Unset) else context)
    else:
        config = configure(config, key=key, context=context, record_size=record_size, limits=limits)
        sealer = Sealer(
            config.key, context=config.context, record_size=config.record_size, limits=config.limits
        )
    return SecureStreamWriter(sealer, writer.transport, writer.drain, closed=writer.wait_closed)


def decrypting_reader(
    reader: asyncio.StreamReader,
    *,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    limit: int = _DEFAULT_LIMIT,
    ring_size: int | Unset = UNSET,
    tink: TinkKeyset | TinkStreamingKey | None = None,
) -> SecureStreamReader:
    """One-way: decrypt what ``reader`` delivers (written by ``encrypting_writer`` or a Sealer).
    Options: a :class:`~gcmstream.Configuration` or its keywords; a reader uses ``key`` (any
    key of a KeyRing), ``context``, ``max_record_size``, ``limits`` and ``ring_size`` (the
    receive ring's byte budget, as for :class:`~gcmstream.Opener`).

    ``tink``: read Tink's AES-GCM-HKDF streaming format instead (docs/TINK.md), each key of
    the keyset tried on the first segment, ``context`` as Tink's associated data. The same
    reader, the same rules: plaintext only of authenticated segments; the end is the last
    segment authenticated at the end of input, and input that ends before it raises
    TruncatedStreamError. Nothing but ``context`` and ``limit`` may be given with it."""
    opener: AnyOpener
    if tink is not None:
        given = {
            "config": config,
            "key": key,
            "max_record_size": max_record_size,
            "limits": limits,
            "ring_size": ring_size,
        }
        refuse_beside_tink(
            [name for name, value in given.items() if value is not None and value is not UNSET]
        )
        opener = TinkOpener(tink, b"" if isinstance(context, Unset) else context)
    else:
        config = configure(
            config,
            key=key,
            context=context,
            max_record_size=max_record_size,
            limits=limits,
            ring_size=ring_size,
        )
        opener = Opener(
            config.key,
            context=config.context,
            max_record_size=config.max_record_size,
            limits=config.limits,
            ring_size=config.ring_size,
        )
    return SecureStreamReader(opener, _StreamReaderSource(opener, reader), limit=limit)


async def wrap_streams(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    role: Role,
    config: Configuration | None = None,
    key: Keys | Unset = UNSET,
    context: Buffer | Unset = UNSET,
    record_size: int | Unset = UNSET,
    max_record_size: int | Unset = UNSET,
    limits: KeyLimits | Unset | None = UNSET,
    handshake_timeout: float | Unset | None = UNSET,
    limit: int = _DEFAULT_LIMIT,
    key_exchange: KeyExchange | Unset = UNSET,
    local_id: str | bytes | Unset | None = UNSET,
    peer_id: str | bytes | Unset | None = UNSET,
    ring_size: int | Unset = UNSET,
) -> tuple[SecureStreamReader, SecureStreamWriter]:
    """Duplex channel over existing asyncio streams. One side must use Role.INITIATOR and the
    other Role.RESPONDER. Runs the handshake before returning; if it fails (or takes longer
    than ``handshake_timeout`` seconds) the transport is aborted and the error raised.
    Options: a :class:`~gcmstream.Configuration` or its keywords, not both; this uses the
    channel options and ``handshake_timeout`` (over streams it does not own it keeps no record
    or idle timer: ``record_timeout`` and ``idle_timeout`` do not apply)."""
    config = configure(
        config,
        key=key,
        context=context,
        record_size=record_size,
        max_record_size=max_record_size,
        limits=limits,
        handshake_timeout=handshake_timeout,
        key_exchange=key_exchange,
        local_id=local_id,
        peer_id=peer_id,
        ring_size=ring_size,
    )
    _check_limit(limit)
    channel = config.channel(role)
    tell_endpoints(channel, writer.get_extra_info("socket"))
    # a responder does not answer a peer that hung up after its header (an initiator: no-op)
    answer_only_a_connected_peer(channel, writer.get_extra_info("socket"))
    source = _StreamReaderSource(channel.opener, reader)

    async def send(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    async def abort() -> None:
        _abort(writer.transport)

    await handshake(channel, send, source.wait, time_limit=config.handshake_timeout, abort=abort)
    secure_reader = SecureStreamReader(channel.opener, source, limit=limit)
    secure_writer = SecureStreamWriter(
        channel.sealer, writer.transport, writer.drain, reader=secure_reader, closed=writer.wait_closed
    )
    return secure_reader, secure_writer
