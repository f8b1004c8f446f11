"""The anyio adapter's ByteStream contract, on asyncio and trio."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import stat
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.stapled import StapledObjectStream
from anyio.streams.tls import TLSStream

import gcmstream
import gcmstream.errors
from gcmstream import KeyExchange, anyio_stream
from gcmstream.anyio_stream import GcmStreamAttribute, SecureStream

KEY = bytes(range(32))

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def secure_pair(
    client_options: dict[str, Any] | None = None, server_options: dict[str, Any] | None = None
) -> AsyncIterator[tuple[SecureStream, SecureStream]]:
    """Two SecureStreams over a real TCP connection on 127.0.0.1 (``key=KEY`` unless an
    ``*_options`` dict, passed on to ``wrap``, says otherwise)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    send_accepted, receive_accepted = anyio.create_memory_object_stream[SocketStream](1)
    result: dict[str, SecureStream] = {}

    async def wrap_server() -> None:
        raw_server = await receive_accepted.receive()
        result["server"] = await SecureStream.wrap(
            raw_server, role=gcmstream.Role.RESPONDER, **{"key": KEY, **(server_options or {})}
        )

    async with listener:
        async with anyio.create_task_group() as serving:
            serving.start_soon(listener.serve, send_accepted.send)
            async with anyio.create_task_group() as tg:
                tg.start_soon(wrap_server)
                raw_client = await anyio.connect_tcp("127.0.0.1", port)
                client = await SecureStream.wrap(
                    raw_client, role=gcmstream.Role.INITIATOR, **{"key": KEY, **(client_options or {})}
                )
            serving.cancel_scope.cancel()
        # yielded outside the cancelled scope: inside it, the caller's first await was
        # cancelled and the rest of its block silently skipped (mutation run 2026-12-04)
        try:
            yield client, result["server"]
        finally:
            await anyio.aclose_forcefully(client)
            await anyio.aclose_forcefully(result["server"])


async def test_the_pair_runs_the_whole_block() -> None:
    """The fixture's own check: a block using secure_pair() runs past its awaits (it once
    yielded inside a cancelled scope, so every test here stopped at its first await, passing)."""
    reached = []
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            await client.send(b"x")
            assert await server.receive() == b"x"
            reached.append("end of block")
    assert reached == ["end of block"]


async def test_receive_never_returns_empty_and_ends_after_final() -> None:
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            await client.send(b"a")
            await client.send(b"")  # nothing to seal: nothing sent
            await client.send(b"bc")
            await client.send_eof()
            received = bytearray()
            with pytest.raises(anyio.EndOfStream):
                while True:
                    chunk = await server.receive()
                    assert chunk
                    received += chunk
            assert received == b"abc"
            with pytest.raises(anyio.EndOfStream):
                await server.receive()
            await server.send(b"still open the other way")
            assert await client.receive() == b"still open the other way"


async def test_two_receivers_at_once_are_busy() -> None:
    with anyio.fail_after(10):
        async with secure_pair() as (client, server), anyio.create_task_group() as tg:
            tg.start_soon(server.receive)
            await anyio.sleep(0.05)
            with pytest.raises(anyio.BusyResourceError):
                await server.receive()
            tg.cancel_scope.cancel()


async def test_cancelled_send_breaks_the_stream() -> None:
    with anyio.fail_after(20):
        async with secure_pair() as (client, server):
            big = bytes(64 << 20)  # far more than the socket buffers hold: send must wait
            with anyio.move_on_after(0.2) as scope:
                await client.send(big)
            assert scope.cancelled_caught
            with pytest.raises(anyio.BrokenResourceError):
                await client.send(b"more")
            with pytest.raises(anyio.BrokenResourceError):
                await client.send_eof()


async def test_typed_attributes_pass_through_and_add_ours() -> None:
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            assert client.extra(SocketAttribute.remote_address)[0] == "127.0.0.1"
            await client.send(b"12345")
            assert await server.receive() == b"12345"
            assert client.extra(GcmStreamAttribute.suite) == "AES_256_GCM"
            assert client.extra(GcmStreamAttribute.bytes_sealed) == 5
            assert server.extra(GcmStreamAttribute.records_opened) == 1
            assert isinstance(client.transport_stream, SocketStream)


async def test_the_peer_id_attribute_is_the_identity_the_peer_sent() -> None:
    """Issue 24.7: the peer's identity where anyio users look. Proved with a named KeyRing
    (KeyRing.name gives the name as written), a claim without one, None when none was sent."""
    alice = gcmstream.generate_key()
    ring = gcmstream.KeyRing({"alice": alice})
    with anyio.fail_after(20):
        async with secure_pair({"key": alice, "local_id": "alice"}, {"key": ring}) as (client, server):
            assert server.extra(GcmStreamAttribute.peer_id) == b"alice"
            assert ring.name(server.extra(GcmStreamAttribute.peer_key_id)) == "alice"
            assert client.extra(GcmStreamAttribute.peer_id) is None
        async with secure_pair({"local_id": "carol"}, {"local_id": b"server"}) as (client, server):
            assert (server.extra(GcmStreamAttribute.peer_id), client.extra(GcmStreamAttribute.peer_id)) == (
                b"carol",
                b"server",
            )


async def test_peer_closing_without_final_is_truncation() -> None:
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            await client.send(b"half a story")
            await anyio.aclose_forcefully(client.transport_stream)  # no FINAL
            assert await server.receive() == b"half a story"
            with pytest.raises(gcmstream.TruncatedStreamError):
                await server.receive()


async def test_aclose_without_send_eof_reads_as_truncation() -> None:
    """A failing `async with stream:` must not look like a complete transfer to the peer."""
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            with pytest.raises(RuntimeError, match="failed mid-transfer"):
                async with client:
                    await client.send(b"first half")
                    raise RuntimeError("failed mid-transfer")
            assert await server.receive() == b"first half"
            with pytest.raises(gcmstream.TruncatedStreamError):
                await server.receive()


async def test_receive_zero_bytes_is_refused_not_taken_for_the_end() -> None:
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            await client.send(b"hello")
            with pytest.raises(ValueError, match="max_bytes"):
                await server.receive(0)
            assert await server.receive() == b"hello"


@pytest.mark.parametrize(
    ("ours", "gcmstream_class", "anyio_class"),
    [
        (anyio_stream.AnyioTruncatedStreamError, gcmstream.TruncatedStreamError, anyio.BrokenResourceError),
        (anyio_stream.AnyioStreamClosedError, gcmstream.StreamClosedError, anyio.ClosedResourceError),
        (anyio_stream.AnyioStreamBrokenError, gcmstream.StreamBrokenError, anyio.BrokenResourceError),
    ],
)
def test_anyio_flavoured_errors_stay_in_the_one_tree(
    ours: type[Exception], gcmstream_class: type[Exception], anyio_class: type[Exception]
) -> None:
    assert issubclass(ours, gcmstream_class) and issubclass(ours, anyio_class)
    assert ours.__name__ in (gcmstream.errors.__doc__ or "")


async def test_handshake_timeout_raises_and_closes_the_transport() -> None:
    """The one handshake policy: on a timeout (or any failure) the transport is closed."""
    with anyio.fail_after(10):
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(SocketAttribute.local_port)
            async with anyio.create_task_group() as tg:
                silent: list[SocketStream] = []

                async def accept() -> None:
                    silent.append(await listener.listeners[0].accept())  # type: ignore[attr-defined]

                tg.start_soon(accept)
                raw = await anyio.connect_tcp("127.0.0.1", port)
            with pytest.raises(TimeoutError):
                await SecureStream.wrap(raw, key=KEY, role=gcmstream.Role.INITIATOR, handshake_timeout=0.2)
            with pytest.raises(anyio.ClosedResourceError):
                await raw.send(b"still open?")
            # our header went out meanwhile (version 2: the initiator's header with its shares)
            header_size = len(gcmstream.Channel(KEY, role=gcmstream.Role.INITIATOR).initial_data())
            received = b""
            while len(received) < header_size:
                received += await silent[0].receive()
            assert len(received) == header_size
            await silent[0].aclose()


async def test_listener_hook_sees_failed_handshakes_and_the_peer_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[type[BaseException]] = []
    called = anyio.Event()

    class Listener(anyio_stream.SecureListener):
        async def handle_handshake_error(self, exc: Exception, stream: anyio.abc.AnyByteStream) -> None:
            await super().handle_handshake_error(exc, stream)
            seen.append(type(exc))
            called.set()

    caplog.set_level("WARNING", logger="gcmstream")
    with anyio.fail_after(10):
        inner = await anyio.create_tcp_listener(local_host="127.0.0.1")
        listener = Listener(inner, key=KEY)
        port = listener.extra(SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, lambda stream: None)
            # version 2 (issue 10): the listener refuses the unknown key ID and hangs up
            with pytest.raises(gcmstream.TruncatedStreamError, match="during the handshake") as cut:
                await anyio_stream.connect_tcp("127.0.0.1", port, key=bytes(32))
            assert cut.value.in_header  # kept by anyio's subclass (it was dropped: always False)
            await called.wait()
            tg.cancel_scope.cancel()
        await listener.aclose()
    assert seen == [gcmstream.UnknownKeyError]  # a KeyCommitmentError
    assert "handshake with ('127.0.0.1', " in caplog.text and "UnknownKeyError" in caplog.text


async def test_send_cancelled_before_it_began_breaks_nothing() -> None:
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            with anyio.CancelScope() as scope:
                scope.cancel()
                await client.send(b"never sealed")
            await client.send(b"sent")
            assert await server.receive() == b"sent"


async def test_identities_and_the_x25519_suite_through_the_listener() -> None:
    from gcmstream.anyio_stream import connect_tcp, create_tcp_listener

    listener = await create_tcp_listener(
        key=KEY, local_host="127.0.0.1", key_exchange=KeyExchange.X25519, local_id="server", peer_id="client"
    )
    port = listener.extra(SocketAttribute.local_port)
    seen: list[bytes | None] = []

    async def handler(stream: SecureStream) -> None:
        seen.append(stream.channel.peer_id)
        await stream.send(b"hello client")
        with contextlib.suppress(OSError, anyio.BrokenResourceError):  # the client may be gone
            await stream.send_eof()

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handler)
        stream = await connect_tcp(
            "127.0.0.1", port, key=KEY, key_exchange=KeyExchange.X25519, local_id="client", peer_id="server"
        )
        assert await stream.receive() == b"hello client"
        assert stream.channel.peer_id == b"server"
        await stream.aclose()
        # a client that is not "client" is refused by the server (in this process: it tells the
        # client); one expecting another server refuses it itself
        with pytest.raises(gcmstream.PeerIdentityError, match="in this process"):
            await connect_tcp("127.0.0.1", port, key=KEY, key_exchange=KeyExchange.X25519, local_id="mallory")
        with pytest.raises(gcmstream.PeerIdentityError):
            await connect_tcp(
                "127.0.0.1",
                port,
                key=KEY,
                key_exchange=KeyExchange.X25519,
                local_id="client",
                peer_id="other",
            )
        tg.cancel_scope.cancel()
    await listener.aclose()
    assert seen == [b"client"]


async def test_a_listener_built_without_options_requires_the_post_quantum_share() -> None:
    """SecureListener's default handshake options keep the hybrid: an X25519-only client is
    refused (DowngradeError at the listener), a default client is served."""
    seen: list[type[BaseException]] = []
    refused = anyio.Event()

    class Listener(anyio_stream.SecureListener):
        async def handle_handshake_error(self, exc: Exception, stream: anyio.abc.AnyByteStream) -> None:
            seen.append(type(exc))
            refused.set()

    async def handler(stream: SecureStream) -> None:
        await stream.send(b"served")
        with contextlib.suppress(OSError, anyio.BrokenResourceError):
            await stream.send_eof()

    with anyio.fail_after(10):
        listener = Listener(await anyio.create_tcp_listener(local_host="127.0.0.1"), key=KEY)
        port = listener.extra(SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handler)
            with pytest.raises(gcmstream.DowngradeError, match="in this process"):
                await anyio_stream.connect_tcp("127.0.0.1", port, key=KEY, key_exchange=KeyExchange.X25519)
            await refused.wait()
            client = await anyio_stream.connect_tcp("127.0.0.1", port, key=KEY)
            assert client.channel.key_exchange is KeyExchange.MLKEM768_X25519
            assert await client.receive() == b"served"
            await client.aclose()
            tg.cancel_scope.cancel()
        await listener.aclose()
    assert seen == [gcmstream.DowngradeError]


async def test_every_send_hands_the_transport_fresh_memory() -> None:
    """reuse_output=False reaches the sealer: what send() gave the transport stays as it was
    after later sends (a transport may keep it), each in its own buffer."""
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            given: list[tuple[memoryview, bytes]] = []
            transport_send = client.transport_stream.send

            async def keep(item: bytes) -> None:  # a memoryview, in fact: the sealer's output
                given.append((memoryview(item), bytes(item)))  # .obj: the sealer's buffer
                await transport_send(item)

            client.transport_stream.send = keep  # type: ignore[method-assign]
            for message in (b"first", b"again", b"third"):
                await client.send(message)
                assert await server.receive() == message
            assert len(given) == 3
            assert all(bytes(view) == copy for view, copy in given)
            assert len({id(view.obj) for view, _ in given}) == 3


async def test_leaving_the_block_after_the_peer_left_does_not_raise() -> None:
    """Issue 24: a client that ended its stream, read its answer and closed its socket. The
    handler then leaves ``async with stream:``; its implicit send_eof meets a peer that is
    gone (on trio, shutdown() said ENOTCONN: BrokenResourceError 'could not half-close'),
    which escaped the block and the listener. Now the block ends quietly, as trio's
    SSLStream.aclose does when its close_notify cannot be sent; the peer never got FINAL."""
    outcomes: list[BaseException | None] = []
    client_gone, handler_done = anyio.Event(), anyio.Event()

    async def handler(stream: SecureStream) -> None:
        try:
            async with stream:
                async for data in stream:
                    await stream.send(data.upper())
                await client_gone.wait()
                await anyio.sleep(0.05)  # the client's FIN is in
        except BaseException as exc:
            outcomes.append(exc)
            raise
        else:
            outcomes.append(None)
        finally:
            handler_done.set()

    listener = await anyio_stream.create_tcp_listener(key=KEY, local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    with anyio.fail_after(10):
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handler)
            for _ in range(3):
                stream = await anyio_stream.connect_tcp("127.0.0.1", port, key=KEY)
                await stream.send(b"hi")
                await stream.send_eof()
                assert await stream.receive() == b"HI"
                await stream.aclose()  # before the server's FINAL: it goes to a closed socket
                client_gone.set()
                await handler_done.wait()
                assert outcomes == [None], outcomes
                outcomes.clear()
                client_gone, handler_done = anyio.Event(), anyio.Event()
            tg.cancel_scope.cancel()


# -- unix sockets (issue 24.6) -------------------------------------------------------------------


async def test_unix_socket_handshake_echo_and_a_failing_handler(tmp_path: Path) -> None:
    """create_unix_listener and connect_unix over a real unix socket: the handshake, an echo,
    and a handler that fails ends its connection only (the client reads a truncation, the
    next client is served), on asyncio and trio."""
    path = tmp_path / "echo.sock"

    async def echo(stream: SecureStream) -> None:
        data = await stream.receive()
        if data == b"fail":
            raise RuntimeError("a handler that fails")
        async with stream:
            await stream.send(data)

    async def round_trip(data: bytes) -> bytes:
        async with await gcmstream.connect_unix(path, key=KEY) as client:
            await client.send(data)
            received = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    received += await client.receive()
            return received

    with anyio.fail_after(20):
        async with (
            await gcmstream.create_unix_listener(path, key=KEY) as listener,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(listener.serve, echo)
            assert await round_trip(b"hello over a unix socket") == b"hello over a unix socket"
            with pytest.raises(gcmstream.TruncatedStreamError):
                await round_trip(b"fail")
            assert await round_trip(b"still served") == b"still served"
            tg.cancel_scope.cancel()


async def test_a_unix_listener_leaves_the_path_to_the_caller(tmp_path: Path) -> None:
    """As asyncio.start_unix_server (tests/test_aio.py::test_a_unix_socket_file_is_asyncios):
    without ``mode`` the socket file gets what the umask gives, the mode of a plain anyio
    listener's; ``mode=`` sets it (anyio's); a stale socket file is replaced."""
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as left_behind:
        left_behind.bind(str(stale))
    async with (
        await anyio.create_unix_listener(tmp_path / "plain.sock"),
        await gcmstream.create_unix_listener(stale, key=KEY),
        await gcmstream.create_unix_listener(tmp_path / "private.sock", key=KEY, mode=0o600),
    ):
        modes = {
            name: os.stat(tmp_path / name).st_mode for name in ("plain.sock", "stale.sock", "private.sock")
        }
        assert stat.S_ISSOCK(modes["stale.sock"])
        assert stat.S_IMODE(modes["stale.sock"]) == stat.S_IMODE(modes["plain.sock"])
        assert stat.S_IMODE(modes["private.sock"]) == 0o600


async def test_a_closed_unix_listeners_socket_file_is_where_anyio_leaves_it(tmp_path: Path) -> None:
    """README: closing the listener leaves the socket file, as a plain anyio listener does (the
    caller removes it; the README's example does)."""
    async with (
        await anyio.create_unix_listener(tmp_path / "plain.sock"),
        await gcmstream.create_unix_listener(tmp_path / "secure.sock", key=KEY),
    ):
        pass
    left = {name: (tmp_path / name).exists() for name in ("plain.sock", "secure.sock")}
    assert left == {"plain.sock": True, "secure.sock": True}, left


# -- records received straight into the ring (issue 23 item 6) ------------------------------


def _count_receives(stream: SecureStream) -> list[int]:
    """Spy on the transport's receive(): the sizes of what it returned, from now on."""
    sizes: list[int] = []
    transport_receive: Any = stream.transport_stream.receive

    async def counted(max_bytes: int = 65536) -> bytes:
        data: bytes = await transport_receive(max_bytes)
        sizes.append(len(data))
        return data

    stream.transport_stream.receive = counted  # type: ignore[method-assign]
    return sizes


async def _send_all(stream: SecureStream, data: bytes, piece: int) -> None:
    for start in range(0, len(data), piece):
        await stream.send(data[start : start + piece])
    await stream.send_eof()


async def _receive_all(stream: SecureStream, max_bytes: int = 65536) -> bytes:
    received = bytearray()
    with contextlib.suppress(anyio.EndOfStream):
        while True:
            received += await stream.receive(max_bytes)
    return bytes(received)


async def test_tcp_records_arrive_without_the_transports_receive() -> None:
    """Over anyio's own TCP stream the records go from the socket into the ring (recv_into on
    trio, a protocol that reads into the ring on asyncio): the transport's receive(), which
    returns new bytes to be copied again, carries at most what anyio had read before the
    switch. Fails on the adapter that received every byte through receive()."""
    data = bytes(range(256)) * (4 * 4096 + 7)  # 4 MiB and 1,792 B, in 64 KiB records
    with anyio.fail_after(20):
        async with secure_pair() as (client, server):
            through_receive = _count_receives(server)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_send_all, client, data, 100_000)
                received = await _receive_all(server)
    assert received == data
    assert sum(through_receive) < len(data) // 8, sum(through_receive)


async def test_tcp_records_in_order_when_data_follows_the_handshake_at_once() -> None:
    """The client sends its records right after its Finished: on asyncio anyio may already
    hold some in its own queue when the records begin; those come first, in order, then the
    socket's (and on trio the socket is all there is)."""
    data = bytes(range(251)) * 9001
    for _ in range(5):
        with anyio.fail_after(20):
            async with secure_pair() as (client, server), anyio.create_task_group() as tg:
                tg.start_soon(_send_all, client, data, 3001)
                await anyio.sleep(0.02)  # let what was sent land wherever it lands
                received = await _receive_all(server, 4099)
        assert received == data


async def test_tcp_receive_cancelled_again_and_again_loses_nothing() -> None:
    """Cancellation while waiting for the socket takes no byte: receives cut off by short
    timeouts, over and over while the data flows, still read every byte in order."""
    data = bytes(range(256)) * 8192  # 2 MiB
    cancelled = 0
    with anyio.fail_after(30):
        async with secure_pair() as (client, server):

            async def paced_send() -> None:
                for start in range(0, len(data), 65536):
                    await client.send(data[start : start + 65536])
                    await anyio.sleep(0.002)
                await client.send_eof()

            received = bytearray()
            async with anyio.create_task_group() as tg:
                tg.start_soon(paced_send)
                while True:
                    with anyio.move_on_after(0.0005) as scope:
                        try:
                            received += await server.receive()
                        except anyio.EndOfStream:
                            break
                    cancelled += scope.cancelled_caught
    assert bytes(received) == data
    assert cancelled > 0  # the test cancelled receives that were waiting


async def test_aclose_ends_a_receive_waiting_on_the_socket() -> None:
    """aclose() from another task while a receive waits for the socket (after the records
    began): the receive ends with ClosedResourceError, as anyio's own receive() does."""
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            await client.send(b"first")
            assert await server.receive() == b"first"  # records began: the direct path
            outcome: list[BaseException] = []

            async def waiting_receive() -> None:
                try:
                    await server.receive()
                except BaseException as exc:
                    outcome.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting_receive)
                await anyio.sleep(0.05)
                await server.aclose()
            assert len(outcome) == 1
            assert isinstance(outcome[0], anyio.ClosedResourceError), outcome


async def test_a_connection_reset_while_waiting_is_a_truncation() -> None:
    """The peer's socket is reset while the direct path waits: AnyioTruncatedStreamError (a
    BrokenResourceError), caused by the connection's error, never a clean end."""
    with anyio.fail_after(10):
        async with secure_pair() as (client, server):
            await client.send(b"x" * 100_000)
            assert len(await _receive_some(server, 100_000)) == 100_000
            sock = client.transport_stream.extra(SocketAttribute.raw_socket)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await client.transport_stream.aclose()  # an RST
            with pytest.raises(anyio_stream.AnyioTruncatedStreamError):
                await server.receive()


async def _receive_some(stream: SecureStream, count: int) -> bytes:
    got = bytearray()
    while len(got) < count:
        got += await stream.receive()
    return bytes(got)


async def test_other_byte_streams_keep_receive() -> None:
    """Only anyio's own socket streams are read beneath: a memory stream, or any wrapper (a
    TLS stream's raw socket carries other bytes than it returns), goes through receive()."""
    with anyio.fail_after(10):
        async with secure_pair() as (client, _):
            tcp = client.transport_stream
            assert anyio_stream._direct_feed(tcp) is not None
            # a TLS stream over it (not handshaken: its class is what counts)
            tls_object = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
            tls = TLSStream(tcp, True, tls_object, ssl.MemoryBIO(), ssl.MemoryBIO())
            assert tls.extra(SocketAttribute.raw_socket).fileno() >= 0  # the socket beneath
            assert anyio_stream._direct_feed(tls) is None
    send, receive = anyio.create_memory_object_stream[bytes](1)
    with send, receive:
        assert anyio_stream._direct_feed(StapledObjectStream(send, receive)) is None


class _HeldSends(anyio.abc.ByteStream):
    """A client's transport that sends its first write (the handshake's header) and holds the
    rest until ``release()``, then writes them at once: the Finished and the first records
    reach the server in one segment, so anyio's asyncio stream reads records into its own
    queue while the handshake takes only the Finished."""

    def __init__(self, inner: anyio.abc.ByteStream) -> None:
        self.inner = inner
        self.sent = 0
        self.held: bytearray | None = bytearray()

    async def send(self, item: bytes) -> None:
        self.sent += 1
        if self.sent == 1 or self.held is None:
            await self.inner.send(item)
        else:
            self.held += item

    async def release(self) -> None:
        held, self.held = bytes(self.held or b""), None
        await self.inner.send(held)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.inner.receive(max_bytes)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_records_anyio_read_before_the_switch_come_first() -> None:
    """Records that anyio's stream already holds in its own queue when the records begin are
    delivered first, then what the socket brings, in order (reading the socket at once
    would put later bytes before them). Fails if the switch ignores anyio's queue."""
    first = bytes(range(256)) * 40  # in the same segment as the client's Finished
    rest = bytes(range(255, -1, -1)) * 4000
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)
    send_accepted, receive_accepted = anyio.create_memory_object_stream[SocketStream](1)
    with anyio.fail_after(10):
        async with listener, anyio.create_task_group() as serving:
            serving.start_soon(listener.serve, send_accepted.send)
            held = _HeldSends(await anyio.connect_tcp("127.0.0.1", port))
            async with anyio.create_task_group() as tg:
                servers: list[SecureStream] = []

                async def wrap_server() -> None:
                    raw = await receive_accepted.receive()
                    servers.append(await SecureStream.wrap(raw, role=gcmstream.Role.RESPONDER, key=KEY))

                tg.start_soon(wrap_server)
                client = await SecureStream.wrap(held, role=gcmstream.Role.INITIATOR, key=KEY)
                await client.send(first)
                await held.release()  # the Finished and the first records, in one write
            server = servers[0]
            await anyio.sleep(0.05)  # the segment is in
            async with anyio.create_task_group() as tg:
                tg.start_soon(_send_all, client, rest, 50_000)
                received = await _receive_all(server, 3000)
            serving.cancel_scope.cancel()
            await anyio.aclose_forcefully(client)
            await anyio.aclose_forcefully(server)
    assert received == first + rest
