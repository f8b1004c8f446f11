"""SecureStream against anyio's TLSStream, the real thing, on asyncio and on trio.

The same calls run on a TLS pair and on a gcmstream pair over TCP on 127.0.0.1, and their
outcomes (values, and exceptions by anyio category) must be equal. TLSStream itself raises
``ssl.SSLError`` for calls after a standard-compatible ``aclose()``; there the comparison is
with ``standard_compatible=False`` (whose ``aclose`` closes the transport, as ours does) and
with anyio's contract, ``ClosedResourceError``, which its socket streams follow.

Deliberate differences, pinned at the end: an empty ``send`` after ``aclose()`` raises
ClosedResourceError (trio's rule; TLSStream does nothing), ``send_eof()``
(TLSStream cannot half-close; ours seals FINAL) and the explicit-end rule (TLSStream's
``aclose()`` is a clean end at the peer; ours is not: leaving ``async with`` without an
exception, or ``send_eof()``, is).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.stapled import StapledObjectStream
from anyio.streams.tls import TLSStream

import gcmstream
from gcmstream.anyio_stream import AnyioTruncatedStreamError, SecureStream, connect_tcp, create_tcp_listener

from ..helpers import KEY

UNKNOWN_ATTRIBUTE: Any = anyio.typed_attribute()

pytestmark = pytest.mark.anyio

CATEGORIES: list[type[BaseException]] = [
    TypeError,
    ValueError,
    anyio.BusyResourceError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    anyio.TypedAttributeLookupError,
]


Wrap = Callable[[anyio.abc.SocketStream, bool], Awaitable[ByteStream]]


@asynccontextmanager
async def connected(wrap: Wrap) -> AsyncIterator[tuple[ByteStream, ByteStream]]:
    """(client, server) over TCP on 127.0.0.1, each wrapped (``True``: the server side)."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(SocketAttribute.local_port)
        accepted: list[ByteStream] = []
        async with anyio.create_task_group() as tg:

            async def accept() -> None:
                raw = await listener.listeners[0].accept()  # type: ignore[attr-defined]
                accepted.append(await wrap(raw, True))

            tg.start_soon(accept)
            client = await wrap(await anyio.connect_tcp("127.0.0.1", port), False)
    try:
        yield client, accepted[0]
    finally:
        for stream in (client, accepted[0]):
            await anyio.aclose_forcefully(stream)


def tls(contexts: tuple[ssl.SSLContext, ssl.SSLContext], *, standard_compatible: bool = True) -> Wrap:
    async def wrap(raw: anyio.abc.SocketStream, server_side: bool) -> ByteStream:
        return await TLSStream.wrap(
            raw,
            server_side=server_side,
            hostname=None if server_side else "localhost",
            ssl_context=contexts[0] if server_side else contexts[1],
            standard_compatible=standard_compatible,
        )

    return wrap


async def gcm(raw: anyio.abc.SocketStream, server_side: bool) -> ByteStream:
    role = gcmstream.Role.RESPONDER if server_side else gcmstream.Role.INITIATOR
    return await SecureStream.wrap(raw, key=KEY, role=role)


async def outcome(call: Awaitable[Any]) -> tuple[Any, ...]:
    try:
        return ("value", await call)
    except BaseException as exc:  # every exception is an outcome to compare
        for category in CATEGORIES:
            if isinstance(exc, category):
                return ("raised", category.__name__)
        return ("raised", f"uncategorised {type(exc).__name__}")


async def now(function: Callable[[], Any]) -> Any:
    return function()


async def receive_exactly(stream: ByteStream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        data += await stream.receive()
    return data


Scenario = Callable[[ByteStream, ByteStream], Awaitable[list[tuple[Any, ...]]]]


async def arguments_buffering_and_attributes(client: ByteStream, server: ByteStream) -> list[tuple[Any, ...]]:
    seen = [
        await outcome(server.receive(1.5)),  # type: ignore[arg-type]
        await outcome(server.receive(0)),
        await outcome(server.receive(-1)),
        await outcome(client.send(b"")),
        await outcome(client.send(b"data")),
    ]
    await anyio.sleep(0.05)  # arrived: now the checks run with data waiting
    seen += [
        await outcome(server.receive(1.5)),  # type: ignore[arg-type]
        await outcome(server.receive(0)),
        await outcome(receive_exactly(server, 4)),
    ]
    with anyio.move_on_after(0.05) as scope:  # a receive cancelled while waiting loses nothing
        await server.receive()
    seen.append(("cancelled", scope.cancelled_caught))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.receive)
        await anyio.wait_all_tasks_blocked()
        seen.append(await outcome(server.receive()))  # a second receiver at once
        await client.send(b"after")
    seen += [
        (
            "remote port",
            server.extra(SocketAttribute.remote_port) == client.extra(SocketAttribute.local_port),
        ),
        await outcome(now(lambda: server.extra(UNKNOWN_ATTRIBUTE))),
        ("default", server.extra(UNKNOWN_ATTRIBUTE, "fallback")),
    ]
    return seen


async def after_own_close(client: ByteStream, server: ByteStream) -> list[tuple[Any, ...]]:
    await client.aclose()
    return [  # in this order: after a failed send TLSStream's receive says BrokenResourceError
        await outcome(client.receive()),
        await outcome(client.send(b"x")),
        await outcome(client.aclose()),
    ]


async def peer_cut_off(client: ByteStream, server: ByteStream) -> list[tuple[Any, ...]]:
    await client.send(b"x")
    assert await server.receive() == b"x"
    await anyio.aclose_forcefully(client)
    seen = [await outcome(server.receive()), await outcome(server.receive())]
    sends = [await outcome(server.send(bytes(100_000))) for _ in range(20)]
    seen.append(("send to a vanished peer breaks", ("raised", "BrokenResourceError") in sends))
    seen.append(await outcome(server.send(b"more")))
    return seen


SCENARIOS: dict[str, tuple[Scenario, bool]] = {  # scenario, TLS standard_compatible
    "arguments_buffering_and_attributes": (arguments_buffering_and_attributes, True),
    "after_own_close": (after_own_close, False),
    "peer_cut_off": (peer_cut_off, True),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_secure_stream_behaves_like_tls_stream(
    name: str, tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    scenario, standard_compatible = SCENARIOS[name]
    with anyio.fail_after(20):
        async with connected(tls(tls_contexts, standard_compatible=standard_compatible)) as pair:
            theirs = await scenario(*pair)
        async with connected(gcm) as pair:
            ours = await scenario(*pair)
    assert ours == theirs
    assert any(item[0] == "raised" for item in theirs)  # the scenario reached the error paths


async def test_deliberate_difference_empty_send_after_aclose_is_closed(
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """trio's suite requires ClosedResourceError even for an empty send after aclose();
    TLSStream sends nothing and says nothing (anyio's own socket streams differ by backend:
    ClosedResourceError on asyncio, nothing on trio). We follow trio's rule everywhere."""
    with anyio.fail_after(20):
        async with connected(tls(tls_contexts, standard_compatible=False)) as (client, server):
            await client.aclose()
            assert await outcome(client.send(b"")) == ("value", None)
        async with connected(gcm) as (client, server):
            await client.aclose()
            assert await outcome(client.send(b"")) == ("raised", "ClosedResourceError")


async def test_deliberate_difference_send_eof_half_closes(
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    with anyio.fail_after(20):
        async with connected(tls(tls_contexts)) as (client, server):
            with pytest.raises(NotImplementedError):
                await client.send_eof()
        async with connected(gcm) as (client, server):
            await client.send(b"last")
            await client.send_eof()
            await client.send_eof()  # idempotent, as trio requires
            with pytest.raises(gcmstream.StreamClosedError):  # also an anyio.ClosedResourceError
                await client.send(b"more")
            assert await server.receive() == b"last"
            with pytest.raises(anyio.EndOfStream):
                await server.receive()
            await server.send(b"still open the other way")
            assert await client.receive() == b"still open the other way"


async def graceful_end_seen_by_peer(
    client: ByteStream, server: ByteStream, end: Callable[[], Awaitable[None]]
) -> tuple[Any, ...]:
    await client.send(b"payload")
    assert await receive_exactly(server, 7) == b"payload"
    result: list[tuple[Any, ...]] = []
    async with anyio.create_task_group() as tg:

        async def peer() -> None:
            result.append(await outcome(server.receive()))
            await server.aclose()  # answers a TLS close_notify

        tg.start_soon(peer)
        await end()
    return result[0]


async def test_deliberate_difference_aclose_is_not_an_end(
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """TLSStream's aclose() is a clean end at the peer (close_notify). Ours is a truncation;
    the clean end is leaving ``async with`` without an exception (or ``send_eof()``)."""
    with anyio.fail_after(20):
        async with connected(tls(tls_contexts)) as (client, server):
            assert await graceful_end_seen_by_peer(client, server, client.aclose) == ("raised", "EndOfStream")
        async with connected(gcm) as (client, server):
            assert await graceful_end_seen_by_peer(client, server, client.aclose) == (
                "raised",
                "BrokenResourceError",
            )

        async def leave_cleanly() -> None:
            async with client:
                pass

        async with connected(gcm) as (client, server):
            assert await graceful_end_seen_by_peer(client, server, leave_cleanly) == ("raised", "EndOfStream")


async def test_leaving_async_with_on_an_exception_is_a_truncation_the_peer_can_catch_as_broken() -> None:
    with anyio.fail_after(20):
        async with connected(gcm) as (client, server):
            with pytest.raises(RuntimeError, match="failed mid-transfer"):
                async with client:
                    await client.send(b"first half")
                    raise RuntimeError("failed mid-transfer")
            assert await receive_exactly(server, 10) == b"first half"
            with pytest.raises(anyio.BrokenResourceError) as info:  # what generic anyio code catches
                await server.receive()
            assert isinstance(info.value, AnyioTruncatedStreamError)
            assert isinstance(info.value, gcmstream.TruncatedStreamError)
            assert "the sender closed without ending the stream" in str(info.value)
            with pytest.raises(anyio.BrokenResourceError):  # and it stays broken
                await server.receive()


def object_stream_pair() -> tuple[StapledObjectStream[bytes], StapledObjectStream[bytes]]:
    """Two ends of an in-memory object stream of bytes (an ``AnyByteStream`` with no sizes)."""
    a_send, b_receive = anyio.create_memory_object_stream[bytes](100)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](100)
    return StapledObjectStream(a_send, a_receive), StapledObjectStream(b_send, b_receive)


@pytest.mark.parametrize("kind", ["tls", "gcmstream"])
async def test_wrap_takes_an_object_stream_of_bytes(
    kind: str, tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """Issue 24: TLSStream.wrap takes any AnyByteStream, object streams of bytes included;
    SecureStream.wrap called ``receive(size)`` on them (TypeError). Both now carry a
    conversation over memory object streams, and the items on the transport are bytes."""
    client_end, server_end = object_stream_pair()
    wrap: Callable[[Any, bool], Awaitable[ByteStream]] = tls(tls_contexts) if kind == "tls" else gcm
    seen: list[object] = []
    spied_receive = server_end.receive_stream.receive

    async def spy() -> bytes:
        item = await spied_receive()
        seen.append(type(item))
        return item

    server_end.receive_stream.receive = spy  # type: ignore[method-assign]
    accepted: list[ByteStream] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def accept() -> None:
                accepted.append(await wrap(server_end, True))

            tg.start_soon(accept)
            client = await wrap(client_end, False)
        server = accepted[0]
        await client.send(b"hello")
        assert await server.receive() == b"hello"
        await server.send(b"world")
        assert await client.receive() == b"world"
    assert seen and set(seen) == {bytes}, seen
    for stream in (client, server):
        await anyio.aclose_forcefully(stream)


async def hang_up_at_first_flight(wrap: Wrap) -> tuple[Any, ...]:
    """A client's wrap against a server that reads the first bytes and hangs up: what a refused
    handshake looks like from the client."""
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:

            async def refuse() -> None:
                raw = await listener.listeners[0].accept()  # type: ignore[attr-defined]
                await raw.receive()
                await raw.aclose()

            tg.start_soon(refuse)
            with anyio.fail_after(10):
                return await outcome(wrap(await anyio.connect_tcp("127.0.0.1", port), False))
    raise AssertionError("unreachable")


async def test_a_refused_handshake_is_a_broken_resource_as_tls(
    tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """Issue 24: a server that hangs up during the handshake reaches an anyio client as a
    BrokenResourceError on TLSStream; on SecureStream it was the plain TruncatedStreamError,
    not the AnyioTruncatedStreamError (also a BrokenResourceError) its later failures are.
    Now the same category; and a real refusal (a server with another key) is that type too."""
    assert await hang_up_at_first_flight(tls(tls_contexts)) == ("raised", "BrokenResourceError")
    assert await hang_up_at_first_flight(gcm) == ("raised", "BrokenResourceError")
    listener = await create_tcp_listener(key=bytes(16), local_host="127.0.0.1")  # another key
    port = listener.extra(SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, anyio.aclose_forcefully)
        with anyio.fail_after(10), pytest.raises(AnyioTruncatedStreamError) as caught:
            await connect_tcp("127.0.0.1", port, key=KEY)
        assert "during the handshake" in str(caught.value)
        tg.cancel_scope.cancel()
