"""Part 4: loopback sockets, 256 MiB one way, receiver and sender in two processes pinned to
different cores. The receiver times from its first received byte to the end of the stream
(handshakes excluded) and checks the byte count. Writes and reads are 256 KiB everywhere.

Rows (receiver side; the sender uses the matching client):

* gcmstream asyncio protocol path: ``gcmstream.start_server`` (a BufferedProtocol: the loop
  receives straight into the opener's ring) read with ``iter_chunks`` (views, no copy) or
  ``readinto`` (one copy out); sender ``gcmstream.open_connection``.
* gcmstream asyncio stream wrappers: ``wrap_streams`` over plain asyncio streams (one copy in).
* gcmstream anyio: ``SecureStream.wrap`` over anyio TCP, on the asyncio and trio backends.
* peers: plain asyncio streams (``reader.read``), a plain asyncio BufferedProtocol receiving into
  a preallocated buffer, asyncio TLS 1.3 AES-128-GCM, anyio plain TCP and anyio TLSStream;
  uvloop variants of the asyncio rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import threading
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

CHUNK = 256 * 1024

# name: (receiver kind, sender kind, loop)
VARIANTS: dict[str, tuple[str, str, str]] = {
    "gcmstream asyncio protocol (iter_chunks)": ("gcm_protocol_chunks", "gcm_protocol", "asyncio"),
    "gcmstream asyncio protocol (readinto)": ("gcm_protocol_readinto", "gcm_protocol", "asyncio"),
    "gcmstream asyncio protocol (iter_chunks, 16-record ring)": (
        "gcm_protocol_chunks16",
        "gcm_protocol",
        "asyncio",
    ),
    "gcmstream asyncio stream wrappers (readinto)": ("gcm_wrapped", "gcm_wrapped", "asyncio"),
    "gcmstream anyio (asyncio backend)": ("anyio_gcm", "anyio_gcm", "anyio-asyncio"),
    "gcmstream anyio (trio backend)": ("anyio_gcm", "anyio_gcm", "anyio-trio"),
    "plain asyncio streams": ("plain_streams", "plain", "asyncio"),
    "plain asyncio BufferedProtocol": ("plain_protocol", "plain", "asyncio"),
    "asyncio TLS 1.3": ("tls_streams", "tls", "asyncio"),
    "anyio plain TCP (asyncio backend)": ("anyio_plain", "anyio_plain", "anyio-asyncio"),
    "anyio plain TCP (trio backend)": ("anyio_plain", "anyio_plain", "anyio-trio"),
    "anyio TLSStream (asyncio backend)": ("anyio_tls", "anyio_tls", "anyio-asyncio"),
    "anyio TLSStream (trio backend)": ("anyio_tls", "anyio_tls", "anyio-trio"),
    "uvloop gcmstream protocol (iter_chunks)": ("gcm_protocol_chunks", "gcm_protocol", "uvloop"),
    "uvloop plain streams": ("plain_streams", "plain", "uvloop"),
    "uvloop plain BufferedProtocol": ("plain_protocol", "plain", "uvloop"),
    "uvloop TLS 1.3": ("tls_streams", "tls", "uvloop"),
}
TLS_KINDS = {"tls_streams", "anyio_tls"}
# GCMSTREAM_BENCH_BASE_SRC=<an older tree's src>: the gcmstream anyio rows again on that tree, in
# the same run (an A/B of the adapter against the commit before)
BASE = " [base tree]"
if os.environ.get("GCMSTREAM_BENCH_BASE_SRC"):
    for _name in ("gcmstream anyio (asyncio backend)", "gcmstream anyio (trio backend)"):
        VARIANTS[_name + BASE] = VARIANTS[_name]


def _selected(variant: str) -> bool:
    """GCMSTREAM_BENCH_ONLY=a,b: only the rows whose name contains one of these (a part of the
    table, e.g. ``anyio``); the others are reported as not run."""
    only = os.environ.get("GCMSTREAM_BENCH_ONLY")
    return not only or any(part.strip() in variant for part in only.split(","))


class _Meter:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.got = 0
        self.start = 0.0
        self.cipher: Any = None
        self.cpu0 = 0.0

    def add(self, n: int) -> None:
        if not self.got and n:
            self.start = time.perf_counter()
            self.cpu0 = _cpu()
        self.got += n

    def report(self) -> None:
        seconds = time.perf_counter() - self.start
        emit(
            "RESULT ",
            {"bytes": self.got, "seconds": seconds, "cipher": self.cipher, "cpu": _cpu() - self.cpu0},
        )


def _cpu() -> float:
    """CPU seconds (user + system) this process used so far."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- receivers ------------------------------------------------------------------------------


async def _asyncio_receiver(kind: str, nbytes: int) -> None:
    meter = _Meter(nbytes)
    done = asyncio.get_running_loop().create_future()

    async def plain_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            ssl_object = writer.get_extra_info("ssl_object")
            if ssl_object is not None:
                meter.cipher = ssl_object.cipher()
            while data := await reader.read(CHUNK):
                meter.add(len(data))
            writer.close()
            done.set_result(None)
        except Exception as exc:  # report it: the receiver must not wait forever
            done.set_exception(exc)

    async def gcm_handler(reader: Any, writer: Any) -> None:
        try:
            if kind.startswith("gcm_protocol_chunks"):
                async for view in reader.iter_chunks():
                    meter.add(len(view))
            else:
                buf = bytearray(CHUNK)
                while n := await reader.readinto(buf):
                    meter.add(n)
            writer.close()
            done.set_result(None)
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)

    async def wrapped_handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from gcmstream import Role
        from gcmstream.aio import wrap_streams

        try:
            sreader, swriter = await wrap_streams(
                reader, writer, key=KEY, role=Role.RESPONDER, context=CONTEXT
            )
        except Exception as exc:
            done.set_exception(exc)
            return
        await gcm_handler(sreader, swriter)

    loop = asyncio.get_running_loop()
    server: asyncio.Server
    if kind == "plain_streams":
        server = await asyncio.start_server(plain_handler, "127.0.0.1", 0)
    elif kind == "tls_streams":
        server = await asyncio.start_server(plain_handler, "127.0.0.1", 0, ssl=server_ssl_context())
    elif kind == "gcm_wrapped":
        server = await asyncio.start_server(wrapped_handler, "127.0.0.1", 0)
    elif kind.startswith("gcm_protocol"):
        import gcmstream.aio
        from gcmstream.ring import DEFAULT_RING_SIZE

        # the receive ring's byte budget: 16 records of 64 KiB, or the default (four)
        ring_size = 16 * (65536 + 21) if kind.endswith("16") else DEFAULT_RING_SIZE
        server = await gcmstream.aio.start_server(
            gcm_handler, "127.0.0.1", 0, key=KEY, context=CONTEXT, ring_size=ring_size
        )
    elif kind == "plain_protocol":
        buffer = memoryview(bytearray(CHUNK))

        class Receiver(asyncio.BufferedProtocol):
            def get_buffer(self, sizehint: int) -> memoryview:
                return buffer

            def buffer_updated(self, nbytes: int) -> None:
                meter.add(nbytes)

            def eof_received(self) -> bool:
                if not done.done():
                    done.set_result(None)
                return False

            def connection_lost(self, exc: Exception | None) -> None:
                if not done.done():
                    done.set_result(None)

        server = await loop.create_server(Receiver, "127.0.0.1", 0)
    else:
        raise ValueError(kind)
    emit("PORT ", str(server.sockets[0].getsockname()[1]))
    await done
    meter.report()
    server.close()


async def _anyio_receiver(kind: str, nbytes: int) -> None:
    import anyio
    from anyio.abc import SocketAttribute

    meter = _Meter(nbytes)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    inner: Any = listener.listeners[0]  # a SocketListener, which has accept()
    emit("PORT ", str(inner.extra(SocketAttribute.local_port)))
    stream: Any = await inner.accept()
    if kind == "anyio_gcm":
        from gcmstream import Role
        from gcmstream.anyio_stream import SecureStream

        stream = await SecureStream.wrap(stream, key=KEY, role=Role.RESPONDER, context=CONTEXT)
    elif kind == "anyio_tls":
        from anyio.streams.tls import TLSAttribute, TLSStream

        stream = await TLSStream.wrap(
            stream, server_side=True, ssl_context=server_ssl_context(), standard_compatible=False
        )
        meter.cipher = stream.extra(TLSAttribute.cipher)
    try:
        while meter.got < nbytes or kind == "anyio_gcm":  # gcmstream: read to the FINAL record
            data = await stream.receive(CHUNK)
            meter.add(len(data))
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        pass
    meter.report()
    await stream.aclose()
    await listener.aclose()


# -- senders --------------------------------------------------------------------------------


async def _asyncio_sender(kind: str, port: int, nbytes: int) -> None:
    data = memoryview(bytes(range(256)) * (CHUNK // 256))
    writer: Any
    if kind == "plain":
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    elif kind == "tls":
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl_context(), server_hostname="localhost"
        )
    elif kind == "gcm_protocol":
        import gcmstream.aio

        _, writer = await gcmstream.aio.open_connection("127.0.0.1", port, key=KEY, context=CONTEXT)
    elif kind == "gcm_wrapped":
        from gcmstream import Role
        from gcmstream.aio import wrap_streams

        reader, plain_writer = await asyncio.open_connection("127.0.0.1", port)
        _, writer = await wrap_streams(reader, plain_writer, key=KEY, role=Role.INITIATOR, context=CONTEXT)
    else:
        raise ValueError(kind)
    sent = 0
    cpu0 = _cpu()
    while sent < nbytes:
        n = min(CHUNK, nbytes - sent)
        writer.write(data[:n])
        await writer.drain()
        sent += n
    if writer.can_write_eof():  # gcmstream: the FINAL record (close() alone reads as a cut)
        writer.write_eof()
    writer.close()
    await writer.wait_closed()
    emit("CPU ", str(_cpu() - cpu0))


async def _anyio_sender(kind: str, port: int, nbytes: int) -> None:
    import anyio

    data = bytes(range(256)) * (CHUNK // 256)
    stream: Any
    if kind == "anyio_plain":
        stream = await anyio.connect_tcp("127.0.0.1", port)
    elif kind == "anyio_tls":
        stream = await anyio.connect_tcp(
            "127.0.0.1",
            port,
            ssl_context=client_ssl_context(),
            tls_hostname="localhost",
            tls_standard_compatible=False,
        )
    elif kind == "anyio_gcm":
        from gcmstream.anyio_stream import connect_tcp

        stream = await connect_tcp("127.0.0.1", port, key=KEY, context=CONTEXT)
    else:
        raise ValueError(kind)
    sent = 0
    cpu0 = _cpu()
    while sent < nbytes:
        n = min(CHUNK, nbytes - sent)
        await stream.send(data if n == CHUNK else data[:n])
        sent += n
    emit("CPU ", str(_cpu() - cpu0))
    if kind == "anyio_gcm":
        await stream.send_eof()
    # Wait for the receiver to close first: closing with unread input (a TLS 1.3 session
    # ticket) would reset the connection and drop data still in flight.
    with anyio.move_on_after(30):
        try:
            while await stream.receive():
                pass
        except Exception:  # however the peer closes, the receiver already counted every byte
            pass
    await stream.aclose()


def worker(argv: list[str]) -> None:
    role, variant, nbytes_s, port_s = argv
    recv_kind, send_kind, loop = VARIANTS[variant]
    nbytes = int(nbytes_s)
    if role == "recv":
        import faulthandler

        faulthandler.dump_traceback_later(45)  # a stuck receiver shows where it waits (stderr)
        pin(0)
        if loop.startswith("anyio"):
            run_loop(loop, lambda: _anyio_receiver(recv_kind, nbytes))
        else:
            run_loop(loop, lambda: _asyncio_receiver(recv_kind, nbytes))
    else:
        pin(1)
        port = int(port_s)
        if loop.startswith("anyio"):
            run_loop(loop, lambda: _anyio_sender(send_kind, port, nbytes))
        else:
            run_loop(loop, lambda: _asyncio_sender(send_kind, port, nbytes))


# -- orchestration --------------------------------------------------------------------------


def one_run(work: Workdir, variant: str, nbytes: int, timeout: float) -> dict[str, Any]:
    env = work.env()
    if variant.endswith(BASE):
        env["PYTHONPATH"] = os.environ["GCMSTREAM_BENCH_BASE_SRC"]
    recv = spawn("bench_sockets.py", ["worker", "recv", variant, str(nbytes), "0"], env)
    send = None
    watchdog = threading.Timer(timeout, recv.kill)  # a stuck receiver must not stall the run
    watchdog.start()
    try:
        port = read_line(recv, "PORT ")
        send = spawn("bench_sockets.py", ["worker", "send", variant, str(nbytes), port], env)
        result: dict[str, Any] = json.loads(read_line(recv, "RESULT "))
        result["sender_cpu"] = float(read_line(send, "CPU "))
        finish(recv, timeout)
        finish(send, timeout)
        if send.returncode:
            err = send.stderr.read() if send.stderr else ""
            raise RuntimeError(f"sender failed: {err.strip()[-1500:]}")
    finally:
        watchdog.cancel()
        for proc in (recv, send):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    if result["bytes"] != nbytes:
        raise RuntimeError(f"received {result['bytes']} of {nbytes} bytes")
    return result


def _available(variant: str, work: Workdir) -> str | None:
    recv_kind, _, loop = VARIANTS[variant]
    if not _selected(variant):
        return "not selected (GCMSTREAM_BENCH_ONLY)"
    if recv_kind in TLS_KINDS and not work.tls:
        return "trustme not installed"
    if loop == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            return "uvloop not installed"
    if loop == "anyio-trio":
        try:
            import trio  # noqa: F401
        except ImportError:
            return "trio not installed"
    return None


def run(quick: bool) -> dict[str, Any]:
    nbytes = (4 if quick else 256) * 1024 * 1024
    reps = 1 if quick else 3
    timeout = 60.0 if quick else 180.0
    work = Workdir()
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
    ciphers: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        for v in VARIANTS:
            reason = _available(v, work)
            if reason:
                errors[v] = reason
        for _ in range(reps):
            for v in VARIANTS:
                if v in errors:
                    continue
                try:
                    result = one_run(work, v, nbytes, timeout)
                except Exception as exc:
                    errors[v] = f"{type(exc).__name__}: {exc}"
                    print(f"   {v}: {errors[v]}", file=sys.stderr, flush=True)
                    continue
                samples[v].append(nbytes / result["seconds"] / 1e6)
                cpu[v].append((result["cpu"], result["sender_cpu"]))
                if result.get("cipher"):
                    ciphers[v] = result["cipher"]
    finally:
        work.close()
    rows: list[dict[str, Any]] = [
        {
            "name": v,
            "loop": VARIANTS[v][2],
            "MB_s": statistics.median(samples[v]) if samples[v] else None,
            "samples_MB_s": samples[v],
            "cipher": ciphers.get(v),
            # CPU seconds (user + system) spent while moving the data, median over runs
            "receiver_cpu_s": statistics.median(c[0] for c in cpu[v]) if cpu[v] else None,
            "sender_cpu_s": statistics.median(c[1] for c in cpu[v]) if cpu[v] else None,
            "error": errors.get(v),
        }
        for v in VARIANTS
    ]
    mib = nbytes / (1024 * 1024)
    for row in rows:
        for side in ("receiver", "sender"):
            cpu_s = row[f"{side}_cpu_s"]
            row[f"{side}_cpu_ms_per_mib"] = cpu_s / mib * 1e3 if cpu_s is not None else None
    raw = raw_aead_cpu_per_mib(volume=(4 if quick else 64) * 1024 * 1024)
    by_row = {row["name"]: row for row in rows}
    plain_proto = by_row["plain asyncio BufferedProtocol"]
    floors: dict[str, Any] = dict(raw)
    if plain_proto["receiver_cpu_s"] is not None and plain_proto["sender_cpu_s"] is not None:
        recv_floor = plain_proto["receiver_cpu_s"] / mib + raw["decrypt_into_cpu_s_per_mib"]
        send_floor = plain_proto["sender_cpu_s"] / mib + raw["encrypt_into_cpu_s_per_mib"]
        floors["receiver_floor_ms_per_mib"] = recv_floor * 1e3
        floors["sender_floor_ms_per_mib"] = send_floor * 1e3
        # a sender whose core does nothing but send and encrypt cannot go faster than this
        floors["sender_bound_ceiling_MB_s"] = 1024 * 1024 / send_floor / 1e6
    by: dict[str, float | None] = {v: statistics.median(samples[v]) if samples[v] else None for v in VARIANTS}
    gcm = by["gcmstream asyncio protocol (iter_chunks)"]
    tls = by["asyncio TLS 1.3"]
    proto = by["plain asyncio BufferedProtocol"]
    gcm_row = by_row["gcmstream asyncio protocol (iter_chunks)"]
    recv_ratio = None
    if gcm_row["receiver_cpu_ms_per_mib"] is not None and "receiver_floor_ms_per_mib" in floors:
        recv_ratio = gcm_row["receiver_cpu_ms_per_mib"] / floors["receiver_floor_ms_per_mib"]
    anyio_gcm = by["gcmstream anyio (asyncio backend)"]
    anyio_plain = by["anyio plain TCP (asyncio backend)"]
    targets = {
        "loopback_vs_tls": {
            "target": ">= 2.0 x asyncio TLS",
            "value": gcm / tls if gcm and tls else None,
            "met": bool(gcm and tls and gcm / tls >= 2.0),
        },
        "loopback_vs_buffered_protocol": {
            "target": ">= 0.80 x plain asyncio BufferedProtocol",
            "value": gcm / proto if gcm and proto else None,
            "met": bool(gcm and proto and gcm / proto >= 0.80),
        },
        "receiver_cpu_vs_floor": {
            "target": "<= 1.15 x (plain BufferedProtocol receiver + raw decrypt_into) CPU per MiB",
            "value": recv_ratio,
            "met": bool(recv_ratio and recv_ratio <= 1.15),
        },
        "anyio_vs_anyio_plain": {
            "target": ">= 0.60 x anyio plain TCP MB/s (asyncio backend)",
            "value": anyio_gcm / anyio_plain if anyio_gcm and anyio_plain else None,
            "met": bool(anyio_gcm and anyio_plain and anyio_gcm / anyio_plain >= 0.60),
        },
    }
    for backend in ("asyncio", "trio"):
        gcm_row = by_row[f"gcmstream anyio ({backend} backend)"]
        plain_row = by_row[f"anyio plain TCP ({backend} backend)"]
        if gcm_row["MB_s"] and plain_row["MB_s"]:
            ratio = gcm_row["MB_s"] / plain_row["MB_s"]
            floor = plain_row["receiver_cpu_ms_per_mib"] + raw["decrypt_into_cpu_s_per_mib"] * 1e3
            cpu_ratio = gcm_row["receiver_cpu_ms_per_mib"] / floor
            targets[f"issue23_anyio_{backend}"] = {
                "target": f">= 0.70 x anyio plain TCP MB/s ({backend}), receiver CPU/MiB <= 1.3 x "
                "(anyio plain receiver + raw decrypt_into)",
                "value": ratio,
                "receiver_cpu_ratio": cpu_ratio,
                "receiver_floor_ms_per_mib": floor,
                "met": ratio >= 0.70 and cpu_ratio <= 1.3,
            }
    return {
        "params": {"bytes": nbytes, "reps": reps, "chunk": CHUNK, "pinned": _can_pin()},
        "rows": rows,
        "floors": floors,
        "targets": targets,
    }


def raw_aead_cpu_per_mib(record_size: int = 65536, volume: int = 64 * 1024 * 1024) -> dict[str, float]:
    """CPU seconds per MiB of raw ``encrypt_into`` and ``decrypt_into`` over a fresh stream of
    ``record_size`` records (each record touched once, as on a socket), in this process."""
    import os

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aead = AESGCM(KEY)
    count = volume // record_size
    header = b"\x00" + (record_size + 16).to_bytes(4, "big")
    plain = memoryview(os.urandom(volume))
    records = [plain[i * record_size : (i + 1) * record_size] for i in range(count)]
    nonces = [seq.to_bytes(12, "big") for seq in range(count)]
    sealed = memoryview(bytearray(count * (record_size + 16)))
    outs = [sealed[i * (record_size + 16) : (i + 1) * (record_size + 16)] for i in range(count)]
    opened = memoryview(bytearray(CHUNK))
    places = [opened[i : i + record_size] for i in range(0, CHUNK, record_size)]
    start = time.process_time()
    for nonce, record, out in zip(nonces, records, outs, strict=True):
        aead.encrypt_into(nonce, record, header, out)
    encrypt = time.process_time() - start
    start = time.process_time()
    for i, (nonce, ct) in enumerate(zip(nonces, outs, strict=True)):
        aead.decrypt_into(nonce, ct, header, places[i % len(places)])
    decrypt = time.process_time() - start
    mib = volume / (1024 * 1024)
    return {"encrypt_into_cpu_s_per_mib": encrypt / mib, "decrypt_into_cpu_s_per_mib": decrypt / mib}


def _can_pin() -> bool:
    import os

    return hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2


def main(quick: bool) -> dict[str, Any]:
    from bench_common import write_result

    data = run(quick)
    write_result("sockets", data, quick)
    return data


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
