"""Every server path drops a peer at each of its three deadlines, once (issue 24.2: one core
computes them, tests/test_server.py; each adapter only arms its timer).

Real sockets on 127.0.0.1, on asyncio's ``start_server`` and the anyio listener, on every loop
(asyncio, uvloop if installed, trio). Three peers hold a server's resources as an attacker
would: one connects and sends nothing (``handshake_timeout``), one with the key sends half a
record and stops (``record_timeout``), one with the key goes quiet after its handshake
(``idle_timeout``). Each is dropped at its deadline, logged once with its address and the
option that dropped it, and the handler's read raises TruncatedStreamError caused by
TimeoutError (never a quiet end). ``gcmstream listen`` runs on the same core and loop
(``_adapter.serve_listener``) with the defaults (30 s each; it takes no timeout options), so it
is not driven here.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import anyio
import anyio.abc
import pytest

import gcmstream
from gcmstream.anyio_stream import AnyioTruncatedStreamError, SecureStream, connect_tcp, create_tcp_listener

from ..helpers import KEY, SERVER_PATHS

HOST = "127.0.0.1"
HANDSHAKE_TIMEOUT = RECORD_TIMEOUT = 0.5
IDLE_TIMEOUT = 1.0


Server = Callable[[], AbstractAsyncContextManager[int]]


def server_for(path: str, endings: list[BaseException]) -> Server:
    """A server with the three timeouts whose handler reads until its read raises, and keeps the error."""

    async def anyio_reads(stream: SecureStream) -> None:
        try:
            while True:
                await stream.receive()
        except Exception as exc:
            endings.append(exc)
        finally:
            await stream.aclose()

    async def asyncio_reads(
        reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
    ) -> None:
        try:
            while await reader.read(65536):
                pass
        except Exception as exc:
            endings.append(exc)
        finally:
            writer.close()

    @asynccontextmanager
    async def listener() -> AsyncIterator[int]:
        secure = await create_tcp_listener(
            key=KEY,
            local_host=HOST,
            handshake_timeout=HANDSHAKE_TIMEOUT,
            record_timeout=RECORD_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
        )
        async with secure, anyio.create_task_group() as tg:
            tg.start_soon(secure.serve, anyio_reads)
            yield secure.extra(anyio.abc.SocketAttribute.local_port)
            tg.cancel_scope.cancel()

    @asynccontextmanager
    async def start_server() -> AsyncIterator[int]:
        server = await gcmstream.start_server(
            asyncio_reads,
            HOST,
            0,
            key=KEY,
            handshake_timeout=HANDSHAKE_TIMEOUT,
            record_timeout=RECORD_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
        )
        async with server:
            yield server.sockets[0].getsockname()[1]

    return listener if path == "listener" else start_server


async def silent(port: int) -> None:
    """Connects and sends nothing: the server hangs up at its handshake deadline."""
    async with await anyio.connect_tcp(HOST, port) as raw:
        with anyio.fail_after(10):
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                while True:
                    await raw.receive()


async def half_a_record(port: int) -> None:
    """Completes the handshake, sends the first half of a record, then nothing."""
    stream = await connect_tcp(HOST, port, key=KEY)
    record = bytes(stream.channel.sealer.seal(b"x" * 1000, flush=True))
    await stream.transport_stream.send(record[: len(record) // 2])
    with anyio.fail_after(10), pytest.raises(AnyioTruncatedStreamError):
        await stream.receive()  # the server hung up: no FINAL
    await stream.aclose()


async def quiet(port: int) -> None:
    """Completes the handshake, then sends nothing."""
    stream = await connect_tcp(HOST, port, key=KEY)
    with anyio.fail_after(10), pytest.raises(AnyioTruncatedStreamError):
        await stream.receive()
    await stream.aclose()


async def drive(server: Server) -> None:
    async with server() as port, anyio.create_task_group() as tg:
        for client in (silent, half_a_record, quiet):
            tg.start_soon(client, port)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("path", "backend", "options"), SERVER_PATHS)
def test_every_server_path_drops_a_peer_once_at_each_deadline(
    path: str, backend: str, options: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    caplog.set_level(logging.WARNING, logger="gcmstream")
    endings: list[BaseException] = []
    anyio.run(drive, server_for(path, endings), backend=backend, backend_options=options)

    lines = [r.getMessage() for r in caplog.records if r.name == "gcmstream"]
    handshake = [line for line in lines if "not complete within 0.5 s" in line]
    record = [line for line in lines if line.endswith("(record_timeout)")]
    idle = [line for line in lines if line.endswith("(idle_timeout)")]
    assert len(handshake) == len(record) == len(idle) == 1, "\n".join(lines)  # each once
    assert all(HOST in line for line in handshake + record + idle), lines
    assert "has not finished arriving" in record[0] and "nothing received for 1 s" in idle[0]
    # the handler's read raised a truncation caused by the deadline, for both key holders
    assert len(endings) == 2, endings
    for ending in endings:
        assert isinstance(ending, gcmstream.TruncatedStreamError), repr(ending)
        assert isinstance(ending.__cause__, TimeoutError), repr(ending)
    assert sorted(str(ending.__cause__) for ending in endings) == [
        "a record started more than 0.5 s ago has not finished arriving",
        "nothing received for 1 s",
    ]
