"""Part 8: what the thread check costs on the hot path (issue 12).

Every public call of a Sealer or Opener takes a one-token turn (``_turn.py``): a ``pop()`` and
an ``append()`` on a deque around the call. Here ``seal`` and ``readinto`` run with the check
(the public method) and without it (the private method the public one wraps, called
directly: the same work minus the token and one Python call), interleaved in one process.

* seal: a fresh Sealer seals 4 MiB in ``record_size`` pieces, one record per call.
* readinto: a fresh Opener is given 4 MiB of sealed records as one ``bytes`` and read with
  ``readinto`` into a ``record_size`` buffer, one record per call.

The per-call difference is the check's cost; divided by the time per record it is the share
of the hot path it takes. Each operation also runs unchecked twice as two separate cases (an
A/A pair): their difference is this run's noise, against which the check's is read. The bare
token (``pop`` + ``append`` in ``try``/``finally``, minus an empty loop) is timed alone too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from bench_common import Op, interleaved, write_result

import gcmstream

KEY = bytes(range(16))
VOLUME = 4 * 1024 * 1024
SIZES = [1024, 65536]


def seal_case(record_size: int, guarded: bool) -> Callable[[], None]:
    piece = memoryview(os.urandom(record_size))
    count = VOLUME // record_size

    def run() -> None:
        sealer = gcmstream.Sealer(KEY, record_size=record_size)
        sealer.take_header()
        if guarded:
            seal = sealer.seal
            for _ in range(count):
                seal(piece)
        else:
            inner = sealer._seal
            for _ in range(count):
                inner(piece, False, False)

    return run


def readinto_case(record_size: int, guarded: bool) -> Callable[[], None]:
    sealer = gcmstream.Sealer(KEY, record_size=record_size)
    wire = bytes(sealer.seal(os.urandom(VOLUME), final=True))
    out = memoryview(bytearray(record_size))

    def run() -> None:
        opener = gcmstream.Opener(KEY, max_record_size=max(record_size, 1 << 20))
        opener.receive_data(wire)
        opener.receive_eof()
        read = opener.readinto if guarded else opener._readinto
        while read(out):
            pass

    return run


def run(quick: bool) -> dict[str, Any]:
    reps = 3 if quick else 31
    sizes = SIZES[:1] if quick else SIZES
    rows = []
    for size in sizes:
        records = VOLUME // size
        cases: dict[str, Op] = {
            "seal, checked": seal_case(size, True),
            "seal, unchecked": seal_case(size, False),
            "seal, unchecked again": seal_case(size, False),
            "readinto, checked": readinto_case(size, True),
            "readinto, unchecked": readinto_case(size, False),
            "readinto, unchecked again": readinto_case(size, False),
        }
        times = interleaved(cases, reps)
        for op in ("seal", "readinto"):
            checked, unchecked = times[f"{op}, checked"], times[f"{op}, unchecked"]
            again = times[f"{op}, unchecked again"]
            rows.append(
                {
                    "name": f"{op} {size}",
                    "op": op,
                    "record_size": size,
                    "checked_us_per_record": checked / records * 1e6,
                    "unchecked_us_per_record": unchecked / records * 1e6,
                    "check_ns_per_call": (checked - unchecked) / records * 1e9,
                    "check_share": (checked - unchecked) / unchecked,
                    "noise_ns_per_call": (again - unchecked) / records * 1e9,
                    "noise_share": (again - unchecked) / unchecked,
                }
            )
    return {
        "params": {"volume": VOLUME, "reps": reps, "sizes": sizes},
        "rows": rows,
        "token_ns": token_cost(),
        "targets": {},
    }


def token_cost(calls: int = 1_000_000) -> float:
    """Nanoseconds of the bare check: take and give back a one-token deque around a call."""
    import time
    from collections import deque

    token: deque[None] = deque((None,))
    best_bare = best_token = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            pass
        best_bare = min(best_bare, time.perf_counter() - start)
        start = time.perf_counter()
        for _ in range(calls):
            token.pop()
            try:
                pass
            finally:
                token.append(None)
        best_token = min(best_token, time.perf_counter() - start)
    return (best_token - best_bare) / calls * 1e9


def main(quick: bool) -> dict[str, Any]:
    data = run(quick)
    write_result("guard", data, quick)
    for row in data["rows"]:
        print(
            f"   {row['name']:>16}: {row['checked_us_per_record']:.3f} us checked, "
            f"{row['unchecked_us_per_record']:.3f} us unchecked per record; "
            f"check {row['check_ns_per_call']:.0f} ns ({row['check_share']:+.1%}); "
            f"A/A noise {row['noise_ns_per_call']:.0f} ns ({row['noise_share']:+.1%})",
            flush=True,
        )
    print(f"   bare token: {data['token_ns']:.0f} ns per call", flush=True)
    return data
