"""A/B of two gcmstream source trees on the server's per-connection and per-record costs:

``python benchmarks/ab_server.py handshake OLD_SRC NEW_SRC [--rounds 60] [--batch 20]``: both
trees loaded in this process (``ab.py``'s loader), batches of handshakes of each in turn, CPU
per side (``time.process_time`` around each side's own calls, as ``bench_handshake.py``), for
X25519 and the hybrid, with a KeyRing made once (a server's) and with the key's bytes.

``python benchmarks/ab_server.py flood OLD_SRC NEW_SRC [--records 300000] [--reps 2]``: the
flood part's run (``bench_flood.one_run``) for each tree in turn (its workers import the tree
through PYTHONPATH), every loop, printing server CPU per record and the echo's figures.

Each SRC is a directory holding a ``gcmstream`` package (``git archive main | tar -x -C
/tmp/base``: ``/tmp/base/src``). Ratios of the same run are what to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab import load

KEY = bytes(range(16))


def handshake_batch(gs: ModuleType, exchange: Any, key: Any, count: int) -> tuple[float, float]:
    """CPU us per handshake of the initiator's and the responder's own calls."""
    initiator_cpu = responder_cpu = 0.0
    with gs.self_connections_allowed():
        for _ in range(count):
            t0 = time.process_time()
            initiator = gs.Channel(key, role=gs.Role.INITIATOR, key_exchange=exchange)
            hello = initiator.initial_data()
            t1 = time.process_time()
            responder = gs.Channel(key, role=gs.Role.RESPONDER, key_exchange=exchange)
            responder.opener.receive_data(hello)
            answer = responder.data_to_send()
            t2 = time.process_time()
            initiator.opener.receive_data(answer)
            if not initiator.handshake_complete():
                raise RuntimeError("the initiator did not complete")
            finished = initiator.data_to_send()
            t3 = time.process_time()
            responder.opener.receive_data(finished)
            if not responder.handshake_complete():
                raise RuntimeError("the responder did not complete")
            t4 = time.process_time()
            initiator_cpu += (t1 - t0) + (t3 - t2)
            responder_cpu += (t2 - t1) + (t4 - t3)
    return initiator_cpu / count * 1e6, responder_cpu / count * 1e6


def handshake_ab(old: str, new: str, rounds: int, batch: int) -> None:
    trees = {"A": load(old, "gcmstream_a"), "B": load(new, "gcmstream_b")}
    for exchange in ("X25519", "MLKEM768_X25519"):
        for key_kind in ("KeyRing", "key bytes"):
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(rounds):
                for name, gs in trees.items():
                    key = gs.KeyRing([KEY]) if key_kind == "KeyRing" else KEY
                    runs[name].append(handshake_batch(gs, getattr(gs.KeyExchange, exchange), key, batch))
            parts = []
            for name, got in runs.items():
                ini, rsp = [g[0] for g in got], [g[1] for g in got]
                parts.append(
                    f"{name} initiator {min(ini):4.0f} / {statistics.median(ini):4.0f}, "
                    f"responder {min(rsp):4.0f} / {statistics.median(rsp):4.0f}"
                )
            ratios = [(b[0] / a[0], b[1] / a[1]) for a, b in zip(runs["A"], runs["B"], strict=True)]
            ratio = (statistics.median(r[0] for r in ratios), statistics.median(r[1] for r in ratios))
            print(
                f"{exchange:<16} {key_kind:<9} CPU us min / median: {'; '.join(parts)}; "
                f"B/A median of rounds {ratio[0]:.2f} / {ratio[1]:.2f}",
                flush=True,
            )
    print(f"1-minute load average: {os.getloadavg()[0]:.1f}")


def flood_ab(old: str, new: str, records: int, reps: int) -> None:
    import bench_flood
    from bench_net import Workdir

    work = Workdir()
    try:
        for _ in range(reps):
            for loop in bench_flood.VARIANTS.values():
                for name, src in (("A", old), ("B", new)):
                    os.environ["PYTHONPATH"] = str(Path(src).resolve())
                    run = bench_flood.one_run(work, loop, records, 2.0, 300.0)
                    flood, base = bench_flood._summary(run["flood"]), bench_flood._summary(run["baseline"])
                    print(
                        f"{loop:<14} {name}: server CPU "
                        f"{run['server_cpu_s'] / records * 1e6:5.1f} us a record, "
                        f"flood {run['flood_seconds']:5.1f} s, echo worst {flood['worst_ms']} ms, "
                        f"median {flood['median_ms']}, no-flood worst {base['worst_ms']}, "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
    finally:
        work.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("handshake", "flood"))
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    if args.what == "handshake":
        handshake_ab(args.old, args.new, args.rounds, args.batch)
    else:
        flood_ab(args.old, args.new, args.records, args.reps)


if __name__ == "__main__":
    main()
