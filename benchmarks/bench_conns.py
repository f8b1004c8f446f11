"""Part 6: memory per connection. A server process (the one measured) accepts N connections
from a client process; RSS is read from /proc after the handshakes (idle) and again after each
connection echoed one 1 KiB message (lightly used). The server also counts the gcmstream
receive rings and sealer output buffers that exist, to check that an idle connection holds
none. Rows: gcmstream asyncio, gcmstream anyio (its listener on
the asyncio backend; the client is gcmstream asyncio, the same wire), plain asyncio streams,
asyncio TLS 1.3. ``python benchmarks/bench_conns.py [N]`` runs it alone (N connections, 1000).
"""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import statistics
import sys
import time
from typing import Any

from bench_net import (
    CONTEXT,
    KEY,
    Watchdog,
    Workdir,
    client_ssl_context,
    emit,
    finish,
    pin,
    raise_fd_limit,
    read_line,
    send_line,
    server_ssl_context,
    spawn,
    stdin_lines,
)

VARIANTS = {
    "gcmstream asyncio": "gcm",
    "gcmstream anyio (asyncio backend)": "anyio",
    "plain asyncio streams": "plain",
    "asyncio TLS 1.3": "tls",
}
MESSAGE = bytes(range(256)) * 4


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def gcm_buffers() -> dict[str, int]:
    """How many receive rings holding memory (and its bytes) / sealer output buffers this
    process holds right now."""
    gc.collect()
    try:
        from gcmstream.codec import Sealer
        from gcmstream.ring import RecordRing
    except ImportError:
        return {}
    rings = ring_bytes = sealers = outputs = 0
    for obj in gc.get_objects():
        if isinstance(obj, RecordRing):
            rings += len(obj.buf) > 0  # a ring that released its memory holds none
            ring_bytes += len(obj.buf)
        elif isinstance(obj, Sealer):
            sealers += 1
            outputs += getattr(obj, "_out", None) is not None
    return {"rings": rings, "ring_bytes": ring_bytes, "sealers": sealers, "sealer_output_buffers": outputs}


async def _server(kind: str) -> None:
    async def echo(reader: Any, writer: Any) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except Exception:
            pass
        writer.close()

    if kind == "anyio":
        await _anyio_server()
        return
    server: asyncio.Server
    if kind == "gcm":
        import gcmstream.aio

        server = await gcmstream.aio.start_server(
            echo, "127.0.0.1", 0, key=KEY, context=CONTEXT, backlog=4096
        )
    elif kind == "tls":
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ssl_context(), backlog=4096)
    else:
        server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=4096)
    queue = await stdin_lines()
    emit("PORT ", str(server.sockets[0].getsockname()[1]))
    while (command := await queue.get()) != "exit":
        if command == "measure":
            await asyncio.sleep(0.3)  # let the last handshakes / echoes finish
            emit("MEASURE ", {"rss": rss_bytes(), "cpu": cpu_seconds(), **gcm_buffers()})
    server.close()


async def _anyio_server() -> None:
    import anyio

    import gcmstream.anyio_stream

    async def echo(stream: Any) -> None:
        try:
            async with stream:
                while True:
                    data = await stream.receive(65536)
                    await stream.send(data)
        except Exception:
            pass

    listener = await gcmstream.anyio_stream.create_tcp_listener(
        key=KEY, context=CONTEXT, local_host="127.0.0.1", max_pending_handshakes=4096
    )
    queue = await stdin_lines()
    emit("PORT ", str(listener.extra(anyio.abc.SocketAttribute.local_port)))
    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, echo)
        while (command := await queue.get()) != "exit":
            if command == "measure":
                await anyio.sleep(0.3)  # let the last handshakes / echoes finish
                emit("MEASURE ", {"rss": rss_bytes(), **gcm_buffers()})
        group.cancel_scope.cancel()


async def _client(kind: str, port: int, count: int) -> None:
    queue = await stdin_lines()
    sem = asyncio.Semaphore(64)

    async def connect() -> tuple[Any, Any]:
        async with sem:
            if kind in ("gcm", "anyio"):
                import gcmstream.aio

                return await gcmstream.aio.open_connection("127.0.0.1", port, key=KEY, context=CONTEXT)
            if kind == "tls":
                return await asyncio.open_connection(
                    "127.0.0.1", port, ssl=client_ssl_context(), server_hostname="localhost"
                )
            return await asyncio.open_connection("127.0.0.1", port)

    start = time.perf_counter()
    conns = await asyncio.gather(*(connect() for _ in range(count)))
    emit("READY ", {"phase": "idle", "rss": rss_bytes(), "seconds": time.perf_counter() - start})
    await queue.get()

    async def use(reader: Any, writer: Any) -> None:
        async with sem:
            writer.write(MESSAGE)
            await writer.drain()
            await reader.readexactly(len(MESSAGE))

    await asyncio.gather(*(use(r, w) for r, w in conns))
    emit("READY ", {"phase": "used", "rss": rss_bytes(), **gcm_buffers()})
    await queue.get()
    for _, writer in conns:
        writer.close()


LOAD_MESSAGE = b"L" * 64  # the busy connections' echo


async def _load_client(kind: str, port: int, count: int, busy: int, seconds: float) -> None:
    """``count`` connections; then ``busy`` of them echo ``LOAD_MESSAGE`` back to back for
    ``seconds`` while the rest stay idle; then every connection echoes once (a lost one fails)."""
    queue = await stdin_lines()
    sem = asyncio.Semaphore(32)

    async def connect() -> tuple[Any, Any]:
        async with sem:
            if kind == "gcm":
                import gcmstream.aio

                return await gcmstream.aio.open_connection("127.0.0.1", port, key=KEY, context=CONTEXT)
            return await asyncio.open_connection("127.0.0.1", port)

    start = time.perf_counter()
    conns = await asyncio.gather(*(connect() for _ in range(count)))
    emit("READY ", {"phase": "idle", "seconds": time.perf_counter() - start})
    await queue.get()
    rtts: list[float] = []
    stop = time.perf_counter() + seconds

    async def echo_loop(reader: Any, writer: Any) -> None:
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            writer.write(LOAD_MESSAGE)
            await writer.drain()
            await reader.readexactly(len(LOAD_MESSAGE))
            rtts.append(time.perf_counter() - sent)

    await asyncio.gather(*(echo_loop(r, w) for r, w in conns[:busy]))
    ordered = sorted(rtts)
    emit(
        "READY ",
        {
            "phase": "busy",
            "round_trips": len(ordered),
            "median_ms": statistics.median(ordered) * 1e3 if ordered else None,
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3 if ordered else None,
            "worst_ms": ordered[-1] * 1e3 if ordered else None,
        },
    )
    await queue.get()
    check = asyncio.Semaphore(256)

    async def alive(reader: Any, writer: Any) -> bool:
        async with check:
            try:
                writer.write(LOAD_MESSAGE)
                await writer.drain()
                got = await asyncio.wait_for(reader.readexactly(len(LOAD_MESSAGE)), 30)
            except Exception:  # any failure (reset, end, timeout, a gcmstream error): lost
                return False
            return bool(got == LOAD_MESSAGE)

    answered = await asyncio.gather(*(alive(r, w) for r, w in conns))
    emit("READY ", {"phase": "check", "lost": answered.count(False)})
    await queue.get()
    for _, writer in conns:
        writer.close()


def worker(argv: list[str]) -> None:
    role, variant, port_s, count_s = argv[:4]
    kind = VARIANTS[variant]
    raise_fd_limit(int(count_s) + 256)
    if role == "server":
        pin(0)
        asyncio.run(_server(kind))
    elif role == "load":
        pin(1)
        asyncio.run(_load_client(kind, int(port_s), int(count_s), int(argv[4]), float(argv[5])))
    else:
        pin(1)
        asyncio.run(_client(kind, int(port_s), int(count_s)))


def one_run(work: Workdir, variant: str, count: int) -> dict[str, Any]:
    env = work.env()
    server = spawn("bench_conns.py", ["worker", "server", variant, "0", str(count)], env)
    client = None
    try:
        port = read_line(server, "PORT ")
        send_line(server, "measure")
        base = json.loads(read_line(server, "MEASURE "))
        client = spawn("bench_conns.py", ["worker", "client", variant, port, str(count)], env)
        client_idle = json.loads(read_line(client, "READY "))
        send_line(server, "measure")
        idle = json.loads(read_line(server, "MEASURE "))
        send_line(client, "use")
        client_used = json.loads(read_line(client, "READY "))
        send_line(server, "measure")
        used = json.loads(read_line(server, "MEASURE "))
        send_line(client, "exit")
        finish(client, 60)
        send_line(server, "exit")
        finish(server, 60)
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return {
        "server_base": base,
        "server_idle": idle,
        "server_used": used,
        "client_idle": client_idle,
        "client_used": client_used,
        "server_rss_per_conn_idle": (idle["rss"] - base["rss"]) / count,
        "server_rss_per_conn_used": (used["rss"] - base["rss"]) / count,
    }


LOAD_VARIANTS = ("gcmstream asyncio", "plain asyncio streams")


def load_run(work: Workdir, variant: str, count: int, busy: int, seconds: float) -> dict[str, Any]:
    """One server process (one core) holding ``count`` connections, ``busy`` of them echoing."""
    env = work.env()
    server = spawn("bench_conns.py", ["worker", "server", variant, "0", str(count)], env)
    client = None
    dog = Watchdog(600.0, f"the {variant} load test")
    try:
        dog.watch(server)
        port = read_line(server, "PORT ")
        send_line(server, "measure")
        base = json.loads(read_line(server, "MEASURE "))
        client = spawn(
            "bench_conns.py", ["worker", "load", variant, port, str(count), str(busy), str(seconds)], env
        )
        dog.watch(client)
        connected = json.loads(read_line(client, "READY "))
        send_line(server, "measure")
        idle = json.loads(read_line(server, "MEASURE "))
        send_line(client, "go")
        latency = json.loads(read_line(client, "READY "))
        send_line(server, "measure")
        loaded = json.loads(read_line(server, "MEASURE "))
        send_line(client, "check")
        check = json.loads(read_line(client, "READY "))
        send_line(client, "exit")
        finish(client, 60)
        send_line(server, "exit")
        finish(server, 60)
    except Exception as exc:
        dog.check(exc)
        raise
    finally:
        dog.cancel()
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    return {
        "name": variant,
        "connections": count,
        "busy": busy,
        "seconds": seconds,
        "connect_seconds": connected["seconds"],
        "lost": check["lost"],
        "server_rss_per_conn_idle": (idle["rss"] - base["rss"]) / count,
        "server_rss_per_conn_loaded": (loaded["rss"] - base["rss"]) / count,
        # the server's CPU while the busy connections echoed, per round trip
        "server_cpu_us_per_round_trip": (loaded["cpu"] - idle["cpu"]) / max(1, latency["round_trips"]) * 1e6,
        **{k: latency[k] for k in ("round_trips", "median_ms", "p99_ms", "worst_ms")},
    }


def load_test(quick: bool, count: int = 0, busy: int = 0) -> dict[str, Any]:
    """The load test: ``count`` concurrent connections (10,000; 200 quick) on one server
    process, ``busy`` of them (100; 20 quick) echoing 64-byte messages for 10 s (1 s quick),
    gcmstream and plain asyncio in the same run."""
    count = count or (200 if quick else 10_000)
    busy = busy or (20 if quick else 100)
    seconds = 1.0 if quick else 10.0
    work = Workdir()
    rows: list[dict[str, Any]] = []
    try:
        for variant in LOAD_VARIANTS:
            try:
                rows.append(load_run(work, variant, count, busy, seconds))
            except Exception as exc:
                rows.append({"name": variant, "error": f"{type(exc).__name__}: {exc}"})
                print(f"   load {variant}: {rows[-1]['error']}", file=sys.stderr, flush=True)
    finally:
        work.close()
    return {"params": {"connections": count, "busy": busy, "seconds": seconds}, "rows": rows}


def run(quick: bool, count: int = 0) -> dict[str, Any]:
    count = count or (20 if quick else 1000)
    work = Workdir()
    rows = []
    try:
        for variant, kind in VARIANTS.items():
            row: dict[str, Any] = {"name": variant}
            if kind == "tls" and not work.tls:
                row["error"] = "trustme not installed"
            else:
                try:
                    row.update(one_run(work, variant, count))
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    print(f"   {variant}: {row['error']}", file=sys.stderr, flush=True)
            rows.append(row)
    finally:
        work.close()
    gcm = rows[0]
    idle_rings = gcm.get("server_idle", {}).get("rings")
    load = load_test(quick)
    lost = [r.get("lost") for r in load["rows"]]
    targets = {
        "idle_no_ring": {
            "target": "idle connection: no ring allocated until data flows",
            "value": idle_rings,
            "met": idle_rings == 0,
        },
        "load_no_connection_lost": {
            "target": f"{load['params']['connections']:,} concurrent connections on one server process, "
            f"{load['params']['busy']} busy: none lost",
            "value": lost,
            "met": all(n == 0 for n in lost),
        },
    }
    return {
        "params": {"connections": count, "message": len(MESSAGE)},
        "rows": rows,
        "targets": targets,
        "load": load,
    }


def main(quick: bool) -> dict[str, Any]:
    from bench_common import write_result

    data = run(quick)
    write_result("conns", data, quick)
    return data


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "load":  # the load test alone: load [N [BUSY]]
        figures = load_test(False, *(int(a) for a in sys.argv[2:4]))
        print(json.dumps(figures, indent=1))
    else:  # alone: print the per-connection figures (KiB) of one run
        result = run(False, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
        for row in result["rows"]:
            idle, used = row.get("server_rss_per_conn_idle"), row.get("server_rss_per_conn_used")
            if idle is None or used is None:
                print(f"{row['name']}: {row.get('error')}")
                continue
            buffers = {k: v for k, v in row["server_used"].items() if k != "rss"}
            print(
                f"{row['name']}: idle {idle / 1024:.1f} KiB, used {used / 1024:.1f} KiB",
                f"per connection {buffers}",
            )
