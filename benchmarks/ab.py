"""A/B of two gcmstream source trees in one process, in CPU time: ``python benchmarks/ab.py
OLD_SRC NEW_SRC [--rounds N]``, each a directory holding a ``gcmstream`` package (e.g. from
``git archive main | tar -x -C /tmp/base``: ``/tmp/base/src``).

Both trees are imported under other names (their imports are relative), then every case runs for
A and B in turn (A first in odd rounds, B first in even ones), ``--rounds`` times, and the best
CPU time (``time.process_time``) of each is kept: a shared machine's noise shows as the spread
between rounds, which is printed, and the B/A ratio of the same run is what to compare; which
tree is loaded first moves it by 2-3 %, so run both orders (benchmarks/README.md). Cases:
sealing; opening records fed in 256 KiB pieces (``bytes`` held, and copied into the ring), read
with ``readinto`` into 256 KiB and with ``read``; the same stream in pieces of whole records
about as large, and held whole (no record split between pieces): their differences from the 256
KiB pieces are the cost of the split records (against aligned pieces) and of the split records
plus the feeding calls (against the whole stream); the raw ``decrypt_into`` of the same records
and a memcpy of each record for scale.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VOLUME = 4 * 1024 * 1024
PIECE = 256 * 1024
KEY = bytes(range(32))


def load(src: str, name: str) -> ModuleType:
    """Import the ``gcmstream`` package under ``src`` as ``name``."""
    init = Path(src) / "gcmstream" / "__init__.py"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    if spec is None or spec.loader is None:
        raise SystemExit(f"no gcmstream package under {src}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cases(
    gs: Any, record_size: int, piece: int = PIECE, out_offset: int = 0
) -> dict[str, Callable[[], None]]:
    data = os.urandom(VOLUME)
    sealer = gs.Sealer(KEY, record_size=record_size)
    header = bytes(sealer.take_header())
    records = bytes(sealer.seal(data)) + bytes(sealer.close())
    wire = header + records
    pieces = [wire[i : i + piece] for i in range(0, len(wire), piece)]
    # pieces of whole records, about as large, the header with the first (cut from the wire,
    # the header's few bytes shifted every cut into a record: each piece split one)
    aligned_size = max(1, round(piece / (record_size + 21))) * (record_size + 21)
    aligned = [header + records[:aligned_size]]
    aligned += [records[i : i + aligned_size] for i in range(aligned_size, len(records), aligned_size)]
    out = memoryview(bytearray(PIECE + out_offset))[out_offset:]  # (where it lies moves the times)

    def seal() -> None:
        s = gs.Sealer(KEY, record_size=record_size)
        s.seal(data)
        s.close()

    def open_held(pieces: list[bytes] = pieces) -> None:
        opener = gs.Opener(KEY)
        for piece in pieces:
            opener.receive_data(piece)
            while opener.readinto(out):
                pass
        opener.receive_eof()

    def open_aligned() -> None:
        open_held(aligned)

    def open_whole() -> None:  # the same records, none split: one input holds them all
        opener = gs.Opener(KEY)
        opener.receive_data(wire)
        while opener.readinto(out):
            pass
        opener.receive_eof()

    def open_ring() -> None:
        opener = gs.Opener(KEY)
        for piece in pieces:
            view = memoryview(piece)
            while view:
                room = opener.get_buffer()
                count = min(len(room), len(view))
                room[:count] = view[:count]
                opener.buffer_updated(count)
                view = view[count:]
                while opener.readinto(out):
                    pass
        opener.receive_eof()

    def open_read() -> None:
        opener = gs.Opener(KEY)
        for piece in pieces:
            opener.receive_data(piece)
            while opener.read(PIECE):
                pass
        opener.receive_eof()

    return {
        "seal": seal,
        "open held readinto": open_held,
        "open aligned readinto": open_aligned,
        "open whole readinto": open_whole,
        "open ring readinto": open_ring,
        "open read": open_read,
    }


def raw_decrypt(record_size: int) -> Callable[[], None]:
    aead = AESGCM(KEY)
    nonce = bytes(12)
    count = VOLUME // record_size
    ciphertext = aead.encrypt(nonce, bytes(record_size), b"")
    out = memoryview(bytearray(record_size))

    def op() -> None:
        for _ in range(count):
            aead.decrypt_into(nonce, ciphertext, b"", out)

    return op


def memcpy(record_size: int) -> Callable[[], None]:
    """Copies of one record's wire bytes each, from a fresh stream, as the Opener's ring gets them."""
    wire_length = record_size + 21
    source = memoryview(os.urandom(VOLUME + wire_length))
    ring = memoryview(bytearray(wire_length))

    def op() -> None:
        for start in range(0, VOLUME, wire_length):
            ring[:] = source[start : start + wire_length]

    return op


def cpu(op: Callable[[], None], inner: int) -> float:
    """CPU seconds of one ``op()``, over ``inner`` calls in a row."""
    start = time.process_time()
    for _ in range(inner):
        op()
    return (time.process_time() - start) / inner


def calls_for(op: Callable[[], None], seconds: float = 0.05) -> int:
    """Calls of ``op`` in a row that take about ``seconds`` (a timer's resolution is far
    below that), after one warm-up call."""
    op()
    return max(1, round(seconds / max(cpu(op, 1), 1e-6)))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sizes", default="1024,4096,65536,1048576")
    parser.add_argument(
        "--piece", type=int, default=PIECE, help="bytes per input piece (small: more records split)"
    )
    parser.add_argument(
        "--out-offset",
        type=int,
        default=0,
        help="bytes the reader's buffer starts past its allocation (to see what layout alone moves)",
    )
    args = parser.parse_args()
    trees = {"A": load(args.old, "gcmstream_a"), "B": load(args.new, "gcmstream_b")}
    print(
        f"CPU ms per {VOLUME >> 20} MiB, best of {args.rounds} rounds (spread: worst/best), "
        "A then B, then B then A, in turn"
    )
    for record_size in (int(s) for s in args.sizes.split(",")):
        raw = raw_decrypt(record_size)
        ops = {label: cases(gs, record_size, args.piece, args.out_offset) for label, gs in trees.items()}
        inner = {name: calls_for(op) for name, op in ops["A"].items()}
        raw_inner = calls_for(raw)
        times: dict[tuple[str, str], list[float]] = {}
        for round_number in range(args.rounds):
            times.setdefault(("raw", "decrypt_into"), []).append(cpu(raw, raw_inner))
            # neither tree always runs first in a round
            order = ("A", "B") if round_number % 2 == 0 else ("B", "A")
            for name in ops["A"]:
                for label in order:
                    times.setdefault((label, name), []).append(cpu(ops[label][name], inner[name]))
        raw_best = min(times[("raw", "decrypt_into")])
        copy = memcpy(record_size)
        copy_calls = calls_for(copy)
        copy_best = min(cpu(copy, copy_calls) for _ in range(args.rounds))
        copy_us = copy_best / -(-VOLUME // (record_size + 21)) * 1e6
        print(f"record size {record_size}: raw decrypt_into {raw_best * 1e3:.1f} ms")
        for name in ops["A"]:
            a, b = times[("A", name)], times[("B", name)]
            paired = sorted(y / x for x, y in zip(a, b, strict=True))  # each round's B/A
            print(
                f"  {name:20} A {min(a) * 1e3:7.2f} ms (spread {max(a) / min(a):.2f}, "
                f"raw/A {raw_best / min(a):.2f})  B {min(b) * 1e3:7.2f} ms (spread {max(b) / min(b):.2f}, "
                f"raw/B {raw_best / min(b):.2f})"
                f"  B/A best {min(b) / min(a):.3f}, median of rounds {paired[len(paired) // 2]:.3f}"
                f" [{paired[0]:.2f}..{paired[-1]:.2f}]"
            )
        splits = VOLUME // args.piece  # the boundaries between pieces: each one splits a record
        for against in ("whole", "aligned"):
            extra = {}
            for label in ("A", "B"):
                pieces_best = min(times[(label, "open held readinto")])
                extra[label] = (pieces_best - min(times[(label, f"open {against} readinto")])) / splits * 1e6
            print(
                f"  per boundary between pieces (a record split there), against {against}: "
                f"A {extra['A']:.1f} us, B {extra['B']:.1f} us (one record's memcpy alone: {copy_us:.1f} us)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
