"""Run gcmstream's benchmarks: ``python benchmarks/run.py [PART ...] [--quick]``.

Parts: seed, allocs, codec, sockets, echo, conns, busy, handshake, flood, guard, files, recipients, tink
(default: all, in
that order). Each writes benchmarks/results/<part>.json (``--quick``: <part>.quick.json, tiny
sizes, seconds; set GCMSTREAM_BENCH_RESULTS to write elsewhere). ``python benchmarks/render.py`` turns the
results into benchmarks/README.md's tables and chart.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PARTS = {
    "seed": "bench_seed",
    "allocs": "bench_allocs",
    "codec": "bench_codec",
    "sockets": "bench_sockets",
    "echo": "bench_echo",
    "conns": "bench_conns",
    "busy": "bench_busy",
    "handshake": "bench_handshake",
    "flood": "bench_flood",
    "guard": "bench_guard",
    "files": "bench_files",
    "recipients": "bench_recipients",
    "tink": "bench_tink",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("parts", nargs="*", help=f"parts to run (default: all): {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test, not a measurement")
    args = parser.parse_args(argv)
    parts = args.parts or list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    failed = []
    for part in parts:
        start = time.perf_counter()
        print(f"== {part}{' (quick)' if args.quick else ''}", flush=True)
        module = importlib.import_module(PARTS[part])
        try:
            module.main(args.quick)
        except Exception as exc:  # report and go on with the other parts
            failed.append(part)
            print(f"!! {part} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            if os.environ.get("GCMSTREAM_BENCH_RAISE"):
                raise
        print(f"   {part} took {time.perf_counter() - start:.1f} s", flush=True)
    if failed:
        print(f"failed parts: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
