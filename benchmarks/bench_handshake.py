"""Part 7: the channel handshake. CPU per side (sans-IO, each side's calls timed on their own,
process time beside wall time), bytes each side sends before its first record, and connection
set-up on loopback to the first echoed byte (client and server in this one process, one event
loop, so the latency includes both sides' CPU): gcmstream hybrid, gcmstream X25519-only, plain
TCP, asyncio TLS 1.3 (trustme certificates; skipped if trustme is not installed).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench_common import write_result
from bench_net import Workdir

import gcmstream
from gcmstream import Channel, KeyExchange, Role
from gcmstream.channel import self_connections_allowed
from gcmstream.handshake import handshake_sizes

KEY = bytes(range(16))
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


def handshake_cpu(exchange: KeyExchange, count: int) -> dict[str, float]:
    """Microseconds per handshake spent by each side's own calls (construction included)."""
    initiator_clock, responder_clock = Clock(), Clock()
    with self_connections_allowed():
        for _ in range(count):
            with initiator_clock:
                initiator = Channel(KEY, role=Role.INITIATOR, key_exchange=exchange)
                hello = initiator.initial_data()
            with responder_clock:
                responder = Channel(KEY, role=Role.RESPONDER, key_exchange=exchange)
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
    finally:
        workdir.close()
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
    targets = {
        "hybrid handshake <= 1 ms CPU per side": {
            "target": 1000,
            "value": max(hybrid["initiator_cpu_us"], hybrid["responder_cpu_us"]),
            "met": max(hybrid["initiator_cpu_us"], hybrid["responder_cpu_us"]) <= 1000,
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
            "rows": rows + setup,
            "targets": targets,
            "ssl": ssl.OPENSSL_VERSION,
        },
        quick,
    )
