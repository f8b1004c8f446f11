"""Part 5: echo round trip for 64 B, 1 KiB and 16 KiB messages. The echo server and the client
run in two processes pinned to different cores; the client times each round trip
(``write`` + ``drain`` + ``readexactly``) and reports the median.

Rows: gcmstream over asyncio (``open_connection``/``start_server``), plain asyncio streams,
asyncio TLS 1.3 AES-128-GCM, and the same three on uvloop.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

from bench_net import (
    CONTEXT,
    KEY,
    Workdir,
    client_ssl_context,
    emit,
    finish,
    pin,
    read_line,
    run_loop,
    server_ssl_context,
    spawn,
)

SIZES = [64, 1024, 16384]

# name: (kind, loop)
VARIANTS: dict[str, tuple[str, str]] = {
    "gcmstream asyncio": ("gcm", "asyncio"),
    "plain asyncio streams": ("plain", "asyncio"),
    "asyncio TLS 1.3": ("tls", "asyncio"),
    "gcmstream uvloop": ("gcm", "uvloop"),
    "plain uvloop streams": ("plain", "uvloop"),
    "uvloop TLS 1.3": ("tls", "uvloop"),
}


async def _server(kind: str) -> None:
    done = asyncio.get_running_loop().create_future()

    async def echo(reader: Any, writer: Any) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
        if not done.done():
            done.set_result(None)

    server: asyncio.Server
    if kind == "gcm":
        import gcmstream.aio

        server = await gcmstream.aio.start_server(echo, "127.0.0.1", 0, key=KEY, context=CONTEXT)
    elif kind == "tls":
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ssl_context())
    else:
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
    emit("PORT ", str(server.sockets[0].getsockname()[1]))
    await done
    server.close()


async def _client(kind: str, port: int, count: int) -> None:
    reader: Any
    writer: Any
    if kind == "gcm":
        import gcmstream.aio

        reader, writer = await gcmstream.aio.open_connection("127.0.0.1", port, key=KEY, context=CONTEXT)
    elif kind == "tls":
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl_context(), server_hostname="localhost"
        )
    else:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    result: dict[str, Any] = {}
    clock = time.perf_counter
    for size in SIZES:
        message = bytes(range(256)) * (size // 256) if size >= 256 else bytes(size)
        times = []
        for i in range(count + count // 10):
            start = clock()
            writer.write(message)
            await writer.drain()
            echoed = await reader.readexactly(size)
            elapsed = clock() - start
            if i >= count // 10:  # the first tenth warms up
                times.append(elapsed)
        if echoed != message:
            raise RuntimeError("echo mismatch")
        times.sort()
        result[str(size)] = {
            "median_us": statistics.median(times) * 1e6,
            "p90_us": times[int(len(times) * 0.9)] * 1e6,
        }
    emit("RESULT ", result)
    if writer.can_write_eof():  # gcmstream: the FINAL record (close() alone reads as a cut)
        writer.write_eof()
    writer.close()
    await writer.wait_closed()


def worker(argv: list[str]) -> None:
    role, variant, port_s, count_s = argv
    kind, loop = VARIANTS[variant]
    if role == "server":
        pin(0)
        run_loop(loop, lambda: _server(kind))
    else:
        pin(1)
        run_loop(loop, lambda: _client(kind, int(port_s), int(count_s)))


def one_run(work: Workdir, variant: str, count: int) -> dict[str, Any]:
    env = work.env()
    server = spawn("bench_echo.py", ["worker", "server", variant, "0", "0"], env)
    client = None
    try:
        port = read_line(server, "PORT ")
        client = spawn("bench_echo.py", ["worker", "client", variant, port, str(count)], env)
        result: dict[str, Any] = json.loads(read_line(client, "RESULT "))
        finish(client, 60)
        finish(server, 60)
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return result


def codec_cost_us(size: int, count: int) -> float:
    """CPU time gcmstream's codec adds to one message on one side, no I/O: seal + flush the
    message into a record, then receive_data + read it back (a round trip does this twice)."""
    import gcmstream

    sealer = gcmstream.Sealer(KEY, context=CONTEXT)
    opener = gcmstream.Opener(KEY, context=CONTEXT)
    opener.receive_data(sealer.flush())  # the stream header
    message = bytes(size)
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(count):
            sealer.seal(message)
            opener.receive_data(sealer.flush())
            opener.read()
        samples.append((time.perf_counter() - start) / count * 1e6)
    return statistics.median(samples)


def run(quick: bool) -> dict[str, Any]:
    count = 50 if quick else 1000
    reps = 1 if quick else 3
    work = Workdir()
    samples: dict[str, dict[str, list[float]]] = {v: {str(s): [] for s in SIZES} for v in VARIANTS}
    errors: dict[str, str] = {}
    for v, (kind, loop) in VARIANTS.items():
        if kind == "tls" and not work.tls:
            errors[v] = "trustme not installed"
        if loop == "uvloop":
            try:
                import uvloop  # noqa: F401
            except ImportError:
                errors[v] = "uvloop not installed"
    try:
        for _ in range(reps):
            for v in VARIANTS:
                if v in errors:
                    continue
                try:
                    result = one_run(work, v, count)
                except Exception as exc:
                    errors[v] = f"{type(exc).__name__}: {exc}"
                    print(f"   {v}: {errors[v]}", file=sys.stderr, flush=True)
                    continue
                for size, figures in result.items():
                    samples[v][size].append(figures["median_us"])
    finally:
        work.close()
    rows = []
    for v in VARIANTS:
        row: dict[str, Any] = {"name": v, "loop": VARIANTS[v][1], "error": errors.get(v)}
        row["median_us"] = {s: statistics.median(x) if x else None for s, x in samples[v].items()}
        rows.append(row)
    by = {r["name"]: r["median_us"] for r in rows}
    gcm, plain, tls = by["gcmstream asyncio"], by["plain asyncio streams"], by["asyncio TLS 1.3"]
    ratios = {s: gcm[s] / plain[s] if gcm[s] and plain[s] else None for s in gcm}
    below_tls = {s: bool(gcm[s] and tls[s] and gcm[s] < tls[s]) for s in gcm}
    worst = max((r for r in ratios.values() if r is not None), default=None)
    targets = {
        "echo_vs_plain": {
            "target": "<= 1.15 x plain asyncio round trip",
            "value": worst,
            "per_size": ratios,
            "met": worst is not None and worst <= 1.15,
        },
        "echo_below_tls": {
            "target": "below asyncio TLS",
            "per_size": below_tls,
            "met": all(below_tls.values()),
        },
    }
    codec = {str(size): codec_cost_us(size, 200 if quick else 5000) for size in SIZES}
    return {
        "params": {"sizes": SIZES, "round_trips": count, "reps": reps},
        "rows": rows,
        "codec_us_per_message_per_side": codec,
        "targets": targets,
    }


def main(quick: bool) -> dict[str, Any]:
    from bench_common import write_result

    data = run(quick)
    write_result("echo", data, quick)
    return data


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
