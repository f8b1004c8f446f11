"""Shared helpers: interleaved timing, allocation counting (memray + tracemalloc), results files.

Allocation counting, and which tool counts what:

* memray (``trace_python_allocators=True``) records every allocation call made while an
  operation runs: native ones (``malloc``/``calloc``/``realloc``/``mmap``..., which is where
  OpenSSL and cryptography's Rust code allocate and which tracemalloc cannot see) and Python's
  own allocator (pymalloc, reported once even when pymalloc hands a large request to malloc).
  ``allocs/op`` and ``B/op`` are memray's counts (like Go's ``-benchmem``: every allocation,
  including short-lived ones), split into native and python.
* tracemalloc sees only Python's allocator domains. We report its ``peak`` (highest Python
  heap growth during one operation) and ``net`` (Python memory still held after it).

Per-operation figures subtract a baseline: the same loop calling a no-op function.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def results_dir() -> Path:
    """benchmarks/results, or $GCMSTREAM_BENCH_RESULTS (the smoke test writes to a temp dir)."""
    return Path(os.environ.get("GCMSTREAM_BENCH_RESULTS") or RESULTS)


NATIVE_ALLOCATORS = {"MALLOC", "CALLOC", "REALLOC", "POSIX_MEMALIGN", "ALIGNED_ALLOC", "MEMALIGN", "VALLOC"}
NATIVE_ALLOCATORS |= {"PVALLOC", "MMAP"}
PYTHON_ALLOCATORS = {"PYMALLOC_MALLOC", "PYMALLOC_CALLOC", "PYMALLOC_REALLOC"}

Op = Callable[[], object]


def machine_info() -> dict[str, Any]:
    import cryptography

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from cryptography.hazmat.backends.openssl.backend import backend

    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "cryptography": cryptography.__version__,
        "openssl": backend.openssl_version_text(),
    }


def timed(fn: Op, inner: int = 1) -> float:
    """Seconds per call of ``fn`` over ``inner`` calls."""
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - start) / inner


def interleaved(cases: dict[str, Op], reps: int, inner: int = 1, warm: bool = False) -> dict[str, float]:
    """Median seconds per call of each case; repetitions interleave the cases so that drift and
    other processes' load hit every case alike (the figures that matter are ratios). With
    ``warm``, each timed sample follows one untimed call of the same case."""
    return interleaved_both(cases, reps, inner, warm)[0]


def interleaved_both(
    cases: dict[str, Op], reps: int, inner: int = 1, warm: bool = False
) -> tuple[dict[str, float], dict[str, float]]:
    """``interleaved``, with each case's median CPU seconds per call (``time.process_time``)
    beside its wall-clock median: on a shared machine CPU time moves far less."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    cpu_samples: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():  # warm-up
        fn()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(reps):
            for name, fn in cases.items():
                if warm:
                    fn()
                cpu_start = time.process_time()
                samples[name].append(timed(fn, inner))
                cpu_samples[name].append((time.process_time() - cpu_start) / inner)
    finally:
        if enabled:
            gc.enable()
    return (
        {name: statistics.median(values) for name, values in samples.items()},
        {name: statistics.median(values) for name, values in cpu_samples.items()},
    )


def _noop() -> None:
    return None


def _memray_counts(fn: Op, count: int) -> dict[str, float]:
    import memray

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "alloc.bin")
        with memray.Tracker(path, trace_python_allocators=True):
            for _ in range(count):
                fn()
        totals = {"native_allocs": 0.0, "native_bytes": 0.0, "python_allocs": 0.0, "python_bytes": 0.0}
        for record in memray.FileReader(path).get_allocation_records():
            name = memray.AllocatorType(record.allocator).name
            if name in NATIVE_ALLOCATORS:
                totals["native_allocs"] += record.n_allocations
                totals["native_bytes"] += record.size
            elif name in PYTHON_ALLOCATORS:
                totals["python_allocs"] += record.n_allocations
                totals["python_bytes"] += record.size
    return totals


def have_memray() -> bool:
    try:
        import memray  # noqa: F401
    except ImportError:
        return False
    return True


def memray_per_op(fn: Op, count: int) -> dict[str, float | None]:
    """memray's allocation calls and bytes per call of ``fn``, minus a no-op loop (None for
    every figure when memray is not installed: ``pip install -e '.[bench]'``)."""
    if not have_memray():
        keys = ("native_allocs", "native_bytes", "python_allocs", "python_bytes", "allocs", "bytes")
        return dict.fromkeys(keys)
    fn()  # warm caches, lazily built objects
    enabled = gc.isenabled()
    gc.disable()
    try:
        measured = _memray_counts(fn, count)
        baseline = _memray_counts(_noop, count)
    finally:
        if enabled:
            gc.enable()
    out: dict[str, float | None] = {k: max(0.0, (measured[k] - baseline[k]) / count) for k in measured}
    out["allocs"] = (out["native_allocs"] or 0.0) + (out["python_allocs"] or 0.0)
    out["bytes"] = (out["native_bytes"] or 0.0) + (out["python_bytes"] or 0.0)
    return out


def tracemalloc_per_op(fn: Op, count: int) -> dict[str, float | None]:
    """Python-heap growth: peak during one call, and net retained per call over ``count``."""
    fn()
    enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fn()
        _, peak = tracemalloc.get_traced_memory()
        mid, _ = tracemalloc.get_traced_memory()
        for _ in range(count):
            fn()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        if enabled:
            gc.enable()
    return {"tm_peak_bytes": float(peak - base), "tm_net_bytes": (end - mid) / count}


def alloc_profile(fn: Op, count: int) -> dict[str, float | None]:
    result = memray_per_op(fn, count)
    result.update(tracemalloc_per_op(fn, count))
    return result


def source_state() -> dict[str, Any]:
    """The commit measured, and whether src/ had uncommitted changes (others edit it live)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "src_dirty": bool(git("status", "--porcelain", "src")),
    }


def write_result(part: str, data: dict[str, Any], quick: bool) -> Path:
    out_dir = results_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "part": part,
        "quick": quick,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": machine_info(),
        "loadavg": os.getloadavg(),
        "source": source_state(),
        **data,
    }
    name = f"{part}.quick.json" if quick else f"{part}.json"
    path = out_dir / name
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6 if seconds > 0 else float("nan")
