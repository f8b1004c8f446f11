"""The adapters' log lines (the glue in _adapter.py and the timers of both adapters) always
say why a connection was dropped and whose it was, and never carry key material.

Each case drives a real server on 127.0.0.1 into one failure: a handshake that never comes
(handshake_timeout), a record that stops half way (record_timeout), a client that goes quiet
(idle_timeout), and a tampered record (the handler's AuthenticationError). The captured text
(messages and formatted tracebacks) must name the reason and the peer's address, and contain
the key in none of the forms a log could show it: hex, base64, base64url, Python's repr.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import errno
import logging
import os
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.abc
import pytest

import gcmstream
from gcmstream import Channel, Role
from gcmstream._adapter import (
    HUNG_UP,
    answer_only_a_connected_peer,
    anyio_asyncio_protocol,
    ended_before_sending,
    peer_ended_input,
    raw_socket,
    read_already,
    receive_size,
    remote_address,
    serve_listener,
    serve_retrying,
)
from gcmstream.anyio_stream import SecureStream, connect_tcp, create_tcp_listener
from gcmstream.config import Configuration

KEY = os.urandom(16)  # random: any trace of it in a log is a leak, not a coincidence


def key_forms(key: bytes) -> list[str]:
    forms = [key.hex(), key.hex().upper(), repr(key), str(key)]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        text = encode(key).decode()
        forms += [text, text.rstrip("=")]
    return forms


def check_log(caplog: pytest.LogCaptureFixture, *reasons: str) -> str:
    text = caplog.text  # every record, with its formatted traceback
    for reason in reasons:
        assert reason in text, f"{reason!r} not in the log:\n{text}"
    assert "127.0.0.1" in text, text
    for form in key_forms(KEY):
        assert form not in text, f"the key appears in the log as {form!r}"
    return text


async def logged(caplog: pytest.LogCaptureFixture, what: str) -> None:
    """Wait (at most 10 s) until a captured log line contains ``what``."""
    for _ in range(200):
        if what in caplog.text:
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"nothing logged with {what!r}:\n{caplog.text}")


@pytest.fixture(autouse=True)
def _capture_gcmstream_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gcmstream")


async def _server(
    handler: gcmstream.aio.ClientConnectedCallback, **options: object
) -> tuple[asyncio.Server, int]:
    server = await gcmstream.start_server(handler, "127.0.0.1", 0, key=KEY, **options)  # type: ignore[arg-type]
    return server, server.sockets[0].getsockname()[1]


async def _reads_until_error(
    reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
) -> None:
    try:
        while await reader.read(65536):
            pass
    finally:
        writer.close()


@pytest.mark.asyncio
async def test_handshake_timeout_says_so(caplog: pytest.LogCaptureFixture) -> None:
    server, port = await _server(_reads_until_error, handshake_timeout=0.3)
    async with server:
        with socket.create_connection(("127.0.0.1", port)) as silent:  # connects, sends nothing
            await logged(caplog, "handshake with")
            silent.close()
    check_log(caplog, "handshake with", "TimeoutError", "not complete within 0.3 s")


@pytest.mark.asyncio
async def test_record_timeout_says_so(caplog: pytest.LogCaptureFixture) -> None:
    server, port = await _server(_reads_until_error, record_timeout=0.3)
    async with server:
        _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
        record = bytes(writer.sealer.seal(b"x" * 1000, flush=True))
        writer.transport.write(record[:100])  # the rest never comes
        await logged(caplog, "record_timeout")
        writer.close()
    check_log(caplog, "record_timeout", "has not finished arriving", "0.3 s")


@pytest.mark.asyncio
async def test_idle_timeout_says_so(caplog: pytest.LogCaptureFixture) -> None:
    server, port = await _server(_reads_until_error, idle_timeout=0.3)
    async with server:
        _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
        await logged(caplog, "idle_timeout")
        writer.close()
    check_log(caplog, "idle_timeout", "nothing received for 0.3 s")


@pytest.mark.asyncio
async def test_a_bad_record_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """The handler lets the AuthenticationError escape: start_server logs it with the peer."""
    server, port = await _server(_reads_until_error)
    async with server:
        _, writer = await gcmstream.open_connection("127.0.0.1", port, key=KEY)
        record = bytearray(writer.sealer.seal(b"secret plaintext", flush=True))
        record[-1] ^= 1  # the tag
        writer.transport.write(bytes(record))
        await logged(caplog, "client_connected_cb failed")
        writer.close()
    text = check_log(caplog, "client_connected_cb failed", "AuthenticationError")
    assert "secret plaintext" not in text


@pytest.mark.anyio
async def test_anyio_listener_timeouts_say_so(caplog: pytest.LogCaptureFixture) -> None:
    """handshake, record and idle timeouts on the anyio listener, on asyncio and trio."""
    listener = await create_tcp_listener(
        key=KEY, local_host="127.0.0.1", handshake_timeout=0.3, record_timeout=0.3, idle_timeout=0.6
    )
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def handler(stream: SecureStream) -> None:
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, gcmstream.TruncatedStreamError):
            pass
        finally:
            await anyio.aclose_forcefully(stream)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handler)
        silent = await anyio.connect_tcp("127.0.0.1", port)  # no handshake
        await logged(caplog, "handshake with")
        await silent.aclose()
        partial = await connect_tcp("127.0.0.1", port, key=KEY)
        record = bytes(partial.channel.sealer.seal(b"x" * 1000, flush=True))
        await partial.transport_stream.send(record[:100])
        await logged(caplog, "record_timeout")
        quiet = await connect_tcp("127.0.0.1", port, key=KEY)
        await logged(caplog, "idle_timeout")
        tg.cancel_scope.cancel()
    await partial.aclose()
    await quiet.aclose()
    check_log(
        caplog,
        "not complete within 0.3 s",
        "has not finished arriving",
        "nothing received for 0.6 s",
    )


# -- which error wins: the peer's, or a failed send (review 10b LOW-7.3) -----------------------


def _failing_send(feed: gcmstream.Channel | None, data: bytes) -> Callable[[bytes], Awaitable[None]]:
    """A send that fails as a transport does once the peer went away; ``data`` (the peer's
    bytes) reaches ``feed``'s opener first, as asyncio's callbacks deliver input during a send."""

    async def send(_: bytes) -> None:
        if feed is not None:
            feed.opener.receive_data(data)
        raise anyio.BrokenResourceError

    return send


async def _nothing_more() -> None:
    raise AssertionError("no read is expected")


async def _abort() -> None:
    pass


@pytest.mark.anyio
async def test_the_peers_error_wins_over_a_failed_send() -> None:
    """A send that fails once the peer's bytes failed the handshake raises the peer's error
    (what the peer did), the send's failure as its context; with no such error the send's
    failure is raised; a responder whose peer's header and forged Finished arrived together
    sends its answer (as it would had they arrived apart), then raises the Finished's error."""
    from gcmstream import Channel, Role
    from gcmstream._adapter import handshake
    from gcmstream.format import FINISHED_SIZE, KeyExchange
    from gcmstream.handshake import handshake_sizes

    initiator = Channel(KEY, role=Role.INITIATOR)
    garbage = b"NOT A GCMSTREAM HEADER" * 4
    with pytest.raises(gcmstream.ProtocolError) as raised:
        await handshake(
            initiator, _failing_send(initiator, garbage), _nothing_more, time_limit=5, abort=_abort
        )
    assert isinstance(raised.value.__context__, anyio.BrokenResourceError)

    alone = Channel(KEY, role=Role.INITIATOR)
    with pytest.raises(anyio.BrokenResourceError):
        await handshake(alone, _failing_send(None, b""), _nothing_more, time_limit=5, abort=_abort)

    responder = Channel(KEY, role=Role.RESPONDER)
    responder.opener.receive_data(Channel(KEY, role=Role.INITIATOR).initial_data() + bytes(FINISHED_SIZE))
    sent: list[bytes] = []

    async def record(data: bytes) -> None:
        sent.append(data)

    with pytest.raises(gcmstream.HandshakeError, match="key confirmation failed"):
        await handshake(responder, record, _nothing_more, time_limit=5, abort=_abort)
    assert len(b"".join(sent)) == handshake_sizes(KeyExchange.MLKEM768_X25519)[1]


# -- accept loops that survive running out of descriptors (review 2026-12-04 finding 2) ---------


class FlakyListener:
    """``serve()`` ends with ``errors`` (in order, as anyio's own ``serve()`` ends when its
    accept fails), then serves one connection and returns."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def serve(self, handler: Callable[[str], Awaitable[object]], task_group: object) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        await handler("a connection")


def emfile() -> OSError:
    return OSError(errno.EMFILE, "Too many open files")


def broken_by(cause: OSError) -> anyio.BrokenResourceError:
    exc = anyio.BrokenResourceError()
    exc.__cause__ = cause  # as anyio on trio raises it
    return exc


async def served_by(listener: FlakyListener) -> list[str]:
    served: list[str] = []

    async def handler(connection: str) -> None:
        served.append(connection)

    await serve_retrying(listener, handler, None)
    return served


@pytest.mark.anyio
async def test_an_accept_loop_survives_running_out_of_descriptors(caplog: pytest.LogCaptureFixture) -> None:
    """Review finding 2: EMFILE/ENFILE (as anyio raises them on asyncio and on trio, alone or
    in a group) pause the accept loop; they do not end it. One warning, not one per attempt."""
    listener = FlakyListener(
        emfile(),
        broken_by(emfile()),
        ExceptionGroup("a MultiListener's", [OSError(errno.ENFILE, "table full")]),
    )
    with caplog.at_level(logging.WARNING, logger="gcmstream"):
        with anyio.fail_after(5):
            assert await served_by(listener) == ["a connection"]
    assert listener.calls == 4
    assert len([r for r in caplog.records if "accept() failed" in r.getMessage()]) <= 1


class _Connections:
    """A listener whose ``serve()`` hands each of ``transports`` to the handler in turn, then
    returns (as a listener closed after them)."""

    def __init__(self, *transports: Any) -> None:
        self.transports = transports

    async def serve(self, handler: Callable[[Any], Awaitable[object]], task_group: object) -> None:
        for transport in self.transports:
            await handler(transport)


class _Closable:
    """An accepted stream with no socket to look at, that records its closing."""

    closed = False

    def extra(self, attribute: Any, default: Any = None) -> Any:
        return default

    async def aclose(self) -> None:
        self.closed = True


@pytest.mark.anyio
async def test_one_connection_that_breaks_the_servers_code_never_ends_serve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Whatever raises out of the server's own code for one connection (here its report of a
    failed handshake) is one error line and that connection closed: ``serve()`` goes on to the
    next connection rather than ending for every client (the new user's make check,
    2026-12-05: a ValueError from a look at a socket uvloop had closed ended it)."""
    first, second = _Closable(), _Closable()
    reported: list[Any] = []

    async def responder(transport: Any, *_: Any) -> None:
        raise gcmstream.TruncatedStreamError("the peer left")

    async def handshake_failed(exc: Exception, transport: Any, peer: object, level: int) -> None:
        reported.append(transport)
        if transport is first:
            raise RuntimeError("a bug in the report")

    async def handler(stream: Any) -> None:  # (never reached: no handshake completes)
        raise AssertionError

    with caplog.at_level(logging.ERROR, logger="gcmstream"):
        with anyio.fail_after(5):
            config = Configuration(key=bytes(32))
            await serve_listener(_Connections(first, second), config, responder, handler, handshake_failed)
    assert reported == [first, second]  # the second was served after the first broke
    assert first.closed
    lines = [r.getMessage() for r in caplog.records if "admitting a connection failed" in r.getMessage()]
    assert len(lines) == 1 and "RuntimeError: a bug in the report" in lines[0], lines


class _ClosableFrom(_Closable):
    """A ``_Closable`` whose peer address anyio would give."""

    def extra(self, attribute: Any, default: Any = None) -> Any:
        if attribute is anyio.abc.SocketAttribute.remote_address:
            return ("192.0.2.7", 4242)
        return default


@pytest.mark.anyio
async def test_a_connection_that_breaks_the_servers_code_is_logged_with_its_peer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The error line of a connection whose server-side code raised names its peer (the
    address anyio gives, or "an unknown peer" where it gives none). Mutation run of 2026-12-05
    (mut35): with the peer dropped from the line (then ``_isolated``'s, now ``handle``'s own) every
    other test passed."""

    async def responder(transport: Any, *_: Any) -> None:
        raise gcmstream.TruncatedStreamError("the peer left")

    async def handshake_failed(exc: Exception, transport: Any, peer: object, level: int) -> None:
        raise RuntimeError("a bug in the report")

    async def handler(stream: Any) -> None:  # (never reached: no handshake completes)
        raise AssertionError

    with caplog.at_level(logging.ERROR, logger="gcmstream"):
        with anyio.fail_after(5):
            connections = _Connections(_ClosableFrom(), _Closable())
            await serve_listener(
                connections, Configuration(key=bytes(32)), responder, handler, handshake_failed
            )
    lines = [r.getMessage() for r in caplog.records if "admitting a connection failed" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("admitting a connection failed for ('192.0.2.7', 4242);"), lines[0]
    assert lines[1].startswith("admitting a connection failed for an unknown peer;"), lines[1]


@pytest.mark.anyio
async def test_an_accept_loop_still_ends_on_other_errors() -> None:
    """(from the loop's own task group, as anyio's ``serve()`` raises: in a group)"""
    with pytest.raises(BaseExceptionGroup) as refused:
        await served_by(FlakyListener(OSError(errno.ECONNREFUSED, "refused")))
    assert refused.group_contains(ConnectionRefusedError, match="refused")
    with pytest.raises(BaseExceptionGroup) as broken:
        await served_by(FlakyListener(broken_by(OSError(errno.EBADF, "closed"))))
    assert broken.group_contains(anyio.BrokenResourceError)


# -- read sizes on record boundaries (issue 23 item 5) --------------------------------------


def _read_in_receive_sizes(opener: gcmstream.Opener, wire: bytes) -> tuple[bytes, list[int], list[int]]:
    """Feed ``wire`` in pieces of ``receive_size(opener)`` (as a stream holding plenty would
    return them): the plaintext, the sizes asked for, and ``record_missing`` after each piece."""
    pos, out, sizes, missing = 0, bytearray(), [], []
    for _ in range(len(wire)):  # bounded: every piece takes at least one byte
        if pos == len(wire):
            break
        in_header = bool(opener.header_missing)
        size = receive_size(opener)
        if not in_header:
            sizes.append(size)
        opener.receive_data(wire[pos : pos + size])
        pos += min(size, len(wire) - pos)
        while chunk := opener.read():
            out += chunk
        missing.append(opener.record_missing)
    opener.receive_eof()
    return bytes(out), sizes, missing


def test_receive_size_keeps_reads_on_record_boundaries() -> None:
    """After the header, each read asks for whole records of the peer's record size (64 KiB
    records, 65,557 bytes on the wire: three in a 256 KiB read), so no record is split between
    two reads and copied into the ring; the old fixed 256 KiB split every fourth record."""
    data = os.urandom(10 * 65536 + 1000)
    sealer = gcmstream.Sealer(KEY, record_size=65536)
    wire = bytes(sealer.seal(data)) + bytes(sealer.close())
    opened, sizes, missing = _read_in_receive_sizes(gcmstream.Opener(KEY), wire)
    assert opened == data
    wire_length = 5 + 65536 + 16
    assert sizes and all(size == 3 * wire_length for size in sizes), sizes
    assert all(count == 0 for count in missing), missing  # every piece ended on a boundary


def _feed_header(opener: gcmstream.Opener, wire: bytes) -> int:
    """Feed the header in the sizes ``receive_size`` asks for; its length."""
    pos = 0
    for _ in range(4):  # bounded: the fixed part, then the rest
        if opener.header is not None and not opener.header_missing:
            return pos
        size = receive_size(opener)
        opener.receive_data(wire[pos : pos + size])
        pos += size
    raise AssertionError("the header did not verify")


def test_receive_size_finishes_a_record_part_way_in_first() -> None:
    """A short record (a flush) shifts where records fall: the next read asks for the rest of
    the record part-way in, then whole records again; a record larger than a read goes in reads
    of the usual 256 KiB."""
    sealer = gcmstream.Sealer(KEY, record_size=4096)
    wire = (
        bytes(sealer.seal(b"x" * 100, flush=True)) + bytes(sealer.seal(b"y" * 50_000)) + bytes(sealer.close())
    )
    opener = gcmstream.Opener(KEY)
    header_size = _feed_header(opener, wire)
    assert opener.record_missing == 0
    opener.receive_data(wire[header_size : header_size + 7])  # 7 bytes of the 121-byte record
    assert opener.read() is None  # (an adapter asks after a read that needed more)
    assert opener.record_missing == 5 + 100 + 16 - 7
    wire_length = 5 + 4096 + 16
    size = receive_size(opener)
    assert (size - opener.record_missing) % wire_length == 0 and size <= 256 * 1024

    big = gcmstream.Sealer(KEY, record_size=1 << 20)
    big_wire = bytes(big.seal(b"z" * (1 << 20)))
    big_opener = gcmstream.Opener(KEY, max_record_size=1 << 20)
    header_size = _feed_header(big_opener, big_wire)
    big_opener.receive_data(big_wire[header_size : header_size + 1000])
    assert big_opener.read() is None
    assert big_opener.record_missing == 5 + (1 << 20) + 16 - 1000
    assert receive_size(big_opener) == 256 * 1024


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_connection_that_hung_up_before_sending_builds_no_handshake(
    backend: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Review 2026-12-04 finding 3: a flood of connections that connect and hang up cost the
    anyio listener a channel, a cancel scope and two forced closes each. Twenty that hung up
    before the listener accepted them (their FIN queued with them) are closed on arrival: no
    channel is built for any, each is counted as a failed handshake in the core's one line per
    interval, and a genuine client after them is served."""
    built: list[object] = []
    channel = Configuration.channel

    def counting(self: Configuration, *args: Any, **kwargs: Any) -> Any:
        made = channel(self, *args, **kwargs)
        built.append(made)
        return made

    async def echo(stream: Any) -> None:
        async with stream:
            await stream.send(await stream.receive())

    async def scenario() -> bytes:
        listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        for _ in range(20):  # bounded: connected and closed before the listener accepts
            socket.create_connection(("127.0.0.1", port)).close()
        await anyio.sleep(0.1)
        monkeypatch.setattr(Configuration, "channel", counting)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, echo)
            await anyio.sleep(0.3)
            assert built == []  # none of the twenty got a channel
            with anyio.fail_after(10):
                async with await connect_tcp("127.0.0.1", port, key=KEY) as client:
                    await client.send(b"genuine")
                    answer = await client.receive()
            tg.cancel_scope.cancel()
        return answer

    with caplog.at_level(logging.DEBUG, logger="gcmstream"):
        assert anyio.run(scenario, backend=backend) == b"genuine"
    hung_up = [r for r in caplog.records if HUNG_UP in r.getMessage()]
    assert len(hung_up) == 20  # each its line (the first a warning, the rest at debug level)
    assert sum(r.levelno >= logging.WARNING for r in hung_up) == 1


# the kernel's word (TCP_INFO) is asked on Linux only
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's TCP_INFO")


@contextlib.contextmanager
def _accepted_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(client, the server's accepted socket, non-blocking) over 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
    accepted.setblocking(False)  # as a server's accepted socket is
    with client, accepted:
        yield client, accepted


def _kernel_says(check: Callable[[], bool], want: bool) -> bool:
    """``check()`` once it equals ``want`` (the peer's FIN or reset reaches the kernel's state
    a moment after it is sent), or its last answer after a bounded wait."""
    for _ in range(200):
        if check() is want:
            return want
        time.sleep(0.005)
    return check()


class _Transport:
    """An anyio stream's ``extra`` over a socket (or raising), as ``raw_socket`` and
    ``ended_before_sending`` look at it."""

    def __init__(self, sock: Any, fails: BaseException | None = None) -> None:
        self.sock, self.fails = sock, fails

    def extra(self, attribute: Any, default: Any = None) -> Any:
        if self.fails is not None:
            raise self.fails
        return self.sock if attribute is anyio.abc.SocketAttribute.raw_socket else default


@linux_only
def test_the_kernels_word_on_a_peer_that_ended_its_input_or_reset() -> None:
    """``_adapter.peer_ended_input`` (``answer_only_a_connected_peer``'s check): False while the
    peer is connected, True once it sent its FIN or reset; False where it cannot be asked (no
    socket, no getsockopt, not TCP). Mutation run of 2026-12-05 (mop5)."""
    assert not peer_ended_input(None)
    assert not peer_ended_input(object())  # no getsockopt: AttributeError, not raised
    left, right = socket.socketpair()  # not TCP: the kernel refuses TCP_INFO (OSError)
    with left, right:
        assert not peer_ended_input(left)
    with _accepted_pair() as (client, accepted):
        assert not peer_ended_input(accepted)
        client.shutdown(socket.SHUT_WR)
        assert _kernel_says(lambda: peer_ended_input(accepted), True)
    with _accepted_pair() as (client, accepted):
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset
        assert _kernel_says(lambda: peer_ended_input(accepted), True)


@linux_only
def test_a_responder_answers_a_header_only_while_its_peer_is_connected() -> None:
    """``answer_only_a_connected_peer`` on a responder channel with its accepted socket: the
    header of a peer still connected is answered, that of a peer that ended its input is not
    (nothing to send); without a socket to ask, it is answered as always."""
    key = bytes(32)

    def answers(sock: Any) -> bool:
        initiator = Channel(key, role=Role.INITIATOR)
        responder = Channel(key, role=Role.RESPONDER)
        answer_only_a_connected_peer(responder, sock)
        responder.opener.receive_data(initiator.data_to_send())
        return responder.data_to_send() != b""

    with _accepted_pair() as (client, accepted):
        assert answers(accepted)
        client.shutdown(socket.SHUT_WR)
        assert _kernel_says(lambda: peer_ended_input(accepted), True)
        assert not answers(accepted)
        assert answers(None)


def test_raw_socket_is_none_where_a_stream_has_none_to_give() -> None:
    sock = object()
    assert raw_socket(_Transport(sock)) is sock
    assert raw_socket(_Transport(sock, fails=OSError("closed"))) is None
    # uvloop's PseudoSocket of a connection reset before the server looked at it (the new
    # user's make check, 2026-12-05: it ended the anyio listener's serve() on uvloop)
    for fails in (ValueError("negative file descriptor"), AttributeError("no socket")):
        assert raw_socket(_Transport(sock, fails=fails)) is None
        assert remote_address(_Transport(sock, fails=fails)) is None
    assert raw_socket(object()) is None  # no ``extra``: AttributeError, not raised
    send, receive = anyio.create_memory_object_stream[bytes]()  # anyio's, with no socket
    with send, receive:
        assert raw_socket(send) is None
        assert not ended_before_sending(send)


@linux_only
def test_ended_before_sending_only_for_a_peer_that_hung_up_without_a_byte() -> None:
    """``_adapter.ended_before_sending``: True for a peer that ended its input (or reset) and
    sent nothing; False for a connected peer, for one whose bytes wait, and where the socket
    cannot be looked at. Mutation run of 2026-12-05 (mop5)."""
    with _accepted_pair() as (client, accepted):
        assert not ended_before_sending(_Transport(accepted))  # connected, nothing yet
        client.sendall(b"GCMS")
        client.shutdown(socket.SHUT_WR)
        assert _kernel_says(lambda: peer_ended_input(accepted), True)
        assert not ended_before_sending(_Transport(accepted))  # bytes wait: a handshake to run
        assert accepted.recv(4) == b"GCMS"  # the look left the bytes and the socket as they were
        assert accepted.fileno() >= 0
    with _accepted_pair() as (client, accepted):
        client.sendall(b"G")
        client.shutdown(socket.SHUT_WR)
        assert _kernel_says(lambda: peer_ended_input(accepted), True)
        assert accepted.recv(1) == b"G"  # read already (asyncio's transport reads at once)
        assert not ended_before_sending(_Transport(accepted))  # the kernel counted the byte
    with _accepted_pair() as (client, accepted):
        client.shutdown(socket.SHUT_WR)
        assert _kernel_says(lambda: ended_before_sending(_Transport(accepted)), True)
        assert accepted.fileno() >= 0  # (the look does not own the descriptor)
    with _accepted_pair() as (client, accepted):
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        assert _kernel_says(lambda: ended_before_sending(_Transport(accepted)), True)
    left, right = socket.socketpair()
    with left, right:
        right.close()  # ended, but not TCP: the kernel refuses TCP_INFO (OSError)
        assert not ended_before_sending(_Transport(left))
    with open(os.devnull, "rb") as not_a_socket:  # socket.socket(fileno=...) refuses it
        assert not ended_before_sending(_Transport(not_a_socket))
    closed = socket.socket()
    closed.close()  # fileno() -1
    for transport in (_Transport(None), _Transport(closed), _Transport(None, fails=OSError()), object()):
        assert not ended_before_sending(transport)


@linux_only
@pytest.mark.parametrize("descriptor", [0, 1])
def test_ended_before_sending_looks_at_the_given_socket_whatever_its_descriptor(descriptor: int) -> None:
    """A socket accepted as descriptor 0 (stdin closed: a daemon) is looked at like any other,
    and no socket means no look at all, not at descriptor 1 (mop5: ``fd <= 0``, and -1 made
    +1 for no socket)."""
    saved = os.dup(descriptor)
    try:
        with _accepted_pair() as (client, accepted):
            client.shutdown(socket.SHUT_WR)
            assert _kernel_says(lambda: peer_ended_input(accepted), True)
            os.dup2(accepted.fileno(), descriptor)  # the hung-up socket as descriptor 0 or 1
            at_descriptor = socket.socket(fileno=descriptor)
            try:
                assert ended_before_sending(_Transport(at_descriptor))
                assert not ended_before_sending(_Transport(None))
            finally:
                at_descriptor.detach()
    finally:
        os.dup2(saved, descriptor)
        os.close(saved)


class _Protocol(asyncio.Protocol):
    """A protocol with the fields gcmstream reads of anyio's (``read_queue``, ``is_at_eof``,
    ``exception``), or without those named in ``missing``."""

    def __init__(self, queued: bytes = b"", missing: tuple[str, ...] = ()) -> None:
        if "read_queue" not in missing:
            self.read_queue = collections.deque([queued] if queued else [])
        for name in ("is_at_eof", "exception"):
            if name not in missing:
                setattr(self, name, lambda: None)


def _stream_class(module: str, name: str) -> type:
    """A class named ``name`` of ``module``, as anyio's own stream classes are told apart."""
    return type(name, (), {"__module__": module})


def test_only_anyios_asyncio_socket_stream_with_the_fields_read_gives_its_protocol() -> None:
    """``anyio_asyncio_protocol``: anyio's asyncio ``SocketStream`` gives its protocol, which
    ``read_already`` asks for bytes read before the server looked; any other stream, or that
    class with a field missing or of another kind (a later anyio), gives None and no bytes
    read, never an AttributeError or a guess that would credit input. Mutation run of
    2026-12-05 (mut35): the class test, the default of ``getattr`` and the field checks each
    mutated went unseen."""
    anyio_class = _stream_class("anyio._backends._asyncio", "SocketStream")
    stream = anyio_class()
    stream._protocol = protocol = _Protocol(b"GCMS")
    assert anyio_asyncio_protocol(stream) is protocol
    assert read_already(stream)
    stream._protocol = _Protocol()
    assert not read_already(stream)  # (its queue empty: nothing read)
    for module, name in (("anyio._backends._trio", "SocketStream"), ("anyio._backends._asyncio", "Other")):
        other = _stream_class(module, name)()
        other._protocol = _Protocol(b"GCMS")
        assert anyio_asyncio_protocol(other) is None, (module, name)
        assert not read_already(other)
    assert anyio_asyncio_protocol(anyio_class()) is None  # no _protocol (a later anyio)
    for missing in (
        ("read_queue",),
        ("is_at_eof",),
        ("exception",),
        ("read_queue", "is_at_eof", "exception"),
    ):
        stream._protocol = _Protocol(b"GCMS", missing)
        assert anyio_asyncio_protocol(stream) is None, missing
        assert not read_already(stream)
    stream._protocol = _Protocol(b"GCMS")
    stream._protocol.read_queue = [b"GCMS"]  # a queue of another kind
    assert anyio_asyncio_protocol(stream) is None
    not_a_protocol = _Protocol(b"GCMS").__dict__  # the fields, on no asyncio.Protocol
    stream._protocol = type("Fields", (), not_a_protocol)()
    assert anyio_asyncio_protocol(stream) is None


async def _connected_from(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain TCP client of 127.0.0.1:``port`` from ``source`` (any 127/8 address is this
    host's loopback on Linux), which sends nothing."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _closed_within(client: tuple[asyncio.StreamReader, asyncio.StreamWriter], seconds: float) -> bool:
    """True if the server closed (or reset) ``client`` within ``seconds``."""
    try:
        return await asyncio.wait_for(client[0].read(1), seconds) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@linux_only
@pytest.mark.parametrize("path", ["start_server", "listener"])
def test_the_per_source_cap_counts_each_connection_by_its_own_address(path: str) -> None:
    """``_adapter.admit`` hands ``ServerCore.admit`` the accepted connection's peer address:
    with ``start`` handshakes pending, a second silent connection from the same address is
    refused at once (``per_source`` 1) and one from another address (127.0.0.2) is admitted.
    Mutation run of 2026-12-05 (mut35): with the address dropped (no source: no cap) every
    other test passed."""
    policy = gcmstream.AdmissionPolicy(start=1, rate=0, full=4, per_source=1)

    async def never_called(*streams: Any) -> None:  # (no client here completes a handshake)
        raise AssertionError(streams)

    async def scenario() -> None:
        async with contextlib.AsyncExitStack() as stack:
            if path == "start_server":
                server = await gcmstream.start_server(never_called, "127.0.0.1", 0, key=KEY, admission=policy)
                await stack.enter_async_context(server)
                port = server.sockets[0].getsockname()[1]
            else:
                listener = await create_tcp_listener(key=KEY, local_host="127.0.0.1", admission=policy)
                await stack.enter_async_context(listener)
                group = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(group.cancel_scope.cancel)
                group.start_soon(listener.serve, never_called)
                port = listener.extra(anyio.abc.SocketAttribute.local_port)
            clients = [await _connected_from(port, "127.0.0.1")]
            assert not await _closed_within(clients[0], 0.3)  # admitted, pending, silent
            clients.append(await _connected_from(port, "127.0.0.1"))
            assert await _closed_within(clients[1], 3.0)  # its address has one pending
            clients.append(await _connected_from(port, "127.0.0.2"))
            assert not await _closed_within(clients[2], 0.3)  # another address: admitted
            for _, writer in clients:
                writer.close()

    asyncio.run(scenario())
