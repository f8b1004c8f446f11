"""One failing handler never ends a server (issue 24), on every server path and loop.

Real sockets on 127.0.0.1. Each server runs an echo handler in the README's shape. Among many
clients, some make their connection's handler fail in each way a key holder (or anyone on the
path) can: the handler raises (a bug: the client sent b"raise"), the client hangs up without
FINAL (the handler's read raises TruncatedStreamError), or the connection is reset (SO_LINGER
0: TruncatedStreamError caused by ConnectionResetError). Every other client is served, a
client that comes after them all too, each failure is logged once with the peer, and the
failing connection is closed without FINAL: the client that asked for b"raise" reads a
truncation, never a complete stream. Before issue 24, the first failure ended the anyio
listener's ``serve()`` (its task group) on asyncio and trio.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

import gcmstream
from gcmstream.anyio_stream import AnyioTruncatedStreamError, SecureStream, connect_tcp, create_tcp_listener

from ..helpers import KEY, SERVER_PATHS

HOST = "127.0.0.1"
GOOD_CLIENTS = 12
EACH_FAILURE = 4  # clients per way of failing
FAILURES = ("raise", "hang up", "reset")


class HandlerBug(Exception):
    """What the handler raises when a client asks for it."""


async def anyio_echo(stream: SecureStream) -> None:
    """The README's anyio handler: echo in upper case until the peer's FINAL."""
    async with stream:
        async for data in stream:
            if data == b"raise":
                raise HandlerBug("the handler has a bug")
            await stream.send(data.upper())


async def asyncio_echo(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
    """The same handler on start_server."""
    async with writer:
        while data := await reader.read(65536):
            if data == b"raise":
                raise HandlerBug("the handler has a bug")
            writer.write(data.upper())
            await writer.drain()


Server = Callable[[], AbstractAsyncContextManager[int]]


def listener_server() -> AbstractAsyncContextManager[int]:
    @asynccontextmanager
    async def serve() -> AsyncIterator[int]:
        listener = await create_tcp_listener(key=KEY, local_host=HOST)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, anyio_echo)
            yield listener.extra(anyio.abc.SocketAttribute.local_port)
            tg.cancel_scope.cancel()

    return serve()


def start_server(reports: list[dict[str, Any]]) -> Server:
    @asynccontextmanager
    async def serve() -> AsyncIterator[int]:
        asyncio.get_running_loop().set_exception_handler(lambda _, context: reports.append(context))
        server = await gcmstream.start_server(asyncio_echo, HOST, 0, key=KEY)
        async with server:
            yield server.sockets[0].getsockname()[1]

    return serve


async def good_client(port: int, number: int) -> bytes:
    async with await connect_tcp(HOST, port, key=KEY) as stream:
        message = f"hello {number}".encode()
        await stream.send(message)
        assert await stream.receive() == message.upper()  # the handler runs
        await stream.send_eof()
        with pytest.raises(anyio.EndOfStream):  # the handler ended its stream: complete
            await stream.receive()
        return message


async def failing_client(port: int, how: str) -> None:
    stream = await connect_tcp(HOST, port, key=KEY)
    await stream.send(b"ping")
    assert await stream.receive() == b"PING"  # the handler runs: it, not the handshake, fails
    if how == "raise":
        await stream.send(b"raise")
        with pytest.raises(AnyioTruncatedStreamError):  # closed without FINAL
            await stream.receive()
        await stream.aclose()
    elif how == "hang up":
        await stream.aclose()  # no FINAL: the handler's read raises TruncatedStreamError
    else:
        raw = stream.transport_stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await stream.aclose()  # with SO_LINGER 0: a reset


async def serve_many(server: Server) -> list[bytes]:
    served: list[bytes] = []

    async def good(port: int, number: int) -> None:
        served.append(await good_client(port, number))

    with anyio.fail_after(60):
        async with server() as port:
            async with anyio.create_task_group() as tg:
                for number in range(GOOD_CLIENTS):
                    tg.start_soon(good, port, number)
                    if number < EACH_FAILURE:
                        for how in FAILURES:
                            tg.start_soon(failing_client, port, how)
            served.append(await good_client(port, GOOD_CLIENTS))  # after every failure
    return served


def failure_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "gcmstream" and " failed for " in r.getMessage()
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_failing_handlers_never_end_the_server(
    path: str, backend: str, options: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    caplog.set_level(logging.ERROR, logger="gcmstream")
    reports: list[dict[str, Any]] = []
    server = listener_server if path == "listener" else start_server(reports)

    served = anyio.run(serve_many, server, backend=backend, backend_options=options)
    assert sorted(served) == sorted(f"hello {n}".encode() for n in range(GOOD_CLIENTS + 1))
    lines = failure_lines(caplog)
    assert len(lines) == EACH_FAILURE * len(FAILURES), "\n".join(lines)  # each logged once
    assert all(HOST in line for line in lines), lines  # with the peer
    assert sum("HandlerBug" in line for line in lines) == EACH_FAILURE
    assert sum("TruncatedStreamError" in line for line in lines) == 2 * EACH_FAILURE
    if path == "start_server":  # and reported as asyncio.start_server reports it
        assert len(reports) == len(lines)
        assert {r["message"] for r in reports} == {"Unhandled exception in client_connected_cb"}
    else:
        assert reports == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_a_cancelled_handler_is_not_a_failure(
    path: str, backend: str, options: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping the server while a handler waits cancels the handler, and that cancellation
    propagates: it is not logged or reported as the handler's failure (only an Exception is)."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    caplog.set_level(logging.ERROR, logger="gcmstream")
    seen: list[str] = []
    waiting = anyio.Event()

    async def anyio_waits(stream: SecureStream) -> None:
        waiting.set()
        try:
            await stream.receive()
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise

    async def asyncio_waits(
        reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
    ) -> None:
        waiting.set()
        try:
            await reader.read(1)
        except BaseException as exc:
            seen.append(type(exc).__name__)
            raise
        finally:
            writer.close()

    async def main() -> None:
        with anyio.fail_after(20):
            if path == "listener":
                listener = await create_tcp_listener(key=KEY, local_host=HOST)
                async with listener, anyio.create_task_group() as tg:
                    tg.start_soon(listener.serve, anyio_waits)
                    client = await connect_tcp(
                        HOST, listener.extra(anyio.abc.SocketAttribute.local_port), key=KEY
                    )
                    await waiting.wait()
                    tg.cancel_scope.cancel()  # stop serving: the handler is cancelled
                await client.aclose()
            else:
                server = await gcmstream.start_server(asyncio_waits, HOST, 0, key=KEY)
                client = await connect_tcp(HOST, server.sockets[0].getsockname()[1], key=KEY)
                await waiting.wait()
                server.close()
                handlers = asyncio.all_tasks() - {asyncio.current_task()}
                for task in handlers:  # what asyncio.run does to what is left at its end
                    task.cancel()
                await asyncio.wait(handlers)
                await client.aclose()

    anyio.run(main, backend=backend, backend_options=options)
    assert seen == ["Cancelled" if backend == "trio" else "CancelledError"]
    assert failure_lines(caplog) == []
