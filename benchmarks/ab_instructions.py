"""A/B of two gcmstream source trees by work done, not time: ``python
benchmarks/ab_instructions.py OLD_SRC NEW_SRC [--sizes ...] [--cases ...]``.

On a shared machine a 3 % target is inside the noise of any timing (``ab.py``'s ratios move by
2-3 % with which tree is loaded first). Here each case of ``ab.py`` runs under valgrind's
cachegrind (needs ``valgrind``), once warm and then ``--repeat`` times more, for each tree in its
own process; the difference of the two runs' totals over ``--repeat`` is what one call of the
case costs: instructions executed and first-level data-cache misses (cachegrind's simulated
cache: a placement effect shows there, and instructions cannot show it). Deterministic up to a
few instructions a call; about 15 s a run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# cachegrind's summary lines: "I refs: 1,234", "D1  misses: 5,678" (a read and a write part)
_TOTAL = re.compile(r"^==\d+== (I +refs|D1 +misses):\s+([\d,]+)", re.MULTILINE)


def child(src: str, size: int, case: str, repeat: int) -> None:
    """Run ``case`` once to warm it, then ``repeat`` times (the process valgrind measures)."""
    sys.path.insert(0, str(HERE))
    import ab  # (the child alone needs it, once the path is set)

    op = ab.cases(ab.load(src, "gcmstream_measured"), size)[case]
    op()
    for _ in range(repeat):
        op()


def totals(src: str, size: int, case: str, repeat: int) -> tuple[int, int]:
    """Instructions and D1 misses of the whole process that runs ``case`` ``repeat`` times."""
    with tempfile.TemporaryDirectory() as scratch:
        out = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=yes",
                f"--cachegrind-out-file={os.path.join(scratch, 'cg.out')}",
                sys.executable,
                __file__,
                "--child",
                src,
                str(size),
                case,
                str(repeat),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    found = {name.split()[0]: int(value.replace(",", "")) for name, value in _TOTAL.findall(out)}
    return found["I"], found["D1"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--sizes", default="1024,4096,65536,1048576")
    parser.add_argument("--cases", default="open ring readinto,open held readinto,open read")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    print(f"per call of each case (4 MiB), the difference of 1 + {args.repeat} and 1 call")
    for size in (int(s) for s in args.sizes.split(",")):
        for case in args.cases.split(","):
            per_call = {}
            for label, src in (("A", args.old), ("B", args.new)):
                base = totals(src, size, case, 0)
                more = totals(src, size, case, args.repeat)
                per_call[label] = [(m - b) / args.repeat for m, b in zip(more, base, strict=True)]
            (ia, da), (ib, db) = per_call["A"], per_call["B"]
            print(
                f"{size:>8} {case:20} instructions A {ia / 1e6:8.3f} M  B {ib / 1e6:8.3f} M  "
                f"B/A {ib / ia:.4f}   D1 misses A {da:9.0f}  B {db:9.0f}  B/A {db / da:.3f}"
            )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        raise SystemExit(0)
    raise SystemExit(main())
