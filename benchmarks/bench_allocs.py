"""Part 2: allocations per record against record size (1 KiB .. 1 MiB), gcmstream's open path
(get_buffer/buffer_updated feeding, readinto or read_view reading, steady state: the Opener
already has its ring) against raw ``AESGCM.decrypt_into`` (prebuilt arguments: the floor this
dependency allows). memray counts every allocation call; tracemalloc the Python heap growth.

For the default record size the gcmstream allocations are also attributed to source lines
(memray stack traces), so a miss says exactly what costs what.
"""

from __future__ import annotations

import linecache
import os
import tempfile
from collections import Counter
from typing import Any

from bench_common import NATIVE_ALLOCATORS, PYTHON_ALLOCATORS, Op, alloc_profile, have_memray, write_result
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import gcmstream

KEY = bytes(range(16))
CONTEXT = bytes(range(256))

SIZES = [1024, 4096, 16384, 65536, 262144, 1048576]
QUICK_SIZES = [1024, 65536]
APP_BUFFER = 256 * 1024  # the application buffer of the codec and socket benchmarks


class OpenDriver:
    """A long-lived Opener fed from a pre-sealed stream, ``records`` records per call."""

    def __init__(
        self, record_size: int, records_per_call: int, calls: int, *, zero_copy: bool, out_size: int = 0
    ) -> None:
        self.record_size = record_size
        self.per_call = records_per_call
        sealer = gcmstream.Sealer(KEY, context=CONTEXT, record_size=record_size)
        total = record_size * records_per_call * (calls + 2)
        self.wire = memoryview(bytes(sealer.seal(os.urandom(record_size)[:1] * total, final=True)))
        self.opener = gcmstream.Opener(KEY, context=CONTEXT, max_record_size=max(record_size, 1 << 20))
        self.out = memoryview(bytearray(max(out_size, record_size)))  # default: one record per read
        self.pos = 0
        self.zero_copy = zero_copy
        self.step()  # header parsed, ring allocated, first records opened

    def step(self) -> None:
        opener, wire, out = self.opener, self.wire, self.out
        want = self.per_call
        while want:
            buf = opener.get_buffer()
            count = min(len(buf), len(wire) - self.pos)
            if count:
                buf[:count] = wire[self.pos : self.pos + count]
                opener.buffer_updated(count)
                self.pos += count
            while want:
                if self.zero_copy:
                    view = opener.read_view()
                    if view is None:
                        break
                    want -= 1
                else:  # whole records only, never more than ``want``
                    room = want * self.record_size
                    n = opener.readinto(out if room >= len(out) else out[:room])
                    if n is None:
                        break
                    want -= n // self.record_size


def raw_op(record_size: int) -> Op:
    aead = AESGCM(KEY)
    nonce = bytes(12)
    header = b"\x00" + (record_size + 16).to_bytes(4, "big")
    ct = aead.encrypt(nonce, bytes(record_size), header)
    out = bytearray(record_size)

    def op() -> object:
        return aead.decrypt_into(nonce, ct, header, out)

    return op


def _empty(x: int) -> None:
    return None


def memray_call_cost(calls: int = 10_000) -> dict[str, float]:
    """What memray itself adds per Python function call: its stack tracking materialises a
    frame object for each call, an allocation CPython 3.11 does not make untraced. Measured
    as a loop calling an empty function minus the same loop without the call."""
    import memray

    def with_call() -> None:
        for i in range(calls):
            _empty(i)

    def without_call() -> None:
        for _ in range(calls):
            pass

    counts = []
    for fn in (with_call, without_call):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "calls.bin")
            with memray.Tracker(path, trace_python_allocators=True):
                fn()
            records = list(memray.FileReader(path).get_allocation_records())
            counts.append((sum(r.n_allocations for r in records), sum(r.size for r in records)))
    (n1, b1), (n0, b0) = counts
    return {"allocs_per_call": (n1 - n0) / calls, "bytes_per_call": (b1 - b0) / calls}


def attribute(driver: OpenDriver, calls: int) -> list[dict[str, Any]]:
    """memray records of ``calls`` steps grouped by the innermost gcmstream (or driver) line."""
    import memray

    sites: Counter[tuple[str, str]] = Counter()
    sizes: Counter[tuple[str, str]] = Counter()
    code: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "attr.bin")
        with memray.Tracker(path, trace_python_allocators=True):
            for _ in range(calls):
                driver.step()
        for record in memray.FileReader(path).get_allocation_records():
            kind = memray.AllocatorType(record.allocator).name
            if kind not in NATIVE_ALLOCATORS and kind not in PYTHON_ALLOCATORS:
                continue
            where = "(no Python frame)"
            for func, filename, line in record.stack_trace():
                if "gcmstream" in filename or "bench_allocs" in filename:
                    short = filename.split("/src/")[-1].split("/benchmarks/")[-1]
                    where = f"{short}:{line} {func}"
                    code[where] = linecache.getline(filename, line).strip()
                    break
            key = (where, "native" if kind in NATIVE_ALLOCATORS else "python")
            sites[key] += record.n_allocations
            sizes[key] += record.size
    records = calls * driver.per_call
    return [
        {
            "site": site,
            "code": code.get(site, ""),
            "allocator": kind,
            "allocs_per_record": n / records,
            "bytes_per_record": sizes[(site, kind)] / records,
        }
        for (site, kind), n in sites.most_common()
    ]


def tracemalloc_transient(record_size: int, records: int, *, pieces: bool) -> float:
    """The most Python heap (tracemalloc's peak above the bytes traced before) that opening one
    record took, over ``records`` records of a long stream after a warm-up, read one record per
    ``readinto``: fed as 256 KiB ``bytes`` pieces (``receive_data``) or through the ring
    (``get_buffer``/``buffer_updated``). tracemalloc counts Python's allocator only."""
    import tracemalloc

    warm = 2 * (4 * 65536) // record_size + 4
    sealer = gcmstream.Sealer(KEY, context=CONTEXT, record_size=record_size)
    wire = memoryview(bytes(sealer.seal(bytes(record_size) * (records + warm + 2), final=True)))
    opener = gcmstream.Opener(KEY, context=CONTEXT, max_record_size=max(record_size, 1 << 20))
    out = memoryview(bytearray(record_size))
    pos = 0

    def one() -> int:
        nonlocal pos
        while True:
            got = opener.readinto(out)
            if got is not None:
                return got
            if pieces:
                count = min(APP_BUFFER, len(wire) - pos)
                opener.receive_data(wire[pos : pos + count])
            else:
                room = opener.get_buffer()
                count = min(len(room), len(wire) - pos)
                room[:count] = wire[pos : pos + count]
                opener.buffer_updated(count)
            pos += count

    for _ in range(warm):
        one()
    worst = 0
    tracemalloc.start()
    try:
        for _ in range(records):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            one()
            _, peak = tracemalloc.get_traced_memory()
            worst = max(worst, peak - before)
    finally:
        tracemalloc.stop()
    return float(worst)


def run(quick: bool) -> dict[str, Any]:
    sizes = QUICK_SIZES if quick else SIZES
    rows = []
    attribution: dict[int, list[dict[str, Any]]] = {}
    memray_ok = have_memray()
    for size in sizes:
        per_call = max(1, min(64, (4 << 20) // size)) if not quick else 4
        calls = 2 if quick else 4
        raw = alloc_profile(raw_op(size), 16 if not quick else 2)
        row: dict[str, Any] = {"record_size": size, "raw_decrypt_into": raw}
        for label, zero_copy, out_size in (
            ("gcmstream_readinto", False, 0),
            ("gcmstream_readinto_256k", False, APP_BUFFER),
            ("gcmstream_read_view", True, 0),
        ):
            driver = OpenDriver(size, per_call, calls * 3 + 4, zero_copy=zero_copy, out_size=out_size)
            prof = alloc_profile(driver.step, calls)
            row[label] = {k: None if v is None else v / per_call for k, v in prof.items()}
            if not memray_ok:
                continue
            attr = attribute(
                OpenDriver(size, per_call, calls + 2, zero_copy=zero_copy, out_size=out_size), calls
            )
            lib = [a for a in attr if a["site"].startswith("gcmstream/")]
            row[label + "_library_only"] = {
                f"{kind}_{unit}": sum(a[f"{unit}_per_record"] for a in lib if a["allocator"] == kind)
                for kind in ("native", "python")
                for unit in ("allocs", "bytes")
            }
            if label == "gcmstream_readinto":
                attribution[size] = attr
        if memray_ok:
            lib = row["gcmstream_readinto_library_only"]
            row["extra_bytes_readinto"] = lib["native_bytes"] + lib["python_bytes"] - (raw["bytes"] or 0.0)
            row["extra_native_bytes_readinto"] = lib["native_bytes"] - (raw["native_bytes"] or 0.0)
        rows.append(row)
    retained = [r["gcmstream_readinto"]["tm_net_bytes"] for r in rows]
    targets: dict[str, Any] = {
        "open_retained_per_record": {
            "target": "Python heap retained per record (tracemalloc net): none beyond counters",
            "value": max(retained),
            "met": max(retained) < 64,
        },
    }
    count = 16 if quick else 200
    transient = {
        "pieces": tracemalloc_transient(65536, count, pieces=True),
        "ring": tracemalloc_transient(65536, count, pieces=False),
    }
    targets["issue23_transient_per_64k_record"] = {
        "target": "<= 2,048 B transient Python allocation per opened 64 KiB record (tracemalloc peak, "
        "worst of 200 records, 256 KiB pieces and ring feeding)",
        "value": max(transient.values()),
        "each": transient,
        "met": max(transient.values()) <= 2048,
    }
    calibration = memray_call_cost() if memray_ok else None
    if memray_ok:
        default = next(r for r in rows if r["record_size"] == 65536) if 65536 in sizes else rows[-1]
        python_bytes = default["gcmstream_readinto_library_only"]["python_bytes"]
        targets["open_python_bytes_per_record"] = {
            "target": "<= 2,048 B of transient Python allocation per opened 64 KiB record "
            "(memray, library frames)",
            "value": python_bytes,
            "met": python_bytes <= 2048,
        }
        extras = [r["extra_bytes_readinto"] for r in rows]
        native = [r["extra_native_bytes_readinto"] for r in rows]
        targets["open_allocs_per_record"] = {
            "target": "<= raw decrypt_into + 256 B per record, flat 1 KiB..1 MiB (all allocation calls)",
            "value": max(extras),
            "met": max(extras) <= 256,
            "spread_bytes": max(extras) - min(extras),
        }
        targets["open_native_allocs_per_record"] = {
            "target": "native (OpenSSL/Rust) bytes per record <= raw decrypt_into + 256 B",
            "value": max(native),
            "met": max(native) <= 256,
        }
    return {
        "params": {"sizes": sizes, "memray": memray_ok},
        "memray_call_cost": calibration,
        "rows": rows,
        "attribution": {str(k): v for k, v in attribution.items()},
        "targets": targets,
    }


def main(quick: bool) -> dict[str, Any]:
    data = run(quick)
    write_result("allocs", data, quick)
    return data
