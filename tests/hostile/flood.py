"""A keyless flood against a server on 127.0.0.1, as one attacker process does it (issue 24.3).

Shared by every server path (tests/hostile/test_admission_flood.py): the attacker
(:func:`attack`, run in its own process by :func:`keyless_flood`) holds ``count`` TCP
connections and opens a new one as soon as the server drops one, each from one of ``sources``
(loopback addresses: one for an attacker with one address, many for a botnet or an IPv6 /64,
one per connection for a botnet as large as the flood: :func:`one_per_connection`); each
connection sends nothing (silent) or a recorded initiator header (a replayed first flight, or
one byte of it at an interval: a trickle), then only reads, until the server drops it or, if it
leaves once answered, until the first byte of an answer. :func:`serve` runs the server under
attack in its own process (so the test's legitimate clients and the attacker do not share its
interpreter), on one of ``BACKENDS``.

The attacker is stdlib only (selectors, non-blocking sockets): as fast as one process allows.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY_HEX = bytes(range(16)).hex()  # tests.helpers.KEY, without importing the helpers' imports
BACKENDS = ("asyncio", "uvloop", "anyio-asyncio", "anyio-trio")
ONE_SOURCE = ("127.0.0.2",)
MANY_SOURCES = tuple(f"127.0.1.{n}" for n in range(1, 251))  # 4 connections each of 1,000
LEAVE = ("dropped", "answered")  # an attacker connection leaves when dropped, or once answered too
_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux: pick the port at connect


def raise_fd_limit(wanted: int) -> None:
    """Raise this process's soft RLIMIT_NOFILE to ``wanted`` (at most the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def one_per_connection(count: int) -> tuple[str, ...]:
    """``count`` loopback addresses, 127.1.0.1 onwards (none a legitimate client's): each
    attacker connection from its own, as a botnet with an address per connection."""
    return tuple(f"127.1.{n // 250}.{n % 250 + 1}" for n in range(count))


def attack(
    port: int,
    count: int,
    payload: bytes,
    sources: Sequence[str],
    seconds: float,
    leave: str = "dropped",
    trickle: float = 0.0,
) -> dict[str, int]:
    """Hold ``count`` connections to 127.0.0.1:``port`` for ``seconds``, reconnecting each as
    soon as it ends (``leave="answered"``: also as soon as the server answers, having paid for
    a responder half); each sends ``payload`` (b"": nothing) once connected, connection number
    n from ``sources[n % len(sources)]``. ``trickle`` > 0: each sends instead one byte of
    ``payload`` every ``trickle`` seconds, all but its last byte (a slow header that never
    completes: every loop pass of the server has reads to do, and each connection counts as
    having sent part of a header). Prints READY once the first ``count`` attempts are under
    way, FULL once ``count`` connections were established; returns what it did."""
    if leave not in LEAVE:
        raise ValueError(f"leave={leave!r}: one of {LEAVE}")
    if trickle < 0:
        raise ValueError(f"trickle={trickle!r}: seconds between bytes, or 0")
    raise_fd_limit(count + 256)
    selector = selectors.DefaultSelector()
    stats = {"connects": 0, "established": 0, "dropped": 0, "answered": 0, "failed": 0}
    connected: set[socket.socket] = set()
    trickled: dict[socket.socket, int] = {}  # bytes of ``payload`` each trickling one has sent

    def open_one(slot: int) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        with contextlib.suppress(OSError):  # (Linux only: the port is picked at connect)
            sock.setsockopt(socket.IPPROTO_IP, _BIND_ADDRESS_NO_PORT, 1)
        sock.bind((sources[slot % len(sources)], 0))
        error = sock.connect_ex(("127.0.0.1", port))
        stats["connects"] += 1
        if error not in (0, errno.EINPROGRESS):
            stats["failed"] += 1
        selector.register(sock, selectors.EVENT_WRITE, slot)

    def reopen(sock: socket.socket, slot: int) -> None:
        selector.unregister(sock)
        connected.discard(sock)
        trickled.pop(sock, None)
        sock.close()
        open_one(slot)

    for slot in range(count):
        open_one(slot)
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, frame: stopped.append(number))  # then report
    print("READY", flush=True)
    deadline = time.monotonic() + seconds
    next_byte = time.monotonic() + trickle
    while time.monotonic() < deadline and not stopped:  # bounded: ``seconds`` at most
        if trickle and time.monotonic() >= next_byte:
            next_byte += trickle
            for slow, sent in list(trickled.items()):
                if sent < len(payload) - 1:
                    try:
                        slow.send(payload[sent : sent + 1])
                    except BlockingIOError:
                        continue
                    except OSError:  # dropped: the read below sees it, or the next send
                        continue
                    trickled[slow] = sent + 1
        wait = min(0.05, max(0.0, next_byte - time.monotonic())) if trickle else 0.05
        for key, _ in selector.select(wait):
            sock, slot = key.fileobj, key.data
            assert isinstance(sock, socket.socket)
            if sock not in connected:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    stats["failed"] += 1
                    reopen(sock, slot)
                    continue
                connected.add(sock)
                stats["established"] += 1
                if stats["established"] == count:
                    print("FULL", flush=True)  # every slot connected once: the flood is real
                if trickle:
                    trickled[sock] = 0  # its first byte at the next tick
                else:
                    with contextlib.suppress(OSError):
                        sock.send(payload)  # a header fits the empty send buffer at once
                selector.modify(sock, selectors.EVENT_READ, slot)
                continue
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:  # dropped by the server: come back at once
                stats["dropped"] += 1
                reopen(sock, slot)
            elif leave == "answered":  # the server paid for an answer: leave, and come back
                stats["answered"] += 1
                reopen(sock, slot)
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    return stats


@contextlib.contextmanager
def keyless_flood(
    port: int,
    *,
    count: int = 1000,
    payload: bytes = b"",
    sources: Sequence[str] = ONE_SOURCE,
    seconds: float = 60,
    leave: str = "dropped",
    trickle: float = 0.0,
) -> Iterator[subprocess.Popen[str]]:
    """Run :func:`attack` in its own process while the block runs (up to ``seconds``); the
    process's last stdout line (after the block) is the attack's counts."""
    code = (
        "import sys; from tests.hostile.flood import attack; "
        "print(attack(int(sys.argv[1]), int(sys.argv[2]), bytes.fromhex(sys.argv[3]), sys.argv[7:], "
        "float(sys.argv[4]), sys.argv[5], float(sys.argv[6])), flush=True)"
    )
    argv = [str(port), str(count), payload.hex(), str(seconds), leave, str(trickle), *sources]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *argv], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "READY\n"
        yield process
    finally:
        process.terminate()
        process.wait(10)


def serve(backend: str, nofile: int = 0) -> None:
    """An echo server on 127.0.0.1 with every default, on ``backend``; prints its port, serves
    until stdin ends. Run in its own process (:func:`server_process`), its soft RLIMIT_NOFILE
    raised to 8,192, or set to ``nofile`` (1,024: the usual default, to which the admission's
    default budget is fitted at start)."""
    if nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    else:
        raise_fd_limit(8192)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    key = bytes.fromhex(KEY_HEX)
    if backend in ("asyncio", "uvloop"):
        import asyncio

        import gcmstream

        async def echo(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
            with contextlib.suppress(Exception):  # a client that gave up is not the server's end
                writer.write(await reader.read())
                writer.write_eof()
            writer.close()

        async def main() -> None:
            server = await gcmstream.start_server(echo, "127.0.0.1", 0, key=key)
            print(server.sockets[0].getsockname()[1], flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            server.close()

        factory = None
        if backend == "uvloop":
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main())
        return
    import anyio

    from gcmstream.anyio_stream import SecureStream, create_tcp_listener

    async def handle(stream: SecureStream) -> None:
        with contextlib.suppress(Exception):  # (a handler's error would end serve(): issue 24)
            data = b""
            with contextlib.suppress(anyio.EndOfStream):
                while len(data) < 1 << 20:  # bounded
                    data += await stream.receive()
            await stream.send(data)
            await stream.send_eof()
        with contextlib.suppress(Exception):
            await stream.aclose()

    async def run() -> None:
        listener = await create_tcp_listener(key=key, local_host="127.0.0.1")
        print(listener.extra(anyio.abc.SocketAttribute.local_port), flush=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)
            await anyio.to_thread.run_sync(sys.stdin.read)
            tg.cancel_scope.cancel()

    anyio.run(run, backend=backend.removeprefix("anyio-"))


@contextlib.contextmanager
def server_process(backend: str, log: Path, nofile: int = 0) -> Iterator[int]:
    """:func:`serve` in its own process (``nofile``: its soft RLIMIT_NOFILE, 0: raised), its log
    (stderr) in ``log``; yields its port."""
    code = "import sys; from tests.hostile.flood import serve; serve(sys.argv[1], int(sys.argv[2]))"
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", code, backend, str(nofile)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip().isdigit(), log.read_text()
        yield int(line)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
