"""A conformance suite for gcmstream adapters, over real loopback sockets.

Every adapter in gcmstream runs through it (tests/test_testing.py), and so can yours: wrap
your transport in an :class:`Adapter` (how to serve, how to connect, both giving
:class:`Endpoint` objects) and run each check in :data:`CHECKS` under anyio (any backend)::

    for name, check in gcmstream.testing.CHECKS.items():
        anyio.run(check, my_adapter)

The checks use 127.0.0.1 only, seeded randomness, and a deadline on every wait, so a broken
adapter fails rather than hangs. A small TCP proxy between client and server records, cuts,
corrupts and replays bytes to test truncation, tampering and replay.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Protocol

import anyio
from anyio.abc import SocketAttribute, SocketStream

from . import aio
from .anyio_stream import SecureStream, connect_tcp, create_tcp_listener
from .channel import Channel, _self_connections_refused, self_connections_allowed
from .errors import (
    AuthenticationError,
    GcmStreamError,
    KeyCommitmentError,
    PeerIdentityError,
    RoleMismatchError,
    SelfConnectionError,
    StreamBrokenError,
    TruncatedStreamError,
)
from .format import KeyExchange, KeyRing, Keys, Role, generate_key, make_header
from .handshake import InitiatorShares, handshake_sizes

__all__ = (
    "CHECKS",
    "Adapter",
    "AnyioEndpoint",
    "AsyncioEndpoint",
    "Endpoint",
    "anyio_adapter",
    "asyncio_adapter",
    "asyncio_wrapped_adapter",
    "check_cancelled_receive",
    "check_clean_end",
    "check_client_vanishes_mid_record",
    "check_close_without_end_is_truncation",
    "check_downgrade_refused",
    "check_half_close",
    "check_identity_refused_in_this_process",
    "check_large_transfer_backpressure",
    "check_reflection_rejected",
    "check_replay_rejected",
    "check_rotated_key_ring",
    "check_round_trip_both_directions",
    "check_self_connection_refused",
    "check_tampering",
    "check_truncation_at_record_boundary",
    "check_truncation_mid_record",
    "check_unconfirmed_peers_are_closed",
    "check_wrong_key",
    "run_handshake",
)

DEADLINE = 30.0  # seconds any single check may take
LOCALHOST = "127.0.0.1"
SERVER_HANDSHAKE_TIMEOUT = 2.0  # the built-in adapters' servers: how long a handshake may take


class Endpoint(Protocol):
    """One side of a secure connection, as the checks drive it."""

    async def send(self, data: bytes) -> None: ...

    async def send_eof(self) -> None:
        """End what this side sends: the one clean end (the FINAL record)."""
        ...

    async def receive(self, max_bytes: int = 65536) -> bytes:
        """Some bytes, or b"" at the authenticated end of the stream."""
        ...

    async def aclose(self) -> None:
        """Close the connection. Not an end: without ``send_eof`` first the peer must see a
        truncation (check_close_without_end_is_truncation)."""
        ...


Handler = Callable[[Endpoint], Awaitable[None]]
Serve = Callable[[Handler, Keys, bytes], AbstractAsyncContextManager[int]]
Connect = Callable[[int, bytes, bytes], Awaitable[Endpoint]]


@dataclass(frozen=True)
class Adapter:
    """How to run a server (an async context manager giving its port on 127.0.0.1) and how to
    connect to one, with a key and a context."""

    name: str
    serve: Serve
    connect: Connect


# -- the built-in adapters ------------------------------------------------------------------


@dataclass
class AsyncioEndpoint:
    reader: aio.SecureStreamReader
    writer: aio.SecureStreamWriter

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_eof(self) -> None:
        self.writer.write_eof()
        await self.writer.drain()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.reader.read(max_bytes)

    async def aclose(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


@dataclass
class AnyioEndpoint:
    stream: SecureStream

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            return await self.stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""

    async def aclose(self) -> None:
        await self.stream.aclose()


def asyncio_adapter() -> Adapter:
    """gcmstream.open_connection / start_server (the zero-copy BufferedProtocol path)."""

    @asynccontextmanager
    async def serve(handler: Handler, key: Keys, context: bytes) -> AsyncIterator[int]:
        async def connected(reader: aio.SecureStreamReader, writer: aio.SecureStreamWriter) -> None:
            try:
                await handler(AsyncioEndpoint(reader, writer))
            finally:
                writer.close()  # the handler is done with it (never FINAL: only send_eof is)

        server = await aio.start_server(
            connected, LOCALHOST, 0, key=key, context=context, handshake_timeout=SERVER_HANDSHAKE_TIMEOUT
        )
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()

    async def connect(port: int, key: bytes, context: bytes) -> Endpoint:
        reader, writer = await aio.open_connection(LOCALHOST, port, key=key, context=context)
        return AsyncioEndpoint(reader, writer)

    return Adapter("asyncio-protocol", serve, connect)


def asyncio_wrapped_adapter() -> Adapter:
    """gcmstream.wrap_streams over asyncio's own open_connection / start_server streams."""

    @asynccontextmanager
    async def serve(handler: Handler, key: Keys, context: bytes) -> AsyncIterator[int]:
        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                secure = await aio.wrap_streams(
                    reader,
                    writer,
                    key=key,
                    role=Role.RESPONDER,
                    context=context,
                    handshake_timeout=SERVER_HANDSHAKE_TIMEOUT,
                )
            except (GcmStreamError, TimeoutError):
                writer.close()
                return
            try:
                await handler(AsyncioEndpoint(*secure))
            finally:
                secure[1].close()  # the handler is done with it (never FINAL: only send_eof is)

        server = await asyncio.start_server(connected, LOCALHOST, 0)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()

    async def connect(port: int, key: bytes, context: bytes) -> Endpoint:
        reader, writer = await asyncio.open_connection(LOCALHOST, port)
        try:
            secure = await aio.wrap_streams(reader, writer, key=key, role=Role.INITIATOR, context=context)
        except BaseException:
            writer.close()
            raise
        return AsyncioEndpoint(*secure)

    return Adapter("asyncio-wrapped", serve, connect)


def anyio_adapter() -> Adapter:
    """gcmstream.anyio_stream: SecureListener / connect_tcp (any anyio backend)."""

    @asynccontextmanager
    async def serve(handler: Handler, key: Keys, context: bytes) -> AsyncIterator[int]:
        listener = await create_tcp_listener(
            key=key, context=context, local_host=LOCALHOST, handshake_timeout=SERVER_HANDSHAKE_TIMEOUT
        )

        async def connected(stream: SecureStream) -> None:
            await handler(AnyioEndpoint(stream))

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, connected)
            try:
                yield listener.extra(SocketAttribute.local_port)
            finally:
                tg.cancel_scope.cancel()
        await listener.aclose()

    async def connect(port: int, key: bytes, context: bytes) -> Endpoint:
        return AnyioEndpoint(await connect_tcp(LOCALHOST, port, key=key, context=context))

    return Adapter("anyio", serve, connect)


# -- helpers for the checks -------------------------------------------------------------------


def _expect(condition: object, message: str) -> None:
    """A check that stays a check under ``python -O`` (where ``assert`` disappears)."""
    if not condition:
        raise AssertionError(message)


def _shown(value: object) -> str:
    """A value for a failure message: long byte strings by their length and first bytes."""
    if isinstance(value, bytes | bytearray) and len(value) > 48:
        return f"{len(value)} bytes starting {bytes(value[:24])!r}"
    return repr(value)


def _expect_equal(what: str, seen: object, expected: object) -> None:
    """``seen == expected``, or an AssertionError saying what was expected and what was seen."""
    if seen != expected:
        raise AssertionError(f"{what}: expected {_shown(expected)}, saw {_shown(seen)}")


@dataclass
class _Outcomes:
    """What server-side handlers saw, for checks that judge the server."""

    items: list[object] = field(default_factory=list)
    event: anyio.Event = field(default_factory=anyio.Event)

    def add(self, item: object) -> None:
        self.items.append(item)
        self.event.set()

    async def wait(self, count: int = 1) -> list[object]:
        while len(self.items) < count:
            self.event = anyio.Event()
            await self.event.wait()
        return self.items


async def _receive_all(endpoint: Endpoint, *, delay: float = 0.0) -> bytes:
    parts = []
    while chunk := await endpoint.receive(1 << 20):
        parts.append(chunk)
        if delay:
            await anyio.sleep(delay)
    return b"".join(parts)


async def _send_all(endpoint: Endpoint, chunks: list[bytes], eof: bool = True) -> None:
    for chunk in chunks:
        await endpoint.send(chunk)
    if eof:
        await endpoint.send_eof()


def _chunks(rng: random.Random, count: int, largest: int) -> list[bytes]:
    return [rng.randbytes(rng.randint(1, largest)) for _ in range(count)]


@asynccontextmanager
async def _proxy(
    target_port: int,
    *,
    to_client: Callable[[int, bytes], bytes | None] | None = None,
    to_server: Callable[[int, bytes], bytes | None] | None = None,
    recorded: list[bytes] | None = None,
) -> AsyncIterator[int]:
    """A TCP proxy on 127.0.0.1. Each direction's filter gets (offset, chunk) and returns the
    bytes to pass on, or None to cut the connection there. ``recorded`` collects what the
    client sent."""

    async def pump(
        source: SocketStream, sink: SocketStream, filt: Callable[[int, bytes], bytes | None] | None, log: bool
    ) -> None:
        offset = 0
        try:
            while True:
                try:
                    chunk = await source.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    await sink.send_eof()
                    return
                if log and recorded is not None:
                    recorded.append(chunk)
                out = filt(offset, chunk) if filt else chunk
                offset += len(chunk)
                if out is None:
                    await sink.aclose()
                    await source.aclose()
                    return
                if out:
                    await sink.send(out)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return

    async def handle(client: SocketStream) -> None:
        async with (
            client,
            await anyio.connect_tcp(LOCALHOST, target_port) as server,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(pump, client, server, to_server, True)
            tg.start_soon(pump, server, client, to_client, False)

    listener = await anyio.create_tcp_listener(local_host=LOCALHOST)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield listener.extra(SocketAttribute.local_port)
        finally:
            tg.cancel_scope.cancel()
    await listener.aclose()


# bytes each side sends before its first record, with the default (hybrid) key exchange
_INITIATOR_HANDSHAKE, _RESPONDER_HANDSHAKE = handshake_sizes(KeyExchange.MLKEM768_X25519)


def _cut_at(limit: int) -> Callable[[int, bytes], bytes | None]:
    def filt(offset: int, chunk: bytes) -> bytes | None:
        if offset >= limit:
            return None
        return chunk[: limit - offset] if offset + len(chunk) > limit else chunk

    return filt


# -- the checks ---------------------------------------------------------------------------------


async def check_round_trip_both_directions(adapter: Adapter) -> None:
    """Random sizes both ways at once; both sides get exactly what the other sent."""
    key, rng = generate_key(), random.Random(1)
    up, down = _chunks(rng, 40, 100_000), _chunks(rng, 40, 100_000)
    outcomes = _Outcomes()

    async def handler(endpoint: Endpoint) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_send_all, endpoint, down)
            outcomes.add(await _receive_all(endpoint))

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"conformance") as port:
            client = await adapter.connect(port, key, b"conformance")
            async with anyio.create_task_group() as tg:
                tg.start_soon(_send_all, client, up)
                received = await _receive_all(client)
            _expect_equal("the client received", received, b"".join(down))
            _expect_equal("the server received", (await outcomes.wait())[0], b"".join(up))
            await client.aclose()


async def check_half_close(adapter: Adapter) -> None:
    """The client ends its direction; the server reads to the end, then still answers."""
    key = generate_key()

    async def handler(endpoint: Endpoint) -> None:
        request = await _receive_all(endpoint)
        await _send_all(endpoint, [hashlib.sha256(request).digest()])

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            client = await adapter.connect(port, key, b"")
            request = random.Random(2).randbytes(300_000)
            await _send_all(client, [request])
            _expect_equal(
                "the server's answer (the request's SHA-256)",
                await _receive_all(client),
                hashlib.sha256(request).digest(),
            )
            await client.aclose()


async def check_clean_end(adapter: Adapter) -> None:
    """An authenticated FINAL record is the end: receive gives b"" (and again after that)."""
    key = generate_key()

    async def handler(endpoint: Endpoint) -> None:
        await _send_all(endpoint, [b"last words"])
        await _receive_all(endpoint)

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            client = await adapter.connect(port, key, b"")
            _expect_equal("what the server sent before its end", await _receive_all(client), b"last words")
            _expect_equal("a receive after the end", await client.receive(), b"")
            await client.send_eof()
            await client.aclose()


async def check_close_without_end_is_truncation(adapter: Adapter) -> None:
    """Closing without ``send_eof`` is not an end (the explicit-end rule): the peer gets what
    was sent, then TruncatedStreamError saying so. A ``finally: close`` after a failure never
    looks like a complete transfer."""
    key = generate_key()

    async def handler(endpoint: Endpoint) -> None:
        await endpoint.send(b"half of the result")
        await endpoint.aclose()

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            client = await adapter.connect(port, key, b"")
            received = bytearray()
            try:
                while chunk := await client.receive():
                    received += chunk
            except TruncatedStreamError as exc:
                _expect("closed without ending the stream" in str(exc), f"truncation said: {exc}")
            else:
                raise AssertionError("a stream closed without send_eof ended like a complete one")
            _expect(received == b"half of the result", f"received {bytes(received)!r}")
            await client.aclose()


async def check_truncation_mid_record(adapter: Adapter) -> None:
    """The connection is cut inside a record: TruncatedStreamError, after a true prefix only."""
    key = generate_key()
    payload = random.Random(3).randbytes(1_000_000)

    async def handler(endpoint: Endpoint) -> None:
        await _send_all(endpoint, [payload])

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port, _proxy(port, to_client=_cut_at(300_001)) as via:
            client = await adapter.connect(via, key, b"")
            received = bytearray()
            try:
                while chunk := await client.receive():
                    received += chunk
            except TruncatedStreamError:
                pass
            else:
                raise AssertionError("a cut connection ended like a clean one")
            _expect(payload.startswith(received), "released plaintext is not a prefix of what was sent")
            _expect(
                len(received) < 300_001, f"released {len(received)} bytes of a stream cut before byte 300,001"
            )
            await client.aclose()


async def check_truncation_at_record_boundary(adapter: Adapter) -> None:
    """The peer vanishes between records (no FINAL): still TruncatedStreamError."""
    key = generate_key()

    async def handler(endpoint: Endpoint) -> None:
        await endpoint.send(b"first record")
        await anyio.sleep(0.2)
        await endpoint.send(b"second record")

    # pass the header and the first record, then cut exactly at the record boundary
    to_client = _cut_at(_RESPONDER_HANDSHAKE + 5 + len(b"first record") + 16)

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port, _proxy(port, to_client=to_client) as via:
            client = await adapter.connect(via, key, b"")
            _expect_equal("the first receive", await client.receive(), b"first record")
            try:
                await client.receive()
            except TruncatedStreamError:
                pass
            else:
                raise AssertionError("a stream without FINAL ended like a clean one")
            await client.aclose()


async def check_tampering(adapter: Adapter) -> None:
    """One flipped bit in a record: AuthenticationError; only earlier records are released."""
    key = generate_key()
    payload = random.Random(4).randbytes(500_000)
    flip_at = 200_000

    def to_client(offset: int, chunk: bytes) -> bytes:
        if offset <= flip_at < offset + len(chunk):
            changed = bytearray(chunk)
            changed[flip_at - offset] ^= 0x10
            return bytes(changed)
        return chunk

    async def handler(endpoint: Endpoint) -> None:
        await _send_all(endpoint, [payload])

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port, _proxy(port, to_client=to_client) as via:
            client = await adapter.connect(via, key, b"")
            received = bytearray()
            try:
                while chunk := await client.receive():
                    received += chunk
            except AuthenticationError as exc:
                _expect(
                    exc.record_number >= 1,
                    f"expected a record after the first to fail, saw {exc.record_number}",
                )
            else:
                raise AssertionError("tampered data was accepted")
            _expect(
                payload.startswith(received) and len(received) <= flip_at,
                f"expected an authenticated prefix of at most {flip_at} bytes (up to the flipped one), "
                f"saw {len(received)} bytes{'' if payload.startswith(received) else ', not a prefix'}",
            )
            try:
                await client.receive()
            except (StreamBrokenError, AuthenticationError):
                pass
            else:
                raise AssertionError("a failed stream delivered more data")
            await client.aclose()


async def check_large_transfer_backpressure(adapter: Adapter) -> None:
    """32 MiB to a reader that starts slowly: all of it arrives intact."""
    key = generate_key()
    block = random.Random(5).randbytes(1 << 20)
    digest = hashlib.sha256(block * 32).hexdigest()

    async def handler(endpoint: Endpoint) -> None:
        await _send_all(endpoint, [block] * 32)
        await _receive_all(endpoint)

    with anyio.fail_after(DEADLINE * 2):
        async with adapter.serve(handler, key, b"") as port:
            client = await adapter.connect(port, key, b"")
            await anyio.sleep(0.3)  # let the sender fill every buffer on the way
            hasher, total = hashlib.sha256(), 0
            while chunk := await client.receive(1 << 20):
                hasher.update(chunk)
                total += len(chunk)
                if total < (2 << 20):
                    await anyio.sleep(0.01)
            _expect_equal("bytes received", total, 32 << 20)
            _expect_equal("SHA-256 of what was received", hasher.hexdigest(), digest)
            await client.send_eof()
            await client.aclose()


async def check_cancelled_receive(adapter: Adapter) -> None:
    """A receive cancelled while waiting loses nothing: the next one gets the data."""
    key = generate_key()
    go = anyio.Event()

    async def handler(endpoint: Endpoint) -> None:
        await go.wait()
        await _send_all(endpoint, [b"after the cancel"])

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            client = await adapter.connect(port, key, b"")
            with anyio.move_on_after(0.1):
                await client.receive()
                raise AssertionError("receive returned without data")
            go.set()
            _expect_equal(
                "what arrived after the cancelled receive", await _receive_all(client), b"after the cancel"
            )
            await client.aclose()


async def check_client_vanishes_mid_record(adapter: Adapter) -> None:
    """The client's connection is cut inside a record: the server sees TruncatedStreamError."""
    key = generate_key()
    outcomes = _Outcomes()

    async def handler(endpoint: Endpoint) -> None:
        try:
            outcomes.add(await _receive_all(endpoint))
        except GcmStreamError as exc:
            outcomes.add(exc)

    with anyio.fail_after(DEADLINE):
        async with (
            adapter.serve(handler, key, b"") as port,
            _proxy(port, to_server=_cut_at(_INITIATOR_HANDSHAKE + 5000)) as via,
        ):
            client = await adapter.connect(via, key, b"")
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await client.send(random.Random(6).randbytes(100_000))
            (seen,) = await outcomes.wait()
            _expect(isinstance(seen, TruncatedStreamError), f"server saw {seen!r}")
            with suppress(OSError, anyio.BrokenResourceError):
                await client.aclose()


async def check_wrong_key(adapter: Adapter) -> None:
    """Another key or context: the server refuses the client's header (UnknownKeyError or
    KeyCommitmentError, logged) and hangs up, so the client's handshake fails (the connection
    ends during it: TruncatedStreamError, or the transport's error); the server keeps serving."""
    key = generate_key()

    async def handler(endpoint: Endpoint) -> None:
        await _send_all(endpoint, [b"served"])
        await _receive_all(endpoint)

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"ctx") as port:
            for wrong_key, context in ((generate_key(), b"ctx"), (key, b"other context")):
                try:
                    endpoint = await adapter.connect(port, wrong_key, context)
                except (KeyCommitmentError, TruncatedStreamError, OSError, anyio.BrokenResourceError):
                    pass
                else:
                    await endpoint.aclose()
                    raise AssertionError("a wrong key or context was accepted")
            client = await adapter.connect(port, key, b"ctx")
            _expect_equal("the answer under the right key and context", await _receive_all(client), b"served")
            await client.send_eof()
            await client.aclose()


async def check_replay_rejected(adapter: Adapter) -> None:
    """A recorded client session replayed to the server never reaches the handler: the server
    answers with fresh ephemeral keys, so the recorded Finished does not confirm them, and it
    hangs up at once."""
    key = generate_key()
    outcomes = _Outcomes()
    recorded: list[bytes] = []

    async def handler(endpoint: Endpoint) -> None:
        try:
            data = await _receive_all(endpoint)
            await _send_all(endpoint, [b"ok"])
            outcomes.add(data)
        except GcmStreamError as exc:
            outcomes.add(exc)

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            async with _proxy(port, recorded=recorded) as via:
                client = await adapter.connect(via, key, b"")
                await _send_all(client, [b"transfer 100 coins"])
                _expect_equal("the server's answer", await _receive_all(client), b"ok")
                await client.aclose()
            _expect_equal("what the handler received", (await outcomes.wait(1))[0], b"transfer 100 coins")
            wire = b"".join(recorded)
            async with await anyio.connect_tcp(LOCALHOST, port) as raw:
                # the handshake first, the records once the server answered: bytes still unread
                # in the server's socket when it hangs up make the kernel reset the connection,
                # which may discard the answer before it left
                await raw.send(wire[:_INITIATOR_HANDSHAKE])
                answered = 0
                with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while answered < _RESPONDER_HANDSHAKE:  # its fresh header and Finished
                        answered += len(await raw.receive())
                    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        await raw.send(wire[_INITIATOR_HANDSHAKE:])
                    while True:  # then nothing more: it hangs up
                        answered += len(await raw.receive())
            _expect(answered == _RESPONDER_HANDSHAKE, f"the server answered a replay with {answered} bytes")
            await anyio.sleep(0.1)
            _expect(len(outcomes.items) == 1, "a replayed session reached the handler")


async def check_reflection_rejected(adapter: Adapter) -> None:
    """A server that sends the client's own bytes back is refused at the header."""
    key = generate_key()

    async def mirror(stream: SocketStream) -> None:
        async with stream:
            try:
                while True:
                    await stream.send(await stream.receive())
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass

    listener = await anyio.create_tcp_listener(local_host=LOCALHOST)
    with anyio.fail_after(DEADLINE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, mirror)
            try:
                await adapter.connect(listener.extra(SocketAttribute.local_port), key, b"")
            except RoleMismatchError:
                pass
            else:
                raise AssertionError("a reflected stream was accepted")
            tg.cancel_scope.cancel()
    await listener.aclose()


async def check_unconfirmed_peers_are_closed(adapter: Adapter) -> None:
    """A recorded initiator header replayed (plus 6 bytes) then silence, and a peer that sends
    nothing: neither reaches the handler, and the server closes both (at its handshake timeout:
    a replayed header cannot produce the Finished that would confirm the server's fresh keys)."""
    key = generate_key()
    outcomes = _Outcomes()

    async def handler(endpoint: Endpoint) -> None:
        outcomes.add("handled")
        await endpoint.aclose()

    # a genuine initiator header, as recorded on the wire (not one this process has in flight)
    shares = InitiatorShares(KeyExchange.MLKEM768_X25519)
    hello, _ = make_header(
        key, Role.INITIATOR, 65536, b"", key_exchange=KeyExchange.MLKEM768_X25519, fields=shares.fields()
    )

    async def until_closed(stream: SocketStream) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            while True:
                await stream.receive()

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            replayer = await anyio.connect_tcp(LOCALHOST, port)
            silent = await anyio.connect_tcp(LOCALHOST, port)
            async with replayer, silent:
                await replayer.send(hello + bytes(6))
                async with anyio.create_task_group() as tg:
                    tg.start_soon(until_closed, replayer)
                    tg.start_soon(until_closed, silent)
            _expect(not outcomes.items, "an unconfirmed peer reached the handler")


async def check_rotated_key_ring(adapter: Adapter) -> None:
    """A server holding KeyRing([new, old]) serves clients with either key; a key it does not
    hold is refused at the client's header (an unknown key ID) and the server keeps serving."""
    old, new = generate_key(), generate_key(256)

    async def handler(endpoint: Endpoint) -> None:
        await _send_all(endpoint, [b"served"])
        await _receive_all(endpoint)

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, KeyRing([new, old]), b"ctx") as port:
            for client_key in (old, new):
                client = await adapter.connect(port, client_key, b"ctx")
                got = await _receive_all(client)
                _expect(got == b"served", f"a client with a key of the ring got {got!r}")
                await client.send_eof()
                await client.aclose()
            try:
                endpoint = await adapter.connect(port, generate_key(), b"ctx")
            except (GcmStreamError, OSError, anyio.BrokenResourceError):
                pass
            else:
                await endpoint.aclose()
                raise AssertionError("a key outside the ring was accepted")


async def _refused_in_this_process(adapter: Adapter, server_key: Keys, client_key: bytes) -> BaseException:
    """The error a client of this process raises when its server, in this process too, refuses
    its header (the handler must never run)."""
    outcomes = _Outcomes()

    async def handler(endpoint: Endpoint) -> None:
        outcomes.add("handled")
        await endpoint.aclose()

    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, server_key, b"") as port:
            try:
                endpoint = await adapter.connect(port, client_key, b"")
            except (GcmStreamError, OSError, anyio.BrokenResourceError) as exc:
                refusal: BaseException = exc
            else:
                await endpoint.aclose()
                raise AssertionError("a connection that its server refused was accepted")
            await anyio.sleep(0.05)
            _expect(not outcomes.items, "a refused connection reached the handler")
    return refusal


async def check_self_connection_refused(adapter: Adapter) -> None:
    """This process connecting to its own server under the same key (what an attacker who
    reroutes its outgoing connection achieves, the Selfie attack) is refused; the handler never
    runs; and the client, which the registry of this process's own headers tells (its own
    header, refused on its own TCP connection: ``Channel.ask_endpoints``), raises
    SelfConnectionError saying how to allow it, not a bare truncation. (Checked with
    self_connections_allowed() switched off, whatever the caller set.)"""
    key = generate_key()
    with _self_connections_refused():
        refusal = await _refused_in_this_process(adapter, key, key)
    _expect(
        isinstance(refusal, SelfConnectionError) and "self_connections_allowed()" in str(refusal),
        f"the client of a connection to itself raised {refusal!r}, not SelfConnectionError",
    )


async def check_identity_refused_in_this_process(adapter: Adapter) -> None:
    """A client that claims no name, connecting to a server of this same process whose key
    ring names the key (so the holder must claim that name, K5), raises PeerIdentityError
    naming the fix (``local_id``), not a bare truncation. (Runs inside
    self_connections_allowed(): the self-connection refusal would come first.)"""
    key = generate_key()
    with self_connections_allowed():
        refusal = await _refused_in_this_process(adapter, KeyRing({"alice": key}), key)
    _expect(
        isinstance(refusal, PeerIdentityError) and "local_id" in str(refusal),
        f"a client refused for its missing name raised {refusal!r}, not PeerIdentityError",
    )


async def check_downgrade_refused(adapter: Adapter) -> None:
    """A client offering X25519 alone to a server that requires the hybrid (the default) is
    refused at its header (DowngradeError, logged): the server answers nothing, hangs up, and
    the handler never runs; a hybrid client is served next."""
    key = generate_key()
    outcomes = _Outcomes()

    async def handler(endpoint: Endpoint) -> None:
        outcomes.add("handled")
        await _send_all(endpoint, [b"served"])
        await _receive_all(endpoint)

    # a genuine X25519-only initiator header with the key (not one this process has in flight)
    shares = InitiatorShares(KeyExchange.X25519)
    hello, _ = make_header(
        key, Role.INITIATOR, 65536, b"", key_exchange=KeyExchange.X25519, fields=shares.fields()
    )
    with anyio.fail_after(DEADLINE):
        async with adapter.serve(handler, key, b"") as port:
            answered = 0
            async with await anyio.connect_tcp(LOCALHOST, port) as weaker:
                await weaker.send(hello)
                with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while True:
                        answered += len(await weaker.receive())
            _expect(answered == 0, f"the server answered an X25519-only offer with {answered} bytes")
            _expect(not outcomes.items, "an X25519-only client reached the handler")
            client = await adapter.connect(port, key, b"")
            got = await _receive_all(client)
            _expect(got == b"served", f"a hybrid client after the refusal got {got!r}")
            await client.send_eof()
            await client.aclose()


CHECKS: dict[str, Callable[[Adapter], Awaitable[None]]] = {
    "round_trip_both_directions": check_round_trip_both_directions,
    "half_close": check_half_close,
    "clean_end": check_clean_end,
    "close_without_end_is_truncation": check_close_without_end_is_truncation,
    "truncation_mid_record": check_truncation_mid_record,
    "truncation_at_record_boundary": check_truncation_at_record_boundary,
    "tampering": check_tampering,
    "large_transfer_backpressure": check_large_transfer_backpressure,
    "cancelled_receive": check_cancelled_receive,
    "client_vanishes_mid_record": check_client_vanishes_mid_record,
    "wrong_key": check_wrong_key,
    "replay_rejected": check_replay_rejected,
    "reflection_rejected": check_reflection_rejected,
    "unconfirmed_peers_are_closed": check_unconfirmed_peers_are_closed,
    "rotated_key_ring": check_rotated_key_ring,
    "self_connection_refused": check_self_connection_refused,
    "identity_refused_in_this_process": check_identity_refused_in_this_process,
    "downgrade_refused": check_downgrade_refused,
}
"""Every check, by name. Each takes an Adapter and raises AssertionError on a failure."""


def run_handshake(initiator: Channel, responder: Channel) -> None:
    """Run a channel handshake between two sans-IO Channels in memory (both ends' bytes pumped
    until neither has anything to send). Errors stay in the openers: ``handshake_complete()``
    raises them."""
    responder.initial_data()
    outgoing = initiator.initial_data()
    for _ in range(3):  # hello, answer + Finished_R, Finished_I
        responder.opener.receive_data(outgoing)
        answer = responder.data_to_send()
        if not answer:
            break
        initiator.opener.receive_data(answer)
        outgoing = initiator.data_to_send()
        if not outgoing:
            break
