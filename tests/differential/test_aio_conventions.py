"""gcmstream's asyncio server and writer against asyncio's own, on asyncio and uvloop (issue 24).

The same handler runs on ``asyncio.start_server`` (plain streams) and on
``gcmstream.start_server``, over real sockets on 127.0.0.1; what the loop's exception handler
receives and the warnings a dropped writer gives must be the same. asyncio's behaviour is
CPython's ``asyncio/streams.py``: ``StreamReaderProtocol.connection_made`` reports a
``client_connected_cb`` task's exception with "Unhandled exception in client_connected_cb"
(keys ``message``, ``exception``, ``transport``), and ``StreamWriter.__del__`` warns
``ResourceWarning("unclosed <StreamWriter ...>")`` and closes its transport.

Deliberate differences, pinned here: after a failed handler asyncio closes the connection (the
client reads an end), gcmstream's client reads a truncation (no FINAL: it must not take what it
got for a complete stream); a plain (not async) callback that raises is reported as a
coroutine's failure, where asyncio reports it as "Exception in callback ..." of connection_made;
a handler that returns without closing its writer leaves asyncio's connection open (its protocol
keeps the writer) while gcmstream's writer, dropped, warns and closes it without FINAL.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

import gcmstream

from ..helpers import KEY

HOST = "127.0.0.1"
LOOPS = [pytest.param(False, id="asyncio"), pytest.param(True, id="uvloop")]


class HandlerBug(Exception):
    pass


async def handler(reader: Any, writer: Any) -> None:
    """The same code for both servers: answer b"ping", fail on b"boom"."""
    try:
        data = await reader.read(100)
        if data == b"boom":
            raise HandlerBug("a bug in the handler")
        writer.write(data.upper())
        if isinstance(writer, gcmstream.SecureStreamWriter):
            writer.write_eof()  # gcmstream's clean end (close() alone is not one)
        await writer.drain()
    finally:
        if not isinstance(writer, gcmstream.SecureStreamWriter) or not writer.is_closing():
            writer.close()


Open = Callable[[int], Awaitable[tuple[Any, Any]]]


async def plain_server() -> tuple[asyncio.Server, Open]:
    server = await asyncio.start_server(handler, HOST, 0)

    async def connect(port: int) -> tuple[Any, Any]:
        return await asyncio.open_connection(HOST, port)

    return server, connect


async def secure_server() -> tuple[asyncio.Server, Open]:
    server = await gcmstream.start_server(handler, HOST, 0, key=KEY)

    async def connect(port: int) -> tuple[Any, Any]:
        return await gcmstream.open_connection(HOST, port, key=KEY)

    return server, connect


def run(use_uvloop: bool, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    if use_uvloop:
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run(main())
    return asyncio.run(main())


async def failing_handler_seen(make: Callable[[], Awaitable[tuple[asyncio.Server, Open]]]) -> dict[str, Any]:
    """Serve one client whose handler raises, then one that is answered; what the loop's
    exception handler got, what the failing client read, and the second client's answer."""
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    server, connect = await make()
    port = server.sockets[0].getsockname()[1]
    async with server:
        reader, writer = await connect(port)
        client_address = writer.get_extra_info("sockname")
        writer.write(b"boom")
        await writer.drain()
        try:
            ending: object = await asyncio.wait_for(reader.read(), 10)
        except gcmstream.TruncatedStreamError:
            ending = "truncated"
        writer.close()
        for _ in range(200):  # the report follows the handler's task
            if reports:
                break
            await asyncio.sleep(0.01)
        reader, writer = await connect(port)  # the server goes on
        writer.write(b"ping")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await writer.wait_closed()
    [report] = reports
    return {
        "keys": sorted(report),
        "message": report["message"],
        "exception": type(report["exception"]).__name__,
        "transport's peer is the client": report["transport"].get_extra_info("peername") == client_address,
        "ending": ending,
        "answer": answer,
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_uvloop", LOOPS)
def test_a_handler_exception_reaches_the_loop_exception_handler_as_asyncio_s(use_uvloop: bool) -> None:
    """Issue 24: gcmstream's start_server only logged a failed handler; asyncio's reports it to
    the loop's exception handler, where applications hook error reporting."""
    plain = run(use_uvloop, lambda: failing_handler_seen(plain_server))
    secure = run(use_uvloop, lambda: failing_handler_seen(secure_server))
    assert plain["keys"] == ["exception", "message", "transport"]
    assert plain["message"] == "Unhandled exception in client_connected_cb"
    assert plain["exception"] == "HandlerBug"
    assert plain["transport's peer is the client"] is True
    assert plain["answer"] == b"PING"
    assert plain["ending"] == b""  # asyncio: the connection just closes
    for what in ("keys", "message", "exception", "transport's peer is the client", "answer"):
        assert secure[what] == plain[what], what
    assert secure["ending"] == "truncated"  # deliberate: no FINAL after a failed handler


async def dropped_writer_seen(make: Callable[[], Awaitable[tuple[asyncio.Server, Open]]]) -> dict[str, Any]:
    """A client drops its writer without close(): the warnings, and whether its transport closed."""
    server, connect = await make()
    async with server:
        reader, writer = await connect(server.sockets[0].getsockname()[1])
        transport = writer.transport
        name = type(writer).__name__
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del writer
            gc.collect()
        await asyncio.sleep(0)
        seen = {
            "warnings": [
                (w.category.__name__, str(w.message).startswith(f"unclosed <{name}"))
                for w in caught
                if "unclosed <" in str(w.message) and "Writer" in str(w.message)
            ],
            "transport closed": transport.is_closing(),
        }
        del reader
    return seen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_uvloop", LOOPS)
def test_a_writer_dropped_without_close_warns_and_closes_as_asyncio_s(use_uvloop: bool) -> None:
    """Issue 24: a SecureStreamWriter dropped without close() neither warned nor closed its
    transport (a connection held until the peer went); asyncio's StreamWriter does both."""
    plain = run(use_uvloop, lambda: dropped_writer_seen(plain_server))
    secure = run(use_uvloop, lambda: dropped_writer_seen(secure_server))
    assert plain == {"warnings": [("ResourceWarning", True)], "transport closed": True}
    assert secure == plain


async def connected_writer(make: Callable[[], Awaitable[tuple[asyncio.Server, Open]]]) -> Any:
    server, connect = await make()
    async with server:
        _, writer = await connect(server.sockets[0].getsockname()[1])
    return writer


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_uvloop", LOOPS)
def test_a_writer_dropped_after_its_loop_closed_warns_as_asyncio_s(use_uvloop: bool) -> None:
    """Past its loop nothing can close the transport: both only warn "loop is closed"."""
    seen = {}
    for make in (plain_server, secure_server):
        writer = run(use_uvloop, lambda make=make: connected_writer(make))  # type: ignore[misc]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del writer
            gc.collect()
        seen[make.__name__] = [
            (w.category.__name__, str(w.message)) for w in caught if "loop" in str(w.message)
        ]
    assert seen["plain_server"] == [("ResourceWarning", "loop is closed")]
    assert seen["secure_server"] == seen["plain_server"]


def failing_callback(reader: Any, writer: Any) -> None:
    """A plain function (not a coroutine) as client_connected_cb, which raises."""
    writer.close()
    raise HandlerBug("a bug in a plain callback")


async def failing_callback_seen(secure: bool) -> tuple[str, str]:
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reports.append(context))
    if secure:
        server = await gcmstream.start_server(failing_callback, HOST, 0, key=KEY)
    else:
        server = await asyncio.start_server(failing_callback, HOST, 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        writer: Any
        if secure:
            _, writer = await gcmstream.open_connection(HOST, port, key=KEY)
        else:
            _, writer = await asyncio.open_connection(HOST, port)
        for _ in range(200):
            if reports:
                break
            await asyncio.sleep(0.01)
        writer.close()
    [report] = reports
    return report["message"].split(" ")[0], type(report["exception"]).__name__


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_uvloop", LOOPS)
def test_a_plain_callback_that_raises_is_reported_as_a_handler_failure(use_uvloop: bool) -> None:
    """A deliberate difference: asyncio calls a plain callback inside connection_made, so its
    exception reaches the loop's handler as "Exception in callback ..."; gcmstream calls it from
    the connection's task, so it is reported as a coroutine's would be ("Unhandled exception in
    client_connected_cb"). The exception itself reaches the handler on both."""
    plain = run(use_uvloop, lambda: failing_callback_seen(False))
    secure = run(use_uvloop, lambda: failing_callback_seen(True))
    assert plain[1] == secure[1] == "HandlerBug"
    assert secure[0] == "Unhandled"
    assert plain[0] != "Unhandled"


async def forgetful_handler(reader: Any, writer: Any) -> None:
    """Answers, then returns without close() or write_eof(), keeping no reference."""
    writer.write((await reader.read(4)).upper())
    await writer.drain()


async def forgotten_writer_seen(secure: bool) -> tuple[str, list[str]]:
    """What the client reads after the handler returned, and the server's ResourceWarnings."""
    server: asyncio.Server
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if secure:
            server = await gcmstream.start_server(forgetful_handler, HOST, 0, key=KEY)
        else:
            server = await asyncio.start_server(forgetful_handler, HOST, 0)
        async with server:
            port = server.sockets[0].getsockname()[1]
            reader: Any
            writer: Any
            if secure:
                reader, writer = await gcmstream.open_connection(HOST, port, key=KEY)
            else:
                reader, writer = await asyncio.open_connection(HOST, port)
            writer.write(b"ping")
            await writer.drain()
            assert await asyncio.wait_for(reader.readexactly(4), 10) == b"PING"
            for _ in range(5):  # the handler's task has ended: let the collector see its writer
                gc.collect()
                await asyncio.sleep(0.02)
            try:
                ending = repr(await asyncio.wait_for(reader.read(), 0.5))
            except gcmstream.TruncatedStreamError:
                ending = "truncated"
            except TimeoutError:
                ending = "still open"
            writer.close()
    return ending, [str(w.message).split(" ")[0] for w in caught if w.category is ResourceWarning]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_uvloop", LOOPS)
def test_a_handler_that_forgets_its_writer_ends_the_connection_as_truncated(use_uvloop: bool) -> None:
    """A deliberate difference: asyncio's server protocol keeps the writer of a handler that
    returned without closing it, so the connection stays open until the client leaves;
    gcmstream's writer is dropped with the handler, warns ResourceWarning and closes the
    connection without FINAL, so the client reads a truncation, never a complete stream."""
    plain = run(use_uvloop, lambda: forgotten_writer_seen(False))
    secure = run(use_uvloop, lambda: forgotten_writer_seen(True))
    assert plain == ("still open", [])
    assert secure[0] == "truncated"
    assert "unclosed" in secure[1]
