"""The asyncio adapter's StreamReader/StreamWriter verbs and its memory safety with transports."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import inspect
import itertools
import logging
import os
import random
import socket
import stat
import struct
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import gcmstream
from gcmstream import aio
from gcmstream.format import MAGIC, key_id

from .helpers import KEY

Pair = tuple[gcmstream.SecureStreamReader, gcmstream.SecureStreamWriter]


@asynccontextmanager
async def connected(
    server_job: Callable[[gcmstream.SecureStreamReader, gcmstream.SecureStreamWriter], Awaitable[None]],
    **options: Any,
) -> AsyncIterator[Pair]:
    """A client connected to a server that runs ``server_job`` on its streams."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        try:
            await server_job(reader, writer)
            done.set_result(None)
        except BaseException as exc:
            done.set_exception(exc)
            raise
        finally:
            writer.close()

    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY, **options)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY, **options)
    try:
        yield reader, writer
        await asyncio.wait_for(done, 20)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


async def send_all(
    data: bytes, reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
) -> None:
    writer.write(data)
    writer.write_eof()
    await writer.drain()
    assert await reader.read() == b""


@pytest.mark.asyncio
async def test_read_verbs_follow_stream_reader() -> None:
    text = b"alpha\nbeta\r\ngamma|delta" + b"x" * 70_000 + b"\nomega"

    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(text, r, w)

    async with connected(job, limit=1 << 20) as (reader, writer):
        assert await reader.read(0) == b""
        assert await reader.readline() == b"alpha\n"
        assert await reader.readuntil(b"\r\n") == b"beta\r\n"
        assert await reader.readexactly(5) == b"gamma"
        assert await reader.readuntil(b"|") == b"|"
        buffer = bytearray(5)
        assert await reader.readinto(buffer) == 5
        assert buffer == b"delta"
        assert await reader.readline() == b"x" * 70_000 + b"\n"
        assert [line async for line in reader] == [b"omega"]
        assert await reader.read() == b""
        assert reader.at_eof()
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readexactly(1)
        assert info.value.partial == b""
        writer.write_eof()


@pytest.mark.asyncio
async def test_readuntil_limit_overrun_keeps_data_readable() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(b"a" * 100 + b"\n" + b"tail", r, w)

    async with connected(job, limit=10) as (reader, writer):
        with pytest.raises(asyncio.LimitOverrunError):
            await reader.readuntil(b"\n")
        assert await reader.read(101) == b"a" * 100 + b"\n"  # nothing was lost
        assert await reader.read() == b"tail"
        writer.write_eof()


@pytest.mark.asyncio
async def test_readexactly_on_clean_end_and_truncation_are_different() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(b"short", r, w)

    async with connected(job) as (reader, writer):
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readexactly(10)
        assert info.value.partial == b"short"
        assert not isinstance(info.value, gcmstream.TruncatedStreamError)
        writer.write_eof()

    async def cut(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        w.write(b"partial")
        await w.drain()
        w.transport.abort()  # vanish without FINAL

    async with connected(cut) as (reader, writer):
        with pytest.raises(gcmstream.TruncatedStreamError):
            await reader.readexactly(10)


@pytest.mark.asyncio
async def test_iter_chunks_views_are_valid_until_next_step() -> None:
    data = random.Random(1).randbytes(300_000)

    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(data, r, w)

    async with connected(job) as (reader, writer):
        kept: list[memoryview] = []
        copies = bytearray()
        async for view in reader.iter_chunks():
            assert isinstance(view, memoryview)
            copies += view
            kept.append(view)
        assert copies == data
        with pytest.raises(ValueError, match="released"):
            bytes(kept[0])  # stale views are released, not silently reused memory
        writer.write_eof()


@pytest.mark.asyncio
async def test_small_writes_in_one_iteration_share_a_record_and_arrive_without_drain() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        assert await r.readexactly(30) == b"x" * 30
        w.write(b"pong")  # no drain: the flush at the end of the iteration sends it
        assert await r.read() == b""

    async with connected(job) as (reader, writer):
        for _ in range(30):
            writer.write(b"x")
        await asyncio.sleep(0)
        assert await asyncio.wait_for(reader.readexactly(4), 10) == b"pong"
        assert writer.get_extra_info("gcmstream_records_sealed") == 1
        writer.write_eof()


@pytest.mark.asyncio
async def test_extra_info_passes_transport_keys_and_adds_ours() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(b"hello", r, w)

    async with connected(job, record_size=4096) as (reader, writer):
        assert await reader.read() == b"hello"
        assert writer.get_extra_info("peername")[0] == "127.0.0.1"
        assert writer.get_extra_info("gcmstream_suite") == "AES_128_GCM"
        assert writer.get_extra_info("gcmstream_record_size") == 4096
        assert writer.get_extra_info("gcmstream_bytes_opened") == 5
        assert writer.get_extra_info("no such key", "fallback") == "fallback"
        writer.write_eof()


@pytest.mark.asyncio
async def test_two_readers_at_once_are_refused() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await r.read()

    async with connected(job) as (reader, writer):
        first = asyncio.ensure_future(reader.read(1))
        await asyncio.sleep(0.05)
        with pytest.raises(gcmstream.ConcurrencyError, match="already waiting"):  # a RuntimeError too
            await reader.read(1)
        first.cancel()
        writer.write_eof()


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_transport_held_memory_is_never_reused_under_backpressure(use_uvloop: bool) -> None:
    """Megabytes in flight to a reader that stalls: the writer's sealed output is handed to a
    transport that cannot send it at once; every byte must still arrive as written."""
    blocks = [bytes([i]) * 200_000 + os.urandom(1000) for i in range(1, 60)]
    expected = hashlib.sha256(b"".join(blocks)).hexdigest()

    async def main() -> str:
        async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
            for block in blocks:  # no drain between writes: the transport buffers them all
                w.write(block)
            w.write_eof()
            await w.drain()

        async with connected(job) as (reader, writer):
            await asyncio.sleep(0.5)  # let the sender run far ahead of us
            hasher = hashlib.sha256()
            async for view in reader.iter_chunks():
                hasher.update(view)
            return hasher.hexdigest()

    if use_uvloop:
        if sys.platform == "win32":
            pytest.skip("no uvloop")
        import uvloop

        digest = uvloop.run(main())
    else:
        digest = asyncio.run(main())
    assert digest == expected


@pytest.mark.timeout(30)
@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_writing_after_the_peer_reset_raises_connection_reset(use_uvloop: bool) -> None:
    """Issue 21 section 6: a peer resets the connection (SO_LINGER 0) while the server writes.
    Both loops report it as the lost connection it is, ConnectionResetError (an OSError, as
    errors.py allows from the transport): asyncio at drain(), uvloop at write(), where it
    raised its own RuntimeError("... the handler is closed") before."""

    async def main() -> None:
        async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
            await r.readexactly(5)  # the client's hello, then its reset
            with pytest.raises(ConnectionResetError):
                for _ in range(200):  # bounded: each write goes out, until the reset is seen
                    w.write(b"x" * 1000)
                    await w.drain()
                    await asyncio.sleep(0.01)

        async with connected(job) as (reader, writer):
            client = writer.get_extra_info("socket")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.write(b"hello")
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.transport.abort()  # with SO_LINGER 0: a reset, not a FIN

    if use_uvloop:
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())


@pytest.mark.asyncio
async def test_one_way_pipe_to_a_subprocess() -> None:
    """encrypting_writer into a child's stdin, decrypting_reader over what it sends back."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys, shutil; shutil.copyfileobj(sys.stdin.buffer, sys.stdout.buffer)",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    payload = random.Random(2).randbytes(1_500_000)
    writer = aio.encrypting_writer(child.stdin, key=KEY, context=b"pipe", record_size=16384)
    reader = aio.decrypting_reader(child.stdout, key=KEY, context=b"pipe")

    async def produce() -> None:
        for start in range(0, len(payload), 100_000):
            writer.write(payload[start : start + 100_000])
            await writer.drain()
        writer.write_eof()  # seals FINAL (close() would not)
        writer.close()

    _, received = await asyncio.wait_for(asyncio.gather(produce(), reader.read()), 30)
    assert received == payload
    assert reader.at_eof()
    assert await asyncio.wait_for(child.wait(), 10) == 0


@pytest.mark.asyncio
async def test_wrong_context_is_refused_at_the_handshake() -> None:
    server = await gcmstream.start_server(lambda r, w: None, "127.0.0.1", 0, key=KEY, context=b"a")
    port = server.sockets[0].getsockname()[1]
    # the server refuses the header and hangs up: the client's handshake is cut short
    with pytest.raises(
        (gcmstream.TruncatedStreamError, ConnectionError), match=r"during the handshake|reset"
    ):
        await gcmstream.open_connection("127.0.0.1", port, key=KEY, context=b"b")
    server.close()
    await server.wait_closed()


@pytest.mark.asyncio
async def test_silent_client_is_dropped_after_the_handshake_timeout() -> None:
    calls: list[object] = []
    server = await gcmstream.start_server(
        lambda r, w: calls.append(r), "127.0.0.1", 0, key=KEY, handshake_timeout=0.2
    )
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # a responder says nothing before the initiator's header; it hangs up at the timeout
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert calls == []
    writer.close()
    server.close()
    await server.wait_closed()


@pytest.mark.asyncio
async def test_abort_after_a_failure_reads_as_truncation() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        w.write(b"first half")
        await w.drain()
        w.abort()

    async with connected(job) as (reader, writer):
        assert await reader.readexactly(10) == b"first half"
        with pytest.raises(gcmstream.TruncatedStreamError):
            await reader.read()


@pytest.mark.asyncio
async def test_iter_chunks_view_survives_an_await_while_more_data_arrives() -> None:
    """A proxy holds a chunk across an await; the transport delivering more must not kill it."""

    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        w.write(b"first record")
        await w.drain()
        await asyncio.sleep(0.1)
        w.write(b"second record")
        w.write_eof()
        await w.drain()
        await r.read()

    async with connected(job) as (reader, writer):
        seen = []
        async for chunk in reader.iter_chunks():
            await asyncio.sleep(0.2)  # the second record arrives meanwhile
            seen.append(bytes(chunk))
        assert b"".join(seen) == b"first recordsecond record"
        writer.write_eof()


@pytest.mark.asyncio
async def test_readexactly_zero_and_readuntil_limit_match_asyncio() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(b"x" * 8 + b"\n" + b"y" * 9 + b"\n", r, w)

    async with connected(job, limit=8) as (reader, writer):
        assert await asyncio.wait_for(reader.readexactly(0), 1) == b""
        assert await reader.readuntil(b"\n") == b"x" * 8 + b"\n"  # separator at the limit: fine
        with pytest.raises(asyncio.LimitOverrunError):
            await reader.readuntil(b"\n")
        writer.write_eof()


@pytest.mark.asyncio
async def test_concurrent_drains_all_wake_and_drain_after_loss_raises() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        with pytest.raises(gcmstream.TruncatedStreamError):  # the client aborts
            await r.read()

    async with connected(job) as (reader, writer):
        protocol = writer.transport.get_protocol()
        protocol.pause_writing()
        drains = [asyncio.ensure_future(writer.drain()) for _ in range(3)]
        await asyncio.sleep(0.05)
        protocol.resume_writing()
        await asyncio.wait_for(asyncio.gather(*drains), 2)
        protocol.pause_writing()
        writer.abort()
        await asyncio.sleep(0.05)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(writer.drain(), 2)


@pytest.mark.asyncio
async def test_readinto_with_large_buffers_reads_every_byte_in_order() -> None:
    """readinto decrypts whole records straight into the caller's buffer; mixed with the other
    verbs, every byte arrives once and in order, and the end reads as 0."""
    data = random.Random(9).randbytes(1_000_000)

    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(data, r, w)

    async with connected(job) as (reader, writer):
        got = bytearray(await reader.readexactly(3))
        buffer = bytearray(200_000)
        while True:
            count = await reader.readinto(buffer)
            if not count:
                break
            got += buffer[:count]
            got += await reader.read(7)
        assert bytes(got) == data
        assert reader.at_eof()
        writer.write_eof()


@pytest.mark.asyncio
async def test_finally_close_after_a_failed_transfer_reads_as_truncation() -> None:
    """The usual ``try: ... finally: writer.close()``: a transfer that fails part way must not
    look complete at the peer (issue 11: it once did, after 1.69 of 10 MB)."""
    total = 10 * 1024 * 1024
    seen: asyncio.Future[tuple[int, BaseException | None]] = asyncio.get_running_loop().create_future()

    async def receive(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        got = 0
        try:
            while chunk := await r.read(1 << 20):
                got += len(chunk)
        except gcmstream.TruncatedStreamError as exc:
            seen.set_result((got, exc))
            return
        seen.set_result((got, None))

    server = await gcmstream.start_server(receive, "127.0.0.1", 0, key=KEY)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
    block = os.urandom(64 * 1024)
    with pytest.raises(OSError, match="disk failed"):
        try:
            for sent in range(0, total, len(block)):
                if sent >= total * 17 // 100:
                    raise OSError("disk failed")  # the source fails part way
                writer.write(block)
                await writer.drain()
        finally:
            writer.close()
    got, error = await asyncio.wait_for(seen, 20)
    assert isinstance(error, gcmstream.TruncatedStreamError), (
        f"the peer took {got} of {total} bytes as complete"
    )
    assert "the sender closed without ending the stream" in str(error)
    assert 0 < got < total
    server.close()
    await server.wait_closed()


@pytest.mark.asyncio
async def test_async_with_writer_ends_the_stream_only_on_a_clean_exit() -> None:
    outcomes: asyncio.Queue[bytes | BaseException] = asyncio.Queue()

    async def receive(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        try:
            await outcomes.put(await r.read())
        except gcmstream.TruncatedStreamError as exc:
            await outcomes.put(exc)
        finally:
            w.close()  # a writer left to the collector warns (ResourceWarning, as asyncio's)

    server = await gcmstream.start_server(receive, "127.0.0.1", 0, key=KEY)
    port = server.sockets[0].getsockname()[1]
    _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
    async with writer:
        writer.write(b"complete")
    assert await asyncio.wait_for(outcomes.get(), 10) == b"complete"
    assert writer.is_closing()

    _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
    with pytest.raises(ZeroDivisionError):
        async with writer:
            writer.write(b"half")
            await writer.drain()
            1 / 0  # noqa: B018
    assert isinstance(await asyncio.wait_for(outcomes.get(), 10), gcmstream.TruncatedStreamError)

    _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)

    async def cancelled_inside() -> None:
        async with writer:
            writer.write(b"cancelled")
            await asyncio.sleep(10)

    inner = asyncio.ensure_future(cancelled_inside())
    await asyncio.sleep(0.05)
    inner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await inner
    assert isinstance(await asyncio.wait_for(outcomes.get(), 10), gcmstream.TruncatedStreamError)
    server.close()
    await server.wait_closed()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_leaving_async_with_writer_after_the_peer_left_does_not_raise(use_uvloop: bool) -> None:
    """Issue 24: a client that ended its stream, read its answer and closed its socket. The
    handler then leaves ``async with writer:``, whose write_eof() half-closed a connection the
    peer's reset had ended: OSError ENOTCONN on asyncio escaped the block (the trio bug of the
    anyio adapter, here). Now the block ends quietly, as the anyio adapter's does."""
    outcomes: list[str | None] = []

    async def main() -> None:
        client_gone, handled = asyncio.Event(), asyncio.Event()

        async def handle(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
            try:
                async with writer:
                    while data := await reader.read(100):
                        writer.write(data.upper())
                    await client_gone.wait()
                    await asyncio.sleep(0.05)  # the client's FIN is in
            except BaseException as exc:
                outcomes.append(repr(exc))
                raise
            else:
                outcomes.append(None)
            finally:
                handled.set()

        server = await gcmstream.start_server(handle, "127.0.0.1", 0, key=KEY)
        async with server:
            for _ in range(3):
                reader, writer = await gcmstream.open_connection(
                    "127.0.0.1", server.sockets[0].getsockname()[1], key=KEY
                )
                writer.write(b"hi")
                writer.write_eof()
                assert await asyncio.wait_for(reader.read(2), 10) == b"HI"
                writer.close()  # before the server's FINAL: it goes to a closed socket
                await writer.wait_closed()
                client_gone.set()
                await asyncio.wait_for(handled.wait(), 10)
                client_gone.clear()
                handled.clear()

    if use_uvloop:
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())
    assert outcomes == [None, None, None]


def test_a_writer_made_outside_a_loop_dropped_after_it_closed_only_warns() -> None:
    """encrypting_writer is not async: a writer made outside a running loop and dropped after
    that loop closed cannot close its transport; its __del__ warns "loop is closed" and raises
    nothing (an exception there would be unraisable: pytest fails the test on it)."""
    here, there = socket.socketpair()
    loop = asyncio.new_event_loop()

    async def inner_writer() -> asyncio.StreamWriter:
        return (await asyncio.open_unix_connection(sock=here))[1]

    inner = loop.run_until_complete(inner_writer())
    writer = gcmstream.encrypting_writer(inner, key=KEY)
    loop.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del writer
        gc.collect()
    assert ("ResourceWarning", "loop is closed") in [(w.category.__name__, str(w.message)) for w in caught]
    inner.transport.abort()
    here.close()
    there.close()


@pytest.mark.asyncio
async def test_write_eof_twice_is_harmless_and_writing_after_it_is_refused() -> None:
    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        await send_all(b"once", r, w)

    async with connected(job) as (reader, writer):
        assert await reader.read() == b"once"
        writer.write_eof()
        writer.write_eof()  # as asyncio's transports: nothing more happens
        with pytest.raises(gcmstream.StreamClosedError):  # also a RuntimeError, as asyncio's
            writer.write(b"late")


@pytest.mark.asyncio
async def test_failed_handshakes_close_the_connection_and_name_the_peer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One policy in every entry point: a failed handshake closes the transport; a server logs
    the peer's address."""
    caplog.set_level(logging.WARNING, logger="gcmstream")
    server = await gcmstream.start_server(lambda r, w: None, "127.0.0.1", 0, key=KEY)
    port = server.sockets[0].getsockname()[1]
    raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", port)
    local = raw_writer.get_extra_info("sockname")
    # version 2 (issue 10): the server refuses the unknown key ID and hangs up without answering
    with pytest.raises(gcmstream.TruncatedStreamError, match="during the handshake"):
        await aio.wrap_streams(raw_reader, raw_writer, key=bytes(16), role=gcmstream.Role.INITIATOR)
    assert raw_writer.transport.is_closing()  # wrap_streams closed it, as open_connection does
    for _ in range(100):
        if "handshake with" in caplog.text:
            break
        await asyncio.sleep(0.02)
    assert f"handshake with {local!r} failed" in caplog.text
    server.close()
    await server.wait_closed()


@pytest.mark.asyncio
async def test_write_after_close_is_refused_where_asyncio_drops_it() -> None:
    """Deliberate difference: asyncio's StreamWriter drops a write after close() silently;
    ours raises, so the data cannot be lost without a word."""
    got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def plain(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        got.set_result(await r.read())
        w.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    _, plain_writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    plain_writer.write(b"a")
    plain_writer.close()
    plain_writer.write(b"b")  # no error
    assert await asyncio.wait_for(got, 10) == b"a"  # and b"b" is gone
    server.close()
    await server.wait_closed()

    async def job(r: gcmstream.SecureStreamReader, w: gcmstream.SecureStreamWriter) -> None:
        with pytest.raises(gcmstream.TruncatedStreamError):
            await r.read()

    async with connected(job) as (reader, writer):
        writer.close()
        with pytest.raises(gcmstream.StreamClosedError, match="closing"):
            writer.write(b"b")


@pytest.mark.asyncio
async def test_a_key_ring_server_sees_which_key_the_client_proved() -> None:
    """Review finding: identities are claims; the key a client proved is what tells key-ring
    clients apart, so the server must be able to read it (its public key ID)."""
    from gcmstream import KeyRing, generate_key
    from gcmstream.format import key_id

    alice, bob = generate_key(), generate_key()
    seen: list[object] = []

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        seen.append(writer.get_extra_info("gcmstream_peer_key_id"))
        async with writer:
            await reader.read()

    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KeyRing([alice, bob]))
    port = server.sockets[0].getsockname()[1]
    async with server:
        for key in (bob, alice):
            reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=key)
            assert writer.get_extra_info("gcmstream_peer_key_id") == key_id(key)  # the server's
            writer.write_eof()
            assert await reader.read() == b""
            writer.close()
            await writer.wait_closed()
    assert seen == [key_id(bob), key_id(alice)]


@pytest.mark.asyncio
async def test_get_extra_info_gives_the_identity_the_peer_sent() -> None:
    """Issue 24.7: ``gcmstream_peer_id`` is the identity the peer sent (proved when its key is
    named in the ring, whose name() gives it as written), None when it sent none."""
    from gcmstream import KeyRing, generate_key

    alice = generate_key()
    ring = KeyRing({"alice": alice})
    seen: list[object] = []

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        peer_key = writer.get_extra_info("gcmstream_peer_key_id")
        seen.append((writer.get_extra_info("gcmstream_peer_id"), ring.name(peer_key)))
        async with writer:
            await reader.read()

    async with await gcmstream.start_server(handler, "127.0.0.1", 0, key=ring, local_id=b"srv") as server:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=alice, local_id="alice")
        assert writer.get_extra_info("gcmstream_peer_id") == b"srv"
        writer.write_eof()
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()
    assert seen == [(b"alice", "alice")]


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_a_named_key_ring_authenticates_identities(caplog: pytest.LogCaptureFixture) -> None:
    """Review MEDIUM-2: with KeyRing({"alice": ..., "bob": ...}) a client's identity is the name
    of the key it proved. Bob (holding only bob's key) claiming to be alice is refused before
    the handler, as is bob where alice is expected; alice is served once she names herself
    (review 10b: a named key's holder must claim its name; without the claim she is refused)."""
    from gcmstream import KeyRing, generate_key

    caplog.set_level(logging.DEBUG, logger="gcmstream")  # (a stranger's line after the first: debug)
    alice, bob = generate_key(), generate_key()
    served: list[tuple[bytes, bytes]] = []

    async def handler(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
        served.append((await reader.read(), writer.get_extra_info("gcmstream_peer_key_id")))
        writer.write_eof()
        writer.close()

    ring = KeyRing({"alice": alice, "bob": bob})
    async with (
        await gcmstream.start_server(handler, "127.0.0.1", 0, key=ring, handshake_timeout=5) as anyone,
        await gcmstream.start_server(
            handler, "127.0.0.1", 0, key=ring, peer_id="alice", handshake_timeout=5
        ) as alice_only,
    ):
        ports = [server.sockets[0].getsockname()[1] for server in (anyone, alice_only)]

        async def attempt(port: int, key: bytes, local_id: str | None) -> bool:
            try:
                reader, writer = await gcmstream.open_connection(
                    "127.0.0.1", port, key=key, local_id=local_id, handshake_timeout=5
                )
            except gcmstream.PeerIdentityError:
                return False  # the server, in this process, refused the claim: it tells the client
            writer.write(b"hello")
            writer.write_eof()
            await reader.read()
            writer.close()
            await writer.wait_closed()
            return True

        assert not await attempt(ports[0], bob, "alice")  # a claim that the key contradicts
        assert not await attempt(ports[1], bob, "alice")
        assert not await attempt(ports[1], bob, "bob")  # bob's key is bob, not the alice expected
        assert not await attempt(ports[1], alice, None)  # review 10b: a named key's holder names itself
        assert await attempt(ports[1], alice, "alice")
        assert await attempt(ports[0], bob, "bob")
    assert served == [(b"hello", key_id(alice)), (b"hello", key_id(bob))]
    refusals = [r.getMessage() for r in caplog.records if "PeerIdentityError" in r.getMessage()]
    assert len(refusals) == 4, caplog.text
    assert sum("proved the key named b'bob' but sent identity b'alice'" in m for m in refusals) == 2
    assert sum("the peer sent identity b'bob', expected b'alice'" in m for m in refusals) == 1
    assert sum("proved the key named b'alice' but sent no identity" in m for m in refusals) == 1


# A's listener, in a process of its own (so the in-process check K4 is blind): its ring names
# the key it shares with B "B" and the key it shares with C "C"; it wants B only. It prints
# its port, then one line per connection it serves, with the name of the key proved.
_PAIRWISE_LISTENER = """
import asyncio, logging, sys
import gcmstream
logging.basicConfig(format="%(levelname)s %(message)s")
logging.getLogger("gcmstream").setLevel(logging.DEBUG)  # a stranger's line after the first: debug
k_ab, k_ac = (bytes.fromhex(h) for h in sys.argv[1:3])
ring = gcmstream.KeyRing({"B": k_ab, "C": k_ac})
async def main():
    async def serve(reader, writer):
        name = ring.name(writer.get_extra_info("gcmstream_peer_key_id"))
        print("SERVED", name, (await reader.read()).decode(), flush=True)
        writer.write(b"served by A")
        writer.write_eof()
        writer.close()
    server = await gcmstream.start_server(
        serve, "127.0.0.1", 0, key=ring, local_id="A", peer_id="B", handshake_timeout=5
    )
    print("PORT", server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until stdin closes
asyncio.run(main())
"""


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_own_connection_reflected_into_its_listener_is_refused_with_named_pairwise_keys() -> None:
    """Review 10b MEDIUM-1, the pairwise-PSK Selfie: A and B share k_AB, A's ring names it "B".
    A's connection to B, redirected by a proxy holding no key into A's own listener (another
    process), proves k_AB; it once passed as B. Now the holder of a named key must claim its
    name, so whatever A's client sends (nothing, or its own name) is refused before A's
    handler; B itself, naming itself, is served (through the same proxy)."""
    k_ab, k_ac = gcmstream.generate_key(), gcmstream.generate_key()
    listener = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PAIRWISE_LISTENER, k_ab.hex(), k_ac.hex(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert listener.stdin is not None and listener.stdout is not None
    try:
        port = int((await asyncio.wait_for(listener.stdout.readline(), 20)).split()[1])
        recorded: list[bytes] = []

        async def redirect(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
            # the attacker: no key, it only forwards (and records) both ways
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)

            async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
                with contextlib.suppress(ConnectionError):
                    while data := await source.read(65536):
                        recorded.append(data)
                        sink.write(data)
                        await sink.drain()
                    sink.write_eof()

            await asyncio.gather(pump(client_reader, upstream_writer), pump(upstream_reader, client_writer))
            client_writer.close()
            upstream_writer.close()

        proxy = await asyncio.start_server(redirect, "127.0.0.1", 0)
        proxy_port = proxy.sockets[0].getsockname()[1]
        outcomes = []
        for key, claim in ((k_ab, None), (k_ab, "A"), (k_ab, "B")):  # A's client twice, then B
            try:
                reader, writer = await gcmstream.open_connection(
                    "127.0.0.1", proxy_port, key=key, local_id=claim, handshake_timeout=10
                )
            except gcmstream.TruncatedStreamError:
                outcomes.append("refused")  # the listener hung up at the header
                continue
            writer.write(b"wire 1000 EUR")
            writer.write_eof()
            outcomes.append((await reader.read()).decode())
            writer.close()
        proxy.close()
        assert recorded  # the proxy did carry A's headers to the listener
        assert outcomes == ["refused", "refused", "served by A"]
    finally:
        listener.stdin.close()
        out, err = await asyncio.wait_for(listener.communicate(), 20)
    assert out.decode().splitlines() == ["SERVED B wire 1000 EUR"]  # (after the PORT line)
    assert "PeerIdentityError: the peer proved the key named b'B' but sent no identity" in err.decode()
    assert "PeerIdentityError: the peer proved the key named b'B' but sent identity b'A'" in err.decode()


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_wrap_streams_upgrades_a_connection_that_carried_plaintext() -> None:
    """Issue 24.6, the start_tls habit: a plaintext line, then wrap_streams on the same asyncio
    streams. The client sends its line and its whole first flight in one write, so the server's
    StreamReader already holds the header behind the line when readline() returns: wrap_streams
    must take those buffered bytes, and both directions then carry records."""
    upgraded: list[bytes] = []

    async def serve(raw_reader: asyncio.StreamReader, raw_writer: asyncio.StreamWriter) -> None:
        upgraded.append(await raw_reader.readline())
        buffered: bytearray = vars(raw_reader)["_buffer"]  # CPython's StreamReader buffer
        for _ in range(200):  # bounded: until the header sits behind the line in the buffer
            if len(buffered) >= len(MAGIC):  # the condition under test
                break
            await asyncio.sleep(0.01)
        upgraded.append(bytes(buffered[: len(MAGIC)]))
        role = gcmstream.Role.RESPONDER
        reader, writer = await aio.wrap_streams(raw_reader, raw_writer, key=KEY, role=role)
        upgraded.append(await reader.read())
        async with writer:
            writer.write(b"secured reply")
            writer.write_eof()

    async with await asyncio.start_server(serve, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", port)
        first_flight = bytearray()
        real_write = raw_writer.write

        def write_after_the_line(data: bytes | bytearray | memoryview) -> None:
            first_flight.extend(data)  # the line and the header leave in one segment
            if len(first_flight) > len(b"UPGRADE\n"):
                real_write(bytes(first_flight))
                first_flight.clear()

        raw_writer.write = write_after_the_line  # type: ignore[method-assign]
        raw_writer.write(b"UPGRADE\n")
        role = gcmstream.Role.INITIATOR
        reader, writer = await aio.wrap_streams(raw_reader, raw_writer, key=KEY, role=role)
        raw_writer.write = real_write  # type: ignore[method-assign]
        async with writer:
            writer.write(b"secured request")
            writer.write_eof()
            assert await reader.read() == b"secured reply"
    assert upgraded[0] == b"UPGRADE\n"
    assert upgraded[1] == MAGIC  # the header was in the reader's buffer before wrap_streams
    assert upgraded[2] == b"secured request"


# -- unix sockets and the loop's own keywords (issue 24.1 and 24.6) -------------------------------


async def _echo(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
    data = await reader.read()
    if data == b"fail":
        raise RuntimeError("a handler that fails")
    writer.write(data)
    writer.write_eof()
    await writer.drain()
    writer.close()


async def _round_trip(path: str, data: bytes) -> bytes:
    reader, writer = await gcmstream.open_unix_connection(path, key=KEY)
    try:
        writer.write(data)
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


@pytest.mark.asyncio
async def test_unix_socket_handshake_echo_and_a_failing_handler(tmp_path: Path) -> None:
    """start_unix_server and open_unix_connection over a real unix socket: the handshake, an
    echo, and a handler that fails ends its connection only (the client reads a truncation,
    the loop's exception handler hears of it, the next client is served)."""
    reports: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reports.append(context))
    path = str(tmp_path / "echo.sock")
    server = await gcmstream.start_unix_server(_echo, path, key=KEY)
    try:
        assert server.sockets[0].family == socket.AF_UNIX
        assert await _round_trip(path, b"hello over a unix socket") == b"hello over a unix socket"
        with pytest.raises(gcmstream.TruncatedStreamError):
            await _round_trip(path, b"fail")
        assert await _round_trip(path, b"still served") == b"still served"
        assert [type(report["exception"]) for report in reports] == [RuntimeError]
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.asyncio
async def test_a_unix_socket_file_is_asyncios(tmp_path: Path) -> None:
    """Path permissions are left to the caller, as asyncio.start_unix_server leaves them: the
    socket file's mode is the one asyncio's own server gets (the umask's), and a stale socket
    file at the path is replaced, as asyncio replaces it."""
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as left_behind:
        left_behind.bind(str(stale))  # a server that died leaves its file
    plain = await asyncio.start_unix_server(lambda r, w: None, str(tmp_path / "plain.sock"))
    secure = await gcmstream.start_unix_server(_echo, str(stale), key=KEY)
    try:
        modes = [os.stat(tmp_path / name).st_mode for name in ("plain.sock", "stale.sock")]
        assert stat.S_ISSOCK(modes[1]) and stat.S_IMODE(modes[0]) == stat.S_IMODE(modes[1])
        assert await _round_trip(str(stale), b"x") == b"x"
    finally:
        for server in (plain, secure):
            server.close()
            await server.wait_closed()


@pytest.mark.asyncio
async def test_a_closed_unix_servers_socket_file_is_where_asyncio_leaves_it(tmp_path: Path) -> None:
    """README: start_unix_server is asyncio's server, so closing it leaves the socket file as
    asyncio's own does: left up to Python 3.12, removed from 3.13 on (``cleanup_socket``)."""
    plain = await asyncio.start_unix_server(lambda r, w: None, str(tmp_path / "plain.sock"))
    secure = await gcmstream.start_unix_server(_echo, str(tmp_path / "secure.sock"), key=KEY)
    for server in (plain, secure):
        server.close()
        await server.wait_closed()
    left = {name: (tmp_path / name).exists() for name in ("plain.sock", "secure.sock")}
    assert left == dict.fromkeys(left, sys.version_info < (3, 13)), left


@pytest.mark.asyncio
async def test_loop_keywords_reach_the_loop_and_a_misspelt_option_is_an_error(tmp_path: Path) -> None:
    """gcmstream's options are named keywords; everything else goes to the loop
    (create_server's start_serving, create_connection's sock, ...), so a misspelt option is
    the loop's TypeError, never silently dropped, with config= too."""
    server = await gcmstream.start_server(_echo, "127.0.0.1", 0, key=KEY, start_serving=False)
    try:
        assert not server.is_serving()  # the loop took start_serving=False
        await server.start_serving()
        port = server.sockets[0].getsockname()[1]
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        reader, writer = await gcmstream.open_connection(sock=sock, key=KEY)  # the loop took sock=
        writer.write(b"through sock=")
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 10) == b"through sock="
        writer.close()
        config = gcmstream.Configuration(key=KEY)
        with pytest.raises(TypeError, match="recrod_size"):
            await gcmstream.open_connection("127.0.0.1", port, key=KEY, recrod_size=1000)
        with pytest.raises(TypeError, match="recrod_size"):
            await gcmstream.open_connection("127.0.0.1", port, config=config, recrod_size=1000)
        with pytest.raises(TypeError, match="idle_timout"):
            await gcmstream.start_server(_echo, "127.0.0.1", 0, key=KEY, idle_timout=5)
        with pytest.raises(TypeError, match="recrod_size"):
            await gcmstream.open_unix_connection(str(tmp_path / "none"), key=KEY, recrod_size=1000)
        with pytest.raises(TypeError, match="idle_timout"):
            await gcmstream.start_unix_server(_echo, str(tmp_path / "s"), config=config, idle_timout=5)
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_wrap_streams_reads_whole_records() -> None:
    """Issue 23 item 5: wrap_streams asks its StreamReader for the rest of a record part-way in
    plus whole records of the peer's record size (three 64 KiB records, 196,671 bytes, in a
    256 KiB read), so a reader that holds plenty hands over pieces that split no record (the
    old fixed 256 KiB split every fourth). Every read after the handshake is of that form."""
    wire_length = 5 + 65536 + 16
    # (size asked, what the record part-way in still lacked then: the records after the
    # handshake are 64 KiB each, so that is where the bytes read so far leave off)
    asked: list[tuple[int, int]] = []
    data = os.urandom(20 * 65536)
    received: list[bytes] = []

    async def serve(raw_reader: asyncio.StreamReader, raw_writer: asyncio.StreamWriter) -> None:
        role = gcmstream.Role.RESPONDER
        reader, writer = await aio.wrap_streams(raw_reader, raw_writer, key=KEY, role=role)
        real_read = raw_reader.read
        offset = 0  # record bytes read so far: the handshake read no more than its own

        async def spied(n: int = -1) -> bytes:
            nonlocal offset
            asked.append((n, -offset % wire_length))
            chunk = await real_read(n)
            offset += len(chunk)
            return chunk

        raw_reader.read = spied  # type: ignore[method-assign]
        received.append(await reader.read())
        async with writer:
            writer.write_eof()

    async with await asyncio.start_server(serve, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await aio.wrap_streams(
            raw_reader, raw_writer, key=KEY, role=gcmstream.Role.INITIATOR
        )
        async with writer:
            writer.write(data)
            writer.write_eof()
            assert await reader.read() == b""
    assert received == [data]
    assert asked, "no read after the handshake"
    for size, missing in asked:
        assert size <= 256 * 1024 and (size - missing) % wire_length == 0, asked


def _somaxconn() -> int:  # the kernel's ceiling on a listen queue
    return int(Path("/proc/sys/net/core/somaxconn").read_text())


def _accept_queue(listening: Any) -> tuple[int, int]:
    """A listening socket's accept queue on Linux (TCP_INFO): connections waiting for
    ``accept()`` (tcpi_unacked) and the queue's size (tcpi_sacked)."""
    info = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
    waiting, size = struct.unpack_from("II", info, 24)  # 8 one-byte fields, then rto..snd_mss..
    return waiting, size


@pytest.mark.skipif(sys.platform != "linux", reason="a listening socket's TCP_INFO: Linux")
@pytest.mark.asyncio
async def test_the_asyncio_server_accepts_a_few_a_loop_pass_and_queues_the_rest_in_the_kernel() -> None:
    """asyncio's selector loop accepts up to ``backlog`` connections each time its listening
    socket is ready and admits each at once: under a keyless flood that admitted handshakes faster
    than their answers were computed, and the admission evicted clients mid-handshake
    (docs/review-2026-12-04-admission.md, stop 33). start_server accepts ACCEPTS_PER_PASS a loop
    pass, and the kernel's queue, first in first out, holds the rest: DEFAULT_BACKLOG (clipped to
    net.core.somaxconn) or the ``backlog=`` given, where asyncio's default is 100."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop):
        pytest.skip("asyncio's own selector loop paces its accepts; others are left alone")
    default = min(aio.DEFAULT_BACKLOG, _somaxconn())
    cases: list[tuple[dict[str, Any], int]] = [({}, default), ({"backlog": 50}, 50)]
    for given, size in cases:
        server = await gcmstream.start_server(_echo, "127.0.0.1", 0, key=KEY, **given)
        listening = server.sockets[0]
        clients = []
        try:
            assert _accept_queue(listening) == (0, size)
            for _ in range(40):  # the kernel completes each connect; none accepted yet
                clients.append(socket.create_connection(listening.getsockname()))
            waiting = [_accept_queue(listening)[0]]
            while waiting[-1] and len(waiting) < 200:  # one sample a loop pass
                await asyncio.sleep(0)
                waiting.append(_accept_queue(listening)[0])
            assert waiting[0] == 40 and waiting[-1] == 0, waiting
            taken = [before - after for before, after in itertools.pairwise(waiting)]
            assert max(taken) <= aio.ACCEPTS_PER_PASS, waiting  # on asyncio's own: 40 in one pass
        finally:
            for client in clients:
                client.close()
            server.close()
            await server.wait_closed()


@pytest.mark.asyncio
async def test_a_server_made_not_serving_keeps_asyncios_accept_loop_and_its_backlog() -> None:
    """With ``start_serving=False`` asyncio's ``start_serving()`` listens again with the backlog
    it was made with, so such a server is not paced (a documented difference): its queue is the
    ``backlog`` given, or asyncio's 100 (``aio.ASYNCIO_BACKLOG``), not DEFAULT_BACKLOG, as
    asyncio accepts up to ``backlog`` a loop pass there (the review of stop 33: with 4,096 it
    took 1,000 in one pass). And it serves."""
    loop = asyncio.get_running_loop()
    selector_loop = isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop)
    asyncios = inspect.signature(loop.create_server).parameters["backlog"].default  # its own: 100
    default = min(asyncios if selector_loop else aio.DEFAULT_BACKLOG, _somaxconn())
    cases: list[tuple[dict[str, Any], int]] = [({"backlog": 30}, 30), ({}, default)]
    for given, size in cases:
        server = await gcmstream.start_server(_echo, "127.0.0.1", 0, key=KEY, start_serving=False, **given)
        try:
            await server.start_serving()
            listening = server.sockets[0]
            if sys.platform == "linux":
                assert _accept_queue(listening)[1] == size
            port = listening.getsockname()[1]
            reader, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
            writer.write(b"x")
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), 10) == b"x"
            writer.close()
        finally:
            server.close()
            await server.wait_closed()


@pytest.mark.asyncio
async def test_a_backlog_that_is_not_an_int_is_refused_before_any_socket() -> None:
    for bad in (True, 2.5, "100"):
        with pytest.raises(TypeError, match="backlog must be an int"):
            await gcmstream.start_server(_echo, "127.0.0.1", 0, key=KEY, backlog=bad)
