"""Part 7: an echo client's round trips while a peer with the key floods the same server with
one-byte records (issue 12's fairness case), on asyncio, uvloop and anyio (asyncio and trio).

Three processes: the gcmstream server (pinned to one core), an echo client and a flooder
(both on the other core). The flooder holds the key, announces 1 MiB records, seals
``RECORDS`` one-byte records and FINAL before it is told to go, then writes them all at once;
the server reads that connection with ``read(65536)`` / ``receive(65536)`` and drops the
data, and echoes every other connection. The echo client (a gcmstream asyncio client, 64-byte
messages, ``write`` + ``drain`` + ``readexactly``) runs from before the flood to after it and
stamps each round trip with the system's monotonic clock, which the server's flood window
(first flood byte read .. FINAL read) uses too. Reported per loop: worst, median and p99 of the
round trips that overlap the flood window, beside the same figures for the round trips before
the flooder was told to go (the no-flood baseline, same run, same processes).

Only the server runs on the loop under test; both clients use asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import statistics
import sys
import threading
import time
from typing import Any

from bench_net import CONTEXT, KEY, Watchdog, Workdir, emit, finish, pin, read_line, run_loop, spawn

MESSAGE = b"E" * 64
FLOOD_RECORD_SIZE = 1 << 20  # what the flooder announces: the ring takes many tiny records

# name: the server's loop
VARIANTS: dict[str, str] = {
    "gcmstream asyncio": "asyncio",
    "gcmstream uvloop": "uvloop",
    "gcmstream anyio (asyncio backend)": "anyio-asyncio",
    "gcmstream anyio (trio backend)": "anyio-trio",
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _FloodClock:
    """The server's view of the flood: when its first byte and its end were read."""

    def __init__(self) -> None:
        self.first = self.cpu0 = 0.0
        self.total = 0

    def start(self, nbytes: int) -> None:
        self.first, self.cpu0, self.total = time.monotonic(), _cpu(), nbytes

    def end(self) -> None:
        emit(
            "FLOOD ",
            {"first": self.first, "end": time.monotonic(), "cpu": _cpu() - self.cpu0, "bytes": self.total},
        )


async def _asyncio_server() -> None:
    import gcmstream.aio

    async def handle(reader: Any, writer: Any) -> None:
        first = await reader.read(65536)
        if first.startswith(b"x"):  # the flood: read it all, the way the reader did
            clock = _FloodClock()
            clock.start(len(first))
            while data := await reader.read(65536):
                clock.total += len(data)
            clock.end()
        else:
            data = first
            while data:
                writer.write(data)
                await writer.drain()
                data = await reader.read(65536)
        writer.close()

    server = await gcmstream.aio.start_server(handle, "127.0.0.1", 0, key=KEY, context=CONTEXT)
    emit("PORT ", str(server.sockets[0].getsockname()[1]))
    async with server:
        await server.serve_forever()


async def _anyio_server() -> None:
    import anyio
    from anyio.abc import SocketAttribute

    from gcmstream.anyio_stream import SecureStream, create_tcp_listener

    listener = await create_tcp_listener(key=KEY, context=CONTEXT, local_host="127.0.0.1")
    emit("PORT ", str(listener.extra(SocketAttribute.local_port)))

    async def handle(stream: SecureStream) -> None:
        try:
            first = await stream.receive(65536)
            if first.startswith(b"x"):
                clock = _FloodClock()
                clock.start(len(first))
                try:
                    while True:
                        clock.total += len(await stream.receive(65536))
                except anyio.EndOfStream:
                    clock.end()
            else:
                data = first
                while True:
                    await stream.send(data)
                    data = await stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
        finally:
            await anyio.aclose_forcefully(stream)

    async with listener:
        await listener.serve(handle)


def _stdin_event(loop: asyncio.AbstractEventLoop) -> asyncio.Event:
    """Set when a line (or the end) arrives on stdin: how the orchestrator says go or stop."""
    event = asyncio.Event()

    def wait() -> None:
        sys.stdin.readline()
        loop.call_soon_threadsafe(event.set)

    threading.Thread(target=wait, daemon=True).start()
    return event


async def _echo_client(port: int) -> None:
    import gcmstream.aio

    reader, writer = await gcmstream.aio.open_connection("127.0.0.1", port, key=KEY, context=CONTEXT)
    stop = _stdin_event(asyncio.get_running_loop())
    samples: list[tuple[float, float]] = []
    emit("READY ", "")
    while not stop.is_set():
        start = time.monotonic()
        writer.write(MESSAGE)
        await writer.drain()
        await reader.readexactly(len(MESSAGE))
        samples.append((start, time.monotonic() - start))
    emit("SAMPLES ", samples)
    writer.write_eof()
    writer.close()


async def _flooder(port: int, records: int) -> None:
    import gcmstream.aio

    reader, writer = await gcmstream.aio.open_connection(
        "127.0.0.1", port, key=KEY, context=CONTEXT, record_size=FLOOD_RECORD_SIZE
    )
    sealer = writer.sealer
    wire = bytearray()
    for _ in range(records):
        wire += sealer.seal(b"x", flush=True)
    wire += sealer.close()
    go = _stdin_event(asyncio.get_running_loop())
    emit("ARMED ", str(len(wire)))
    await go.wait()
    writer.transport.write(bytes(wire))
    await writer.drain()
    with contextlib.suppress(Exception):  # until the server hangs up (it sends no FINAL)
        await reader.read()
    writer.transport.close()


def worker(argv: list[str]) -> None:
    role = argv[0]
    if role == "server":
        pin(0)
        loop = argv[1]
        run_loop(loop, _anyio_server if loop.startswith("anyio") else _asyncio_server)
    elif role == "echo":
        pin(1)
        asyncio.run(_echo_client(int(argv[1])))
    else:
        pin(1)
        asyncio.run(_flooder(int(argv[1]), int(argv[2])))


# -- orchestration --------------------------------------------------------------------------


def _tell(proc: Any) -> None:
    proc.stdin.write("\n")
    proc.stdin.flush()


def one_run(work: Workdir, loop: str, records: int, baseline_s: float, timeout: float) -> dict[str, Any]:
    env = work.env()
    procs = []
    dog = Watchdog(timeout, f"the {loop} flood run")  # a stuck run must not stall the rest
    try:
        server = spawn("bench_flood.py", ["worker", "server", loop], env)
        procs.append(server)
        dog.watch(server)
        port = read_line(server, "PORT ")
        flooder = spawn("bench_flood.py", ["worker", "flood", port, str(records)], env)
        procs.append(flooder)
        dog.watch(flooder)
        wire = int(read_line(flooder, "ARMED "))
        echo = spawn("bench_flood.py", ["worker", "echo", port], env)
        procs.append(echo)
        dog.watch(echo)
        read_line(echo, "READY ")
        time.sleep(baseline_s)
        go = time.monotonic()
        _tell(flooder)
        flood = json.loads(read_line(server, "FLOOD "))
        time.sleep(0.2)  # a few round trips after the flood
        _tell(echo)
        samples = json.loads(read_line(echo, "SAMPLES "))
        finish(echo, timeout)
        finish(flooder, timeout)
    except Exception as exc:
        dog.check(exc)
        raise
    finally:
        dog.cancel()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if flood["bytes"] != records:
        raise RuntimeError(f"the server read {flood['bytes']} of {records} flood bytes")
    before = [rtt for start, rtt in samples if start + rtt < go]
    during = [rtt for start, rtt in samples if start < flood["end"] and start + rtt > flood["first"]]
    return {
        "baseline": before,
        "flood": during,
        "flood_seconds": flood["end"] - flood["first"],
        "server_cpu_s": flood["cpu"],
        "wire_bytes": wire,
    }


def codec_cpu_us_per_record(records: int) -> float:
    """The codec's own CPU per flood record, no sockets: the flood's wire (one-byte records
    under a 1 MiB announced size) fed to an Opener through ``get_buffer``/``buffer_updated`` in
    the pieces the ring offers and read with ``read(65536)``, as the server does, in this
    process; the best of three."""
    import gcmstream

    sealer = gcmstream.Sealer(KEY, context=CONTEXT, record_size=FLOOD_RECORD_SIZE)
    wire = bytearray()  # (the first seal carries the stream header)
    for _ in range(records):
        wire += sealer.seal(b"x", flush=True)
    wire += sealer.close()
    best = float("inf")
    for _ in range(3):
        opener = gcmstream.Opener(KEY, context=CONTEXT, max_record_size=FLOOD_RECORD_SIZE)
        data, fed, got = memoryview(wire), 0, 0
        start = time.process_time()
        while not opener.at_eof:
            if fed < len(data) and opener.wants_data:
                view = opener.get_buffer()
                count = min(len(view), len(data) - fed)
                view[:count] = data[fed : fed + count]
                opener.buffer_updated(count)
                fed += count
            elif fed == len(data):
                opener.receive_eof()
            got += len(opener.read(65536) or b"")  # (None: more input needed)
        best = min(best, time.process_time() - start)
        if got != records:
            raise RuntimeError(f"the codec opened {got} of {records} flood bytes")
    return best / records * 1e6


def _summary(rtts: list[float]) -> dict[str, float | int | None]:
    if not rtts:
        return {"count": 0, "worst_ms": None, "median_ms": None, "p99_ms": None}
    ordered = sorted(rtts)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        "count": len(ordered),
        "worst_ms": ordered[-1] * 1e3,
        "median_ms": statistics.median(ordered) * 1e3,
        "p99_ms": p99 * 1e3,
    }


def _available(loop: str) -> str | None:
    module = {"uvloop": "uvloop", "anyio-trio": "trio"}.get(loop)
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} not installed"
    return None


def run(quick: bool) -> dict[str, Any]:
    records = 5_000 if quick else 300_000
    baseline_s = 0.3 if quick else 2.0
    reps = 1 if quick else 2
    timeout = 60.0 if quick else 180.0
    work = Workdir()
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    errors: dict[str, str] = {v: r for v in VARIANTS if (r := _available(VARIANTS[v]))}
    try:
        for _ in range(reps):  # interleaved: drift and others' load hit every loop alike
            for name, loop in VARIANTS.items():
                if name in errors:
                    continue
                try:
                    runs[name].append(one_run(work, loop, records, baseline_s, timeout))
                except Exception as exc:
                    errors[name] = f"{type(exc).__name__}: {exc}"
                    print(f"   {name}: {errors[name]}", file=sys.stderr, flush=True)
    finally:
        work.close()
    rows = []
    for name in VARIANTS:
        done = runs[name]
        row: dict[str, Any] = {"name": name, "error": errors.get(name)}
        row["baseline"] = _summary([rtt for r in done for rtt in r["baseline"]])
        row["flood"] = _summary([rtt for r in done for rtt in r["flood"]])
        row["worst_ms_per_run"] = [_summary(r["flood"])["worst_ms"] for r in done]
        row["flood_seconds"] = [r["flood_seconds"] for r in done]
        # the server's CPU per flood record (one byte each), record opening and loop turns
        row["server_cpu_us_per_record"] = [r["server_cpu_s"] / records * 1e6 for r in done]
        rows.append(row)
    worsts = {r["name"]: r["flood"]["worst_ms"] for r in rows if r["flood"]["worst_ms"] is not None}
    base_worsts = [r["baseline"]["worst_ms"] for r in rows if r["baseline"]["worst_ms"] is not None]
    cpus = {r["name"]: max(r["server_cpu_us_per_record"]) for r in rows if r["server_cpu_us_per_record"]}
    codec_us = codec_cpu_us_per_record(records)
    return {
        "params": {
            "records": records,
            "record_size_announced": FLOOD_RECORD_SIZE,
            "message": len(MESSAGE),
            "baseline_s": baseline_s,
            "reps": reps,
        },
        "codec_cpu_us_per_record": codec_us,
        "rows": rows,
        "targets": {
            "flood_echo_worst": {
                "target": "echo worst round trip < 100 ms under the one-byte-record flood, every loop",
                "value": max(worsts.values()) if worsts else None,
                "met": bool(worsts) and len(worsts) == len(VARIANTS) and max(worsts.values()) < 100,
                "no_flood_worst_ms": max(base_worsts) if base_worsts else None,
            },
            "flood_server_cpu_per_record": {
                "target": "server CPU per one-byte flood record <= 15 us, every loop (the codec's own: "
                f"{codec_us:.1f} us)",
                "value": max(cpus.values()) if cpus else None,
                "met": len(cpus) == len(VARIANTS) and max(cpus.values()) <= 15,
            },
        },
    }


def main(quick: bool) -> dict[str, Any]:
    from bench_common import write_result

    data = run(quick)
    write_result("flood", data, quick)
    return data


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
