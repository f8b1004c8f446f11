"""A peer that holds the key and slices its stream into tiny records must not hold the event
loop: a reader yields after a bounded amount of work however the records are cut.

Measured without timing (timed assertions flake on shared machines): a ticker task records how
many records the flooded reader had opened each time the loop ran it. Between two ticks the
reader may open at most what one read call opens plus one fairness quantum; before the fix it
opened the whole backlog (tens of thousands of records) in one stretch (checked: with the
fairness quantum and the per-call cap set to a million, every case here fails).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import anyio
import pytest

import gcmstream
from gcmstream import Opener, Role, Sealer
from gcmstream._adapter import FAIR_RECORDS
from gcmstream.anyio_stream import SecureStream
from gcmstream.opener import _CALL_RECORDS

from ..helpers import KEY

FLOOD = 40_000  # one-byte records: about 880 KB on the wire, most of a 1 MiB ring
# Records one stretch may open: one read call and one fairness quantum, times the turns the
# scheduler may give the reader in a row (trio randomises the order of ready tasks: 5 and 6 in
# a row were seen; 16 in a row is ~2^-16 per turn). Without the fix a stretch was the whole
# backlog, every one of the FLOOD records (40,001, over twice this bound).
BOUND = 16 * (FAIR_RECORDS + _CALL_RECORDS)


def flood(sealer: Sealer) -> bytes:
    """FLOOD one-byte records, then FINAL, from a keyed channel sealer."""
    out = bytearray()
    for _ in range(FLOOD):
        out += sealer.seal(b"x", flush=True)
    out += sealer.close()
    return bytes(out)


def check(samples: list[int]) -> None:
    assert samples and samples[-1] - samples[0] >= FLOOD // 2, "the flood was not read while ticking"
    stretch = max(b - a for a, b in itertools.pairwise(samples))
    assert stretch <= BOUND, f"the reader opened {stretch} records without yielding"


@pytest.mark.slow  # 2 to 4 s
@pytest.mark.asyncio
async def test_asyncio_reader_yields_under_a_flood_of_one_byte_records() -> None:
    go, finished = asyncio.Event(), asyncio.Event()
    openers: list[Opener] = []

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        assert isinstance(reader.opener, Opener)  # a channel's (not a TinkOpener)
        openers.append(reader.opener)
        await go.wait()  # the flood piles up in the ring first
        total = 0
        while data := await reader.read(65536):
            total += len(data)
        assert total == FLOOD
        finished.set()
        writer.close()

    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY)
    port = server.sockets[0].getsockname()[1]
    async with server:
        _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY, record_size=1 << 20)
        assert isinstance(writer.sealer, Sealer)
        writer.transport.write(flood(writer.sealer))
        await asyncio.sleep(0.3)  # the server's ring fills; its transport pauses when full
        samples = [openers[0].records_opened]  # before the reader starts: its first stretch counts
        go.set()
        async with asyncio.timeout(60):
            while not finished.is_set():
                await asyncio.sleep(0)
                samples.append(openers[0].records_opened)
        writer.close()
    check(samples)


class MemoryByteStream(anyio.abc.ByteStream):
    """One end of an in-memory byte pipe whose reads return up to ``max_bytes`` of a whole
    send: a flood sent at once arrives in 256 KiB pieces (a socket would cut it finer)."""

    def __init__(
        self,
        send: anyio.abc.ObjectSendStream[bytes],
        receive: anyio.abc.ObjectReceiveStream[bytes],
    ) -> None:
        self._send, self._receive, self._rest = send, receive, b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._rest:
            self._rest = await self._receive.receive()
        data, self._rest = self._rest[:max_bytes], self._rest[max_bytes:]
        return data

    async def send(self, item: bytes) -> None:
        await self._send.send(bytes(item))

    async def send_eof(self) -> None:
        await self._send.aclose()

    async def aclose(self) -> None:
        await self._send.aclose()
        await self._receive.aclose()


def memory_pipe() -> tuple[MemoryByteStream, MemoryByteStream]:
    a_send, b_receive = anyio.create_memory_object_stream[bytes](float("inf"))
    b_send, a_receive = anyio.create_memory_object_stream[bytes](float("inf"))
    return MemoryByteStream(a_send, a_receive), MemoryByteStream(b_send, b_receive)


@pytest.fixture
async def pipe(anyio_backend: object) -> AsyncIterator[tuple[MemoryByteStream, MemoryByteStream]]:
    """memory_pipe(), closed after the test (an unclosed memory stream warns, which fails)."""
    near, far = memory_pipe()
    yield near, far
    await near.aclose()
    await far.aclose()


@pytest.mark.anyio
async def test_anyio_stream_yields_under_a_flood_of_one_byte_records(
    pipe: tuple[MemoryByteStream, MemoryByteStream],
) -> None:
    near, far = pipe
    streams: dict[str, SecureStream] = {}

    async def wrap(name: str, transport: MemoryByteStream, role: Role) -> None:
        streams[name] = await SecureStream.wrap(transport, key=KEY, role=role, record_size=1 << 20)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wrap, "client", near, Role.INITIATOR)
        tg.start_soon(wrap, "server", far, Role.RESPONDER)
    client, server = streams["client"], streams["server"]
    await near.send(flood(client.channel.sealer))  # all at once, beside the client stream
    finished = anyio.Event()
    total = 0

    async def drain() -> None:
        nonlocal total
        try:
            while True:
                total += len(await server.receive(65536))
        except anyio.EndOfStream:
            finished.set()

    samples = [server.channel.opener.records_opened]
    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        with anyio.fail_after(60):
            while not finished.is_set():
                await anyio.lowlevel.checkpoint()
                samples.append(server.channel.opener.records_opened)
    assert total == FLOOD
    check(samples)


@pytest.mark.asyncio
async def test_a_peer_trickling_a_record_is_dropped_at_the_record_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer with the key starts a 1 MiB record and sends one byte every 50 ms: the server
    drops it once the record timeout passes, logging the peer and the reason."""
    errors: list[BaseException] = []

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        try:
            await reader.read(65536)
        except gcmstream.TruncatedStreamError as exc:
            errors.append(exc)
        writer.close()

    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY, record_timeout=0.5)
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY, record_size=1 << 20)
        record = bytes(writer.sealer.seal(bytes(1 << 20), flush=True))
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with asyncio.timeout(10):
            for byte in range(len(record)):
                if writer.transport.is_closing() or errors:
                    break
                writer.transport.write(record[byte : byte + 1])
                await asyncio.sleep(0.05)
        elapsed = loop.time() - start
        writer.close()
    assert errors, "the trickling peer was never dropped"
    assert isinstance(errors[0].__cause__, TimeoutError)
    assert 0.4 < elapsed < 5
    assert any("record_timeout" in r.getMessage() and "127.0.0.1" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_anyio_stream_drops_a_peer_trickling_a_record(
    caplog: pytest.LogCaptureFixture, pipe: tuple[MemoryByteStream, MemoryByteStream]
) -> None:
    near, far = pipe
    streams: dict[str, SecureStream] = {}

    async def wrap(name: str, transport: MemoryByteStream, role: Role) -> None:
        streams[name] = await SecureStream.wrap(
            transport, key=KEY, role=role, record_size=1 << 20, record_timeout=0.5
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(wrap, "client", near, Role.INITIATOR)
        tg.start_soon(wrap, "server", far, Role.RESPONDER)
    record = bytes(streams["client"].channel.sealer.seal(bytes(1 << 20), flush=True))

    async def trickle() -> None:
        for index in range(len(record)):
            await near.send(record[index : index + 1])
            await anyio.sleep(0.05)

    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(trickle)
        with anyio.fail_after(10), pytest.raises(gcmstream.TruncatedStreamError) as info:
            await streams["server"].receive()
        tg.cancel_scope.cancel()
    assert isinstance(info.value, anyio.BrokenResourceError)
    assert isinstance(info.value.__cause__, TimeoutError)
    assert 0.4 < anyio.current_time() - start < 5
    assert any("record_timeout" in r.getMessage() for r in caplog.records)


@pytest.mark.asyncio
async def test_start_server_drops_a_client_idle_past_the_idle_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that completes its handshake, sends one message, then nothing: dropped after
    ``idle_timeout``, its reader raising TruncatedStreamError caused by TimeoutError. A client
    that keeps talking more often than that stays."""
    errors: list[BaseException] = []
    received: list[bytes] = []
    ended: list[bool] = []
    both_ended = asyncio.Event()

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                received.append(data)
        except gcmstream.TruncatedStreamError as exc:
            errors.append(exc)
        ended.append(True)
        if len(ended) == 2:
            both_ended.set()
        writer.close()

    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY, idle_timeout=0.4)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    async with server:
        _, chatty = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
        _, quiet = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
        quiet.write(b"hello")
        await quiet.drain()
        start = loop.time()
        async with asyncio.timeout(10):
            while not errors:
                chatty.write(b".")  # every 0.1 s: never idle for 0.4 s
                await chatty.drain()
                await asyncio.sleep(0.1)
        elapsed = loop.time() - start
        assert not chatty.transport.is_closing()
        chatty.write_eof()  # the chatty client ends cleanly: its handler ends without error
        async with asyncio.timeout(10):
            await both_ended.wait()
        chatty.close()
        quiet.close()
    assert len(errors) == 1, errors
    assert isinstance(errors[0].__cause__, TimeoutError)
    assert 0.3 < elapsed < 5
    assert b"hello" in received
    lines = [r.getMessage() for r in caplog.records if "idle_timeout" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1" in lines[0] and "nothing received for 0.4 s" in lines[0], lines


@pytest.mark.asyncio
async def test_idle_timeout_does_not_count_while_the_server_paused_reading() -> None:
    """A full ring pauses reading for a slow handler: the peer cannot send, so it is not idle."""
    got: list[int] = []
    handled = asyncio.Event()

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        await asyncio.sleep(1.0)  # 2.5 x the idle timeout without reading, the ring full
        total = 0
        try:
            while data := await reader.read(1 << 20):
                total += len(data)
        finally:
            got.append(total)
            handled.set()
            writer.close()

    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY, idle_timeout=0.4)
    port = server.sockets[0].getsockname()[1]
    async with server:
        _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
        writer.write(bytes(4 << 20))  # far more than the ring and the socket buffers take
        writer.write_eof()
        async with asyncio.timeout(20):
            await writer.drain()
            await handled.wait()
        writer.close()
    assert got == [4 << 20]


@pytest.mark.anyio
async def test_anyio_listener_drops_a_client_idle_past_the_idle_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from gcmstream.anyio_stream import connect_tcp, create_tcp_listener

    errors: list[BaseException] = []
    dropped = anyio.Event()
    listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1", idle_timeout=0.4)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve_one(stream: SecureStream) -> None:
        try:
            while True:
                await stream.receive()
        except (gcmstream.TruncatedStreamError, anyio.EndOfStream) as exc:
            errors.append(exc)
            dropped.set()
        finally:
            await anyio.aclose_forcefully(stream)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve_one)
        client = await connect_tcp("127.0.0.1", port, key=KEY)
        await client.send(b"hello")
        start = anyio.current_time()
        with anyio.fail_after(10):
            await dropped.wait()
        elapsed = anyio.current_time() - start
        tg.cancel_scope.cancel()
    await client.aclose()
    assert isinstance(errors[0], gcmstream.TruncatedStreamError), errors
    assert isinstance(errors[0].__cause__, TimeoutError)
    assert 0.3 < elapsed < 5
    lines = [r.getMessage() for r in caplog.records if "idle_timeout" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1" in lines[0] and "nothing received for 0.4 s" in lines[0], lines


@pytest.mark.anyio
async def test_anyio_stream_without_idle_timeout_waits_for_a_quiet_peer() -> None:
    """The default (None): a peer silent for longer than any test timeout is still connected
    (with the record timer off too: neither limit applies)."""
    near, far = memory_pipe()
    streams: dict[str, SecureStream] = {}

    async def wrap(name: str, transport: MemoryByteStream, role: Role) -> None:
        streams[name] = await SecureStream.wrap(transport, key=KEY, role=role, record_timeout=None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wrap, "client", near, Role.INITIATOR)
        tg.start_soon(wrap, "server", far, Role.RESPONDER)
    assert streams["server"].idle_timeout is None
    with anyio.move_on_after(0.5) as scope:
        await streams["server"].receive()
    assert scope.cancelled_caught  # still waiting, not dropped
    await streams["client"].send(b"late")
    with anyio.fail_after(5):
        assert await streams["server"].receive() == b"late"
