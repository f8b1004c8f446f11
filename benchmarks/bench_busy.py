"""Part 10: server CPU per MiB, one busy connection against 100 (issue 24 item 4).

A server process (pinned to one core, the one measured) receives bulk data from a client
process (the other core): the same total of fresh random bytes, written 64 KiB at a time,
over one connection and then over 100 connections at once (each its share). The server's
handlers only read and count; from the first byte read to the last its CPU (``getrusage``,
user + sys) and wall clock are taken. Each server and client process lives for the whole run;
the connections are opened before each measurement (handshakes are not measured) and closed
after it. Rounds interleave the servers and alternate which count goes first, so the ratio
that counts, CPU per MiB at 100 over CPU per MiB at 1, comes from neighbouring measurements.
Rows: gcmstream asyncio (``start_server``), gcmstream anyio (its listener on the asyncio
backend; the client is gcmstream asyncio, the same wire) and plain asyncio streams, whose own
ratio is what the loop costs. ``python benchmarks/bench_busy.py [ROUNDS]`` runs it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

from bench_conns import cpu_seconds
from bench_net import (
    CONTEXT,
    KEY,
    Watchdog,
    Workdir,
    emit,
    finish,
    pin,
    raise_fd_limit,
    read_line,
    send_line,
    spawn,
    stdin_lines,
)

VARIANTS = {
    "gcmstream asyncio": "gcm",
    "gcmstream anyio (asyncio backend)": "anyio",
    "plain asyncio streams": "plain",
}
WRITE = 64 * 1024
READ = 64 * 1024
TARGET_RATIO = 1.15


class Meter:
    """The server's bytes received since ``arm``, and the CPU and wall clock from the first to
    the last of them; ``DONE`` is emitted once the armed total has arrived."""

    def __init__(self) -> None:
        self.total = self.count = self.reads = self.faults0 = 0
        self.cpu0 = self.wall0 = self.sys0 = 0.0
        # GCMSTREAM_BENCH_PROFILE=FILE: cProfile the measured spans, stats to FILE at exit
        self.profile_path = os.environ.get("GCMSTREAM_BENCH_PROFILE")
        self.profiler = cProfile.Profile() if self.profile_path else None

    def arm(self, total: int) -> None:
        self.total, self.count, self.reads = total, 0, 0

    def received(self, nbytes: int) -> None:
        if not self.total:
            return
        if not self.count:
            self.cpu0, self.wall0 = cpu_seconds(), time.perf_counter()
            usage = resource.getrusage(resource.RUSAGE_SELF)
            self.faults0, self.sys0 = usage.ru_minflt, usage.ru_stime
            if self.profiler:
                self.profiler.enable()
        self.count += nbytes
        self.reads += 1
        if self.count >= self.total:
            if self.profiler:
                self.profiler.disable()
            cpu, wall = cpu_seconds() - self.cpu0, time.perf_counter() - self.wall0
            usage = resource.getrusage(resource.RUSAGE_SELF)
            faults, sys_cpu = usage.ru_minflt - self.faults0, usage.ru_stime - self.sys0
            done = {"bytes": self.count, "cpu": cpu, "sys": sys_cpu, "wall": wall, "reads": self.reads}
            emit("DONE ", {**done, "faults": faults})
            self.total = 0

    def save(self) -> None:
        if self.profiler and self.profile_path:
            self.profiler.dump_stats(self.profile_path)


async def _server(kind: str) -> None:
    meter = Meter()

    async def sink(reader: Any, writer: Any) -> None:
        try:
            while data := await reader.read(READ):
                meter.received(len(data))
        except Exception:
            pass
        writer.close()

    if kind == "anyio":
        await _anyio_server(meter)
        return
    if kind == "gcm":
        import gcmstream.aio

        server = await gcmstream.aio.start_server(sink, "127.0.0.1", 0, key=KEY, context=CONTEXT)
    else:
        server = await asyncio.start_server(sink, "127.0.0.1", 0)
    queue = await stdin_lines()
    emit("PORT ", str(server.sockets[0].getsockname()[1]))
    while (command := await queue.get()) != "exit":
        await _command(command, meter)
    meter.save()
    server.close()


async def _command(command: str, meter: Meter) -> None:
    verb, _, arg = command.partition(" ")
    if verb == "arm":
        await asyncio.sleep(0.3)  # let the last handshakes finish: they are not measured
        meter.arm(int(arg))
        emit("ARMED ", "")


async def _anyio_server(meter: Meter) -> None:
    import anyio

    import gcmstream.anyio_stream

    async def sink(stream: Any) -> None:
        try:
            async with stream:
                while True:
                    meter.received(len(await stream.receive(READ)))
        except Exception:  # the end of the stream (anyio.EndOfStream) included
            pass

    listener = await gcmstream.anyio_stream.create_tcp_listener(
        key=KEY, context=CONTEXT, local_host="127.0.0.1"
    )
    queue = await stdin_lines()
    emit("PORT ", str(listener.extra(anyio.abc.SocketAttribute.local_port)))
    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, sink)
        while (command := await queue.get()) != "exit":
            await _command(command, meter)
        meter.save()
        group.cancel_scope.cancel()


async def _client(kind: str, port: int) -> None:
    """Commands: ``open N TOTAL`` (N connections, and TOTAL fresh bytes for them), ``send``
    (each connection writes its share, 64 KiB at a time, all at once), ``close``."""
    queue = await stdin_lines()
    conns: list[tuple[Any, Any]] = []
    data = memoryview(b"")

    async def connect() -> tuple[Any, Any]:
        if kind in ("gcm", "anyio"):
            import gcmstream.aio

            return await gcmstream.aio.open_connection("127.0.0.1", port, key=KEY, context=CONTEXT)
        return await asyncio.open_connection("127.0.0.1", port)

    async def push(writer: Any, share: memoryview) -> None:
        for start in range(0, len(share), WRITE):
            writer.write(share[start : start + WRITE])
            await writer.drain()

    while (command := await queue.get()) != "exit":
        verb, _, arg = command.partition(" ")
        if verb == "open":
            count, total = (int(a) for a in arg.split())
            conns = list(await asyncio.gather(*(connect() for _ in range(count))))
            data = memoryview(os.urandom(total))  # fresh for every measurement
            emit("READY ", "")
        elif verb == "send":
            share = len(data) // len(conns)
            start = time.perf_counter()
            await asyncio.gather(
                *(push(w, data[i * share : (i + 1) * share]) for i, (_, w) in enumerate(conns))
            )
            emit("SENT ", {"wall": time.perf_counter() - start})
        elif verb == "close":
            for _, writer in conns:
                writer.close()
            await asyncio.gather(*(w.wait_closed() for _, w in conns), return_exceptions=True)
            conns = []
            emit("CLOSED ", "")


def worker(argv: list[str]) -> None:
    role, variant, port = argv[:3]
    kind = VARIANTS[variant]
    raise_fd_limit(1024)
    if role == "server":
        pin(0)
        asyncio.run(_server(kind))
    else:
        pin(1)
        asyncio.run(_client(kind, int(port)))


class Pair:
    """One server process and its client process, kept for the whole run."""

    def __init__(self, work: Workdir, variant: str, dog: Watchdog) -> None:
        env = work.env()
        self.server = spawn("bench_busy.py", ["worker", "server", variant, "0"], env)
        self.client: Any = None
        dog.watch(self.server)
        try:
            port = read_line(self.server, "PORT ")
        except Exception:
            self.server.kill()
            self.server.wait()
            raise
        self.client = spawn("bench_busy.py", ["worker", "client", variant, port], env)
        dog.watch(self.client)

    def measure(self, conns: int, total: int) -> dict[str, Any]:
        """Server CPU and wall per MiB while ``conns`` connections send ``total`` bytes."""
        send_line(self.client, f"open {conns} {total}")
        read_line(self.client, "READY ")
        send_line(self.server, f"arm {total - total % conns}")
        read_line(self.server, "ARMED ")
        send_line(self.client, "send")
        sent = json.loads(read_line(self.client, "SENT "))
        done = json.loads(read_line(self.server, "DONE "))
        send_line(self.client, "close")
        read_line(self.client, "CLOSED ")
        mib = done["bytes"] / (1 << 20)
        return {
            "conns": conns,
            "mib": mib,
            "server_cpu_ms_per_mib": done["cpu"] / mib * 1e3,
            "server_sys_ms_per_mib": done["sys"] / mib * 1e3,  # the kernel's share (recv's copy)
            "server_wall_ms_per_mib": done["wall"] / mib * 1e3,
            "server_reads_per_mib": done["reads"] / mib,  # what the handlers' reads returned
            "server_page_faults_per_mib": done["faults"] / mib,  # minor: fresh memory touched
            "client_wall_s": sent["wall"],
        }

    def close(self) -> None:
        for proc in (self.client, self.server):
            if proc is not None and proc.poll() is None:
                send_line(proc, "exit")
        for proc in (self.client, self.server):
            if proc is not None:
                with contextlib.suppress(Exception):  # a worker that hangs is killed
                    finish(proc, 30)


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(name: str, samples: list[dict[str, Any]], busy: int) -> dict[str, Any]:
    """Per-round ratios (each round's busy measurement over its one-connection neighbour)."""
    rounds = sorted({s["round"] for s in samples})
    by = {(s["round"], s["conns"]): s for s in samples}
    cpu_ratios = [by[r, busy]["server_cpu_ms_per_mib"] / by[r, 1]["server_cpu_ms_per_mib"] for r in rounds]
    wall_ratios = [by[r, busy]["server_wall_ms_per_mib"] / by[r, 1]["server_wall_ms_per_mib"] for r in rounds]

    def user(sample: dict[str, Any]) -> float:  # CPU outside the kernel: the loop, gcmstream, the handler
        return float(sample["server_cpu_ms_per_mib"] - sample["server_sys_ms_per_mib"])

    user_ratios = [user(by[r, busy]) / user(by[r, 1]) for r in rounds]
    return {
        "name": name,
        "cpu_ms_per_mib_1": statistics.median(by[r, 1]["server_cpu_ms_per_mib"] for r in rounds),
        "cpu_ms_per_mib_busy": statistics.median(by[r, busy]["server_cpu_ms_per_mib"] for r in rounds),
        "wall_ms_per_mib_1": statistics.median(by[r, 1]["server_wall_ms_per_mib"] for r in rounds),
        "wall_ms_per_mib_busy": statistics.median(by[r, busy]["server_wall_ms_per_mib"] for r in rounds),
        "sys_ms_per_mib_1": statistics.median(by[r, 1]["server_sys_ms_per_mib"] for r in rounds),
        "sys_ms_per_mib_busy": statistics.median(by[r, busy]["server_sys_ms_per_mib"] for r in rounds),
        "reads_per_mib_1": statistics.median(by[r, 1]["server_reads_per_mib"] for r in rounds),
        "reads_per_mib_busy": statistics.median(by[r, busy]["server_reads_per_mib"] for r in rounds),
        "page_faults_per_mib_1": statistics.median(by[r, 1]["server_page_faults_per_mib"] for r in rounds),
        "page_faults_per_mib_busy": statistics.median(
            by[r, busy]["server_page_faults_per_mib"] for r in rounds
        ),
        "cpu_ratio": _spread(cpu_ratios),
        "wall_ratio": _spread(wall_ratios),
        "user_ratio": _spread(user_ratios),
        "cpu_ratios": cpu_ratios,
        "samples": samples,
    }


def run(quick: bool, rounds: int = 0) -> dict[str, Any]:
    rounds = rounds or (2 if quick else 7)
    busy = 20 if quick else 100
    # 64 MiB was 30-90 ms of server CPU a measurement: ratios of single rounds spread 0.4-1.9
    total = (4 if quick else 256) << 20
    work = Workdir()
    dog = Watchdog(120.0 if quick else 1200.0, "the busy-connections part")
    pairs: dict[str, Pair] = {}
    errors: dict[str, str] = {}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    try:
        for name in VARIANTS:
            try:
                pairs[name] = Pair(work, name, dog)
                for conns in (1, busy):  # warm-up, not recorded: the first measurement ran slow
                    pairs[name].measure(conns, total // 4)
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
        for r in range(rounds):
            names = list(pairs)
            names = names[r % len(names) :] + names[: r % len(names)] if names else names
            for name in names:
                if name in errors:
                    continue
                for conns in (1, busy) if r % 2 == 0 else (busy, 1):
                    try:
                        samples[name].append({"round": r, **pairs[name].measure(conns, total)})
                    except Exception as exc:
                        try:
                            dog.check(exc)
                        except TimeoutError as timeout:
                            exc = timeout
                        errors[name] = f"{type(exc).__name__}: {exc}"
                        print(f"   {name}: {errors[name]}", file=sys.stderr, flush=True)
                        break
    finally:
        dog.cancel()
        for pair in pairs.values():
            pair.close()
        work.close()
    rows: list[dict[str, Any]] = [
        {"name": name, "error": errors[name]} if name in errors else summarize(name, samples[name], busy)
        for name in VARIANTS
    ]
    gcm = [r["cpu_ratio"]["median"] for r in rows if r["name"].startswith("gcmstream") and "error" not in r]
    worst = max(gcm) if gcm else None
    plain = [r["cpu_ratio"]["median"] for r in rows if r["name"].startswith("plain") and "error" not in r]
    return {
        "params": {"total_bytes": total, "write": WRITE, "read": READ, "busy": busy, "rounds": rounds},
        "rows": rows,
        "targets": {
            "busy_server_cpu_per_mib_ratio": {
                "target": f"server CPU per MiB, {busy} busy connections / 1 connection <= {TARGET_RATIO} "
                "(median of per-round ratios; worst of gcmstream asyncio and anyio)",
                "value": worst,
                "met": worst is not None and worst <= TARGET_RATIO,
                "control_plain_asyncio": plain[0] if plain else None,
            }
        },
    }


def main(quick: bool) -> dict[str, Any]:
    from bench_common import write_result

    data = run(quick)
    write_result("busy", data, quick)
    return data


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        result = run(False, int(sys.argv[1]) if len(sys.argv) > 1 else 0)
        for row in result["rows"]:
            if "error" in row:
                print(f"{row['name']}: {row['error']}")
                continue
            ratio, wall = row["cpu_ratio"], row["wall_ratio"]
            print(
                f"{row['name']}: CPU/MiB {row['cpu_ms_per_mib_1']:.3f} -> "
                f"{row['cpu_ms_per_mib_busy']:.3f} ms,"
                f" ratio {ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f});"
                f" wall ratio {wall['median']:.3f} ({wall['min']:.3f}-{wall['max']:.3f});"
                f" per round {', '.join(f'{x:.3f}' for x in row['cpu_ratios'])}"
            )
