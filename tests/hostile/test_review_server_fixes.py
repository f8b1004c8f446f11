"""Review 2026-12-05 of three merged changes (docs/review-2026-12-05-server-fixes.md): the
kernel look at admission (merge fix1), a same-process refusal reaching only its own client
(merge fix2), and the CLI's output safety (d19ac2f). Each xfail here fails on main because of
a finding, and flips (strict) when it is fixed."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import pytest

import gcmstream
import gcmstream._server
from gcmstream import AdmissionPolicy, Role
from gcmstream.admission import Admission
from gcmstream.anyio_stream import SecureStream, create_tcp_listener

from ..helpers import KEY

HOST = "127.0.0.1"

_ANYIO_ON_ASYNCIO = pytest.mark.xfail(
    strict=True,
    reason=(
        "review 2026-12-05: anyio's asyncio backend reads the first flight into its own queue "
        "(connect_accepted_socket starts reading) before the listener admits the connection, so "
        "the kernel look sees nothing and the client is admitted as silent"
    ),
)

PATHS = [
    pytest.param("start_server", "asyncio", {}, id="start_server-asyncio"),
    pytest.param("start_server", "asyncio", {"use_uvloop": True}, id="start_server-uvloop"),
    pytest.param("listener", "asyncio", {}, id="listener-asyncio", marks=_ANYIO_ON_ASYNCIO),
    pytest.param("listener", "asyncio", {"use_uvloop": True}, id="listener-uvloop", marks=_ANYIO_ON_ASYNCIO),
    pytest.param("listener", "trio", {}, id="listener-trio"),
]


@pytest.mark.parametrize(("path", "backend", "options"), PATHS)
def test_a_first_flight_queued_before_accept_is_never_admitted_as_silent(
    path: str, backend: str, options: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SECURITY.md: "at admission they ask the kernel: a connection whose first bytes already
    arrived counts as having received part of a header, not as one that sent nothing", on
    every server. A client's whole header is in the kernel before the server accepts (the loop
    is held while it connects and sends); when the server first reports what it read
    (``Admission.observe``), the admission must not have held it as silent meanwhile. The
    anyio listener on asyncio (and on uvloop) admits it as silent: anyio read it first."""
    if options.get("use_uvloop"):
        pytest.importorskip("uvloop")
    silent_at_first_read: list[bool] = []

    class Spy(Admission[Any]):
        def __init__(self, policy: AdmissionPolicy, drop: Callable[[Any], object], **kwargs: Any) -> None:
            super().__init__(policy, drop, **kwargs)
            self.seen: set[int] = set()

        def observe(self, connection: Any, opener: Any) -> None:
            if id(connection) not in self.seen:
                self.seen.add(id(connection))
                silent_at_first_read.append(self.silent > 0)  # one connection: was it silent?
            super().observe(connection, opener)

    monkeypatch.setattr(gcmstream._server, "Admission", Spy)  # the one every server path makes

    async def asyncio_handler(
        reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter
    ) -> None:
        writer.close()

    async def anyio_handler(stream: SecureStream) -> None:
        await stream.aclose()

    async def scenario() -> None:
        async with contextlib.AsyncExitStack() as stack:
            if path == "start_server":
                server = await gcmstream.start_server(asyncio_handler, HOST, 0, key=KEY)
                await stack.enter_async_context(server)
                port = server.sockets[0].getsockname()[1]
            else:
                listener = await create_tcp_listener(key=KEY, local_host=HOST)
                await stack.enter_async_context(listener)
                port = listener.extra(anyio.abc.SocketAttribute.local_port)
            client = stack.enter_context(socket.create_connection((HOST, port)))
            client.sendall(gcmstream.Channel(KEY, role=Role.INITIATOR).initial_data())
            time.sleep(0.1)  # noqa: ASYNC251 (it holds the loop on purpose: the header is in the kernel before any accept)
            if path == "listener":
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                tg.start_soon(listener.serve, anyio_handler)
            for _ in range(50):  # bounded: until the server read it
                if silent_at_first_read:
                    break
                await anyio.sleep(0.01)

    anyio.run(scenario, backend=backend, backend_options=options)
    assert silent_at_first_read == [False], "a header that was in the kernel at admission was held as silent"
