"""Part 7: the channel handshake. CPU per side (sans-IO, each side's calls timed on their own,
process time beside wall time), bytes each side sends before its first record, and connection
set-up on loopback to the first echoed byte (client and server in this one process, one event
loop, so the latency includes both sides' CPU): gcmstream hybrid, gcmstream X25519-only, plain
TCP, asyncio TLS 1.3 (trustme certificates; skipped if trustme is not installed).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import ssl
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench_common import write_result
from bench_net import Workdir

import gcmstream
from gcmstream import Channel, KeyExchange, KeyRing, Role
from gcmstream.channel import self_connections_allowed
from gcmstream.handshake import handshake_sizes

KEY = bytes(range(16))
KEYS = KeyRing([KEY])
HOST = "127.0.0.1"
EXCHANGES = {"hybrid ML-KEM-768 + X25519": KeyExchange.MLKEM768_X25519, "X25519 only": KeyExchange.X25519}


class Clock:
    """Wall and process time spent inside ``with`` blocks, summed."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu


def handshake_cpu(exchange: KeyExchange, count: int, key: bytes | KeyRing = KEYS) -> dict[str, float]:
    """Microseconds per handshake spent by each side's own calls (construction included).
    ``key``: a KeyRing made once (what a server's start_server and a Configuration hold: the
    key's ID is derived once), or the key's bytes (a KeyRing, and its key ID, per Channel)."""
    initiator_clock, responder_clock = Clock(), Clock()
    with self_connections_allowed():
        for _ in range(count):
            with initiator_clock:
                initiator = Channel(key, role=Role.INITIATOR, key_exchange=exchange)
                hello = initiator.initial_data()
            with responder_clock:
                responder = Channel(key, role=Role.RESPONDER, key_exchange=exchange)
                responder.opener.receive_data(hello)
                answer = responder.data_to_send()
            with initiator_clock:
                initiator.opener.receive_data(answer)
                assert initiator.handshake_complete()
                finished = initiator.data_to_send()
            with responder_clock:
                responder.opener.receive_data(finished)
                assert responder.handshake_complete()
    scale = 1e6 / count
    return {
        "initiator_cpu_us": initiator_clock.cpu * scale,
        "initiator_wall_us": initiator_clock.wall * scale,
        "responder_cpu_us": responder_clock.cpu * scale,
        "responder_wall_us": responder_clock.wall * scale,
    }


async def echo_plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.read(1))
    await writer.drain()
    writer.close()


async def echo_secure(reader: gcmstream.SecureStreamReader, writer: gcmstream.SecureStreamWriter) -> None:
    writer.write(await reader.read(1))
    await writer.drain()
    writer.close()


Connect = Callable[[int], Awaitable[tuple[Any, Any]]]


async def setup_latency(
    start: Callable[[], Awaitable[asyncio.Server]], connect: Connect, count: int
) -> dict[str, float]:
    server = await start()
    port = server.sockets[0].getsockname()[1]
    walls, cpus = [], []
    try:
        for _ in range(count):
            wall, cpu = time.perf_counter(), time.process_time()
            reader, writer = await connect(port)
            writer.write(b"x")
            assert await reader.read(1) == b"x"
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            writer.close()
    finally:
        server.close()
        await server.wait_closed()
    return {
        "setup_ms_median": statistics.median(walls) * 1e3,
        "setup_cpu_ms_median": statistics.median(cpus) * 1e3,
    }


async def latencies(count: int, workdir: Workdir) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, exchange in EXCHANGES.items():

        async def start(exchange: KeyExchange = exchange) -> asyncio.Server:
            return await gcmstream.start_server(echo_secure, HOST, 0, key=KEY, key_exchange=exchange)

        async def connect(port: int, exchange: KeyExchange = exchange) -> tuple[Any, Any]:
            return await gcmstream.open_connection(HOST, port, key=KEY, key_exchange=exchange)

        with self_connections_allowed():  # both ends in this process, on purpose
            rows.append({"name": f"gcmstream {name}", **await setup_latency(start, connect, count)})

    async def start_plain() -> asyncio.Server:
        return await asyncio.start_server(echo_plain, HOST, 0)

    async def connect_plain(port: int) -> tuple[Any, Any]:
        return await asyncio.open_connection(HOST, port)

    rows.append({"name": "plain TCP", **await setup_latency(start_plain, connect_plain, count)})
    if not workdir.tls:
        rows.append({"name": "asyncio TLS 1.3", "error": "trustme is not installed"})
        return rows
    os.environ["GCMSTREAM_BENCH_DIR"] = str(workdir.path)
    from bench_net import client_ssl_context, server_ssl_context

    server_ctx, client_ctx = server_ssl_context(), client_ssl_context()

    async def start_tls() -> asyncio.Server:
        return await asyncio.start_server(echo_plain, HOST, 0, ssl=server_ctx)

    async def connect_tls(port: int) -> tuple[Any, Any]:
        return await asyncio.open_connection(HOST, port, ssl=client_ctx, server_hostname="localhost")

    rows.append({"name": "asyncio TLS 1.3", **await setup_latency(start_tls, connect_tls, count)})
    return rows


# -- the accept loop: connections per second one server core completes -----------------------

ACCEPT_VARIANTS = {
    "gcmstream hybrid ML-KEM-768 + X25519": "hybrid",
    "gcmstream X25519 only": "x25519",
    "asyncio TLS 1.3": "tls",
}
ACCEPT_CONCURRENCY = 16  # connections the client keeps in flight


def _cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _nodelay(writer: Any) -> bool:
    sock = writer.get_extra_info("socket")
    return bool(sock is not None and sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def _accept_server(kind: str, warm: int, count: int) -> None:
    """Count the handshakes completed (the handler ran); from the ``warm``-th to the
    ``warm + count``-th, this process's CPU and the wall time."""
    from bench_net import emit, server_ssl_context

    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    state: dict[str, Any] = {"done": 0}

    async def handle(reader: Any, writer: Any) -> None:
        state["done"] += 1
        if state["done"] == 1:
            state["nodelay"] = _nodelay(writer)
        if state["done"] == warm:
            state["wall0"], state["cpu0"] = time.perf_counter(), _cpu()
        elif state["done"] == warm + count and not finished.done():
            state["wall"], state["cpu"] = time.perf_counter() - state["wall0"], _cpu() - state["cpu0"]
            finished.set_result(None)
        writer.write(b"x")  # the client's sign that this end completed
        await writer.drain()
        writer.close()

    if kind == "tls":
        server = await asyncio.start_server(handle, HOST, 0, ssl=server_ssl_context(), backlog=1024)
    else:
        exchange = KeyExchange.X25519 if kind == "x25519" else KeyExchange.MLKEM768_X25519
        server = await gcmstream.start_server(handle, HOST, 0, key=KEYS, key_exchange=exchange, backlog=1024)
    emit("PORT ", str(server.sockets[0].getsockname()[1]))
    await finished
    emit("DONE ", {"wall": state["wall"], "cpu": state["cpu"], "nodelay": state.get("nodelay")})
    server.close()


async def _accept_client(kind: str, port: int, total: int) -> None:
    from bench_net import client_ssl_context, emit

    ctx = client_ssl_context() if kind == "tls" else None
    exchange = KeyExchange.X25519 if kind == "x25519" else KeyExchange.MLKEM768_X25519
    left = [total]
    nodelay: list[bool] = []

    async def one() -> None:
        try:
            await connect_once()
        except (OSError, EOFError, gcmstream.GcmStreamError):
            left[0] = 0  # the server completed its count and went: the run is over

    async def connect_once() -> None:
        reader: Any
        writer: Any
        if ctx is not None:
            reader, writer = await asyncio.open_connection(HOST, port, ssl=ctx, server_hostname="localhost")
        else:
            reader, writer = await gcmstream.open_connection(HOST, port, key=KEYS, key_exchange=exchange)
        if not nodelay:
            nodelay.append(_nodelay(writer))
        await reader.readexactly(1)
        writer.close()

    async def lane() -> None:
        while left[0] > 0:
            left[0] -= 1
            await one()

    await asyncio.gather(*(lane() for _ in range(ACCEPT_CONCURRENCY)))
    emit("CLIENT ", {"nodelay": nodelay[0] if nodelay else None})


def worker(argv: list[str]) -> None:
    from bench_net import pin

    role, kind = argv[0], argv[1]
    if role == "server":
        pin(0)
        asyncio.run(_accept_server(kind, int(argv[2]), int(argv[3])))
    else:
        pin(1)
        asyncio.run(_accept_client(kind, int(argv[2]), int(argv[3])))


def accept_rate(workdir: Workdir, kind: str, warm: int, count: int) -> dict[str, Any]:
    """One server process (pinned to one core) completing ``count`` handshakes (after
    ``warm``) for a client process on the other core that keeps 16 connections in flight."""
    from bench_net import Watchdog, finish, read_line, spawn

    env = workdir.env()
    dog = Watchdog(300.0, f"the {kind} accept loop")
    server = spawn("bench_handshake.py", ["worker", "server", kind, str(warm), str(count)], env)
    client = None
    try:
        dog.watch(server)
        port = read_line(server, "PORT ")
        client = spawn("bench_handshake.py", ["worker", "client", kind, port, str(warm + count + 32)], env)
        dog.watch(client)
        done = json.loads(read_line(server, "DONE "))
        client_side = json.loads(read_line(client, "CLIENT "))
        finish(server, 60)
        finish(client, 60)
    except Exception as exc:
        dog.check(exc)
        raise
    finally:
        dog.cancel()
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    cpu_us = done["cpu"] / count * 1e6
    return {
        "handshakes": count,
        "server_cpu_us_per_handshake": cpu_us,
        "per_server_core_per_s": 1e6 / cpu_us if cpu_us else None,
        "wall_per_s": count / done["wall"],
        "server_cpu_share": done["cpu"] / done["wall"],
        "nodelay": {"server": done["nodelay"], "client": client_side["nodelay"]},
    }


def accept_rows(workdir: Workdir, quick: bool) -> list[dict[str, Any]]:
    warm, count = (5, 30) if quick else (50, 1000)
    rows: list[dict[str, Any]] = []
    for name, kind in ACCEPT_VARIANTS.items():
        if kind == "tls" and not workdir.tls:
            rows.append({"name": f"accept loop: {name}", "error": "trustme not installed"})
            continue
        rows.append({"name": f"accept loop: {name}", **accept_rate(workdir, kind, warm, count)})
    return rows


def main(quick: bool = False) -> None:
    count = 20 if quick else 300
    rows: list[dict[str, Any]] = []
    for name, exchange in EXCHANGES.items():
        sent = dict(zip(("initiator_bytes", "responder_bytes"), handshake_sizes(exchange), strict=True))
        rows.append({"name": f"gcmstream {name}", **sent, **handshake_cpu(exchange, count)})
    for row in rows:
        print(
            f"   {row['name']:<40} CPU initiator {row['initiator_cpu_us']:7.0f} us, responder "
            f"{row['responder_cpu_us']:7.0f} us; bytes {row['initiator_bytes']} / {row['responder_bytes']}"
        )
    workdir = Workdir()
    try:
        setup = asyncio.run(latencies(10 if quick else 200, workdir))
        accept = accept_rows(workdir, quick)
    finally:
        workdir.close()
    for row in accept:
        if "error" in row:
            print(f"   {row['name']:<40} skipped: {row['error']}")
        else:
            print(
                f"   {row['name']:<50} server CPU {row['server_cpu_us_per_handshake']:6.0f} us a handshake: "
                f"{row['per_server_core_per_s']:6.0f} per server core per s "
                f"(wall {row['wall_per_s']:.0f}/s, TCP_NODELAY {row['nodelay']})"
            )
    for row in setup:
        if "error" in row:
            print(f"   {row['name']:<40} skipped: {row['error']}")
        else:
            print(
                f"   {row['name']:<40} set-up to first echoed byte {row['setup_ms_median']:6.2f} ms "
                f"(CPU {row['setup_cpu_ms_median']:.2f} ms, both ends)"
            )
    hybrid = rows[0]
    tls = next((r for r in setup if r["name"] == "asyncio TLS 1.3" and "error" not in r), None)
    gcm = setup[0]
    x25519 = rows[1]
    per_core = {r["name"]: r.get("per_server_core_per_s") for r in accept}
    tls_rate = per_core.get("accept loop: asyncio TLS 1.3")
    gcm_rate = per_core.get("accept loop: gcmstream hybrid ML-KEM-768 + X25519")
    targets = {
        "hybrid handshake <= 0.6 ms CPU per side (issue 24)": {
            "target": 600,
            "value": max(hybrid["initiator_cpu_us"], hybrid["responder_cpu_us"]),
            "met": max(hybrid["initiator_cpu_us"], hybrid["responder_cpu_us"]) <= 600,
        },
        "X25519 handshake <= 0.3 ms CPU per side (issue 24)": {
            "target": 300,
            "value": max(x25519["initiator_cpu_us"], x25519["responder_cpu_us"]),
            "met": max(x25519["initiator_cpu_us"], x25519["responder_cpu_us"]) <= 300,
        },
        "accept loop: hybrid handshakes per server core over asyncio TLS 1.3's": {
            "target": ">= 1 (reported)",
            "value": gcm_rate / tls_rate if gcm_rate and tls_rate else None,
            "met": bool(gcm_rate and tls_rate and gcm_rate >= tls_rate),
        },
        "set-up latency <= asyncio TLS 1.3": {
            "target": tls["setup_ms_median"] if tls else None,
            "value": gcm["setup_ms_median"],
            "met": bool(tls) and gcm["setup_ms_median"] <= tls["setup_ms_median"],  # type: ignore[index]
        },
    }
    write_result(
        "handshake",
        {
            "params": {"handshakes": count},
            "rows": rows + setup + accept,
            "targets": targets,
            "ssl": ssl.OPENSSL_VERSION,
        },
        quick,
    )


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    worker(sys.argv[2:])
